/*
 * Vaka crash report format — the one contract between the C writer (Sources/VakaCrash, sig_*.c) and the
 * Swift reader (Sources/Vaka/Report). docs/report-format.md describes the format in prose; this header holds
 * its names and numbers. Both sides use these macros: C directly, Swift through `import VakaCrash`, where
 * every string macro is a `String` constant and every integer macro an `Int32` constant.
 *
 * A report is plain text, one record a line: `key` or `key SP value`, lines end with `\n`. The first line is
 * `VAKA_REPORT_MAGIC SP VAKA_REPORT_VERSION`, the last `VAKA_REPORT_KEY_END`.
 */
#ifndef VAKA_REPORT_FORMAT_H
#define VAKA_REPORT_FORMAT_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- format and version */

/** The first line's key: `VAKA-CRASH <version>`. */
#define VAKA_REPORT_MAGIC "VAKA-CRASH"
/** Version of the report format this runtime writes (the value of the first line): 2 (version 1 had no
 *  thread lines). A reader takes the versions from VAKA_REPORT_VERSION_MIN to VAKA_REPORT_VERSION and refuses
 *  others. */
#define VAKA_REPORT_VERSION 2
/** Oldest report format version a reader still reads. */
#define VAKA_REPORT_VERSION_MIN 1
/** Ending of a report file's name: `<run_id>.crash`, or `<run_id>-<pid>.crash` in a fork child. */
#define VAKA_REPORT_FILE_SUFFIX ".crash"

/* ---------------------------------------------------------------- keys, in the order they are written */

/** Text: the run id given at install. */
#define VAKA_REPORT_KEY_RUN_ID "run_id"
/** Decimal: getpid() of the crashed process. */
#define VAKA_REPORT_KEY_PID "pid"
/** Decimal: kernel thread id (gettid()) of the crashed thread. */
#define VAKA_REPORT_KEY_TID "tid"
/** Text: the crashed thread's name (prctl(PR_GET_NAME)), at most VAKA_REPORT_THREAD_NAME_MAX bytes. */
#define VAKA_REPORT_KEY_THREAD_NAME "thread_name"
/** Decimal: CLOCK_REALTIME at handler entry, nanoseconds since the Unix epoch. */
#define VAKA_REPORT_KEY_TIMESTAMP_NS "timestamp_ns"
/** VAKA_REPORT_ARCH_X86_64 or VAKA_REPORT_ARCH_AARCH64. */
#define VAKA_REPORT_KEY_ARCH "arch"
/** Text: path of the main executable, or VAKA_REPORT_VALUE_UNKNOWN. */
#define VAKA_REPORT_KEY_EXECUTABLE "executable"
/** `<number> <name>`, e.g. `11 SIGSEGV` (name from vaka_signal_name(), VAKA_REPORT_NAME_UNKNOWN if none). */
#define VAKA_REPORT_KEY_SIGNAL "signal"
/** `<si_code> <name>`, e.g. `1 SEGV_MAPERR` (name from vaka_si_code_name(), VAKA_REPORT_NAME_UNKNOWN if none). */
#define VAKA_REPORT_KEY_CODE "code"
/** Hex: si_addr, for a hardware fault raised by the kernel (si_code > 0). */
#define VAKA_REPORT_KEY_FAULT_ADDR "fault_addr"
/** `<pid> <uid>`: si_pid and si_uid of the sending process (si_code <= 0). */
#define VAKA_REPORT_KEY_SENDER "sender"
/** Text: the Swift runtime's fatal-error message, at most VAKA_REPORT_MESSAGE_MAX bytes before escaping. */
#define VAKA_REPORT_KEY_FATAL_MESSAGE "fatal_message"
/** Text: glibc's abort message (__abort_msg), at most VAKA_REPORT_MESSAGE_MAX bytes before escaping. */
#define VAKA_REPORT_KEY_ABORT_MESSAGE "abort_message"
/** Decimal: present when a journal is registered (vaka_crash_set_journal): its last sequence number at the
 *  crash (vaka_journal_last_seq, one atomic load) — the records up to it were appended before the crash. */
#define VAKA_REPORT_KEY_JOURNAL_SEQ "journal_seq"
/** `<name> <hex>` pairs: the general registers of the crashed thread, all on one line (version 2; version 1
 *  wrote one line per register — a reader takes any number of pairs per line, and the line may repeat). */
#define VAKA_REPORT_KEY_REGISTER "register"
/** `<hex> <method>`: one frame of the crashed thread, newest first (repeats, at most VAKA_REPORT_MAX_FRAMES);
 *  `<method>` is one of VAKA_REPORT_FRAME_METHOD_*. */
#define VAKA_REPORT_KEY_FRAME "frame"
/** Decimal: present when the walk stopped at VAKA_REPORT_MAX_FRAMES; the count of frames written. */
#define VAKA_REPORT_KEY_FRAMES_TRUNCATED "frames_truncated"
/** `<base> <size> <build-id> <path>`: one loaded ELF image (repeats); build ID and path may be
 *  VAKA_REPORT_VALUE_UNKNOWN. */
#define VAKA_REPORT_KEY_IMAGE "image"
/** `<total> <listed> <wait_ns>`: the threads of the process at the crash (entries of /proc/self/task; 0 when it
 *  could not be read: only the crashed thread is listed), how many
 *  are listed in `thread` lines (at most VAKA_REPORT_MAX_THREADS) and how long the crashed thread waited for the
 *  others to unwind themselves, in ns. Version 2. */
#define VAKA_REPORT_KEY_THREADS "threads"
/** `<tid> <status> <name>`: one thread (repeats), the crashed one first; `<status>` is one of
 *  VAKA_REPORT_THREAD_*; `<name>` (text, the rest of the line) its comm. The crashed thread's line is only
 *  `<tid> crashed` (its name is the `thread_name` line). Version 2. */
#define VAKA_REPORT_KEY_THREAD "thread"
/** `<tid> <state> <syscall> <sp> <pc>`: what /proc/self/task/<tid>/{stat,syscall} said of a thread that did not
 *  unwind itself: its state letter, the system call it sits in (decimal; `-1` blocked outside one; `running`),
 *  stack pointer and PC (hex, `-` when unknown). Version 2. */
#define VAKA_REPORT_KEY_THREAD_PROC "thread_proc"
/** `<tid> <method> <frame>...`: a thread's frames, newest first, the first its PC; `<method>` says how the others
 *  were found (VAKA_REPORT_FRAME_METHOD_*). A frame is `<image>:<offset>` (decimal index of an `image` line of
 *  this report, hex offset from its base; `:<offset>` when the image is the previous frame's) or a bare hex
 *  address (in no listed image); a last `+` means the walk
 *  stopped at VAKA_REPORT_MAX_THREAD_FRAMES. Version 2. */
#define VAKA_REPORT_KEY_THREAD_FRAMES "thread_frames"
/** How the handler read memory that may be unmapped: one of VAKA_REPORT_MEMORY_READ_*. */
#define VAKA_REPORT_KEY_MEMORY_READ "memory_read"
/** Decimal: CLOCK_MONOTONIC nanoseconds from handler entry to just before this line. */
#define VAKA_REPORT_KEY_CAPTURE_NS "capture_ns"
/** Dots: filler right before `end` (at most VAKA_REPORT_PAD_LINE_MAX bytes a line); readers ignore it. */
#define VAKA_REPORT_KEY_PAD "pad"
/** No value: the report is complete. A report without it is truncated. */
#define VAKA_REPORT_KEY_END "end"

/* ---------------------------------------------------------------- values */

/** Written for an unknown text value (executable, image path, build ID). */
#define VAKA_REPORT_VALUE_UNKNOWN "-"
/** Written as the name of a signal or si_code the name table does not know. */
#define VAKA_REPORT_NAME_UNKNOWN "UNKNOWN"

/** Values of `arch`: the CPU architecture, as Sentry names it for Linux. */
#define VAKA_REPORT_ARCH_X86_64 "x86_64"
#define VAKA_REPORT_ARCH_AARCH64 "aarch64"

/** Frame methods (the last field of a `frame` line; readers copy it to Sentry's `trust`). */
/** The PC from the signal context (the crash site). */
#define VAKA_REPORT_FRAME_METHOD_CONTEXT "context"
/** libunwind local unwinding (DWARF CFI from .eh_frame). */
#define VAKA_REPORT_FRAME_METHOD_CFI "cfi"
/** Frame-pointer walk with safe memory reads. */
#define VAKA_REPORT_FRAME_METHOD_FP "fp"
/** Stack scan: a stack word pointing just after a call instruction in an image's executable segment. */
#define VAKA_REPORT_FRAME_METHOD_SCAN "scan"

/** Values of a `thread` line's status. */
/** The thread that crashed: its frames are the `frame` lines. */
#define VAKA_REPORT_THREAD_CRASHED "crashed"
/** It unwound itself from its own registers (the thread signal) within the deadline. */
#define VAKA_REPORT_THREAD_OK "ok"
/** It started unwinding itself but had not finished at the deadline: the frames it had (at least its PC). */
#define VAKA_REPORT_THREAD_PARTIAL "partial"
/** It blocks the thread signal (/proc/self/task/<tid>/status SigBlk) or waits for signals in sigwait (its
 *  syscall file): not asked. PC and stack pointer from /proc, frames by CFI from them, else a stack scan. */
#define VAKA_REPORT_THREAD_BLOCKED "blocked"
/** It did not answer within the deadline (stopped, in the kernel, not scheduled): as for `blocked`. */
#define VAKA_REPORT_THREAD_MISSED "missed"
/** It was not asked: the thread signal's action was no longer the runtime's (the application took the signal over
 *  after install), or the signal could not be sent: as for `blocked`. */
#define VAKA_REPORT_THREAD_UNASKED "unasked"
/** One of Vaka's own threads (marked by the SDK while it runs, vaka_crash_mark_own_thread; a program thread with
 *  such a name is asked like any other): not asked, not waited for and not read from /proc (each would only delay
 *  the process's death: its stack is Vaka's, waiting for work); the name is the one the SDK gave it, and it has no
 *  `thread_proc` or `thread_frames` line. */
#define VAKA_REPORT_THREAD_OWN "vaka"
/** It ended between the listing and the signal. */
#define VAKA_REPORT_THREAD_GONE "gone"
/** A bare `thread_frames` token after the frames: the walk stopped at VAKA_REPORT_MAX_THREAD_FRAMES. */
#define VAKA_REPORT_THREAD_FRAMES_MORE "+"

/** Values of `memory_read`. */
/** process_vm_readv on the process's own pid. */
#define VAKA_REPORT_MEMORY_READ_PVR "process_vm_readv"
/** write(2) into a private pipe and read back. */
#define VAKA_REPORT_MEMORY_READ_PIPE "pipe"
/** Neither worked: every read of possibly unmapped memory failed. */
#define VAKA_REPORT_MEMORY_READ_NONE "none"

/* ---------------------------------------------------------------- limits */

/** Most `frame` lines written for the crashed thread (also the most frames a handled-error capture keeps). */
#define VAKA_REPORT_MAX_FRAMES 128
/** Most threads listed in `thread` lines (the crashed one included); `threads` gives the total. */
#define VAKA_REPORT_MAX_THREADS 128
/** Most frames written for a thread other than the crashed one. */
#define VAKA_REPORT_MAX_THREAD_FRAMES 64
/** Cap of a message value (`fatal_message`, `abort_message`), in bytes before escaping. */
#define VAKA_REPORT_MESSAGE_MAX 4096
/** Longest path written (executable, image), in bytes before escaping: PATH_MAX. A longer one is written as
 *  VAKA_REPORT_VALUE_UNKNOWN, never cut. */
#define VAKA_REPORT_PATH_MAX 4096
/** Longest thread name, in bytes (the kernel's TASK_COMM_LEN without the NUL). */
#define VAKA_REPORT_THREAD_NAME_MAX 15
/** Longest GNU build ID written, in bytes (written as twice as many hex digits). */
#define VAKA_REPORT_BUILD_ID_MAX 64
/** Longest `pad` line, in bytes including the key and the newline. */
#define VAKA_REPORT_PAD_LINE_MAX 4096
/** Longest line a reader must accept, in bytes without the newline. The writer stays far below: its longest
 *  line is an `image` line whose 4096-byte path escapes to at most 16 KiB (`\xHH` per byte). */
#define VAKA_REPORT_MAX_LINE (64 * 1024)

/* ---------------------------------------------------------------- the signal-name table */

/**
 * Name of signal `sig` as the kernel headers spell it ("SIGSEGV"), or NULL for a number it does not know.
 * Async-signal-safe (returns a string constant); the writer and the reader use this one table.
 */
const char *vaka_signal_name(int sig);

/**
 * Name of si_code `code` for signal `sig` as the kernel headers spell it ("SEGV_MAPERR", "SI_TKILL",
 * "SI_KERNEL"), or NULL if it does not know it. Codes <= 0 and SI_KERNEL (0x80) are the generic, sender-side
 * codes of any signal; positive codes are per signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGCHLD,
 * SIGSYS...). Async-signal-safe (returns a string constant).
 */
const char *vaka_si_code_name(int sig, int code);

#ifdef __cplusplus
}
#endif

#endif /* VAKA_REPORT_FORMAT_H */
