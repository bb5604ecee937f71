/*
 * Signal path: the crash handler.
 *
 * Entry: the first thread to arrive wins a compare-and-swap on `crash_tid` and writes the report; any
 * other crashing thread waits (bounded, ~10 s) until the winner has restored the previous handlers, then
 * waits another ~10 s for the winner's chained signal to end the process, and only then lets its own
 * signal through — unless the process survived the winner's signal (crash_gen changes): then it competes
 * again. A second entry on the winner's thread means the capture itself
 * faulted: the partial report is left without its `end` line and the process dies with the original
 * signal. A signal sent from outside (si_code <= 0) to a signal ignored before us is ignored.
 *
 * Chaining: after the report is closed, every previous action is put back as saved — only where our handler
 * is the current action: a handler installed after ours is never replaced (restore_one(), put_ours_back()).
 * A previous handler function is called directly by the winner, under the signal mask the kernel would have
 * given it (with our handlers back in place while it runs, so a siglongjmp out of it leaves Vaka armed);
 * SIG_DFL is re-sent with tgkill, or, for a hardware fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE with
 * si_code > 0), left to repeat: returning re-executes the faulting instruction. When the previous handler
 * returns (or the signal is ignored), the process survived: the report is removed (or, while death may still
 * follow, kept until a normal exit) and the handlers re-armed (survived()).
 *
 * Only async-signal-safe syscalls, libunwind and other sig_*.c code are used here; all storage is static.
 */
#include "vaka_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h> /* renameat only (no stdio streams in the handler) */
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

vaka_sig_state vaka_state = {
    .reader = { .method = VAKA_SAFE_READ_NONE, .pipe_r = -1, .pipe_w = -1 },
    .targets = { { .dir_fd = -1, .reserve_fd = -1 }, { .dir_fd = -1, .reserve_fd = -1 } },
};

/* Kernel tid of the thread writing the report; 0 while no crash has started. */
static atomic_int crash_tid;
/* Set once the winner has restored the previous handlers (or given up). */
static atomic_int crash_done;
/* CLOCK_MONOTONIC ns when the winner finished its capture and restored the previous handlers; 0 before. */
static _Atomic uint64_t crash_done_ns;
/* Bumped each time a capture ends in a signal the process survived and the handlers are re-armed: a waiting
 * thread that sees it change competes again instead of waiting out the grace period. */
static atomic_uint crash_gen;
/* The signal the winner is handling (for the nested-fault path). */
static int crash_sig;
static int report_fd = -1;
/* The last report written, still open after its capture, and its length in bytes: when the process survives
 * the signal, that file (blocks and all) becomes the next reserve; when death follows, the blocks past its
 * end are released (trim_report()). -1 when none. */
static int kept_fd = -1;
static long kept_len;
/* 1 while a report of a signal the process survived is kept because death may still follow (SIGABRT:
 * abort() raises it again; a previous handler that put SIG_DFL in place): a normal exit removes it. */
static int kept_survived;
/* The report of a signal the process survived, kept as the next reserve (blocks and all: on a full disk,
 * freeing them would let another thread take them before a new reserve could): renamed to the hidden
 * `.<run_id>-<pid>.spare` in the report directory, still open. The next capture writes it from offset 0, cuts it to
 * the written length and renames it to the report's name; a normal exit or uninstall unlinks it. spare_dir
 * is the directory descriptor the name is relative to (spare_path + spare_rel), or AT_FDCWD (spare_path is
 * absolute). -1 when none. */
static int spare_fd = -1;
static int spare_dir;
static dev_t spare_dev;
static ino_t spare_ino;
static pid_t spare_pid;
static size_t spare_rel;
static char spare_path[VAKA_REPORT_FILE_PATH_MAX + 8];
/* Where the current report was created (directory descriptor or AT_FDCWD, and name), to remove it when the
 * process survives the signal; name NULL when none. */
static int report_dir_used = -1;
static const char *report_name_used;
/* While the winner runs a previous handler function with our handlers in place (chain()): its thread and the
 * stack pointer of chain()'s frame. A later entry on that thread tells a signal raised inside that handler
 * (interrupted code below that frame / on the alternate stack) from one after the handler left with
 * siglongjmp (the signal was survived). 0 when none. */
static atomic_int chain_tid;
static volatile uintptr_t chain_sp;
static vaka_writer writer;
static uintptr_t frame_ips[VAKA_REPORT_MAX_FRAMES];
static uint8_t frame_methods[VAKA_REPORT_MAX_FRAMES];
static char message_buf[VAKA_REPORT_MESSAGE_MAX];

/* ---- capture watchdog ----
 * The whole capture is bounded: at crash time the winner arms two POSIX timers with raw syscalls. Timer A
 * (VAKA_WATCHDOG_NS) is directed at the winner's thread (SIGEV_THREAD_ID): when the winner is stuck with the
 * watchdog signal deliverable, its handler runs on the winner and takes the nested-fault path. Timer B
 * (VAKA_WATCHDOG_NS + 1 s) is process-directed: libunwind blocks every signal around dl_iterate_phdr, so a
 * winner stuck on the dynamic linker's lock never sees timer A; the kernel then gives timer B to another
 * thread, which writes the frame-pointer frames the winner collected before unwinding and ends the process
 * with the original signal (default action). */
#define VAKA_WATCHDOG_NS 2000000000LL
#define VAKA_WATCHDOG_COOKIE 0x56414b41 /* "VAKA" in si_value: tells our timers from foreign signals */
enum { PHASE_IDLE = 0, PHASE_UNWINDING = 1, PHASE_WRITING = 2, PHASE_ABANDONED = 3 };
static atomic_int capture_phase;
static int watchdog_timers[2] = { -1, -1 };
static struct sigaction watchdog_previous;
static int watchdog_armed;
/* Frames from the frame-pointer walk done before libunwind runs (written by the watchdog if it hangs). */
static uintptr_t pre_ips[VAKA_REPORT_MAX_FRAMES];
static uint8_t pre_methods[VAKA_REPORT_MAX_FRAMES];
static size_t pre_count;
static vaka_writer watchdog_writer;
static void disarm_watchdog(void);
static void vaka_sig_handler_body(int sig, siginfo_t *info, void *context);

/* Size of the kernel's signal set (rt_sigtimedwait's last argument wants it in bytes). */
#define VAKA_KERNEL_NSIG 64

/* How long a non-winning thread waits for the winner: 1000 x 10 ms. */
#define VAKA_WAIT_STEPS 1000
#define VAKA_WAIT_STEP_NS 10000000L

static uint64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    ts.tv_sec = 0; /* assignments, not `= {0}`: some compilers emit memset for that at -O0 */
    ts.tv_nsec = 0;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static pid_t current_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

static void send_self(int sig, pid_t tid)
{
    syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), tid, sig);
}

int vaka_sig_crash_started(void)
{
    return atomic_load(&crash_tid) != 0;
}

void vaka_sig_rearm(void)
{
    if (atomic_load(&crash_done)) {
        atomic_store(&crash_tid, 0);
        atomic_store(&crash_done, 0);
    }
}

/* 1 when `a` is our crash handler. */
static int is_ours(const struct sigaction *a)
{
    return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == vaka_sig_handler;
}

/* Signals whose current action is the previous one that we put back in place ourselves (restore_one()):
 * only those, and those still carrying our handler, are ever changed by us again. */
static volatile uint8_t put_by_us[VAKA_NSIG];

/* Puts the saved previous action of `sig` back, only where our handler is the current one: a handler
 * installed after ours (a library that chains to us, a JIT's SIGSEGV handler) is never replaced. */
static void restore_one(int sig)
{
    put_by_us[sig] = 0;
    struct sigaction now;
    if (sigaction(sig, NULL, &now) != 0 || !is_ours(&now)) return;
    struct sigaction action = vaka_state.previous[sig];
    if (is_ours(&action)) {
        vaka_sig_zero(&action, sizeof action);
        action.sa_handler = SIG_DFL;
    }
    if (sigaction(sig, &action, NULL) == 0) put_by_us[sig] = 1;
}

void vaka_sig_restore_previous(void)
{
    for (size_t i = 0; i < vaka_state.signal_count; i++) restore_one(vaka_state.signals[i]);
    atomic_store(&vaka_state.installed, 0); /* our handlers are gone: a later install starts afresh */
    atomic_store(&vaka_sig_protected_mask, 0u); /* and programs may block those signals again */
}

void vaka_sig_after_fork_child(void)
{
    pid_t pid = (pid_t)syscall(SYS_getpid);
    vaka_state.owner_pid = pid;
    /* A crash in progress in the parent (fork from a previous handler) is not the child's. */
    atomic_store(&crash_tid, 0);
    atomic_store(&crash_done, 0);
    atomic_store(&capture_phase, PHASE_IDLE);
    report_fd = -1;
    /* A report the parent kept (a survived signal death may follow) is the parent's: the child's normal exit
     * must not remove it, nor its death trim it. */
    if (kept_fd >= 0) close(kept_fd);
    kept_fd = -1;
    kept_survived = 0;
    report_name_used = NULL;
    /* So is the spare (the parent's open file, under the parent's name): never written, nor unlinked here. */
    spare_fd = -1;
    for (int k = 0; k < 2; k++) watchdog_timers[k] = -1; /* timers are not inherited */
    watchdog_armed = 0;

    /* The child's own report file: `<dir>/<run_id>-<pid>.crash`, so parent and child never overwrite each
     * other's report. */
    vaka_report_target *current = atomic_load(&vaka_state.target);
    if (current == NULL) return;
    vaka_report_target *next = current == &vaka_state.targets[0] ? &vaka_state.targets[1] : &vaka_state.targets[0];
    vaka_sig_copy(next, current, sizeof *next);
    /* The reserve is the parent's (the same open file): the child must never write into it. Its copy of the
     * descriptor is closed; the child's report is created by name. */
    if (next->reserve_fd >= 0) {
        struct stat st;
        if (fstat(next->reserve_fd, &st) == 0 && st.st_dev == next->reserve_dev && st.st_ino == next->reserve_ino)
            close(next->reserve_fd);
        next->reserve_fd = -1;
    }
    size_t p = current->dir_len;
    if (p == 0 || p + current->run_id_len + 1 + 10 + 6 + 1 > sizeof next->path) return;
    vaka_sig_copy(next->path + p, current->run_id, current->run_id_len);
    p += current->run_id_len;
    next->path[p++] = '-';
    char digits[10];
    size_t nd = 0;
    uint32_t v = (uint32_t)pid;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0 && nd < sizeof digits);
    while (nd > 0) next->path[p++] = digits[--nd];
    vaka_sig_copy(next->path + p, ".crash", 7);
    atomic_store(&vaka_state.target, next);
}

void vaka_sig_test_fault(int stage)
{
    if (stage != 0 && atomic_load(&vaka_state.test_fault_stage) == stage) {
        atomic_store(&vaka_state.test_fault_stage, 0);
        volatile uintptr_t address = 8;
        *(volatile int *)address = 1; /* SIGSEGV inside the capture, on purpose */
    }
}

/* ------------------------------------------------------------------ report */

static void write_text_line(const char *key, const char *s, size_t n)
{
    vaka_w_key(&writer, key);
    vaka_w_text(&writer, s, n);
    vaka_w_nl(&writer);
}

static void write_register(const char *name, uint64_t value)
{
    vaka_w_key(&writer, VAKA_REPORT_KEY_REGISTER);
    vaka_w_str(&writer, name);
    vaka_w_char(&writer, ' ');
    vaka_w_hex(&writer, value);
    vaka_w_nl(&writer);
}

static void write_registers(const ucontext_t *uc)
{
#if defined(__x86_64__)
    static const struct { const char *name; int index; } regs[] = {
        { "rax", REG_RAX }, { "rbx", REG_RBX }, { "rcx", REG_RCX }, { "rdx", REG_RDX },
        { "rsi", REG_RSI }, { "rdi", REG_RDI }, { "rbp", REG_RBP }, { "rsp", REG_RSP },
        { "r8", REG_R8 },   { "r9", REG_R9 },   { "r10", REG_R10 }, { "r11", REG_R11 },
        { "r12", REG_R12 }, { "r13", REG_R13 }, { "r14", REG_R14 }, { "r15", REG_R15 },
        { "rip", REG_RIP }, { "eflags", REG_EFL },
    };
    for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++)
        write_register(regs[i].name, (uint64_t)uc->uc_mcontext.gregs[regs[i].index]);
#elif defined(__aarch64__)
    for (int i = 0; i <= 28; i++) {
        vaka_w_key(&writer, VAKA_REPORT_KEY_REGISTER);
        vaka_w_char(&writer, 'x');
        vaka_w_udec(&writer, (uint64_t)i);
        vaka_w_char(&writer, ' ');
        vaka_w_hex(&writer, uc->uc_mcontext.regs[i]);
        vaka_w_nl(&writer);
    }
    write_register("fp", uc->uc_mcontext.regs[29]);
    write_register("lr", uc->uc_mcontext.regs[30]);
    write_register("sp", uc->uc_mcontext.sp);
    write_register("pc", uc->uc_mcontext.pc);
#else
    (void)uc;
#endif
}

/* Text of at most VAKA_REPORT_MESSAGE_MAX bytes at `p`, trailing newlines removed. */
static void write_message(const char *key, uintptr_t p, size_t cap)
{
    if (p == 0) return;
    if (cap > VAKA_REPORT_MESSAGE_MAX) cap = VAKA_REPORT_MESSAGE_MAX;
    size_t n = vaka_safe_read_string(&vaka_state.reader, message_buf, p, cap);
    while (n > 0 && (message_buf[n - 1] == '\n' || message_buf[n - 1] == '\r')) n--;
    if (n > 0) write_text_line(key, message_buf, n);
}

static void write_messages(void)
{
    vaka_safe_reader *r = &vaka_state.reader;
    uintptr_t p = 0;
    /* Swift: swift_getFatalErrorMessageBuffer() returned the address of a `char *`. */
    if (vaka_state.swift_fatal_message != NULL &&
        vaka_safe_read_word(r, (uintptr_t)vaka_state.swift_fatal_message, &p) && p != 0)
        write_message(VAKA_REPORT_KEY_FATAL_MESSAGE, p, VAKA_REPORT_MESSAGE_MAX);
    /* glibc: `struct abort_msg_s { unsigned int size; char msg[]; } *__abort_msg`; size is the whole
     * allocation in bytes, msg is NUL-terminated. */
    p = 0;
    if (vaka_state.abort_msg != NULL && vaka_safe_read_word(r, (uintptr_t)vaka_state.abort_msg, &p) && p != 0) {
        unsigned int size = 0;
        if (vaka_safe_read(r, &size, p, sizeof size) == sizeof size && size > sizeof size)
            write_message(VAKA_REPORT_KEY_ABORT_MESSAGE, p + sizeof size, size - sizeof size);
    }
}

static int has_fault_address(int sig, int code)
{
    return code > 0 && (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP);
}

/* Opens the report file `name` in directory `dir` (a descriptor, or AT_FDCWD with an absolute name) for
 * writing without ever blocking: O_NONBLOCK (a FIFO at the path would block open(2) until a reader came),
 * O_NOFOLLOW (no symlinks), and only a regular file is kept. Anything else at the path (a FIFO, a device, a
 * socket) is unlinked and the file created afresh with O_EXCL.
 * @return the descriptor, or -1. */
static int open_report_at(int dir, const char *name)
{
    const int flags = O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int fd = openat(dir, name, flags | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) return fd;
        close(fd);
    } else if (errno != ENXIO && errno != ELOOP && errno != EISDIR && errno != ETXTBSY && errno != EWOULDBLOCK) {
        return -1; /* e.g. ENOENT (directory gone), EACCES, EMFILE: unlinking would not help */
    }
    /* ENXIO: a FIFO without a reader; ELOOP: a symlink; EISDIR: a directory (unlink fails: give up). */
    if (unlinkat(dir, name, 0) != 0) return -1;
    fd = openat(dir, name, flags | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    return fd;
}

int vaka_sig_make_reserve(vaka_report_target *t)
{
    struct stat st;
    int old = t->reserve_fd;
    t->reserve_fd = -1;
    if (old >= 0 && fstat(old, &st) == 0 && st.st_dev == t->reserve_dev && st.st_ino == t->reserve_ino) close(old);
    if (t->dir_fd < 0) return 0;
    int fd = openat(t->dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        return e == EROFS || e == EACCES || e == EPERM ? e : 0; /* EOPNOTSUPP, EISDIR, ENOSPC...: no reserve */
    }
    /* No room at all leaves the unnamed file without blocks: still a descriptor held for the crash (EMFILE). */
    static const long sizes[] = VAKA_RESERVE_SIZES;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (syscall(SYS_fallocate, fd, FALLOC_FL_KEEP_SIZE, 0L, sizes[i]) == 0) break;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return 0;
    }
    t->reserve_dev = st.st_dev;
    t->reserve_ino = st.st_ino;
    t->reserve_pid = (pid_t)syscall(SYS_getpid);
    t->reserve_fd = fd;
    return 0;
}

/* Links the unnamed reserve `fd` as `name` in `dir` (replacing whatever is there). @return 1 on success. */
static int link_reserve(int fd, int dir, const char *name)
{
    char proc[32] = "/proc/self/fd/";
    size_t p = 14;
    char digits[12];
    size_t nd = 0;
    unsigned v = (unsigned)fd;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0 && nd < sizeof digits);
    while (nd > 0) proc[p++] = digits[--nd];
    proc[p] = '\0';
    for (int attempt = 0; attempt < 2; attempt++) {
        /* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link works for everyone where /proc is mounted. */
        if (syscall(SYS_linkat, fd, "", dir, name, AT_EMPTY_PATH) == 0) return 1;
        if (syscall(SYS_linkat, AT_FDCWD, proc, dir, name, AT_SYMLINK_FOLLOW) == 0) return 1;
        if (errno != EEXIST || unlinkat(dir, name, 0) != 0) return 0;
    }
    return 0;
}

/* The reserve of `target`, linked under the report's name (by the directory descriptor, else by the absolute
 * path), when it is this process's and still unnamed. It is used up: the target no longer has a reserve.
 * @return the descriptor, or -1. */
static int take_reserve(vaka_report_target *target, int dir_ok, int path_ok)
{
    int fd = target->reserve_fd;
    struct stat st;
    if (fd < 0 || target->reserve_pid != (pid_t)syscall(SYS_getpid) || fstat(fd, &st) != 0 ||
        st.st_dev != target->reserve_dev || st.st_ino != target->reserve_ino || st.st_nlink != 0)
        return -1;
    if (dir_ok && link_reserve(fd, target->dir_fd, target->path + target->dir_len)) {
        report_dir_used = target->dir_fd;
        report_name_used = target->path + target->dir_len;
    } else if (path_ok && link_reserve(fd, AT_FDCWD, target->path)) {
        report_dir_used = AT_FDCWD;
        report_name_used = target->path;
    } else {
        return -1;
    }
    target->reserve_fd = -1;
    return fd;
}

/* The spare (a survived signal's report kept as reserve), renamed to the report's name (by the directory
 * descriptor, else by the absolute path) and positioned at offset 0, when it is this process's. The caller
 * cuts it to the written length. It is used up. @return the descriptor, or -1. */
static int take_spare(vaka_report_target *target, int dir_ok, int path_ok)
{
    int fd = spare_fd;
    struct stat st;
    if (fd < 0 || spare_pid != (pid_t)syscall(SYS_getpid) || fstat(fd, &st) != 0 || st.st_dev != spare_dev ||
        st.st_ino != spare_ino)
        return -1;
    spare_fd = -1;
    /* Only the file this process created is renamed: the name must still be its (dev, inode). */
    struct stat by_dir, by_path;
    int dir_same = dir_ok && spare_dir == target->dir_fd &&
                   fstatat(target->dir_fd, spare_path + spare_rel, &by_dir, AT_SYMLINK_NOFOLLOW) == 0 &&
                   by_dir.st_dev == spare_dev && by_dir.st_ino == spare_ino;
    int path_same = path_ok && fstatat(AT_FDCWD, spare_path, &by_path, AT_SYMLINK_NOFOLLOW) == 0 &&
                    by_path.st_dev == spare_dev && by_path.st_ino == spare_ino;
    if (dir_same &&
        renameat(target->dir_fd, spare_path + spare_rel, target->dir_fd, target->path + target->dir_len) == 0) {
        report_dir_used = target->dir_fd;
        report_name_used = target->path + target->dir_len;
    } else if (path_same && spare_dir == AT_FDCWD &&
               renameat(AT_FDCWD, spare_path, AT_FDCWD, target->path) == 0) {
        report_dir_used = AT_FDCWD;
        report_name_used = target->path;
    } else if (path_same && spare_path[0] == '/' &&
               renameat(AT_FDCWD, spare_path, AT_FDCWD, target->path) == 0) {
        report_dir_used = AT_FDCWD; /* the directory descriptor is stale: by the absolute path */
        report_name_used = target->path;
    } else {
        close(fd); /* the name is gone (deleted from outside): the reserve or a new file instead */
        return -1;
    }
    if (syscall(SYS_lseek, fd, 0L, SEEK_SET) != 0) {
        close(fd);
        report_name_used = NULL;
        return -1;
    }
    return fd;
}

/* Keeps the report just written (kept_fd, named report_name_used) as the spare: renames it to
 * `.<run_id>-<pid>.spare` in the same directory. @return 1 when done (kept_fd is then the spare's). */
static int keep_as_spare(vaka_report_target *target)
{
    struct stat st;
    if (target == NULL || kept_fd < 0 || report_name_used == NULL || spare_fd >= 0) return 0;
    /* The pid in the name: a fork child keeps the parent's run_id, and its spare must not take (or be taken
     * for) the parent's. */
    pid_t pid = (pid_t)syscall(SYS_getpid);
    char digits[24];
    size_t nd = 0;
    for (unsigned long v = (unsigned long)pid; nd == 0 || v != 0; v /= 10) digits[nd++] = (char)('0' + v % 10);
    size_t need = target->dir_len + 1 + target->run_id_len + 1 + nd + 6 + 1;
    if (need > sizeof spare_path || fstat(kept_fd, &st) != 0) return 0;
    size_t p = 0;
    vaka_sig_copy(spare_path, target->path, target->dir_len);
    p = target->dir_len;
    spare_path[p++] = '.';
    vaka_sig_copy(spare_path + p, target->run_id, target->run_id_len);
    p += target->run_id_len;
    spare_path[p++] = '-';
    while (nd > 0) spare_path[p++] = digits[--nd];
    vaka_sig_copy(spare_path + p, ".spare", 7);
    spare_rel = target->dir_len;
    int ok = report_dir_used == AT_FDCWD
                 ? renameat(AT_FDCWD, report_name_used, AT_FDCWD, spare_path) == 0
                 : renameat(report_dir_used, report_name_used, report_dir_used, spare_path + spare_rel) == 0;
    if (!ok) return 0;
    spare_dir = report_dir_used;
    spare_dev = st.st_dev;
    spare_ino = st.st_ino;
    spare_pid = pid;
    spare_fd = kept_fd;
    kept_fd = -1;
    report_name_used = NULL;
    return 1;
}

void vaka_sig_drop_spare(void)
{
    struct stat st;
    int fd = spare_fd;
    if (fd < 0) return;
    spare_fd = -1;
    if (spare_pid != (pid_t)syscall(SYS_getpid) || fstat(fd, &st) != 0 || st.st_dev != spare_dev ||
        st.st_ino != spare_ino)
        return; /* not ours (any more): the descriptor may be someone else's now */
    if (spare_dir == AT_FDCWD) unlinkat(AT_FDCWD, spare_path, 0);
    else if (unlinkat(spare_dir, spare_path + spare_rel, 0) != 0 && spare_path[0] == '/')
        unlinkat(AT_FDCWD, spare_path, 0);
    close(fd);
}

/* Cuts the report being written at `fd` to what was written so far (a reused spare holds an earlier
 * report's bytes past it). */
static void cut_at_offset(int fd)
{
    struct stat st;
    long pos = (long)syscall(SYS_lseek, fd, 0L, SEEK_CUR);
    /* Only when longer: a truncate to the same size may free the blocks allocated past the end (ext4). */
    if (pos >= 0 && fstat(fd, &st) == 0 && st.st_size > pos) syscall(SYS_ftruncate, fd, pos);
}

/* The report file of `target`: a survived signal's spare, else the reserve made at install, linked under the report's name; else created
 * relative to the directory opened at install when that descriptor is still ours (same device and inode);
 * else (or when that fails: the directory was deleted and created again) by its absolute path (the
 * application closed or reused our descriptor; works when the path is shorter than PATH_MAX).
 * @return the descriptor, or -1. */
static int open_report(vaka_report_target *target)
{
    struct stat st;
    int dir_ok = target->dir_fd >= 0 && fstat(target->dir_fd, &st) == 0 && st.st_dev == target->dir_dev &&
                 st.st_ino == target->dir_ino;
    int path_ok = vaka_sig_strnlen(target->path, VAKA_REPORT_PATH_MAX) < VAKA_REPORT_PATH_MAX;
    report_name_used = NULL;
    int fd = take_spare(target, dir_ok, path_ok);
    if (fd >= 0) return fd;
    fd = take_reserve(target, dir_ok, path_ok);
    if (fd >= 0) return fd;
    if (dir_ok) {
        fd = open_report_at(target->dir_fd, target->path + target->dir_len);
        if (fd >= 0) {
            report_dir_used = target->dir_fd;
            report_name_used = target->path + target->dir_len;
            return fd;
        }
    }
    if (!path_ok) return -1;
    fd = open_report_at(AT_FDCWD, target->path);
    if (fd >= 0) {
        report_dir_used = AT_FDCWD;
        report_name_used = target->path;
    }
    return fd;
}

/* RLIMIT_FSIZE as found at crash time, when the capture raised its soft limit to the hard one. */
static struct { uint64_t cur, max; } fsize_saved;
static int fsize_raised;

/* A soft RLIMIT_FSIZE below the hard one would cut the report (even to 0 bytes): raise it for the capture. */
static void raise_fsize_limit(void)
{
    fsize_raised = 0;
    if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, NULL, &fsize_saved) != 0 || fsize_saved.cur >= fsize_saved.max)
        return;
    struct { uint64_t cur, max; } raised = { fsize_saved.max, fsize_saved.max };
    if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, &raised, NULL) == 0) fsize_raised = 1;
}

static void restore_fsize_limit(void)
{
    if (fsize_raised) syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, &fsize_saved, NULL);
    fsize_raised = 0;
}

/* A reused spare longer than this report: `pad` lines (a key readers ignore, at most 4 KiB each) fill it up to
 * its old size less the `end` line, so the report ends exactly where the file does without a truncate (one
 * would free the blocks past the new end, and those allocated past it with FALLOC_FL_KEEP_SIZE: another
 * thread on a full disk takes them before the process knows whether it survives this signal). */
static void pad_to_file_size(int fd)
{
    struct stat st;
    vaka_w_flush(&writer);
    long pos = (long)syscall(SYS_lseek, fd, 0L, SEEK_CUR);
    if (pos < 0 || fstat(fd, &st) != 0) return;
    long fill = (long)st.st_size - pos - 4; /* 4: `end\n` */
    if (fill <= 0) return;
    if (fill < 4) fill += 4096; /* shorter than `pad\n`: into the blocks past the end */
    while (fill > 0) {
        long n = fill > 4096 ? 4096 : fill;
        if (fill - n > 0 && fill - n < 4) n -= 4; /* leave room for a last `pad\n` */
        vaka_w_str(&writer, VAKA_REPORT_KEY_PAD);
        if (n >= 5) {
            vaka_w_char(&writer, ' ');
            for (long i = 0; i < n - 5; i++) vaka_w_char(&writer, '.');
        }
        vaka_w_char(&writer, '\n');
        fill -= n;
    }
}

static void capture(int sig, siginfo_t *info, ucontext_t *uc, uint64_t start_ns, pid_t tid)
{
    uint64_t wall_ns = now_ns(CLOCK_REALTIME);
    vaka_report_target *target = atomic_load(&vaka_state.target);
    if (target == NULL || target->path[0] == '\0') return;
    if (kept_fd >= 0) close(kept_fd); /* an earlier survived report, replaced by this one */
    kept_fd = -1;
    kept_survived = 0;

    raise_fsize_limit();
    int fd = open_report(target);
    if (fd < 0) return; /* nowhere to write; chaining still happens */
    report_fd = fd;
    vaka_w_init(&writer, fd);
    vaka_safe_reader_begin(&vaka_state.reader);

    int code = info != NULL ? info->si_code : 0;
    const char *name;

    vaka_w_key(&writer, VAKA_REPORT_MAGIC);
    vaka_w_udec(&writer, VAKA_REPORT_VERSION);
    vaka_w_nl(&writer);
    write_text_line(VAKA_REPORT_KEY_RUN_ID, target->run_id, target->run_id_len);
    vaka_w_key(&writer, VAKA_REPORT_KEY_PID);
    vaka_w_dec(&writer, (int64_t)syscall(SYS_getpid));
    vaka_w_nl(&writer);
    vaka_w_key(&writer, VAKA_REPORT_KEY_TID);
    vaka_w_dec(&writer, tid);
    vaka_w_nl(&writer);

    char thread_name[VAKA_REPORT_THREAD_NAME_MAX + 2]; /* PR_GET_NAME stores up to 16 bytes with the NUL */
    vaka_sig_zero(thread_name, sizeof thread_name);
    if (prctl(PR_GET_NAME, thread_name, 0, 0, 0) != 0) thread_name[0] = '\0';
    write_text_line(VAKA_REPORT_KEY_THREAD_NAME, thread_name,
                    vaka_sig_strnlen(thread_name, VAKA_REPORT_THREAD_NAME_MAX + 1));

    vaka_w_key(&writer, VAKA_REPORT_KEY_TIMESTAMP_NS);
    vaka_w_udec(&writer, wall_ns);
    vaka_w_nl(&writer);
#if defined(__x86_64__)
    vaka_w_str(&writer, VAKA_REPORT_KEY_ARCH " " VAKA_REPORT_ARCH_X86_64 "\n");
#elif defined(__aarch64__)
    vaka_w_str(&writer, VAKA_REPORT_KEY_ARCH " " VAKA_REPORT_ARCH_AARCH64 "\n");
#endif
    if (vaka_state.executable_len > 0)
        write_text_line(VAKA_REPORT_KEY_EXECUTABLE, vaka_state.executable, vaka_state.executable_len);
    else
        vaka_w_str(&writer, VAKA_REPORT_KEY_EXECUTABLE " " VAKA_REPORT_VALUE_UNKNOWN "\n");

    vaka_w_key(&writer, VAKA_REPORT_KEY_SIGNAL);
    vaka_w_dec(&writer, sig);
    vaka_w_char(&writer, ' ');
    name = vaka_sig_signal_name(sig);
    vaka_w_str(&writer, name != NULL ? name : VAKA_REPORT_NAME_UNKNOWN);
    vaka_w_nl(&writer);

    vaka_w_key(&writer, VAKA_REPORT_KEY_CODE);
    vaka_w_dec(&writer, code);
    vaka_w_char(&writer, ' ');
    name = vaka_sig_si_code_name(sig, code);
    vaka_w_str(&writer, name != NULL ? name : VAKA_REPORT_NAME_UNKNOWN);
    vaka_w_nl(&writer);

    if (info != NULL && has_fault_address(sig, code)) {
        vaka_w_key(&writer, VAKA_REPORT_KEY_FAULT_ADDR);
        vaka_w_hex(&writer, (uintptr_t)info->si_addr);
        vaka_w_nl(&writer);
    }
    if (info != NULL && code <= 0) {
        vaka_w_key(&writer, VAKA_REPORT_KEY_SENDER);
        vaka_w_dec(&writer, info->si_pid);
        vaka_w_char(&writer, ' ');
        vaka_w_udec(&writer, info->si_uid);
        vaka_w_nl(&writer);
    }
    write_messages();
    /* Flush the header now: if anything below faults or hangs, it is already on disk. */
    vaka_w_flush(&writer);
    vaka_sig_test_fault(1);

    write_registers(uc);
    vaka_w_flush(&writer); /* the registers too: the unwinding below may hang (see the watchdog) */

    /* Frame-pointer frames first, into their own buffer: if libunwind hangs, the watchdog writes these. */
    int pre_truncated = 0;
    pre_ips[0] = vaka_uc_pc(uc);
    pre_methods[0] = VAKA_FRAME_CONTEXT;
    pre_count = vaka_fp_walk(&vaka_state.reader, vaka_uc_fp(uc), vaka_uc_sp(uc), pre_ips, pre_methods, 1,
                             VAKA_REPORT_MAX_FRAMES, &pre_truncated);
    atomic_store(&capture_phase, PHASE_UNWINDING);

    int truncated = 0;
    size_t n = vaka_sig_unwind(uc, &vaka_state.reader, frame_ips, frame_methods, VAKA_REPORT_MAX_FRAMES, &truncated);
    int expected_phase = PHASE_UNWINDING;
    if (!atomic_compare_exchange_strong(&capture_phase, &expected_phase, PHASE_WRITING)) {
        /* The watchdog gave up on us and is ending the process: write nothing more. */
        struct timespec step = { 0, VAKA_WAIT_STEP_NS };
        for (int i = 0; i < VAKA_WAIT_STEPS; i++) nanosleep(&step, NULL);
        syscall(SYS_exit_group, 128 + sig);
    }
    for (size_t i = 0; i < n; i++) {
        vaka_w_frame(&writer, frame_ips[i], frame_methods[i]);
    }
    if (truncated) {
        vaka_w_key(&writer, VAKA_REPORT_KEY_FRAMES_TRUNCATED);
        vaka_w_udec(&writer, n);
        vaka_w_nl(&writer);
    }

    vaka_sig_write_images(&writer, &vaka_state.reader);

    /* How memory was read (after the reads: a method refused mid-capture has been replaced by then). */
    vaka_w_key(&writer, VAKA_REPORT_KEY_MEMORY_READ);
    vaka_w_str(&writer, vaka_state.reader.method == VAKA_SAFE_READ_PVR    ? VAKA_REPORT_MEMORY_READ_PVR
                        : vaka_state.reader.method == VAKA_SAFE_READ_PIPE ? VAKA_REPORT_MEMORY_READ_PIPE
                                                                          : VAKA_REPORT_MEMORY_READ_NONE);
    vaka_w_nl(&writer);

    vaka_w_key(&writer, VAKA_REPORT_KEY_CAPTURE_NS);
    vaka_w_udec(&writer, now_ns(CLOCK_MONOTONIC) - start_ns);
    vaka_w_nl(&writer);
    pad_to_file_size(fd);
    vaka_w_str(&writer, VAKA_REPORT_KEY_END "\n");
    vaka_w_flush(&writer);
    /* No fsync: the data is in the page cache, which outlives this process (only a kernel crash or power
     * loss would lose it), and fsync costs milliseconds on real disks — more than the whole capture. */
    /* The file stays open (kept_fd) until it is known whether death follows. */
    long len = (long)syscall(SYS_lseek, fd, 0L, SEEK_CUR);
    if (len >= 0) cut_at_offset(fd); /* a reused spare may be longer */
    kept_fd = len >= 0 ? fd : -1;
    kept_len = len;
    if (kept_fd < 0) close(fd);
    report_fd = -1;
}

/* Death follows the report just written: release the reserve's blocks past its end (fallocate with
 * FALLOC_FL_KEEP_SIZE kept up to 256 KiB allocated beyond the written length). */
static void trim_report(void)
{
    if (kept_fd < 0) return;
    syscall(SYS_ftruncate, kept_fd, kept_len);
    syscall(SYS_fallocate, kept_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kept_len, 64L << 20);
    close(kept_fd);
    kept_fd = -1;
}

/* A report write over RLIMIT_FSIZE made the kernel raise SIGXFSZ (blocked by our sa_mask). It is ours, not
 * the application's: take it off the pending set so the process still ends with the crash signal. */
static void discard_own_sigxfsz(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGXFSZ);
    struct timespec zero = { 0, 0 };
    syscall(SYS_rt_sigtimedwait, &set, NULL, &zero, (size_t)(VAKA_KERNEL_NSIG / 8));
}

/* ------------------------------------------------------------------ chaining */

/* 1 for a synchronous hardware fault: returning re-runs the faulting instruction. */
static int repeats_by_itself(int sig, const siginfo_t *info)
{
    int code = info != NULL ? info->si_code : 0;
    int repeats = (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) && code > 0;
#ifdef BUS_MCEERR_AO
    if (sig == SIGBUS && code == BUS_MCEERR_AO) repeats = 0;
#endif
    return repeats;
}

static void put_ours_back(void);

/* Lets the signal reach whatever was installed before us (already restored).
 *
 * A synchronous hardware fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE with si_code > 0, except the asynchronous
 * machine-check report BUS_MCEERR_AO) simply returns, the faulting instruction runs again and reaches the
 * previous action — except that the `winner` calls a previous handler function directly, as below, to see it
 * return or leave. Every other signal does not repeat by itself (SIGTRAP's PC is already past the trap, SIGSYS
 * from seccomp, SIGABRT, BUS_MCEERR_AO, anything sent with kill/tgkill/sigqueue, si_code <= 0):
 *   - previous action is a handler function: call it directly with the original signal, siginfo and
 *     ucontext (SA_SIGINFO or plain), so it sees the real si_code/si_addr and can change the context (e.g. a
 *     seccomp SIGSYS handler that emulates the system call). For the winner our handlers are put back first
 *     (put_ours_back) and chain_tid/chain_sp mark the call, so a siglongjmp out of it leaves Vaka armed;
 *   - SIG_DFL: re-send the signal to this thread with tgkill (the default action then ends the process);
 *   - SIG_IGN: for a signal the kernel raised for this thread's own instruction (si_code > 0: SIGTRAP from
 *     int3/brk, SIGSYS from seccomp) what the kernel does for a forced synchronous signal: SIG_DFL, re-sent,
 *     so the process ends as it would without Vaka; for any other signal (sent with kill, raise...) return.
 * @return 1 when the signal was delivered and the process is still here (the previous handler returned, or
 *   the signal is ignored): the process survived it; 0 when the signal is left to repeat or was re-sent. */
/* 1 when the previous action of `sig` is a handler function (not SIG_DFL/SIG_IGN, not ours): chain() calls
 * it directly. */
static int previous_is_function(int sig)
{
    const struct sigaction *prev = &vaka_state.previous[sig];
    return (prev->sa_flags & SA_SIGINFO) ? prev->sa_sigaction != vaka_sig_handler && prev->sa_sigaction != NULL
                                         : prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN;
}

static int chain(int sig, siginfo_t *info, void *context, pid_t tid, int winner)
{
    int code = info != NULL ? info->si_code : 0;
    struct sigaction prev = vaka_state.previous[sig];
    int siginfo_handler = (prev.sa_flags & SA_SIGINFO) != 0;
    int function = siginfo_handler ? prev.sa_sigaction != vaka_sig_handler && prev.sa_sigaction != NULL
                                   : prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN;
    /* A hardware fault repeats: returning re-runs the instruction, which reaches the previous action. The
     * winner calls a previous handler function directly instead (below), to see it return or leave. */
    if (repeats_by_itself(sig, info) && !(winner && function)) {
        trim_report();
        return 0;
    }

    if (siginfo_handler && (prev.sa_sigaction == vaka_sig_handler || prev.sa_sigaction == NULL)) {
        send_self(sig, tid); /* never call ourselves */
        return 0;
    }
    if (!siginfo_handler && prev.sa_handler == SIG_IGN) {
        if (code <= 0) return 1;
        struct sigaction dfl; /* force_sig: an ignored synchronous trap still ends the process */
        vaka_sig_zero(&dfl, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        trim_report();
        send_self(sig, tid);
        return 0;
    }
    if (!siginfo_handler && prev.sa_handler == SIG_DFL) {
        /* A handler installed after ours is in place (it called us, as the action it saved): the default
         * action must still end the process, as without Vaka, instead of re-entering that handler forever. */
        struct sigaction now;
        int dfl_now = sigaction(sig, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL;
        trim_report();
        if (dfl_now && repeats_by_itself(sig, info)) return 0;
        if (!dfl_now) {
            struct sigaction dfl;
            vaka_sig_zero(&dfl, sizeof dfl);
            dfl.sa_handler = SIG_DFL;
            sigaction(sig, &dfl, NULL);
        }
        send_self(sig, tid);
        return 0;
    }
    /* The winner runs the previous handler with our handlers back in place: if it leaves with siglongjmp
     * (recovered), the next crash is still captured (see chain_tid). */
    if (winner) put_ours_back();
    if (prev.sa_flags & SA_RESETHAND) { /* what the kernel would have done on delivery */
        struct sigaction dfl;
        vaka_sig_zero(&dfl, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        if (sigaction(sig, &dfl, NULL) == 0 && winner) put_by_us[sig] = 1; /* ours to re-arm if it survives */
    }
    /* The mask the kernel would have given that handler (the interrupted code's, plus its sa_mask, plus the
     * signal unless SA_NODEFER), not ours (every non-crash signal blocked): a handler that leaves with
     * longjmp must leave the thread with the mask it would have had without Vaka. */
    uint64_t mask = 0, ours = 0;
    if (context != NULL) vaka_sig_copy(&mask, &((const ucontext_t *)context)->uc_sigmask, sizeof mask);
    else syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &mask, sizeof mask);
    uint64_t extra = 0;
    vaka_sig_copy(&extra, &prev.sa_mask, sizeof extra);
    mask |= extra;
    if (!(prev.sa_flags & SA_NODEFER)) mask |= (uint64_t)1 << (sig - 1);
    volatile char frame = 0;
    if (winner) {
        chain_sp = (uintptr_t)&frame;
        atomic_store(&chain_tid, (int)tid);
    }
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &mask, &ours, sizeof mask);
    if (siginfo_handler) prev.sa_sigaction(sig, info, context);
    else prev.sa_handler(sig);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &ours, NULL, sizeof ours);
    if (winner) atomic_store(&chain_tid, 0);
    (void)frame;
    return 1;
}

/* Our handlers for every installed signal again; the action found in place is what the signal meets without
 * Vaka: the saved one, unless a previous handler changed it (Swift's backtracer resets every crash signal to
 * SIG_DFL; SA_RESETHAND left SIG_DFL), which becomes the previous action chained to next time. */
static void put_ours_back(void)
{
    atomic_store(&vaka_state.installed, 1);
    for (size_t i = 0; i < vaka_state.signal_count; i++) {
        int s = vaka_state.signals[i];
        struct sigaction now;
        /* Only over the previous action we put there ourselves: a handler installed after ours stays. */
        if (!put_by_us[s] || sigaction(s, NULL, &now) != 0) continue;
        put_by_us[s] = 0;
        if (is_ours(&now) || sigaction(s, &vaka_state.action, NULL) != 0) continue;
        vaka_state.previous[s] = now;
    }
    atomic_store(&vaka_sig_protected_mask, vaka_state.protect_mask);
}

/* The process survived the signal just captured (chain() returned 1: the previous handler returned — e.g. a
 * seccomp handler that emulated the system call — or the signal is ignored). The report is not a crash: it
 * is removed (except for SIGABRT: abort() goes on to reset SIGABRT to SIG_DFL and raise it again, which ends
 * the process without entering any handler, so that report is the crash's; and see below). Then our handlers go back in
 * place with a fresh reserve, and the arbitration is reset, so the next crash is captured. Threads waiting
 * for this capture see crash_gen change and compete again. */
static void survived(int sig, int repeats)
{
    (void)repeats;
    /* SIGABRT (abort() resets it to SIG_DFL and raises it again after a returning handler), or a previous
     * handler that put SIG_DFL in place for this signal (Swift's backtracer, SA_RESETHAND: the next int3, or
     * the same faulting instruction re-run right after we return, may end the process): death may follow, so
     * that report stays — until the next capture replaces it, or a normal exit removes it (vaka_sig_at_exit).
     * Either way the slot is freed and our handlers re-armed: a fault the one-shot handler fixed is not the
     * last one captured. */
    struct sigaction now;
    int expects_death = sigaction(sig, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL;
    int keep = sig == SIGABRT || expects_death;
    if (keep) {
        trim_report();
        kept_survived = report_name_used != NULL;
    } else if (keep_as_spare(atomic_load(&vaka_state.target))) {
        /* The report, blocks and all, is the next capture's file: no gap where another thread could take the
         * blocks (a full disk). */
    } else {
        /* The new reserve first, while the report still holds its blocks (a full disk); then the report goes. */
        vaka_report_target *target = atomic_load(&vaka_state.target);
        if (target != NULL && target->reserve_fd < 0) vaka_sig_make_reserve(target);
        if (report_name_used != NULL) unlinkat(report_dir_used, report_name_used, 0);
        if (kept_fd >= 0) close(kept_fd);
        kept_fd = -1;
        report_name_used = NULL;
        /* The report's blocks are free now: take what the new reserve could not get before, at once. */
        if (target != NULL && target->reserve_fd >= 0) {
            static const long sizes[] = VAKA_RESERVE_SIZES;
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                if (syscall(SYS_fallocate, target->reserve_fd, FALLOC_FL_KEEP_SIZE, 0L, sizes[i]) == 0) break;
        }
    }
    vaka_report_target *target = atomic_load(&vaka_state.target);
    if (target != NULL && target->reserve_fd < 0 && spare_fd < 0) vaka_sig_make_reserve(target);
    put_ours_back();
    crash_sig = 0;
    atomic_store(&crash_done_ns, 0);
    atomic_store(&crash_done, 0);
    atomic_store(&crash_tid, 0);
    atomic_fetch_add(&crash_gen, 1u); /* after crash_tid: a waiter that saw the old value finds the slot free */
}

/* The capture faulted (or another signal hit the winner mid-capture): keep the complete lines written
 * so far (no `end` line: readers see a truncated report) and die with the original signal. */
__attribute__((noreturn)) static void die_after_nested_fault(int nested_sig, pid_t tid)
{
    int sig = crash_sig;
    if (report_fd >= 0) {
        vaka_w_flush_lines(&writer);
        cut_at_offset(report_fd);
        close(report_fd);
        report_fd = -1;
    }
    writer.fd = -1;
    disarm_watchdog();
    vaka_sig_restore_previous();
    atomic_store(&crash_done, 1);

    send_self(sig, tid); /* the previous handler, or the default action */

    /* Still alive: the previous handler returned or ignores the signal. Force the default action. */
    struct sigaction dfl;
    vaka_sig_zero(&dfl, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    if (nested_sig != sig) sigaction(nested_sig, &dfl, NULL);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, sig);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);
    send_self(sig, tid);
    syscall(SYS_exit_group, 128 + sig); /* not reached unless the default action is to ignore */
    for (;;) {
    }
}

/* ------------------------------------------------------------------ watchdog */

/* Ends the process with the original signal from a thread other than the (stuck) winner: the default
 * action for that signal, so no previous handler runs on a thread that did not crash. */
__attribute__((noreturn)) static void die_from_other_thread(void)
{
    int sig = crash_sig;
    pid_t tid = current_tid();
    vaka_sig_restore_previous();
    atomic_store(&crash_done, 1);
    struct sigaction dfl;
    vaka_sig_zero(&dfl, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, sig);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);
    send_self(sig, tid);
    syscall(SYS_exit_group, 128 + sig);
    for (;;) {
    }
}

/* Handler of the watchdog signal, installed only during a capture. */
static void vaka_sig_watchdog(int sig, siginfo_t *info, void *context)
{
    (void)context;
    if (info == NULL || info->si_code != SI_TIMER || info->si_value.sival_int != VAKA_WATCHDOG_COOKIE) return;
    if (atomic_load(&crash_done)) return;
    pid_t tid = current_tid();
    if (atomic_load(&crash_tid) == (int)tid) die_after_nested_fault(sig, tid); /* timer A on the winner */

    /* Timer B on another thread: the winner cannot take signals (blocked inside libunwind). */
    int expected = PHASE_UNWINDING;
    if (atomic_compare_exchange_strong(&capture_phase, &expected, PHASE_ABANDONED) && report_fd >= 0) {
        vaka_w_init(&watchdog_writer, report_fd);
        for (size_t i = 0; i < pre_count; i++) {
            vaka_w_frame(&watchdog_writer, pre_ips[i], pre_methods[i]);
        }
        vaka_w_flush(&watchdog_writer);
        cut_at_offset(report_fd);
    }
    die_from_other_thread();
}

static void arm_watchdog(pid_t tid)
{
    int wsig = vaka_state.watchdog_signal;
    if (wsig <= 0) return;
    static struct sigaction action; /* static: only the winner arms; keeps a small alternate stack free */
    vaka_sig_zero(&action, sizeof action);
    action.sa_sigaction = vaka_sig_watchdog;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigfillset(&action.sa_mask);
    if (sigaction(wsig, &action, &watchdog_previous) != 0) return;
    watchdog_armed = 1;
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, wsig);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);

    for (int k = 0; k < 2; k++) {
        static struct sigevent sev;
        vaka_sig_zero(&sev, sizeof sev);
        sev.sigev_signo = wsig;
        sev.sigev_value.sival_int = VAKA_WATCHDOG_COOKIE;
        if (k == 0) {
            sev.sigev_notify = SIGEV_THREAD_ID;
            sev._sigev_un._tid = tid;
        } else {
            sev.sigev_notify = SIGEV_SIGNAL;
        }
        int id = -1;
        if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &sev, &id) != 0) continue;
        watchdog_timers[k] = id;
        static struct itimerspec its;
        vaka_sig_zero(&its, sizeof its);
        long long ns = VAKA_WATCHDOG_NS + (k == 0 ? 0 : 1000000000LL);
        its.it_value.tv_sec = (time_t)(ns / 1000000000LL);
        its.it_value.tv_nsec = (long)(ns % 1000000000LL);
        syscall(SYS_timer_settime, id, 0, &its, NULL);
    }
}

static void disarm_watchdog(void)
{
    for (int k = 0; k < 2; k++) {
        if (watchdog_timers[k] >= 0) syscall(SYS_timer_delete, watchdog_timers[k]);
        watchdog_timers[k] = -1;
    }
    if (watchdog_armed) sigaction(vaka_state.watchdog_signal, &watchdog_previous, NULL);
    watchdog_armed = 0;
    atomic_store(&capture_phase, PHASE_IDLE);
}

/* Puts the saved previous action of `sig` back in place (SIG_DFL if what was saved is our own handler), so
 * that chaining reaches it even when a library re-installed our handler after the capture. */
static void put_previous_back(int sig)
{
    restore_one(sig); /* only where our handler is in place: never over a handler installed after ours */
}

/* The signal hit a process the state does not belong to: a vfork child (shares our memory) or a raw
 * clone(). Touch no shared state: the default action for this signal, then let it through. */
static void not_our_process(int sig, const siginfo_t *info)
{
    struct sigaction dfl;
    vaka_sig_zero(&dfl, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    int code = info != NULL ? info->si_code : 0;
    if ((sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) && code > 0) return;
    syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
}

/* The last handler entry that has not returned: signal, interrupted PC and the address of its ucontext (which
 * tells threads apart: each runs on its own alternate stack). */
static volatile int entry_sig;
static volatile uintptr_t entry_pc;
static void *volatile entry_uc;

static uintptr_t context_pc(const void *context)
{
#if defined(__x86_64__)
    return (uintptr_t)((const ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uintptr_t)((const ucontext_t *)context)->uc_mcontext.pc;
#else
    (void)context;
    return 0;
#endif
}

void vaka_sig_handler(int sig, siginfo_t *info, void *context)
{
    /* A fault inside the handler that repeats itself: the handler overflowed a small alternate stack, the
     * kernel delivered the nested fault at the top of that same stack, and it faulted at the same place again.
     * Detected before any call or state change (this much always fits): the same signal, the same PC and the
     * same ucontext address as an entry that has not returned. Bail out: the default action for the signal,
     * and return to the faulting instruction, which now ends the process with that signal (or, when this thread
     * was capturing another signal, the default action for that one, re-sent). */
    uintptr_t pc = context != NULL ? context_pc(context) : 0;
    if (entry_sig == sig && entry_pc == pc && entry_uc == context && pc != 0) {
        struct sigaction dfl;
        vaka_sig_zero(&dfl, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        /* The capture of a different signal (e.g. SIGABRT) was under way on this thread: die with that one. */
        int orig = crash_sig;
        if (orig != 0 && orig != sig && atomic_load(&crash_tid) == (int)syscall(SYS_gettid)) {
            sigaction(orig, &dfl, NULL);
            syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), orig);
        }
        return;
    }
    entry_sig = sig;
    entry_pc = pc;
    entry_uc = context;
    vaka_sig_handler_body(sig, info, context);
    entry_sig = 0;
}

/* 1 when the code `context` interrupted runs inside the previous handler chain() called on this thread: below
 * chain()'s frame, on the same stack (the alternate stack, whose range the ucontext carries; without one,
 * within 8 MiB). After a siglongjmp out of that handler the thread runs on its own stack again. */
static int inside_chained_handler(const void *context)
{
    if (context == NULL) return 1;
    const ucontext_t *uc = context;
    uintptr_t sp = vaka_uc_sp(uc);
    if (sp >= chain_sp) return 0;
    if (!(uc->uc_stack.ss_flags & SS_DISABLE)) {
        uintptr_t lo = (uintptr_t)uc->uc_stack.ss_sp;
        uintptr_t hi = lo + uc->uc_stack.ss_size;
        return chain_sp >= lo && chain_sp <= hi && sp >= lo;
    }
    return chain_sp - sp < ((uintptr_t)8 << 20);
}

/* A normal exit: the report of a signal the process survived is not a crash. */
static void remove_report_at_exit(void)
{
    if (report_name_used != NULL) unlinkat(report_dir_used, report_name_used, 0);
    report_name_used = NULL;
    kept_survived = 0;
}

void vaka_sig_at_uninstall(void)
{
    vaka_sig_drop_spare();
    /* A survived signal's report kept for a death that may follow: the handlers go, so nothing ends it now. */
    if (kept_survived && atomic_load(&crash_tid) == 0) remove_report_at_exit();
    /* The directory descriptors close next (their numbers get reused): a report name still remembered (a
     * previous handler's survival not seen end yet) is kept by its absolute path, else forgotten. */
    if (report_name_used != NULL && report_dir_used != AT_FDCWD) {
        const char *full = NULL;
        for (int k = 0; k < 2; k++) {
            const vaka_report_target *t = &vaka_state.targets[k];
            if (report_name_used == t->path + t->dir_len && t->path[0] == '/') full = t->path;
        }
        report_name_used = full;
        report_dir_used = AT_FDCWD;
        if (full == NULL) kept_survived = 0;
    }
}

void vaka_sig_at_exit(void)
{
    if (atomic_load(&crash_tid) == 0) vaka_sig_drop_spare();
    if (kept_survived && atomic_load(&crash_tid) == 0) remove_report_at_exit();
    if (atomic_load(&chain_tid) != (int)current_tid()) return;
    /* exit() called by the previous handler itself (on the alternate stack, or below chain()'s frame): the
     * crash stands. Otherwise that handler left with siglongjmp and the process now exits normally. */
    stack_t ss;
    volatile char here = 0;
    uintptr_t sp = (uintptr_t)&here;
    if (sigaltstack(NULL, &ss) != 0 || (ss.ss_flags & SS_ONSTACK)) return;
    if ((ss.ss_flags & SS_DISABLE) && sp < chain_sp && chain_sp - sp < ((uintptr_t)8 << 20)) return;
    atomic_store(&chain_tid, 0);
    remove_report_at_exit();
}

static void vaka_sig_handler_body(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    if ((pid_t)syscall(SYS_getpid) != vaka_state.owner_pid) {
        not_our_process(sig, info);
        errno = saved_errno;
        return;
    }
    /* Sent from outside (kill, tgkill, sigqueue: si_code <= 0) to a signal ignored before us: without Vaka
     * nothing happens, so nothing happens — no report, handlers stay. (SIGABRT raised by this process itself
     * is kept: abort() raises it again with SIG_DFL right after, and dies.) */
    const struct sigaction *before = &vaka_state.previous[sig];
    if (info != NULL && info->si_code <= 0 && !(before->sa_flags & SA_SIGINFO) && before->sa_handler == SIG_IGN &&
        !(sig == SIGABRT && info->si_pid == vaka_state.owner_pid)) {
        errno = saved_errno;
        return;
    }
    uint64_t start_ns = 0;
    pid_t tid = current_tid();
    struct timespec step = { 0, VAKA_WAIT_STEP_NS };

    if (atomic_load(&chain_tid) == (int)tid) {
        if (inside_chained_handler(context)) {
            /* Raised inside the previous handler we are running (e.g. it calls abort()): what it would meet
             * without Vaka, no capture (the report is the signal it is handling). */
            put_previous_back(sig);
            chain(sig, info, context, tid, 0);
            errno = saved_errno;
            return;
        }
        /* The previous handler left with siglongjmp and the program went on: it survived that signal. */
        atomic_store(&chain_tid, 0);
        survived(crash_sig, 0);
    }

compete:;
    unsigned gen = atomic_load(&crash_gen);
    start_ns = now_ns(CLOCK_MONOTONIC); /* again after a wait: capture_ns is the capture's own time */
    int expected = 0;
    if (atomic_compare_exchange_strong(&crash_tid, &expected, (int)tid)) {
        crash_sig = sig;
        int armed = atomic_load(&vaka_state.installed);
        if (armed) {
            arm_watchdog(tid);
            capture(sig, info, (ucontext_t *)context, start_ns, tid);
            disarm_watchdog();
            restore_fsize_limit();
            if (writer.file_too_big) discard_own_sigxfsz();
        }
        /* A previous handler function is called directly by chain() with our handlers in place (it puts them
         * back itself): no window where every previous action is in place process-wide, so another thread's
         * real fault meanwhile still reaches Vaka (it waits for this slot and competes again after the
         * survival). A signal raised on this thread inside that handler goes to its previous action
         * (chain_tid, inside_chained_handler()). Otherwise the previous actions go back now. */
        if (!(armed && previous_is_function(sig))) vaka_sig_restore_previous();
        atomic_store(&crash_done_ns, now_ns(CLOCK_MONOTONIC));
        atomic_store(&crash_done, 1);
        if (chain(sig, info, context, tid, armed) && armed) survived(sig, repeats_by_itself(sig, info));
    } else if (expected == (int)tid && !atomic_load(&crash_done)) {
        die_after_nested_fault(sig, tid);
    } else {
        /* Another thread is writing the report (or wrote it, and our handler was put back since): wait for
         * it. When the process survives its signal (crash_gen changes), compete again for this one. */
        for (int i = 0; i < VAKA_WAIT_STEPS && !atomic_load(&crash_done) && atomic_load(&crash_gen) == gen; i++)
            nanosleep(&step, NULL);
        if (atomic_load(&crash_gen) != gen) goto compete;
        if (!atomic_load(&crash_done)) {
            vaka_sig_restore_previous(); /* the winner is stuck: give up on it */
        } else {
            /* The winner has chained to the previous handler, which normally ends the process (Swift's
             * backtracer prints one backtrace, then the default action runs). Give it that time, counted from
             * when the winner finished, before entering the previous handler from this thread too: arriving
             * while it runs made Swift's backtracer start a second backtrace (and, under load, run out of
             * time). A fault long after a capture the process survived goes straight through. */
            uint64_t done = atomic_load(&crash_done_ns);
            while (done != 0 && atomic_load(&crash_gen) == gen &&
                   now_ns(CLOCK_MONOTONIC) - done < (uint64_t)VAKA_WAIT_STEPS * VAKA_WAIT_STEP_NS)
                nanosleep(&step, NULL);
            if (atomic_load(&crash_gen) != gen) goto compete;
        }
        /* Then let this signal through to the previous action, which must really be in place. */
        put_previous_back(sig);
        chain(sig, info, context, tid, 0);
    }
    errno = saved_errno;
}
