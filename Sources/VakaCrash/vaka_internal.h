/*
 * Vaka crash runtime — internal declarations shared by the install-time files (install.c, images.c,
 * thread_stack.c, capture.c) and the signal-path files (sig_*.c).
 *
 * Rule of the house: everything a sig_*.c file touches is static storage defined in a sig_*.c file and
 * prepared at install time. Code in sig_*.c calls only async-signal-safe syscalls, libunwind local
 * unwinding (through the vaka_unw table, filled outside the handler), and other sig_*.c functions
 * (scripts/check-signal-path enforces this on the object files).
 */
#ifndef VAKA_INTERNAL_H
#define VAKA_INTERNAL_H

/* Must come before any system header: REG_* (ucontext), pipe2, dl_iterate_phdr, process_vm_readv. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "vaka/vaka_crash.h"

#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h> /* glibc 2.32 and later */
/* 1 while the process has never had a second thread (glibc clears it at the first pthread_create; a thread made
 * with a raw clone(2) is not seen). Ordinary context only. */
#define VAKA_SINGLE_THREADED() (__libc_single_threaded != 0)
#else
/* Unknown: taken as multi-threaded, the safe answer for each use (fork's prepare hook, install's thread round). */
#define VAKA_SINGLE_THREADED() 0
#endif

/* libunwind's types and the names its macros give its functions (libunwind itself is opened with dlopen:
 * vaka_libunwind below). */
#ifndef UNW_LOCAL_ONLY
#define UNW_LOCAL_ONLY
#endif
#include <libunwind.h>

/* Internal symbols are hidden: calls between the runtime's own files never go through a PLT slot (lazy binding
 * in a signal handler runs the dynamic linker's resolver, which needs far more stack than a small alternate
 * stack has). */
#pragma GCC visibility push(hidden)

/* ---------------------------------------------------------------- limits */

/** Longest report path: `<dir>/<run_id>-<pid>.crash` plus the NUL, in bytes (fork children add `-<pid>`).
 *  May exceed PATH_MAX: the handler creates the report relative to the directory's descriptor (openat). */
#define VAKA_REPORT_FILE_PATH_MAX (VAKA_REPORT_DIR_MAX + 1 + VAKA_RUN_ID_MAX + 1 + 10 + 6 + 1)
/* Paths of images and the executable (VAKA_REPORT_PATH_MAX), build IDs (VAKA_REPORT_BUILD_ID_MAX), messages
 * (VAKA_REPORT_MESSAGE_MAX) and frames (VAKA_REPORT_MAX_FRAMES) are capped by the report contract:
 * vaka/vaka_report_format.h. */
/** Bytes of the per-cache string pool that holds image paths. */
#define VAKA_IMAGE_POOL_SIZE (128 * 1024)
/** The signals the runtime can handle (vaka_crash_config.signals); never blocked while the handler runs. */
#define VAKA_CRASH_SIGNALS SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE, SIGSYS
/** Highest signal number handled + 1 (classic signals only). */
#define VAKA_NSIG 32

/* ---------------------------------------------------------------- safe memory (sig_safe_memory.c) */

enum {
    VAKA_SAFE_READ_NONE = 0,      /* no method works: every read fails */
    VAKA_SAFE_READ_PVR = 1,       /* process_vm_readv(getpid()) */
    VAKA_SAFE_READ_PIPE = 2,      /* write(2) the memory into a private pipe, read it back */
};

/** A way to read memory that may be unmapped without faulting. Set up with vaka_rt_safe_reader_init(). */
typedef struct vaka_safe_reader {
    int method;          /* VAKA_SAFE_READ_* */
    int pipe_r, pipe_w;  /* the private pipe (O_NONBLOCK, O_CLOEXEC), -1 when none */
    dev_t pipe_dev;      /* identity of the pipe, checked before use (an app may close/dup2 over our fds) */
    ino_t pipe_ino;
    pid_t pid;           /* our pid, refreshed by vaka_safe_reader_begin() (fork changes it) */
} vaka_safe_reader;

/** Install time (install.c): picks the method (process_vm_readv if it works, else the pipe) and creates the pipe
 *  (vaka_rt_safe_reader_make_pipe), the fallback for a process_vm_readv refused later; with `defer_pipe` and
 *  process_vm_readv working, the pipe is left to a later vaka_rt_safe_reader_make_pipe (pipe_r/pipe_w -1 until then).
 *  @return 0 or an errno value (the reader then has method NONE). */
int vaka_rt_safe_reader_init(vaka_safe_reader *r, int defer_pipe);
/** Normal context: creates the reader's private pipe (O_NONBLOCK, O_CLOEXEC) unless it has one that is still its own
 *  (same device and inode); the write end is stored last (release). @return 0 or the errno of pipe2/fstat. */
int vaka_rt_safe_reader_make_pipe(vaka_safe_reader *r);
/** Signal safe. Refreshes the pid and checks the pipe is still ours; call once per capture. */
void vaka_safe_reader_begin(vaka_safe_reader *r);
/** Signal safe. Copies up to `len` bytes at address `src` to `dst` without faulting.
 *  @return the number of bytes copied: a prefix of the range, cut at the first unreadable page. */
size_t vaka_safe_read(vaka_safe_reader *r, void *dst, uintptr_t src, size_t len);
/** Signal safe. Reads one machine word. @return 1 on success, 0 when unreadable. */
int vaka_safe_read_word(vaka_safe_reader *r, uintptr_t src, uintptr_t *out);
/** Signal safe. Reads a NUL-terminated string of at most `cap` bytes into `dst` (not terminated).
 *  @return its length in bytes (stops at NUL, `cap`, or the first unreadable page). */
size_t vaka_safe_read_string(vaka_safe_reader *r, char *dst, uintptr_t src, size_t cap);
/** Signal safe byte copy and fill (no compiler-emitted memcpy/memset). */
void vaka_sig_copy(void *dst, const void *src, size_t n);
void vaka_sig_zero(void *dst, size_t n);
/** Signal safe strlen with a cap. */
size_t vaka_sig_strnlen(const char *s, size_t cap);
/** Signal safe. Writes `v` in decimal (no sign, no padding, not NUL-terminated) to `out`.
 *  @return the number of digits written, or 0 when `cap` bytes cannot hold them all (nothing written). */
size_t vaka_sig_format_udec(char *out, size_t cap, uint64_t v);

/* ---------------------------------------------------------------- names (sig_names.c) */

/** Signal safe. The table behind the public vaka_signal_name() (vaka/vaka_report_format.h), called directly by
 *  the handler: a hidden symbol is never reached through a PLT slot. */
const char *vaka_sig_signal_name(int sig);
/** Signal safe. The table behind the public vaka_si_code_name(). */
const char *vaka_sig_si_code_name(int sig, int code);

/* ---------------------------------------------------------------- report writer (sig_report_writer.c) */

/** Buffered writer over a file descriptor; a single static instance is used by the handler. */
typedef struct vaka_writer {
    int fd;            /* -1: writes are dropped */
    int file_too_big;  /* a write failed with EFBIG (RLIMIT_FSIZE): the kernel raised SIGXFSZ */
    size_t len;        /* bytes buffered */
    size_t written;    /* bytes handed to write(2) so far */
    char buf[8192];
} vaka_writer;

void vaka_w_init(vaka_writer *w, int fd);
/** Writes the buffer with write(2) (retrying on EINTR/partial writes). */
void vaka_w_flush(vaka_writer *w);
/** Writes only the complete lines in the buffer and drops the rest (used after a fault mid-line). */
void vaka_w_flush_lines(vaka_writer *w);
void vaka_w_bytes(vaka_writer *w, const char *s, size_t n);
void vaka_w_str(vaka_writer *w, const char *s);
void vaka_w_char(vaka_writer *w, char c);
void vaka_w_dec(vaka_writer *w, int64_t v);
void vaka_w_udec(vaka_writer *w, uint64_t v);
/** Lower-case hex, no prefix, no padding. */
void vaka_w_hexdigits(vaka_writer *w, uint64_t v);
/** `0x` + lower-case hex, no padding. */
void vaka_w_hex(vaka_writer *w, uint64_t v);
/** Lower-case hex of `n` bytes, two digits each, no prefix. */
void vaka_w_hexbytes(vaka_writer *w, const uint8_t *b, size_t n);
/** A text value escaped per docs/report-format.md (`\\`, `\n`, `\t`, `\xHH`). */
void vaka_w_text(vaka_writer *w, const char *s, size_t n);
/** `key` followed by a space (starts a line). */
void vaka_w_key(vaka_writer *w, const char *key);
void vaka_w_nl(vaka_writer *w);
/** A whole `frame` line: `frame <hex ip> <method>`, the method (VAKA_FRAME_*) named as the report contract says
 *  (VAKA_REPORT_FRAME_METHOD_*). */
void vaka_w_frame(vaka_writer *w, uintptr_t ip, uint8_t method);

/* ---------------------------------------------------------------- images */

/** One loaded ELF image, as cached at install (images.c) and written in the handler (sig_images.c). */
typedef struct vaka_image {
    uintptr_t base;        /* address of the image's first byte: l_addr + lowest PT_LOAD p_vaddr, page aligned */
    uintptr_t size;        /* span of the PT_LOAD segments in bytes, page-rounded */
    uintptr_t l_addr;      /* load bias (dlpi_addr / link_map.l_addr): identity in the link map */
    uintptr_t l_ld;        /* address of the dynamic section (link_map.l_ld), 0 if none */
    uintptr_t l_name;      /* link_map.l_name (dlpi_name) at install when the path is that string, else 0 */
    uintptr_t lm_node;     /* its entry in r_debug's list at install (struct link_map *), 0 if not found */
    uintptr_t text_lo;     /* executable PT_LOAD segments (PF_X): lowest start address ... */
    uintptr_t text_hi;     /* ... and highest end address (exclusive); both 0 when there is none */
    uint32_t path_off;     /* path in the cache's pool */
    uint32_t path_len;     /* 0: unknown (written as `-`) */
    uint8_t build_id_len;  /* 0: none (written as `-`) */
    uint8_t not_in_link_map; /* the vDSO may be missing from r_debug's list: always written */
    uint8_t seen;          /* scratch for the handler: matched in the link map walk */
    uint16_t batch_entry;  /* its entry's piece of the cache's batched read (index + 1; 0: not in it) ... */
    uint16_t batch_path;   /* ... and its path's (path_len + 1 bytes at l_name) */
    uint32_t batch_entry_at; /* where those pieces land in the batch's bytes */
    uint32_t batch_path_at;
    uint8_t build_id[VAKA_REPORT_BUILD_ID_MAX];
} vaka_image;

/** Most remote pieces of the handler's one read of the cached link-map entries and paths (the kernel's
 *  UIO_MAXIOV, process_vm_readv's limit). */
#define VAKA_BATCH_IOV 1024

typedef struct vaka_image_cache {
    size_t count;
    size_t pool_used;
    vaka_image images[VAKA_MAX_IMAGES];
    /* The handler's batched read, planned at install (images.c; sig_images.c says how it is used): the remote
     * pieces in order (the r_map word, then per image its link-map entry and path), and where in `pool` their
     * bytes land, back to back (batch_bytes bytes at batch_at, after the paths; written once at install so that
     * the handler does not fault its pages in). */
    size_t batch_count;
    size_t batch_at;
    size_t batch_bytes;
    struct iovec batch_iov[VAKA_BATCH_IOV];
    char pool[VAKA_IMAGE_POOL_SIZE];
} vaka_image_cache;

/** The two image caches (sig_images.c); vaka_sig_state.images points at the current one. */
extern vaka_image_cache vaka_image_caches[2];

/** Install time (images.c): fills `cache` with dl_iterate_phdr. @return the image count. */
size_t vaka_images_collect(vaka_image_cache *cache);
/** Normal context (images.c; install and vaka_crash_copy_images()): the main executable's path, read with
 *  readlink("/proc/self/exe") into `buf` (`size` bytes) and NUL-terminated. @return its length in bytes; 0 when
 *  unreadable or when it may have been cut (it filled the buffer). */
size_t vaka_rt_executable_path(char *buf, size_t size);
/** Normal context (install.c): takes and releases the lock install, uninstall and vaka_crash_refresh_images()
 *  hold, for reading what they write (vaka_state.executable). */
void vaka_rt_install_lock(void);
void vaka_rt_install_unlock(void);
/** Signal safe with `r` (the handler: its static note buffer, one crashing thread), normal context without.
 *  The one per-image computation of the install list, vaka_crash_copy_images() and the handler's link-map walk:
 *  from an image's program headers `ph[0..phnum)` and load bias `l_addr`, sets `img` (cleared first) to
 *  base = l_addr + lowest PT_LOAD p_vaddr rounded down to `page` (bytes, a power of two), size = span of the
 *  PT_LOAD segments rounded up to `page`, l_addr, l_ld (l_addr + PT_DYNAMIC p_vaddr, 0 if none), the PF_X
 *  segments' range (text_lo/text_hi), and the GNU build ID of the first PT_NOTE segment that lies in a
 *  PT_LOAD segment's file bytes and holds one: read in place when `r` is NULL, else with safe reads (at most
 *  2048 bytes of each segment). Path fields are left 0.
 *  @return 1; 0 when there is no PT_LOAD segment (`img` unchanged). */
int vaka_sig_image_from_phdrs(const ElfW(Phdr) *ph, size_t phnum, uintptr_t l_addr, uintptr_t page,
                          vaka_safe_reader *r, vaka_image *img);
/** Signal safe (also used at install): parses the ELF notes in `notes[0..len)` (a PT_NOTE segment whose
 *  p_align is `align`: 4 or 8) for the GNU build ID.
 *  @return its length in bytes (copied to `out`, at most VAKA_REPORT_BUILD_ID_MAX), 0 if none. */
size_t vaka_find_build_id(const uint8_t *notes, size_t len, size_t align, uint8_t *out);
/** Signal safe. Writes the `image` lines (install cache + link map walk for later dlopens). */
void vaka_sig_write_images(vaka_writer *w, vaka_safe_reader *r);

/* ---------------------------------------------------------------- unwinding (sig_unwind.c) */

enum { VAKA_FRAME_CONTEXT = 0, VAKA_FRAME_CFI = 1, VAKA_FRAME_FP = 2, VAKA_FRAME_SCAN = 3 };

/** Most frames a stack scan adds, and how many bytes above the stack pointer it reads. */
#define VAKA_SCAN_MAX_FRAMES 32
#define VAKA_SCAN_BYTES (32u * 1024)

/** Signal safe. Unwinds the interrupted context `uc` into `ips`/`methods` (newest first), at most `max`.
 *  Sets *truncated when more frames were there. Honours the stage-2 test fault. @return frame count. */
size_t vaka_sig_unwind(ucontext_t *uc, vaka_safe_reader *r, uintptr_t *ips, uint8_t *methods, size_t max,
                       int *truncated);
/** Signal safe. vaka_sig_unwind() with the libunwind cursor in `cursor_memory` (an unw_cursor_t the caller owns:
 *  several threads may unwind at once) and the stack scan's reads in `scan_buffer` (`scan_count` words the caller
 *  owns; NULL: the winner's static buffer), and without the frame-pointer and scan fallbacks when `r` is NULL. */
size_t vaka_sig_unwind_with(void *cursor_memory, uintptr_t *scan_buffer, size_t scan_count, ucontext_t *uc,
                            vaka_safe_reader *r, uintptr_t *ips, uint8_t *methods, size_t max, int *truncated);
/** Frame-pointer walk from the frame record at `fp` (stack pointer `sp`) with safe reads, appending
 *  return addresses at ips[n..max). Sets *truncated when it stopped only because of `max`.
 *  Signal safe. @return the new count. */
size_t vaka_fp_walk(vaka_safe_reader *r, uintptr_t fp, uintptr_t sp, uintptr_t *ips, uint8_t *methods,
                    size_t n, size_t max, int *truncated);
/** Stack scan: reads the words from `sp` upward (at most VAKA_SCAN_BYTES, safe reads) and appends each one
 *  that looks like a return address — it points into the executable segment of an image known at install and
 *  the bytes before it decode as a call instruction (x86_64) — as a `scan` frame, at most VAKA_SCAN_MAX_FRAMES.
 *  Signal safe. @return the new count. */
size_t vaka_scan_stack(vaka_safe_reader *r, uintptr_t sp, uintptr_t *ips, uint8_t *methods, size_t n, size_t max,
                       int *truncated);
/** vaka_scan_stack() reading the stack into `buffer` (`buffer_words` words the caller owns) instead of the static
 *  buffer the winner uses, for threads that scan at the same time. Signal safe. @return the new count. */
size_t vaka_scan_stack_into(uintptr_t *buffer, size_t buffer_words, vaka_safe_reader *r, uintptr_t sp,
                            uintptr_t *ips, uint8_t *methods, size_t n, size_t max, int *truncated);
/* ---------------------------------------------------------------- libunwind, opened with dlopen (unwind_load.c) */

/** libunwind's local-unwinding entry points, looked up with dlsym in `libunwind.so.8` (no -lunwind: a program
 *  linking Vaka does not load libunwind, nor the liblzma it needs, at process start). Each member has the type
 *  of the function the header's macro names (`unw_step` is `UNW_OBJ(step)`, `_ULx86_64_step` on x86_64). */
typedef struct vaka_libunwind {
    int (*getcontext)(unw_context_t *);          /* unw_getcontext (unw_tdep_getcontext) */
    __typeof__(unw_init_local) *init_local;
    __typeof__(unw_init_local2) *init_local2;
    __typeof__(unw_get_reg) *get_reg;
    __typeof__(unw_step) *step;
    __typeof__(unw_set_caching_policy) *set_caching_policy;
    unw_addr_space_t *local_addr_space;          /* &unw_local_addr_space (a data symbol) */
} vaka_libunwind;

/** The table the handler calls libunwind through (defined in sig_unwind.c, the handler's own storage). Filled
 *  once by vaka_rt_libunwind() in ordinary context; the handler reads it only after an acquire load of
 *  vaka_state.unwind_ready returned 1, which install.c stores (release) after the table was filled. */
extern vaka_libunwind vaka_unw;

/** Not signal safe (dlopen, dlsym). The first call opens `libunwind.so.8` (RTLD_NOW | RTLD_LOCAL) and fills
 *  vaka_unw; later calls return the same answer (pthread_once). @return &vaka_unw, or NULL when libunwind
 *  cannot be opened or lacks a symbol (vaka_crash_libunwind_error() then says why). */
const vaka_libunwind *vaka_rt_libunwind(void);

/** Not signal safe. &vaka_unw when a vaka_rt_libunwind() call has already loaded libunwind, else NULL (not loaded,
 *  failed, or a load under way on another thread): never opens it, never waits. */
const vaka_libunwind *vaka_rt_libunwind_if_loaded(void);

/** Signal safe. PC, SP and frame pointer of a ucontext. */
uintptr_t vaka_uc_pc(const ucontext_t *uc);
uintptr_t vaka_uc_sp(const ucontext_t *uc);
uintptr_t vaka_uc_fp(const ucontext_t *uc);

/* ---------------------------------------------------------------- handler state (sig_handler.c and the
 * other sig_*.c files of the handler: the map at the top of sig_handler.c; their shared run state: sig_state.h) */

/** Report destination; two copies so a re-install can switch atomically while a crash may be reading. */
typedef struct vaka_report_target {
    char run_id[VAKA_RUN_ID_MAX + 1];
    size_t run_id_len;
    size_t dir_len;                            /* bytes of path up to and including the last '/' */
    char path[VAKA_REPORT_FILE_PATH_MAX];           /* `<dir>/<name>`; the name starts at path + dir_len */
    int dir_fd;                                /* the report directory (O_PATH, opened at install or published
                                                * later by vaka_crash_open_report_dir with a release store), or -1 */
    int dir_pending;                           /* 1: install found no report directory (`make_report_dir`): while
                                                * dir_fd is -1 a crash makes the directories (sig_report_file.c) */
    dev_t dir_dev;                             /* its identity, checked before use (an app may close/dup2 */
    ino_t dir_ino;                             /* over our descriptor) */
    int reserve_fd;                            /* the space reserve (vaka_sig_make_reserve), or -1; published
                                                * last with a release store (__atomic), read by the handler
                                                * with an acquire load: vaka_crash_finish_install may make it
                                                * on another thread while a crash reads the target */
    dev_t reserve_dev;                         /* its identity, checked before use */
    ino_t reserve_ino;
    pid_t reserve_pid;                         /* the process that made it: only that one writes into it */
    int reserve_slot;                          /* -1: the reserve is unnamed (O_TMPFILE); 0..VAKA_RESERVE_SLOTS-1:
                                                * it is the named reserve `.reserve-<slot>` in the report
                                                * directory (vaka_rt_open_named_reserve), renamed to the
                                                * report's name at crash time. Set before reserve_fd is published */
    int reserve_blocks_pending;                /* 1: a named reserve taken without its blocks (install's deferring
                                                * path); vaka_crash_finish_install gives them once, then 0 */
} vaka_report_target;

/** Named reserves kept in the report directory from run to run (docs/crash-handling.md, *Install* and *Capture*):
 *  `.reserve-0` ... `.reserve-<VAKA_RESERVE_SLOTS - 1>`, each empty with its blocks allocated past its end,
 *  held by at most one process at a time (flock). A crash renames the one its process holds to the report's
 *  name: no inode to allocate in the handler (creating the report there took 47-115 µs on ext4, the rename
 *  ~15). More processes of one storage at once than slots get an unnamed reserve (O_TMPFILE). */
#define VAKA_RESERVE_SLOTS 4
#define VAKA_RESERVE_FILE_PREFIX ".reserve-"
/** Bytes of a named reserve's name with its NUL (`.reserve-` and one digit). */
#define VAKA_RESERVE_NAME_MAX (sizeof VAKA_RESERVE_FILE_PREFIX + 1)

/** Bytes reserved at install for the report (docs/crash-handling.md): tried in this order until the file
 *  system grants one (a nearly full file system still gets room for the header and the frames). A report is
 *  4-10 KiB (64 threads: 9.6 KiB); the blocks past its end stay allocated until it is removed. */
#define VAKA_RESERVE_SIZES { 64 * 1024, 32 * 1024, 8 * 1024 }

/** Everything the handler reads. Written only at install/uninstall (under install.c's mutex). */
typedef struct vaka_sig_state {
    atomic_int installed;                      /* 1 while our handlers are in place */
    atomic_int unwind_ready;                   /* 1 once libunwind's one-time initialisation has run (install,
                                                * or vaka_crash_finish_install): until then the handler does
                                                * not call libunwind (frame pointers and stack scan only) */
    pid_t owner_pid;                           /* the process the state belongs to (install, or fork child) */
    int signals[VAKA_NSIG];                    /* handled signals */
    size_t signal_count;
    struct sigaction previous[VAKA_NSIG];      /* actions before install, indexed by signal */
    vaka_report_target targets[2];
    _Atomic(vaka_report_target *) target;      /* current target */
    _Atomic(vaka_image_cache *) images;        /* current image cache */
    char executable[VAKA_REPORT_PATH_MAX + 1];        /* readlink("/proc/self/exe") */
    size_t executable_len;
    char **swift_fatal_message;                /* swift_getFatalErrorMessageBuffer(), or NULL */
    void **abort_msg;                          /* &__abort_msg (struct abort_msg_s *), or NULL */
    void *r_debug;                             /* the dynamic linker's struct r_debug (install.c: link_map_debug), or NULL */
    atomic_int test_fault_stage;               /* vaka_crash_test_fault_in_handler() */
    uintptr_t page_size;                       /* sysconf(_SC_PAGESIZE), bytes */
    int watchdog_signal;                       /* SIGRTMAX (read at install): the capture watchdog's timers */
    vaka_safe_reader reader;                   /* for the handler only */
    struct sigaction action;                   /* our handler's action, as installed (re-arming puts it back) */
    unsigned protect_mask;                     /* vaka_sig_protected_mask while installed */
} vaka_sig_state;

extern vaka_sig_state vaka_state;

/** The signal handler (sig_handler.c). */
void vaka_sig_handler(int sig, siginfo_t *info, void *uc);
/** Signal safe (sig_rearm.c). Puts back every saved previous action and marks the runtime as not installed. */
void vaka_sig_restore_previous(void);
/** Install time (lifecycle.c). 1 when a crash capture has started (then images must not be refreshed). */
int vaka_rt_crash_started(void);
/** fork() child (pthread_atfork; sig_lifecycle.c): the state now belongs to the child; its reports go to
 *  `<dir>/<run_id>-<pid>.crash`. Only plain memory writes, getpid, fstat and close: a previous handler chained
 *  to from ours may call fork(), so this can run inside the handler. */
void vaka_sig_after_fork_child(void);
/** Install time (lifecycle.c): after a finished capture that the process survived (a previous handler
 *  recovered), lets a new install capture again. */
void vaka_rt_rearm(void);
/** Signal safe (sig_report_file.c; also used at install). Gives `t` a space reserve for the report: an unnamed file (O_TMPFILE)
 *  in the report directory with blocks allocated but size 0 (fallocate FALLOC_FL_KEEP_SIZE, the first of
 *  VAKA_RESERVE_SIZES the file system grants), linked under the report's name only at crash time, so a file
 *  system full by then still takes the report. The previous reserve of `t`, if any, is closed.
 *  @return 0; or the errno of the O_TMPFILE open (EROFS, EACCES...; t->reserve_fd is then -1). A file system
 *  without O_TMPFILE (EOPNOTSUPP, EISDIR) or without room returns 0 with no reserve. */
int vaka_sig_make_reserve(vaka_report_target *t);
/** Signal safe (sig_report_file.c): allocates a reserve's blocks past its end, the first of VAKA_RESERVE_SIZES the
 *  file system grants (fallocate, FALLOC_FL_KEEP_SIZE); blocks the file already has cost nothing more. */
void vaka_sig_reserve_blocks(int fd);
/** Signal safe (sig_report_file.c): makes `fd` (whose status is `st`) the reserve of `t`: 0600, `slot` (-1:
 *  unnamed), its identity and this process's pid, then the descriptor, published last (release store). */
void vaka_sig_publish_reserve(vaka_report_target *t, int fd, const struct stat *st, int slot);
/** Signal safe (sig_report_file.c): closes the directory descriptor and the reserve of `t` when they are still the
 *  ones it recorded (same device and inode) and not shared with `keep` (the target in use, or NULL), and sets both
 *  to -1. */
void vaka_sig_close_target(vaka_report_target *t, const vaka_report_target *keep);
/** Signal safe (sig_report_file.c): the name of named reserve `slot` (0..VAKA_RESERVE_SLOTS-1) into `out`
 *  (VAKA_RESERVE_NAME_MAX bytes), NUL-terminated. */
void vaka_sig_reserve_name(char out[VAKA_RESERVE_NAME_MAX], int slot);
/** Install time (install.c; not signal safe): gives `t` (its report directory open) the first named reserve
 *  (VAKA_RESERVE_SLOTS) that no other open file holds: opened (made when missing and `create`), locked with
 *  flock(LOCK_EX|LOCK_NB) for this process's lifetime, and kept only when it is a regular file, empty, with one
 *  name; with `create`, given its blocks (vaka_sig_reserve_blocks). @return 1 when `t` has it, else 0 (none
 *  free, none there without `create`, or a file system without flock: the caller makes an unnamed one). */
int vaka_rt_open_named_reserve(vaka_report_target *t, int create);
/** Normal exit (atexit, registered by install.c; sig_lifecycle.c: exit() may be called by a previous handler
 *  chained to from ours, inside the handler): removes the report of a signal whose previous handler left with siglongjmp
 *  (the process survived it) when nothing crashed since. */
void vaka_sig_at_exit(void);
/** Unlinks and closes the kept spare report (`.<run_id>-<pid>.spare`, a survived signal's report kept as the next
 * reserve) when it is this process's (sig_report_file.c); called at exit (vaka_sig_at_exit) and uninstall. */
void vaka_sig_drop_spare(void);
/** Install time (lifecycle.c; uninstall, before the directory descriptors close): drops the spare, removes a survived signal's
 *  kept report, and keeps any report name still remembered by its absolute path (never by a descriptor about
 *  to close). */
void vaka_rt_at_uninstall(void);
/** Signal safe (sig_lifecycle.c). Faults on purpose (test hook) when the configured stage equals `stage`. */
void vaka_sig_test_fault(int stage);

/* ---------------------------------------------------------------- signal mask (sig_mask.c) */

/** The C library's pthread_sigmask / sigprocmask signature (both take how, set, old set). */
typedef int (*vaka_sigmask_fn)(int how, const sigset_t *set, sigset_t *old);
/** Bit `1 << sig` for each synchronous crash signal (the installed ones except SIGABRT) that SIG_BLOCK and
 *  SIG_SETMASK must leave unblocked; 0 while not installed (the interposers pass everything through). */
extern atomic_uint vaka_sig_protected_mask;
/** The C library's pthread_sigmask and sigprocmask (dlsym RTLD_NEXT, at load time: install.c); NULL before
 *  that and in a fully static program. A linked sanitizer's interceptors take precedence over these, glibc's
 *  static entries or the rt_sigprocmask system call stand in for them (order: sig_mask.c). */
extern _Atomic(vaka_sigmask_fn) vaka_real_pthread_sigmask;
extern _Atomic(vaka_sigmask_fn) vaka_real_sigprocmask;
/** Install time and thread start (install.c, thread_stack.c). Unblocks the protected signals
 *  (vaka_sig_protected_mask) in the calling thread. */
void vaka_rt_unblock_crash_signals(void);
/** vaka_crash_mark_own_thread for thread `tid` of this process (threads.c): the creator of one of Vaka's own threads
 *  marks it by its id as soon as pthread_create returns (thread_stack.c). */
void vaka_rt_mark_own_thread_id(pid_t tid, const char *name);
/* Copies `name` (NULL: "") into `dst`, cut to VAKA_REPORT_THREAD_NAME_MAX bytes and NUL-terminated (`dst` holds
 * VAKA_REPORT_THREAD_NAME_MAX + 1 bytes): an own thread's name as the table and the thread's start keep it. */
void vaka_rt_copy_thread_name(char *dst, const char *name);
/** The kernel thread id of `thread` (0: not known), from pthread_getcpuclockid's clock id (thread_stack.c). */
pid_t vaka_rt_thread_id_of(pthread_t thread);

/* ---------------------------------------------------------------- install-time helpers */

/** thread_stack.c: sets the size used by vaka_crash_thread_attach() (0 = default). */
/* The size of an alternate signal stack for a request of `requested` bytes (0: the default), at least the
 * kernel's minimum, at most 1 GiB, rounded up to whole pages of `page` bytes. Install time only. */
size_t vaka_thread_stack_size(size_t requested, size_t page);
void vaka_thread_stack_set_size(size_t bytes);
/** thread_stack.c: removes the alternate stack this runtime gave the calling thread, if any. */
void vaka_thread_stack_detach(void);
/** thread_stack.c: resolves the pthread_create the interposer forwards to (a sanitizer's interceptor, glibc's
 *  static entry or dlsym RTLD_NEXT: thread_stack.c) and the thread key ahead of the first interposed
 *  pthread_create call; says once on stderr if there is no pthread_create to forward to. */
void vaka_thread_stack_prepare(void);
/** thread_stack.c: 1 if the calling thread's alternate stack was created by this runtime. */
int vaka_thread_stack_is_ours(void);

#pragma GCC visibility pop

#endif /* VAKA_INTERNAL_H */
