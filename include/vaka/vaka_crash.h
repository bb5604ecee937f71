/*
 * Vaka crash runtime — public C interface.
 *
 * The runtime installs async-signal-safe handlers for fatal signals. When one
 * fires it writes a compact text report (docs/report-format.md) to
 * `<report_dir>/<run_id>.crash` using write(2) only, then restores the handlers
 * that were installed before it and lets the signal reach them, so the process
 * ends exactly as it would have without Vaka.
 *
 * Everything here is called from ordinary code (never from a signal handler)
 * unless a function says otherwise. All functions are safe to call from any
 * thread; install/uninstall are serialised internally.
 */
#ifndef VAKA_CRASH_H
#define VAKA_CRASH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The report contract: format version, keys, values, limits and the signal-name table. */
#include "vaka/vaka_report_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most frames recorded for the crashed thread: VAKA_REPORT_MAX_FRAMES (vaka/vaka_report_format.h). */
#define VAKA_MAX_FRAMES VAKA_REPORT_MAX_FRAMES
/** Longest run id, in bytes, excluding the terminating NUL. */
#define VAKA_RUN_ID_MAX 63
/** Longest report directory path, in bytes, excluding the terminating NUL: PATH_MAX - 1, i.e. every path
 *  the kernel accepts. The report itself is created relative to the directory (opened once at install), so
 *  the whole report path may be longer than PATH_MAX. */
#define VAKA_REPORT_DIR_MAX 4095
/** Alternate signal stack size used when the config gives 0, in bytes (64 KiB). */
#define VAKA_DEFAULT_ALT_STACK_SIZE (64 * 1024)
/** Most loaded images recorded in a report. */
#define VAKA_MAX_IMAGES 512

/** Configuration for vaka_crash_install(). Strings are copied; the caller keeps ownership. */
typedef struct vaka_crash_config {
    /** Existing directory where the report is created; absolute path, at most VAKA_REPORT_DIR_MAX bytes.
     *  Opened at install (O_PATH | O_DIRECTORY | O_CLOEXEC, one descriptor kept while installed); the report is
     *  created in that directory even if it is renamed later. */
    const char *report_dir;
    /** Identifier of this run (e.g. a UUID); the report file is `<report_dir>/<run_id>.crash`
     *  (`<report_dir>/<run_id>-<pid>.crash` in a child made with fork() after install).
     *  1..VAKA_RUN_ID_MAX characters of [A-Za-z0-9._-], not starting with '.'. */
    const char *run_id;
    /** Signals to handle, or NULL to handle the default set:
     *  SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE, SIGSYS.
     *  A non-NULL list may only name signals from that set (duplicates are ignored). */
    const int *signals;
    /** Number of entries in `signals`; ignored when `signals` is NULL. */
    size_t signal_count;
    /** Size of each alternate signal stack this runtime creates, in bytes;
     *  0 selects VAKA_DEFAULT_ALT_STACK_SIZE. Rounded up to whole pages, at least MINSIGSTKSZ. */
    size_t alt_stack_size;
    /** 0: install prepares everything the handler uses. Nonzero: install leaves three things to
     *  vaka_crash_finish_install(), which the caller runs later on a thread of its choosing: the report's space
     *  reserve (a crash before it opens the report file normally), libunwind's one-time initialisation (a
     *  crash before it unwinds every thread by frame pointers and stack scan: `fp`/`scan` frames instead of
     *  `cfi`) and, when process_vm_readv works, the safe memory reader's fallback pipe (a crash before it whose
     *  process_vm_readv is refused mid-capture reads no more memory: `memory_read none`). Keeps about 0.1 ms of
     *  system calls off the installing thread. A fork() before that call warms
     *  libunwind up in the forking thread first (fork's prepare hook), so the child unwinds with it. */
    int defer_preparation;
    /** 0: `report_dir` must exist at install. Nonzero: a `report_dir` that does not exist yet (ENOENT) is no
     *  error: install keeps its path without opening it (no file system work on the installing thread), and the
     *  caller makes it later, on a thread of its choosing, then calls vaka_crash_open_report_dir(). A crash before
     *  that makes the missing directories itself (mkdir(2) of every component from the root down, each one it
     *  made set to mode 0700 whatever the umask) and creates the report by its path; that path
     *  (`<report_dir>/<run_id>.crash`) must then be shorter than VAKA_REPORT_PATH_MAX, else install fails with
     *  ENOENT as without this flag. A `report_dir` that exists is opened and checked at install as with 0. */
    int make_report_dir;
} vaka_crash_config;

/**
 * Installs the crash handlers (SA_SIGINFO | SA_ONSTACK | SA_NODEFER) for the configured signals,
 * remembering the actions that were there before; collects the loaded images (base address, size,
 * path, GNU build ID) with dl_iterate_phdr; resolves the Swift runtime's fatal-error message buffer
 * and glibc's abort message if present; and attaches an alternate stack to the calling thread
 * (see vaka_crash_thread_attach()). While installed, every thread created with pthread_create (which this
 * runtime interposes) attaches its own alternate stack before running its start routine, so a stack
 * overflow on any thread created after install is reported (docs/crash-handling.md). Install also chooses the
 * thread signal (a real-time signal, SIGRTMAX - 1 or the next free one below it) and installs its handler, which
 * serves the report's every-thread capture and, right now, gives each thread that existed before install an
 * alternate stack (from a pool of 64 mapped here) and unblocks the crash signals in its mask; it waits at most
 * 100 ms for those threads (a system call one of them sits in may return EINTR once).
 *
 * Idempotent: a second call while installed keeps the saved previous actions and only takes the
 * new report directory and run id (signals and alt_stack_size of the second config are ignored).
 *
 * While installed, the synchronous crash signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS: the
 * configured ones except SIGABRT) are kept unblocked: install unblocks them in the calling thread, new threads
 * unblock them before their start routine, and the interposed pthread_sigmask/sigprocmask never block them
 * (a blocked synchronous fault kills the process without any handler; docs/crash-handling.md).
 *
 * @return 0 on success, or an errno value: EINVAL for a NULL config, a bad run id, a relative or too long
 *         report directory path, or an unsupported signal; the errno of opening the report directory (ENOENT,
 *         ENOTDIR, EACCES, ENAMETOOLONG...); EACCES or EROFS when no file can be created in it (write
 *         permission for the effective ids, a file system mounted read-only); the errno of a failed sigaction,
 *         mmap or sigaltstack otherwise (nothing is left half-installed).
 */
int vaka_crash_install(const vaka_crash_config *config);

/**
 * The part of install that a config with `defer_preparation` set left out (vaka_crash_install()): makes the
 * safe memory reader's fallback pipe, the current report target's space reserve (an unnamed O_TMPFILE file in
 * the report directory with up to 64 KiB of blocks allocated), then initialises libunwind (its first use
 * allocates and blocks signals, so the handler may not be the first) and only then lets the handler unwind
 * with it (an atomic flag the handler reads); last, the handler's image list is collected again, so that it
 * holds libunwind and the libraries it brought (liblzma), which the handler then need not read from memory. Safe
 * to call from any thread at any time, any number of times: does nothing when not installed, when a crash
 * capture has begun, or when already done. Not async-signal-safe.
 * @return 0, or the errno of the reserve's creation (EROFS, EACCES: the crash then creates its report by
 *         name; a file system without O_TMPFILE or without room gives 0 and no reserve).
 */
int vaka_crash_finish_install(void);

/**
 * Opens the report directory that install left unopened (a config with `make_report_dir` whose directory did not
 * exist yet), once the caller has made it: O_PATH | O_DIRECTORY | O_CLOEXEC, checked as install checks it (a
 * directory files can be created in), then published to the handler (a release store), which from then on creates
 * the report relative to it and no longer makes directories. Best called before vaka_crash_finish_install(), whose
 * report reserve is made in that directory; called after it, it makes the reserve itself. Does nothing (returns 0) when not installed, when a crash capture has
 * begun, or when the directory is already open. Not async-signal-safe.
 * @return 0, or the errno of open(2) (ENOENT: still missing, ENOTDIR, EACCES...) or of the writability check
 *         (EACCES, EROFS); the handler then keeps creating the report by its path.
 */
int vaka_crash_open_report_dir(void);

/**
 * Why libunwind could not be used in this process: `libunwind.so.8` is opened with dlopen (not linked) the first
 * time something unwinds with it (vaka_crash_finish_install(), an install without `defer_preparation`, fork's
 * prepare hook before that, vaka_crash_capture_frames()), and this is the loader's message, e.g.
 * "libunwind.so.8: cannot open shared object file: No such file or directory", or "libunwind.so.8: no <symbol>".
 * Crash reports are then unwound by frame pointers and stack scan (`fp`/`scan` frames), handled errors by frame
 * pointers. NULL when libunwind was loaded or no load has been tried yet (this call does not load it).
 * A static string, valid for the process's lifetime. Thread-safe; not for use in a signal handler.
 */
const char *vaka_crash_libunwind_error(void);

/**
 * Why install could not read the executable's own symbol table: when dlsym finds neither the Swift runtime's
 * fatal-error message buffer nor glibc's `__abort_msg` (a program linked with -static-stdlib, or with a static C
 * library), install looks them up in `/proc/self/exe`'s `.symtab` with libelf, which is opened with dlopen
 * (`libelf.so.1`, not linked) for that. This is the loader's message when that failed (e.g. "libelf.so.1: cannot
 * open shared object file: No such file or directory"): the report then lacks those messages. NULL when libelf
 * was loaded or was not needed. A static string, valid for the process's lifetime. Thread-safe; not for use in a
 * signal handler.
 */
const char *vaka_crash_libelf_error(void);

/**
 * Marks the calling thread as one of Vaka's own, named `name` (its first VAKA_REPORT_THREAD_NAME_MAX bytes; NULL:
 * no name): the SDK calls it first thing in each thread it starts (`vaka.start`, `vaka.journal`, `vaka.delivery`,
 * `vaka.close`), and again when a thread takes another name (the entry is renamed). Its kernel thread id, process id
 * and name go into a table of VAKA_OWN_THREADS (32) entries; with all taken, the oldest is reused. At crash time a
 * thread in that table (of this process) is not asked to unwind itself and nothing of it is read from /proc: it is
 * listed with status VAKA_REPORT_THREAD_OWN and the name given here, without frames. Every other thread is asked,
 * whatever its name. Lock-free, no allocation; callable before or after install, from any thread. Not
 * async-signal-safe (it is not needed there).
 */
void vaka_crash_mark_own_thread(const char *name);

/**
 * Creates one of Vaka's own threads (default attributes) running `start(arg)`, marked with `name`
 * (vaka_crash_mark_own_thread) from the moment it exists: by its kernel thread id as soon as pthread_create returns
 * (from pthread_getcpuclockid's clock id, the kernel's encoding of the id), and by itself as its first step; so a
 * crash right after it was created, before it first ran, lists it as Vaka's without reading /proc for it. It is
 * unmarked (vaka_crash_unmark_own_thread) after `start` returns, once its creator is done marking it. It gets the
 * crash runtime's alternate stack and unblocked crash signals while installed. Its scheduling policy is SCHED_BATCH
 * when its creator's is the default SCHED_OTHER (which the creator keeps): it never preempts the thread running
 * where it wakes up, as a new thread queued on its creator's CPU otherwise may for its whole time slice; any other
 * policy of the creator's (real-time, SCHED_IDLE, SCHED_BATCH) is inherited as it is. @return 0, or pthread_create's error
 * (EAGAIN: no thread left, no memory for its start, or no pthread_create found). Not async-signal-safe.
 */
int vaka_crash_create_own_thread(pthread_t *thread, const char *name, void *(*start)(void *), void *arg);

/**
 * Takes the calling thread out of the table of Vaka's own threads (vaka_crash_mark_own_thread): each thread made by
 * vaka_crash_create_own_thread does it as its last step, so that the id, once the kernel gives it to a program
 * thread, is not taken for Vaka's. Nothing happens for a thread that is not marked. Lock-free; not async-signal-safe.
 */
void vaka_crash_unmark_own_thread(void);

/**
 * Restores exactly the signal actions that were in place before vaka_crash_install() (handler,
 * sa_mask and flags; glibc adds its internal SA_RESTORER flag to every action it sets, also to a
 * restored SIG_DFL) for every signal whose current action is still this runtime's handler; a
 * signal whose handler was replaced after install (by the application or a library) keeps that
 * handler. Also removes the alternate stack this runtime gave the calling thread (if it gave it one).
 * @return 0 (also when not installed), or the errno of a failed sigaction.
 */
int vaka_crash_uninstall(void);

/** @return 1 while the handlers are installed, 0 otherwise. */
int vaka_crash_is_installed(void);

/** @return 1 once a thread of this process began capturing a crash (it won the handler's arbitration) until
 *  the handlers are re-armed after a signal the process survived; 0 otherwise. Lets a process hook that may run on top of the handler
 *  (a `fork()` from a previous handler chained to: pthread_atfork's prepare step) do nothing then. */
int vaka_crash_in_progress(void);

/**
 * Covers the calling thread, a thread that existed before vaka_crash_install(): while installed, unblocks the
 * synchronous crash signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS as configured) in this thread's
 * mask — a thread may have inherited them blocked (over exec, or from its creator), and a blocked fault kills
 * the process without a report — and gives the thread its own alternate signal stack (config.alt_stack_size
 * bytes plus a guard page, from mmap) so a stack overflow on it can still be reported. Leaves an alternate
 * stack the thread already has alone. The stack is released when the thread exits. Before install only the
 * stack is attached (there is nothing to unblock yet).
 * Threads created after vaka_crash_install() get both automatically, and so do the threads that existed
 * before it unless they block the runtime's thread signal or wait in sigwait (install asks each of the others with
 * that signal:
 * docs/crash-handling.md, *Stack overflow on any thread*); call this on such a thread, or on one beyond the 64
 * install covers (the installing thread is covered by install itself).
 * @return 0 on success or when the thread already has an alternate stack; an errno value (of pthread_key_create,
 *         mmap, mprotect, sigaltstack or pthread_setspecific; ENOMEM) otherwise — the signals are unblocked
 *         even then.
 */
int vaka_crash_thread_attach(void);

/**
 * Path of the report that a crash would write now: `<report_dir>/<run_id>.crash`
 * (`<report_dir>/<run_id>-<pid>.crash` in a fork child), or NULL when not installed. Valid until the next install/uninstall.
 */
const char *vaka_crash_report_path(void);

/**
 * Re-collects the list of loaded images with dl_iterate_phdr (e.g. after dlopen). Optional: the
 * handler also walks the dynamic linker's link map, so images loaded after install are reported
 * even without this call.
 * @return the number of images now known, or -1 with errno set (EBUSY once a crash capture has started).
 */
int vaka_crash_refresh_images(void);

/**
 * One loaded ELF image, as vaka_crash_copy_images() gives it: the values a crash report's `image` line holds
 * (docs/report-format.md), computed by the same code.
 */
typedef struct vaka_crash_image {
    /** Runtime address of the image's first byte: its load bias (dlpi_addr, link_map.l_addr) plus the lowest
     *  PT_LOAD p_vaddr, rounded down to the page size. */
    uintptr_t base;
    /** Span of its PT_LOAD segments in bytes (p_memsz, so .bss included), from `base`, rounded up to whole pages. */
    uintptr_t size;
    /** Bytes of `build_id` in use: 0 when the image has no GNU build ID note in its mapped PT_NOTE segments. */
    size_t build_id_len;
    /** The GNU build ID (the NT_GNU_BUILD_ID note's descriptor) as raw bytes, at most VAKA_REPORT_BUILD_ID_MAX
     *  (a longer one is cut); `readelf -n` prints the same bytes in hex. */
    uint8_t build_id[VAKA_REPORT_BUILD_ID_MAX];
    /** Bytes of `path` in use: 0 when unknown (also for a path longer than VAKA_REPORT_PATH_MAX: never cut). */
    size_t path_len;
    /** The image's path as the dynamic linker names it (dlpi_name, e.g. "/lib/x86_64-linux-gnu/libc.so.6"); the
     *  main program's is readlink("/proc/self/exe"), the vDSO's "[vdso]". NUL-terminated when shorter than
     *  VAKA_REPORT_PATH_MAX bytes. */
    char path[VAKA_REPORT_PATH_MAX];
} vaka_crash_image;

/**
 * The images loaded now, collected with dl_iterate_phdr by the same code as the install list a crash report's
 * `image` lines come from (base, size, build ID and path as vaka_crash_image says). Works whether or not the
 * handlers are installed and leaves the install list alone. Thread-safe; not for use in a signal handler
 * (dl_iterate_phdr takes the dynamic linker's lock). For the images of handled-error stack traces.
 * Order: dl_iterate_phdr's, the main program first, then the libraries (and the vDSO) in load order; entries
 * with no PT_LOAD segment are skipped.
 * @param out room for `max` images; may be NULL when `max` is 0 (to count them).
 * @return the number of images loaded; when larger than `max`, only the first `max` were stored (call again
 *         with more room: a dlopen or dlclose on another thread may change the count in between).
 */
size_t vaka_crash_copy_images(vaka_crash_image *out, size_t max);

/**
 * The main program's image alone (the first entry vaka_crash_copy_images() gives), without looking at the
 * libraries: what the SDK's default release is made from (its build ID). Thread-safe; not for use in a signal
 * handler.
 * @return 1 when `*out` was filled, 0 when no image was found.
 */
size_t vaka_crash_copy_main_image(vaka_crash_image *out);

/**
 * The main program's path, readlink("/proc/self/exe"), into `buf` (`size` bytes) and NUL-terminated: the path
 * read at install when the handlers are installed (no second readlink), else read now. Thread-safe; not for use
 * in a signal handler.
 * @return its length in bytes; 0 when unknown (no /proc, or longer than `size` - 1 bytes: never cut).
 */
size_t vaka_crash_executable_path(char *buf, size_t size);

/**
 * Unwinds the calling thread (libunwind, frame-pointer fallback) and stores up to `max` instruction
 * addresses in `out`, newest first, after skipping `skip` frames (0 = the caller of this function).
 * Every address is a return address (look up `addr - 1` to symbolicate the call site).
 * Not for use in a signal handler. For handled-error stack traces.
 * @return the number of addresses stored.
 */
size_t vaka_crash_capture_frames(uintptr_t *out, size_t max, size_t skip);

/** An open journal (vaka/vaka_journal.h). */
struct vaka_journal;

/**
 * Registers the run's journal with the crash handler (NULL unregisters). While registered, a crash report
 * carries the journal's last sequence number (`journal_seq`, read with one atomic load: the records with a
 * sequence number up to it were appended before the crash, those being written may be torn) and, when the
 * journal is in its write(2) fallback (not mapped), the handler writes the journal's rings to its file before
 * unwinding. The handler uses a copy of the journal's descriptor, memory address and size taken here, so the
 * journal must stay open while registered; vaka_journal_close() unregisters a journal that is still
 * registered. Normal context; thread-safe (serialised internally). Works whether or not the handlers are
 * installed (the registration is kept across install/uninstall).
 */
void vaka_crash_set_journal(struct vaka_journal *journal);

/**
 * Test hook: when `stage` is non-zero, the next crash capture faults on purpose at that stage
 * (1 = after the header is written, 2 = while unwinding) to exercise the re-entrancy path: the process
 * then dies with the original signal and the report is left without its `end` line (truncated).
 * Never set in production code.
 */
void vaka_crash_test_fault_in_handler(int stage);

/**
 * `path` with `.`, `..` and repeated `/` removed by name, without looking at the file system (`/a/b/../c` is
 * `/a/c` even when `b` is a symbolic link; a `..` at the root stays there); always starts with `/` (a relative
 * `path` is read as below the root, an empty one gives `/`). Not async-signal-safe (malloc).
 * @return a malloc'd string for the caller to free, or NULL when out of memory.
 */
char *vaka_crash_normalised_path(const char *path);

/**
 * The name of a program's default storage directory, `<name>-<hash>` (the rules: Vaka.programDirectoryName(argv0:)
 * in the Swift API, which calls this): `<hash>` 8 lower-case hex digits, the 32-bit FNV-1a hash of the bytes of the
 * program's absolute path as started (`argv0` with a `/` made absolute against `$PWD` or getcwd(3) and normalised
 * by name; a bare name looked up in `PATH`; else the target of `/proc/self/exe`), `<name>` the last component of
 * `argv0` (else of that path, else `program`), control characters, `/` and `\` as `_`, at most 64 bytes.
 * Reads `PATH` and `PWD` with getenv(3). Not async-signal-safe (malloc).
 * @param argv0 the program's argv[0], or NULL.
 * @return a malloc'd string for the caller to free, or NULL when out of memory.
 */
char *vaka_crash_program_directory_name(const char *argv0);

/**
 * The default storage directory's path (no trailing `/`): `$XDG_STATE_HOME/vaka/<name>` when XDG_STATE_HOME is an
 * absolute path, else `<home>/.local/state/vaka/<name>` with `$HOME` when absolute, else `home`; `<name>` is
 * vaka_crash_program_directory_name(argv0). Not async-signal-safe (malloc).
 * @param home the home directory to use when neither variable is usable, or NULL.
 * @return a malloc'd string for the caller to free; NULL when `home` was needed and is NULL, or out of memory.
 */
char *vaka_crash_default_storage_path(const char *argv0, const char *home);

#ifdef __cplusplus
}
#endif

#endif /* VAKA_CRASH_H */
