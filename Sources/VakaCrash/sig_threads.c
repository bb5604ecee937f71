/*
 * Signal path: every thread of the process in the report, and the thread signal's handler.
 *
 * The crash-time round (vaka_sig_write_threads, on the winner, after the `image` lines are written): list the
 * threads (/proc/self/task: open + getdents64), give each a slot, send each the thread signal (a real-time signal
 * chosen at install, sig_threads.h) with rt_tgsigqueueinfo — none when the signal's action is no longer ours, and
 * not to a thread that blocks it or waits in sigwait (it would take the request as a signal of its own) —, and
 * wait — a futex on the count of answers, at most
 * VAKA_THREADS_DEADLINE_NS in all. Each thread's handler (vaka_sig_thread_signal) finds its slot by its tid and
 * unwinds itself from the ucontext the kernel gave it (libunwind, one cursor per slot), then counts itself done.
 * A thread that has not started by the deadline is marked missed (a compare-and-swap: it may no longer start);
 * what is known of it comes from /proc/self/task/<tid>/{status,syscall}: whether it blocks the thread signal, its
 * name and state (from `comm` and `stat` only when the status gives none), the system call it sits in, its stack
 * pointer and PC; its frames are unwound by CFI from that PC and
 * stack pointer, else found by a stack scan. Every buffer is static; the slots are the runtime's own memory.
 *
 * The same handler serves the install-time round (threads.c): it gives a thread that has no alternate stack one
 * from the pool prepared at install, and unblocks the synchronous crash signals in the mask its return restores.
 */
#include "sig_state.h"
#include "sig_threads.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

vaka_threads_state vaka_threads;
vaka_thread_slot vaka_thread_slots[VAKA_THREAD_SLOTS];
vaka_own_thread vaka_own_threads[VAKA_OWN_THREADS];
/* One libunwind cursor (the type from vaka_internal.h's libunwind.h; the calls go through vaka_unw in
 * sig_unwind.c) and one stack-scan buffer per slot: the threads unwind at the same time. */
static unw_cursor_t slot_cursors[VAKA_THREAD_SLOTS];
static uintptr_t slot_scan[VAKA_THREAD_SLOTS][VAKA_THREAD_SCAN_WORDS];

/* The crash-time round's buffers (the winner only). */
static pid_t listed[VAKA_THREAD_SLOTS];
static char dents[4096];
static char proc_path[64];
static char proc_buf[4096];
static vaka_writer *tw;
/* Per slot, what the last status file read of its thread said (the winner only, never the slot itself, which an
 * answering thread writes): kept_name_len bytes of kept_names are its name (-1: not known, read `comm`), and
 * kept_states the letter of its state (0: not known, read `stat`). */
static char kept_names[VAKA_THREAD_SLOTS][VAKA_REPORT_THREAD_NAME_MAX + 1];
static int kept_name_len[VAKA_THREAD_SLOTS];
static char kept_states[VAKA_THREAD_SLOTS];
/* How many slots from the first a round has filled so far (the others still hold tid 0 from program start). */
static int slots_filled;

/* ------------------------------------------------------------------ small helpers */

int vaka_sig_thread_ask(pid_t tid, int ask)
{
    siginfo_t info;
    vaka_sig_zero(&info, sizeof info);
    pid_t pid = (pid_t)syscall(SYS_getpid);
    info.si_signo = vaka_threads.signal;
    info.si_code = SI_QUEUE;
    info.si_pid = pid;
    info.si_uid = (uid_t)syscall(SYS_getuid);
    info.si_value.sival_int = ask;
    if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, vaka_threads.signal, &info) != 0) return errno;
    return 0;
}

/* Parses a decimal tid from a directory entry's name; 0 when it is not one. */
static pid_t parse_tid(const char *s)
{
    long v = 0;
    if (*s == '\0') return 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9' || v > 100000000L) return 0;
        v = v * 10 + (*s - '0');
    }
    return (pid_t)v;
}

/* The directory kept open at install when it is still this process's /proc/self/task (not a fork child's copy
 * of the parent's, not a descriptor the program closed and reused), rewound; else -1. */
static int kept_task_dir(void)
{
    int fd = vaka_threads.task_dir;
    struct stat st;
    if (fd < 0 || vaka_threads.task_dir_pid != (pid_t)syscall(SYS_getpid) || fstat(fd, &st) != 0 ||
        st.st_dev != vaka_threads.task_dir_dev || st.st_ino != vaka_threads.task_dir_ino ||
        syscall(SYS_lseek, fd, 0L, SEEK_SET) != 0)
        return -1;
    return fd;
}

int vaka_sig_list_threads(pid_t *tids, int max)
{
    int kept = kept_task_dir();
    int fd = kept >= 0 ? kept : open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int total = 0;
    for (;;) {
        long got = syscall(SYS_getdents64, fd, dents, sizeof dents);
        if (got < 0 && total == 0) {
            if (fd != kept) close(fd);
            return -1; /* refused (seccomp...): not one thread listed, not even this one */
        }
        if (got <= 0) break;
        for (long at = 0; at < got;) {
            /* struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name. */
            unsigned short reclen = (unsigned short)((unsigned char)dents[at + 16] | ((unsigned char)dents[at + 17] << 8));
            if (reclen == 0) break;
            pid_t tid = parse_tid(dents + at + 19);
            if (tid > 0) {
                if (total < max) tids[total] = tid;
                total++;
            }
            at += reclen;
        }
    }
    if (fd != kept) close(fd);
    return total;
}

/* "/proc/self/task/<tid>/<leaf>" into proc_path. */
static const char *task_path(pid_t tid, const char *leaf)
{
    static const char prefix[] = "/proc/self/task/";
    size_t n = 0;
    for (size_t i = 0; prefix[i] != '\0'; i++) proc_path[n++] = prefix[i];
    n += vaka_sig_format_udec(proc_path + n, 12, (uint64_t)tid);
    proc_path[n++] = '/';
    for (size_t i = 0; leaf[i] != '\0' && n < sizeof proc_path - 1; i++) proc_path[n++] = leaf[i];
    proc_path[n] = '\0';
    return proc_path;
}

/* Reads the whole (small) /proc file of thread `tid` into proc_buf, NUL-terminated. @return its length, or -1. */
static long read_task_file(pid_t tid, const char *leaf)
{
    proc_buf[0] = '\0'; /* nothing stale from another thread's file when this one cannot be read */
    int fd = open(task_path(tid, leaf), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long n = 0;
    while (n < (long)sizeof proc_buf - 1) {
        long k = read(fd, proc_buf + n, sizeof proc_buf - 1 - (size_t)n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += k;
    }
    close(fd);
    proc_buf[n] = '\0';
    return n;
}

/* Hex number at *p (with or without 0x); advances *p. @return 1 when there were digits. */
static int parse_hex(const char **p, uintptr_t *out)
{
    const char *s = *p;
    if (s[0] == '0' && s[1] == 'x') s += 2;
    uintptr_t v = 0;
    int digits = 0;
    for (;; s++, digits++) {
        char c = *s;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) break;
        v = (v << 4) | (uintptr_t)d;
    }
    *p = s;
    *out = v;
    return digits > 0;
}

/* ------------------------------------------------------------------ the thread signal's handler */

/* A thread signal that is not ours (another sender, another si_value): what it would have met without Vaka. */
static void foreign(int sig, siginfo_t *info, void *context)
{
    const struct sigaction *prev = &vaka_threads.previous;
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction != NULL) prev->sa_sigaction(sig, info, context);
        return;
    }
    if (prev->sa_handler == SIG_IGN) return;
    if (prev->sa_handler != SIG_DFL) {
        prev->sa_handler(sig);
        return;
    }
    /* The default action of a real-time signal ends the process: put it in place and send the signal again
     * (delivered once this handler returns, the signal being blocked in it). */
    vaka_sig_set_default(sig);
    vaka_sig_send_self(sig, vaka_sig_gettid());
}

/* Install-time round: an alternate stack from the pool for a thread that has none, and the crash signals
 * unblocked in the mask restored when the handler returns. */
static void attach(ucontext_t *uc)
{
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
        size_t k = atomic_fetch_add(&vaka_threads.pool_next, 1);
        if (k < vaka_threads.pool_count) {
            uintptr_t page = vaka_state.page_size ? vaka_state.page_size : 4096;
            stack_t ss;
            ss.ss_sp = (void *)(vaka_threads.pool + k * (vaka_threads.pool_stack + page) + page);
            ss.ss_flags = 0;
            ss.ss_size = vaka_threads.pool_stack;
            /* rt_sigreturn puts back the alternate stack saved in the signal frame (uc_stack): the new one goes
             * there, or returning from this handler would undo it. */
            if (sigaltstack(&ss, NULL) == 0 && uc != NULL) uc->uc_stack = ss;
        }
    }
    unsigned protect = atomic_load(&vaka_sig_protected_mask);
    if (uc != NULL)
        for (int s = 1; s < VAKA_NSIG; s++)
            if (protect & (1u << s)) sigdelset(&uc->uc_sigmask, s);
    atomic_fetch_add(&vaka_threads.attached, 1);
    syscall(SYS_futex, &vaka_threads.attached, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Crash-time round: this thread unwinds itself from `uc` into its slot. @return 1 when it answered (it counts
 * itself in `left` just before its handler returns). */
static int unwind_self(ucontext_t *uc)
{
    if (!atomic_load(&vaka_threads.round) || uc == NULL) return 0;
    int tid = (int)vaka_sig_gettid();
    int i = 0;
    while (i < VAKA_THREAD_SLOTS && atomic_load(&vaka_thread_slots[i].tid) != tid) i++;
    if (i == VAKA_THREAD_SLOTS) return 0;
    vaka_thread_slot *slot = &vaka_thread_slots[i];
    int expected = VAKA_TSLOT_ASKED;
    if (!atomic_compare_exchange_strong(&slot->state, &expected, VAKA_TSLOT_BUSY)) return 0; /* missed, or twice */
    slot->name[0] = '\0';
    if (prctl(PR_GET_NAME, slot->name, 0, 0, 0) != 0) slot->name[0] = '\0';
    slot->name[VAKA_REPORT_THREAD_NAME_MAX + 1] = '\0';
    /* The PC first: if the unwinding below does not finish in time, the crashed thread still writes it. */
    slot->ips[0] = vaka_uc_pc(uc);
    slot->methods[0] = VAKA_FRAME_CONTEXT;
    atomic_store(&slot->count, 1u);
    /* Memory reads with a copy of the reader that cannot fall back to the shared pipe (one thread at a time). */
    vaka_safe_reader r = vaka_state.reader;
    r.pipe_r = r.pipe_w = -1;
    int truncated = 0;
    size_t n = vaka_sig_unwind_with(&slot_cursors[i], slot_scan[i], VAKA_THREAD_SCAN_WORDS, uc,
                                    r.method == VAKA_SAFE_READ_PVR ? &r : NULL, slot->ips, slot->methods,
                                    VAKA_REPORT_MAX_THREAD_FRAMES, &truncated);
    if (n == 0) n = 1; /* keep the PC */
    slot->truncated = truncated;
    slot->method = n > 1 ? slot->methods[1] : VAKA_FRAME_CFI;
    atomic_store(&slot->count, (unsigned)n);
    atomic_store(&slot->state, VAKA_TSLOT_DONE);
    atomic_fetch_add(&vaka_threads.answered, 1);
    syscall(SYS_futex, &vaka_threads.answered, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    return 1;
}

void vaka_sig_thread_signal(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    if (info != NULL && info->si_code == SI_QUEUE && info->si_pid == (pid_t)syscall(SYS_getpid) &&
        sig == vaka_threads.signal) {
        if (info->si_value.sival_int == VAKA_THREADS_ASK_UNWIND) {
            int answered = unwind_self(context);
            errno = saved_errno;
            /* Last: the crashed thread waits for this before the crash goes on to the previous handler, which
             * must find this thread as it was, not inside this handler with every signal blocked. */
            if (answered) atomic_fetch_add(&vaka_threads.left, 1);
            return;
        }
        if (info->si_value.sival_int == VAKA_THREADS_ASK_ATTACH) {
            attach(context);
            errno = saved_errno;
            return;
        }
    }
    foreign(sig, info, context);
    errno = saved_errno;
}

void vaka_sig_threads_allow_while_waiting(void)
{
    int sig = vaka_threads.signal;
    if (sig <= 0) return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
}

/* ------------------------------------------------------------------ the crash-time round */

/* Waits until `want` threads answered or the deadline (CLOCK_MONOTONIC ns) passed. */
static void wait_answers(unsigned want, uint64_t deadline)
{
    for (;;) {
        unsigned seen = atomic_load(&vaka_threads.answered);
        if (seen >= want) return;
        uint64_t now = vaka_sig_now_ns(CLOCK_MONOTONIC);
        if (now >= deadline) return;
        uint64_t left = deadline - now;
        struct timespec ts = { (time_t)(left / 1000000000u), (long)(left % 1000000000u) };
        if (syscall(SYS_futex, &vaka_threads.answered, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0) != 0 &&
            errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) {
            struct timespec step = { 0, 1000000 }; /* futex refused (seccomp): poll each millisecond */
            nanosleep(&step, NULL);
        }
    }
}

/* One frame token of `thread_frames`: ` <image index>:<offset>`, ` :<offset>` when the image is the previous
 * token's (`*last_image`), or ` <hex>` (no 0x) outside every image. */
static void write_frame_token(uintptr_t ip, int lookup_below, long *last_image)
{
    uintptr_t at = lookup_below && ip != 0 ? ip - 1 : ip;
    vaka_w_char(tw, ' ');
    for (size_t k = 0; k < vaka_written_image_count; k++) {
        const vaka_written_image *img = &vaka_written_images[k];
        if (at >= img->base && at - img->base < img->size) {
            if ((long)k != *last_image) vaka_w_udec(tw, k);
            *last_image = (long)k;
            vaka_w_char(tw, ':');
            vaka_w_hexdigits(tw, ip - img->base);
            return;
        }
    }
    *last_image = -1;
    vaka_w_hexdigits(tw, ip);
}

static const char *method_name(uint8_t m)
{
    switch (m) {
    case VAKA_FRAME_CONTEXT: return VAKA_REPORT_FRAME_METHOD_CONTEXT;
    case VAKA_FRAME_FP: return VAKA_REPORT_FRAME_METHOD_FP;
    case VAKA_FRAME_SCAN: return VAKA_REPORT_FRAME_METHOD_SCAN;
    default: return VAKA_REPORT_FRAME_METHOD_CFI;
    }
}

static void write_frames_line(pid_t tid, uint8_t method, const uintptr_t *ips, size_t n, int truncated)
{
    if (n == 0) return;
    vaka_w_key(tw, VAKA_REPORT_KEY_THREAD_FRAMES);
    vaka_w_udec(tw, (uint64_t)tid);
    vaka_w_char(tw, ' ');
    vaka_w_str(tw, method_name(method));
    long last_image = -1;
    for (size_t i = 0; i < n; i++) write_frame_token(ips[i], i > 0, &last_image);
    if (truncated) vaka_w_str(tw, " " VAKA_REPORT_THREAD_FRAMES_MORE);
    vaka_w_nl(tw);
}

static void write_thread_line(pid_t tid, const char *status, const char *name, size_t name_len)
{
    vaka_w_key(tw, VAKA_REPORT_KEY_THREAD);
    vaka_w_udec(tw, (uint64_t)tid);
    vaka_w_char(tw, ' ');
    vaka_w_str(tw, status);
    vaka_w_char(tw, ' ');
    vaka_w_text(tw, name, name_len);
    vaka_w_nl(tw);
}

/* The name of thread `tid` from /proc/self/task/<tid>/comm into `out` (VAKA_REPORT_THREAD_NAME_MAX + 2 bytes). */
static size_t comm_of(pid_t tid, char *out)
{
    long n = read_task_file(tid, "comm");
    if (n <= 0) return 0;
    while (n > 0 && proc_buf[n - 1] == '\n') n--;
    if (n > VAKA_REPORT_THREAD_NAME_MAX) n = VAKA_REPORT_THREAD_NAME_MAX;
    vaka_sig_copy(out, proc_buf, (size_t)n);
    return (size_t)n;
}

/* What follows `key` at the start of a line of proc_buf (the first such line), or NULL. */
static const char *status_line(const char *key)
{
    for (const char *p = proc_buf; *p != '\0'; p++) {
        if (p != proc_buf && p[-1] != '\n') continue;
        size_t k = 0;
        while (key[k] != '\0' && p[k] == key[k]) k++;
        if (key[k] == '\0') return p + k;
    }
    return NULL;
}

/* The value of `key`'s line of proc_buf: status_line with the spaces and tabs after the key skipped. */
static const char *status_field(const char *key)
{
    const char *p = status_line(key);
    while (p != NULL && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* 1 when `key`'s line of proc_buf (a status mask: 16 hex digits, signal 1 the lowest bit) has signal `sig`. */
static int status_mask_has(const char *key, int sig)
{
    const char *p = status_field(key);
    uintptr_t mask = 0;
    return sig > 0 && p != NULL && parse_hex(&p, &mask) && ((mask >> (sig - 1)) & 1);
}

/* Slot `k` keeps no name and no state: `comm` and `stat` say what they can when its lines are written. */
static void forget_status(int k)
{
    kept_name_len[k] = -1;
    kept_states[k] = 0;
}

/* Keeps slot `k`'s name and state from proc_buf, its thread's status file just read, so that writing its lines needs
 * no `comm` and no `stat`. The kernel prints `Name:\t` and the comm with `\n` and `\\` escaped by a backslash: a
 * name with a backslash in it is left to `comm`, which gives it raw. The state is the first letter of `State:`,
 * the one `stat` shows. */
static void keep_status(int k)
{
    forget_status(k);
    const char *name = status_line("Name:\t"); /* the name as it is: leading blanks are part of it */
    if (name != NULL) {
        size_t n = 0;
        while (n <= VAKA_REPORT_THREAD_NAME_MAX && name[n] != '\0' && name[n] != '\n' && name[n] != '\\') n++;
        if (n <= VAKA_REPORT_THREAD_NAME_MAX && name[n] == '\n') {
            vaka_sig_copy(kept_names[k], name, n);
            kept_name_len[k] = (int)n;
        }
    }
    const char *state = status_field("State:");
    if (state != NULL && *state > ' ') kept_states[k] = *state;
}

/* Thread `tid`'s name (slot `k`'s kept one, else from `comm`) into `out` (VAKA_REPORT_THREAD_NAME_MAX + 2 bytes).
 * @return its length. */
static size_t name_of(int k, pid_t tid, char *out)
{
    if (kept_name_len[k] < 0) return comm_of(tid, out);
    vaka_sig_copy(out, kept_names[k], (size_t)kept_name_len[k]);
    return (size_t)kept_name_len[k];
}

/* What thread `tid`'s status says: VAKA_TSLOT_GONE (no status any more, or a zombie: it is ending),
 * VAKA_TSLOT_BLOCKED (it blocks the thread signal: it will not answer — a thread that is ending blocks every signal
 * too), or 0 (it may still answer). `asked`: the request was sent to it. Then blocking is not enough: a thread that
 * has just taken the request blocks the signal too, while its handler runs (the handler's mask), and is about to
 * answer. Only one whose request is still pending (SigPnd, the thread's own queue; the status is read under the
 * signal lock, so both masks come from one moment) blocks it. */
static int unanswered_verdict(int k, pid_t tid, int asked)
{
    long got = read_task_file(tid, "status");
    if (got > 0) {
        keep_status(k);
    } else {
        forget_status(k); /* nothing kept from an earlier read */
    }
    if (got < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOMEM)) return 0; /* no descriptor: unknown */
    if (got <= 0) return VAKA_TSLOT_GONE;
    const char *state = status_field("State:");
    if (state != NULL && (*state == 'Z' || *state == 'X')) return VAKA_TSLOT_GONE;
    int sig = vaka_threads.signal;
    if (!status_mask_has("SigBlk:", sig)) return 0;
    if (asked && !status_mask_has("SigPnd:", sig) && !status_mask_has("ShdPnd:", sig)) return 0;
    return VAKA_TSLOT_BLOCKED;
}

/* 1 when thread `tid` of slot `k`, which was sent the request (`asked`) or not, blocks the thread signal (see
 * above). */
static int blocks_thread_signal(int k, pid_t tid, int asked)
{
    return unanswered_verdict(k, tid, asked) == VAKA_TSLOT_BLOCKED;
}

/* 1 when thread `tid` sits in sigwait, sigwaitinfo or sigtimedwait (rt_sigtimedwait, the first number of its
 * syscall file). While it waits the kernel takes the waited signals out of its mask, so SigBlk does not show them;
 * a request sent then would be returned to the application as a signal of its own. */
static int waits_for_signals(pid_t tid)
{
    if (read_task_file(tid, "syscall") <= 0) return 0;
    long nr = 0;
    const char *p = proc_buf;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') nr = nr * 10 + (*p++ - '0');
    return *p == ' ' && nr == SYS_rt_sigtimedwait;
}

/* 1 when `tid` is one of Vaka's own threads of process `pid` (the table vaka_crash_mark_own_thread fills); its name
 * is then kept as slot `k`'s. No /proc read: the entry is the thread's while it runs (it leaves the table before it
 * ends). A name being rewritten meanwhile (seq odd, or changed while read) is read again, a few times at most. */
static int is_own_thread(int k, pid_t tid, pid_t pid)
{
    for (unsigned i = 0; i < VAKA_OWN_THREADS; i++) {
        vaka_own_thread *e = &vaka_own_threads[i];
        for (int attempt = 0; attempt < 4; attempt++) {
            unsigned before = atomic_load_explicit(&e->seq, memory_order_acquire);
            int current = atomic_load_explicit(&e->tid, memory_order_acquire);
            if (current == -1 || (before & 1u)) continue; /* being written: look again */
            if (current != (int)tid || e->pid != (int)pid) break;
            size_t n = vaka_sig_strnlen(e->name, VAKA_REPORT_THREAD_NAME_MAX);
            vaka_sig_copy(kept_names[k], e->name, n);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&e->seq, memory_order_relaxed) != before ||
                atomic_load_explicit(&e->tid, memory_order_relaxed) != (int)tid)
                continue;
            kept_name_len[k] = (int)n;
            kept_states[k] = 0;
            return 1;
        }
    }
    return 0;
}

/* What thread `tid` would do with a request, before one is sent: VAKA_TSLOT_GONE (it is ending),
 * VAKA_TSLOT_BLOCKED (it blocks the thread signal, or waits for signals with sigwait: it cannot answer, and one that
 * blocks a signal to take it itself — a sigwait or signalfd loop — would take the request for one of its own
 * signals, e.g. a "shut down" one), VAKA_TSLOT_OWN (one of Vaka's own threads: its stack says nothing about the
 * crash, and waiting for it to be scheduled, unwind and answer, or reading /proc for it — ~0.1 ms a thread —,
 * only delays the death: listed by its name in the table, process `pid`'s), or 0 (ask it). */
static int verdict_before_asking(int k, pid_t tid, pid_t pid)
{
    if (is_own_thread(k, tid, pid)) return VAKA_TSLOT_OWN;
    int verdict = unanswered_verdict(k, tid, 0);
    if (verdict == 0 && waits_for_signals(tid)) verdict = VAKA_TSLOT_BLOCKED;
    return verdict;
}

/* 1 when the thread signal's action is still ours. An application that took the signal over after install (its
 * own handler, SIG_IGN, or SIG_DFL, whose action ends the process with that signal) must not get the requests. */
static int thread_signal_is_ours(void)
{
    struct sigaction cur;
    return vaka_threads.signal > 0 && sigaction(vaka_threads.signal, NULL, &cur) == 0 &&
           (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == vaka_sig_thread_signal;
}

/* A context made of the registers /proc gives, and a cursor for it (the winner only). */
static ucontext_t proc_context;
static unw_cursor_t proc_cursor;

/* The thread_proc and thread_frames lines of a thread that did not unwind itself; `known_state`: the letter of its
 * state from the status file read last (0: read from its `stat`). */
static void describe_from_proc(pid_t tid, char known_state, uintptr_t *ips, uint8_t *methods)
{
    char state = known_state != 0 ? known_state : '?';
    if (known_state == 0 && read_task_file(tid, "stat") > 0) {
        /* `tid (comm) S ...`: the state follows the last ')' (a name may hold parentheses). */
        const char *close_paren = NULL;
        for (const char *p = proc_buf; *p != '\0'; p++)
            if (*p == ')') close_paren = p;
        if (close_paren != NULL && close_paren[1] == ' ' && close_paren[2] != '\0') state = close_paren[2];
    }
    long nr = -2; /* -2: running (no system call to report); -1: blocked outside one */
    int nr_known = 0;
    uintptr_t sp = 0, pc = 0;
    int have_regs = 0;
    if (read_task_file(tid, "syscall") > 0) {
        const char *p = proc_buf;
        if (*p == '-' || (*p >= '0' && *p <= '9')) {
            int neg = *p == '-';
            if (neg) p++;
            long v = 0;
            while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
            nr = neg ? -v : v;
            nr_known = 1;
            /* `nr arg1 ... arg6 sp pc` in a system call, `-1 sp pc` blocked outside one. */
            int words = nr >= 0 ? 8 : 2;
            uintptr_t w[8];
            int got = 0;
            while (got < words && *p == ' ') {
                p++;
                if (!parse_hex(&p, &w[got])) break;
                got++;
            }
            if (got == words) {
                sp = w[words - 2];
                pc = w[words - 1];
                have_regs = 1;
            }
        }
    }
    vaka_w_key(tw, VAKA_REPORT_KEY_THREAD_PROC);
    vaka_w_udec(tw, (uint64_t)tid);
    vaka_w_char(tw, ' ');
    vaka_w_char(tw, state);
    vaka_w_char(tw, ' ');
    if (nr_known) vaka_w_dec(tw, nr);
    else vaka_w_str(tw, "running");
    vaka_w_char(tw, ' ');
    if (have_regs) vaka_w_hex(tw, sp);
    else vaka_w_str(tw, VAKA_REPORT_VALUE_UNKNOWN);
    vaka_w_char(tw, ' ');
    if (have_regs) vaka_w_hex(tw, pc);
    else vaka_w_str(tw, VAKA_REPORT_VALUE_UNKNOWN);
    vaka_w_nl(tw);
    if (!have_regs || pc == 0) return;
    /* The PC and stack pointer the kernel gave are the registers CFI needs first: a context with those two (the
     * others unknown, 0) lets libunwind follow the callers as long as each frame's CFA is computed from the stack
     * pointer or a register an inner frame saved (glibc's system call wrappers save what they use). When that
     * gives fewer than two frames, the usual fallbacks: the frame-pointer walk (nothing without rbp) and a scan of
     * the stack from that stack pointer (honest, but may hold stale return addresses). The thread sits in the
     * kernel, so its stack does not change while it is read. */
    vaka_sig_zero(&proc_context, sizeof proc_context);
#if defined(__x86_64__)
    proc_context.uc_mcontext.gregs[REG_RIP] = (greg_t)pc;
    proc_context.uc_mcontext.gregs[REG_RSP] = (greg_t)sp;
#elif defined(__aarch64__)
    proc_context.uc_mcontext.pc = pc;
    proc_context.uc_mcontext.sp = sp;
#endif
    int truncated = 0;
    size_t n = vaka_sig_unwind_with(&proc_cursor, NULL, 0, &proc_context, &vaka_state.reader, ips, methods,
                                    VAKA_REPORT_MAX_THREAD_FRAMES, &truncated);
    if (n == 0) {
        ips[0] = pc;
        methods[0] = VAKA_FRAME_CONTEXT;
        n = 1;
    }
    write_frames_line(tid, n > 1 ? methods[1] : VAKA_FRAME_SCAN, ips, n, truncated);
}

static uintptr_t proc_ips[VAKA_REPORT_MAX_THREAD_FRAMES];
static uint8_t proc_methods[VAKA_REPORT_MAX_THREAD_FRAMES];

void vaka_sig_write_threads(pid_t crashed_tid)
{
    tw = &vaka_run.writer;
    uint64_t begin = vaka_sig_now_ns(CLOCK_MONOTONIC);
    int total = vaka_sig_list_threads(listed, VAKA_THREAD_SLOTS);
    int count = total < 0 ? 0 : total < VAKA_THREAD_SLOTS ? total : VAKA_THREAD_SLOTS;

    /* The slots: every listed thread but the crashed one, which is written from the report's own lines. */
    atomic_store(&vaka_threads.answered, 0u);
    atomic_store(&vaka_threads.left, 0u);
    int slots = 0;
    for (int k = 0; k < count && slots < VAKA_THREAD_SLOTS - 1; k++) {
        if (listed[k] == crashed_tid) continue;
        vaka_thread_slot *slot = &vaka_thread_slots[slots++];
        atomic_store(&slot->state, VAKA_TSLOT_FREE);
        atomic_store(&slot->count, 0u);
        slot->truncated = 0;
        atomic_store(&slot->tid, (int)listed[k]);
        forget_status(slots - 1);
    }
    /* The crashed thread is always listed (first), even when /proc is not readable or it lies beyond the cap. */
    /* Only slots an earlier round filled can hold a tid: the others were never written, and writing them would
     * fault in a page of .bss per slot (a slot is most of a page). */
    for (int k = slots; k < slots_filled; k++) atomic_store(&vaka_thread_slots[k].tid, 0);
    if (slots > slots_filled) slots_filled = slots;

    /* Ask them all, then wait for all at once: they unwind in parallel. */
    unsigned sent = 0;
    int ask = thread_signal_is_ours();
    pid_t pid = (pid_t)syscall(SYS_getpid);
    atomic_store(&vaka_threads.round, 1);
    for (int k = 0; k < slots; k++) {
        vaka_thread_slot *slot = &vaka_thread_slots[k];
        if (!ask) {
            atomic_store(&slot->state, VAKA_TSLOT_UNSENT);
            continue;
        }
        int verdict = verdict_before_asking(k, (pid_t)atomic_load(&slot->tid), pid);
        if (verdict != 0) {
            atomic_store(&slot->state, verdict);
            continue;
        }
        atomic_store(&slot->state, VAKA_TSLOT_ASKED);
        int err = vaka_sig_thread_ask((pid_t)atomic_load(&slot->tid), VAKA_THREADS_ASK_UNWIND);
        if (err == 0) {
            sent++;
        } else {
            int asked = VAKA_TSLOT_ASKED;
            atomic_compare_exchange_strong(&slot->state, &asked, err == ESRCH ? VAKA_TSLOT_GONE : VAKA_TSLOT_UNSENT);
        }
    }
    /* Most answer within a fraction of a millisecond. Of those that have not, the ones that block the thread signal
     * never will (Dispatch and Swift concurrency workers block every signal they can), nor will one that is ending:
     * looked at after VAKA_THREADS_FIRST_WAIT_NS and again every VAKA_THREADS_RECHECK_NS, and not waited for. */
    uint64_t deadline = begin + VAKA_THREADS_DEADLINE_NS;
    uint64_t look = begin + VAKA_THREADS_FIRST_WAIT_NS;
    while (sent > 0) {
        wait_answers(sent, look < deadline ? look : deadline);
        uint64_t now = vaka_sig_now_ns(CLOCK_MONOTONIC);
        if (atomic_load(&vaka_threads.answered) >= sent || now >= deadline) break;
        for (int k = 0; k < slots; k++) {
            vaka_thread_slot *slot = &vaka_thread_slots[k];
            if (atomic_load(&slot->state) != VAKA_TSLOT_ASKED) continue;
            int verdict = unanswered_verdict(k, (pid_t)atomic_load(&slot->tid), 1);
            int asked = VAKA_TSLOT_ASKED;
            if (verdict != 0 && atomic_compare_exchange_strong(&slot->state, &asked, verdict)) sent--;
        }
        look = vaka_sig_now_ns(CLOCK_MONOTONIC) + VAKA_THREADS_RECHECK_NS;
    }
    /* The deadline: a thread that has not started may no longer (it would write a slot being read). */
    for (int k = 0; k < slots; k++) {
        int asked = VAKA_TSLOT_ASKED;
        atomic_compare_exchange_strong(&vaka_thread_slots[k].state, &asked, VAKA_TSLOT_MISSED);
    }
    atomic_store(&vaka_threads.round, 0);
    uint64_t waited = vaka_sig_now_ns(CLOCK_MONOTONIC) - begin;

    vaka_w_key(tw, VAKA_REPORT_KEY_THREADS);
    vaka_w_udec(tw, (uint64_t)(total > 0 ? total : 0)); /* 0: the threads could not be listed */
    vaka_w_char(tw, ' ');
    vaka_w_udec(tw, (uint64_t)slots + 1);
    vaka_w_char(tw, ' ');
    vaka_w_udec(tw, waited);
    vaka_w_nl(tw);

    /* The crashed thread: its name is the `thread_name` line already. */
    char name[VAKA_REPORT_THREAD_NAME_MAX + 2];
    vaka_sig_zero(name, sizeof name);
    vaka_w_key(tw, VAKA_REPORT_KEY_THREAD);
    vaka_w_udec(tw, (uint64_t)crashed_tid);
    vaka_w_str(tw, " " VAKA_REPORT_THREAD_CRASHED);
    vaka_w_nl(tw);

    for (int k = 0; k < slots; k++) {
        vaka_thread_slot *slot = &vaka_thread_slots[k];
        pid_t tid = (pid_t)atomic_load(&slot->tid);
        int state = atomic_load(&slot->state);
        if (state == VAKA_TSLOT_DONE || state == VAKA_TSLOT_BUSY) {
            unsigned n = atomic_load(&slot->count);
            if (n > VAKA_REPORT_MAX_THREAD_FRAMES) n = VAKA_REPORT_MAX_THREAD_FRAMES;
            const char *status = state == VAKA_TSLOT_DONE ? VAKA_REPORT_THREAD_OK : VAKA_REPORT_THREAD_PARTIAL;
            if (state == VAKA_TSLOT_DONE)
                write_thread_line(tid, status, slot->name, vaka_sig_strnlen(slot->name, VAKA_REPORT_THREAD_NAME_MAX));
            else
                write_thread_line(tid, status, name, comm_of(tid, name));
            write_frames_line(tid, state == VAKA_TSLOT_DONE ? slot->method : VAKA_FRAME_CFI, slot->ips, n,
                              state == VAKA_TSLOT_DONE && slot->truncated);
            continue;
        }
        if (state == VAKA_TSLOT_GONE) {
            write_thread_line(tid, VAKA_REPORT_THREAD_GONE, name, name_of(k, tid, name));
            continue;
        }
        if (state == VAKA_TSLOT_OWN) { /* its name from the table; nothing from /proc */
            write_thread_line(tid, VAKA_REPORT_THREAD_OWN, name, name_of(k, tid, name));
            continue;
        }
        /* A thread not known to block the signal: its status now (kept: its name and state too). */
        int blocked = state == VAKA_TSLOT_BLOCKED || blocks_thread_signal(k, tid, state == VAKA_TSLOT_MISSED);
        write_thread_line(tid, blocked ? VAKA_REPORT_THREAD_BLOCKED
                               : state == VAKA_TSLOT_UNSENT ? VAKA_REPORT_THREAD_UNASKED : VAKA_REPORT_THREAD_MISSED,
                          name, name_of(k, tid, name));
        describe_from_proc(tid, kept_states[k], proc_ips, proc_methods);
    }

    /* A thread that answered wakes this one with its last system call and may be preempted right there, still in
     * its handler with every signal blocked: the crash would then go on to the previous handler (Swift's
     * backtracer, which suspends each thread with a signal) while that thread cannot take a signal. Give those
     * threads the processor until each has reached the handler's last instruction (polled, not woken: a wake-up
     * would be that same preemption point again), within VAKA_THREADS_LEAVE_NS. Usually they have long since
     * returned, while the lines above were written. */
    uint64_t leave_by = vaka_sig_now_ns(CLOCK_MONOTONIC) + VAKA_THREADS_LEAVE_NS;
    while (atomic_load(&vaka_threads.left) < atomic_load(&vaka_threads.answered) &&
           vaka_sig_now_ns(CLOCK_MONOTONIC) < leave_by) {
        struct timespec step = { 0, 100000 };
        nanosleep(&step, NULL);
    }
}
