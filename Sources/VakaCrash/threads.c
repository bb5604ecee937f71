/*
 * Install time: the thread signal (sig_threads.h) and the alternate stacks of the threads that existed before
 * install.
 *
 * The thread signal is a real-time signal chosen here, never in the handler (SIGRTMIN and SIGRTMAX are glibc
 * functions: glibc keeps the first real-time signals for itself and says here which are free): SIGRTMAX - 1 (the
 * capture watchdog has SIGRTMAX), or the next one down whose action is still SIG_DFL, so a signal the application
 * handles itself is never taken. Its handler (vaka_sig_thread_signal, sig_threads.c) stays installed while Vaka
 * is: a crash-time request must find it, and a request still pending in a thread that blocked the signal must
 * not meet SIG_DFL (which ends the process) when the thread unblocks it later.
 *
 * Then every other thread that exists now is asked (the same signal, si_value VAKA_THREADS_ASK_ATTACH) to take
 * an alternate stack from a pool mapped here (one mapping: a PROT_NONE guard page below each stack,
 * MAP_NORESERVE; kept for the life of the process, as a thread that ends does not say so) unless it has one, and
 * to unblock the synchronous crash signals — but not a thread that blocks the signal on purpose or waits in
 * sigwait: a signal thread (a sigwait or signalfd loop) would take the request as a signal of its own. Install
 * waits at most VAKA_THREADS_ATTACH_DEADLINE_NS for the answers of the threads that do not block the signal. A
 * thread just created blocks every signal until its start routine runs with its creator's mask: it is looked at
 * again until then (within that deadline too), and asked only if that mask lets the signal through.
 */
#include "vaka_internal.h"
#include "sig_threads.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int installed_signal;

static atomic_uint own_thread_next;

void vaka_rt_copy_thread_name(char *dst, const char *name)
{
    size_t n = name != NULL ? strnlen(name, VAKA_REPORT_THREAD_NAME_MAX) : 0;
    memcpy(dst, name != NULL ? name : "", n);
    dst[n] = '\0';
}

/* Fills entry `e`, held (tid -1) by the caller, for thread `tid` named `name`, then publishes it (seq: see
 * vaka_own_thread). */
static void fill_own_thread(vaka_own_thread *e, int tid, int pid, const char *name)
{
    unsigned seq = atomic_load_explicit(&e->seq, memory_order_relaxed);
    atomic_store_explicit(&e->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    vaka_rt_copy_thread_name(e->name, name);
    e->pid = pid;
    atomic_store_explicit(&e->seq, seq + 2, memory_order_release);
    atomic_store_explicit(&e->tid, tid, memory_order_release);
}

void vaka_crash_mark_own_thread(const char *name)
{
    vaka_rt_mark_own_thread_id((pid_t)syscall(SYS_gettid), name);
}

void vaka_rt_mark_own_thread_id(pid_t thread_id, const char *name)
{
    int tid = (int)thread_id;
    int pid = (int)syscall(SYS_getpid);
    /* Marked before (renamed): its entry takes the new name. */
    for (unsigned i = 0; i < VAKA_OWN_THREADS; i++) {
        vaka_own_thread *e = &vaka_own_threads[i];
        int expected = tid;
        if (e->pid == pid && atomic_compare_exchange_strong(&e->tid, &expected, -1)) {
            fill_own_thread(e, tid, pid, name);
            return;
        }
    }
    /* A free entry, or one of a process this is a fork child of (its threads are not here). */
    for (unsigned i = 0; i < VAKA_OWN_THREADS; i++) {
        vaka_own_thread *e = &vaka_own_threads[i];
        int current = atomic_load(&e->tid);
        if (current == -1 || (current != 0 && e->pid == pid)) continue;
        if (atomic_compare_exchange_strong(&e->tid, &current, -1)) {
            fill_own_thread(e, tid, pid, name);
            return;
        }
    }
    /* All taken (more than VAKA_OWN_THREADS live own threads): one entry after another in turn, never one another
     * writer holds; the thread it held is then asked like a program thread. Given up after two turns (the thread
     * is then asked too). */
    for (unsigned tries = 0; tries < 2 * VAKA_OWN_THREADS; tries++) {
        vaka_own_thread *e = &vaka_own_threads[atomic_fetch_add(&own_thread_next, 1u) % VAKA_OWN_THREADS];
        int current = atomic_load(&e->tid);
        if (current != -1 && atomic_compare_exchange_strong(&e->tid, &current, -1)) {
            fill_own_thread(e, tid, pid, name);
            return;
        }
    }
}

void vaka_crash_unmark_own_thread(void)
{
    int tid = (int)syscall(SYS_gettid);
    int pid = (int)syscall(SYS_getpid);
    for (unsigned i = 0; i < VAKA_OWN_THREADS; i++) {
        vaka_own_thread *e = &vaka_own_threads[i];
        int expected = tid;
        if (e->pid == pid) atomic_compare_exchange_strong(&e->tid, &expected, 0);
    }
}

/* The thread signal: SIGRTMAX - 1 or the next free one below it (action SIG_DFL), above SIGRTMIN. 0: none. */
static int choose_signal(void)
{
    for (int sig = SIGRTMAX - 1; sig > SIGRTMIN; sig--) {
        struct sigaction cur;
        if (sig == vaka_state.watchdog_signal || sigaction(sig, NULL, &cur) != 0) continue;
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) return sig;
    }
    return 0;
}

/* What /proc/self/task/<tid>/status says: its state letter, and whether it blocks `sig` (1), and blocks it on
 * purpose (2: not the all-signals mask glibc gives a thread while it starts, which has glibc's own SIGCANCEL,
 * __SIGRTMIN, blocked too; pthread_sigmask and sigprocmask never block that one). @return 0 when read. */
static int task_status(pid_t tid, int sig, char *state, int *blocks)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "re");
    if (f == NULL) return -1;
    char line[256];
    *state = '?';
    *blocks = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "State:", 6) == 0) {
            const char *p = line + 6;
            while (*p == ' ' || *p == '\t') p++;
            *state = *p;
        } else if (strncmp(line, "SigBlk:", 7) == 0) {
            unsigned long long mask = strtoull(line + 7, NULL, 16);
            *blocks = (int)((mask >> (sig - 1)) & 1);
            if (*blocks && !((mask >> (__SIGRTMIN - 1)) & 1)) *blocks = 2;
        }
    }
    fclose(f);
    return 0;
}

/* 1 when thread `tid` sits in sigwait, sigwaitinfo or sigtimedwait (rt_sigtimedwait, the first number of
 * /proc/self/task/<tid>/syscall). The kernel takes the waited signals out of its mask meanwhile, so its status does
 * not show them blocked. */
static int waits_for_signals(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    FILE *f = fopen(path, "re");
    if (f == NULL) return 0;
    long nr = -1;
    int got = fscanf(f, "%ld", &nr);
    fclose(f);
    return got == 1 && nr == SYS_rt_sigtimedwait;
}

/* The install-time round: an alternate stack for every thread that exists now (but this one). */
static void attach_existing_threads(size_t requested)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    pid_t asked[VAKA_THREADS_ATTACH_MAX];
    int blocking[VAKA_THREADS_ATTACH_MAX];
    size_t n = 0;
    /* The directory install keeps open, opened again through its descriptor (a file offset of its own: the
     * crash-time round reads the kept one); by its path when there is none. */
    int fd = vaka_threads.task_dir_pid == getpid() ? openat(vaka_threads.task_dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    DIR *dir = fd >= 0 ? fdopendir(fd) : opendir("/proc/self/task");
    if (dir == NULL) {
        if (fd >= 0) close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && n < VAKA_THREADS_ATTACH_MAX) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || tid == self) continue;
        char state;
        int blocks;
        if (task_status(tid, installed_signal, &state, &blocks) != 0) continue;
        if (state == 'Z' || state == 'X') continue;
        /* A thread that blocks the signal on purpose, or waits for signals with sigwait, is not asked: it would
         * take the request as a signal of its own (a sigwait or signalfd loop; its signal may mean "shut down").
         * A thread that blocks every signal because it is starting (glibc) is looked at again below, once its
         * start routine has its own mask. A stopped thread is asked but not waited for. */
        if (blocks == 2 || waits_for_signals(tid)) continue;
        blocking[n] = blocks == 1 ? -1 : state == 'T' || state == 't';
        asked[n++] = tid;
    }
    closedir(dir);
    if (n == 0) return;

    /* The starting threads: their mask becomes the one their creator had (pthread_create), which may block the
     * signal on purpose (a signal thread made with every signal blocked, about to call sigwait or read its
     * signalfd). Asked now, such a thread would find the request pending and take it as its own signal once it
     * waits. So each is looked at every millisecond until it has its own mask, within the round's deadline; one
     * still starting then is not asked (it gets no alternate stack from here; threads made after start get one
     * from pthread_create). */
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    for (;;) {
        int waiting = 0;
        for (size_t k = 0; k < n; k++) {
            if (blocking[k] != -1) continue;
            char state;
            int blocks;
            if (task_status(asked[k], installed_signal, &state, &blocks) != 0 || state == 'Z' || state == 'X' ||
                blocks == 2 || (blocks == 0 && waits_for_signals(asked[k]))) {
                blocking[k] = -2; /* ended, or blocks the signal on purpose: not asked */
            } else if (blocks == 0) {
                blocking[k] = state == 'T' || state == 't';
            } else {
                waiting = 1;
            }
        }
        if (!waiting) break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long spent = (now.tv_sec - started.tv_sec) * 1000000000LL + (now.tv_nsec - started.tv_nsec);
        if (spent >= VAKA_THREADS_ATTACH_DEADLINE_NS) break;
        usleep(1000);
    }

    size_t page = vaka_state.page_size ? vaka_state.page_size : 4096;
    if (vaka_threads.pool == 0) {
        size_t stack = vaka_thread_stack_size(requested, page);
        size_t total = VAKA_THREADS_ATTACH_MAX * (stack + page);
        void *pool = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (pool == MAP_FAILED) return;
        for (size_t k = 0; k < VAKA_THREADS_ATTACH_MAX; k++)
            mprotect((char *)pool + k * (stack + page), page, PROT_NONE);
        vaka_threads.pool_stack = stack;
        vaka_threads.pool_count = VAKA_THREADS_ATTACH_MAX;
        vaka_threads.pool = (uintptr_t)pool;
    }
    atomic_store(&vaka_threads.attached, 0u);
    unsigned sent = 0;
    for (size_t k = 0; k < n; k++)
        if (blocking[k] >= 0 && vaka_sig_thread_ask(asked[k], VAKA_THREADS_ASK_ATTACH) == 0 && !blocking[k]) sent++;

    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        unsigned seen = atomic_load(&vaka_threads.attached);
        if (seen >= sent) break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long spent = (now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec);
        if (spent >= VAKA_THREADS_ATTACH_DEADLINE_NS) break;
        long long left = VAKA_THREADS_ATTACH_DEADLINE_NS - spent;
        struct timespec ts = { (time_t)(left / 1000000000LL), (long)(left % 1000000000LL) };
        syscall(SYS_futex, &vaka_threads.attached, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
    }
}

void vaka_rt_threads_install(size_t stack_size)
{
    nlink_t task_links = 0; /* the task directory's link count: 2 + the process's threads (0: not known) */
    if (vaka_threads.task_dir_pid != getpid()) {
        /* Kept open: at the descriptor limit the crash-time round could not open it. A fork child's copy is the
         * parent's directory (task_dir_pid tells them apart). */
        int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0) {
            vaka_threads.task_dir_dev = st.st_dev;
            vaka_threads.task_dir_ino = st.st_ino;
            vaka_threads.task_dir_pid = getpid();
            vaka_threads.task_dir = fd;
            task_links = st.st_nlink;
        } else if (fd >= 0) {
            close(fd);
        }
    } else if (VAKA_SINGLE_THREADED()) {
        struct stat st;
        if (fstat(vaka_threads.task_dir, &st) == 0) task_links = st.st_nlink;
    }
    if (installed_signal == 0) {
        int sig = choose_signal();
        if (sig == 0) return;
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = vaka_sig_thread_signal;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        /* Nothing interrupts the unwinding but a crash signal (a fault inside it must still reach the handler)
         * and SIGPROF. SIGPROF stays unblocked for Swift's backtracer, which runs right after Vaka's crash
         * handler: it suspends every other thread with SIGUSR1, SIGUSR2 or SIGPROF, the first one the thread's
         * /proc status does not show blocked, and gives up on a thread that blocks all three ("failed to suspend
         * thread N"). A thread that has just answered the crash-time round may still be in this handler then.
         * A SIGPROF taken during the unwinding runs its handler on top of this one (a profiler's sample) and
         * returns; the slots and cursors this handler uses are its own. */
        sigfillset(&action.sa_mask);
        static const int crash_signals[] = { VAKA_CRASH_SIGNALS };
        for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
            sigdelset(&action.sa_mask, crash_signals[i]);
        sigdelset(&action.sa_mask, SIGPROF);
        if (sigaction(sig, &action, &vaka_threads.previous) != 0) return;
        installed_signal = sig;
        vaka_threads.signal = sig;
    }
    /* No other thread yet (a program's usual first start): nothing to attach, and no /proc listing (seven system
     * calls and a 32 KiB directory buffer on the caller of Vaka.start). glibc's word alone is not enough: a thread
     * made with a raw clone(2) leaves it at 1, so the task directory's link count (2 + threads, from the fstat
     * above) must say this thread is the only one too. */
    if (!VAKA_SINGLE_THREADED() || task_links != 3) attach_existing_threads(stack_size);
}

void vaka_rt_threads_uninstall(void)
{
    if (installed_signal == 0) return;
    struct sigaction cur;
    if (sigaction(installed_signal, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == vaka_sig_thread_signal)
        sigaction(installed_signal, &vaka_threads.previous, NULL);
    vaka_threads.signal = 0;
    installed_signal = 0;
}
