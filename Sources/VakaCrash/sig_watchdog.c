/*
 * Signal path: the capture watchdog, armed by the winner for the time of its capture (sig_handler.c).
 */
#include "sig_state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The whole capture is bounded: at crash time the winner arms two POSIX timers with raw syscalls. Timer A
 * (VAKA_WATCHDOG_NS) is directed at the winner's thread (SIGEV_THREAD_ID): when the winner is stuck with the
 * watchdog signal deliverable, its handler runs on the winner and takes the nested-fault path. Timer B
 * (VAKA_WATCHDOG_NS + 1 s) is process-directed: libunwind blocks every signal around dl_iterate_phdr, so a
 * winner stuck on the dynamic linker's lock never sees timer A; the kernel then gives timer B to another
 * thread, which writes the frame-pointer frames the winner collected before unwinding and ends the process
 * with the original signal (default action). */
#define VAKA_WATCHDOG_NS 2000000000LL
#define VAKA_WATCHDOG_COOKIE 0x56414b41 /* "VAKA" in si_value: tells our timers from foreign signals */
static int watchdog_timers[2] = { -1, -1 };
static struct sigaction watchdog_previous;
static int watchdog_armed;
/* Writes the frames of the frame-pointer walk done before libunwind runs (vaka_run.pre_ips) when it hangs. */
static vaka_writer watchdog_writer;

/* Handler of the watchdog signal, installed only during a capture. */
static void vaka_sig_watchdog(int sig, siginfo_t *info, void *context)
{
    (void)context;
    if (info == NULL || info->si_code != SI_TIMER || info->si_value.sival_int != VAKA_WATCHDOG_COOKIE) return;
    if (atomic_load(&vaka_run.crash_done)) return;
    pid_t tid = vaka_sig_gettid();
    if (atomic_load(&vaka_run.crash_tid) == (int)tid) vaka_sig_die_after_nested_fault(sig, tid); /* timer A on the winner */

    /* Timer B on another thread: the winner cannot take signals (blocked inside libunwind). */
    int expected = VAKA_PHASE_UNWINDING;
    if (atomic_compare_exchange_strong(&vaka_run.capture_phase, &expected, VAKA_PHASE_ABANDONED) && vaka_run.report_fd >= 0) {
        vaka_w_init(&watchdog_writer, vaka_run.report_fd);
        for (size_t i = 0; i < vaka_run.pre_count; i++) {
            vaka_w_frame(&watchdog_writer, vaka_run.pre_ips[i], vaka_run.pre_methods[i]);
        }
        vaka_w_flush(&watchdog_writer);
        vaka_sig_cut_at_offset(vaka_run.report_fd);
    }
    vaka_sig_die_from_other_thread();
}

void vaka_sig_arm_watchdog(pid_t tid)
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

void vaka_sig_disarm_watchdog(void)
{
    for (int k = 0; k < 2; k++) {
        if (watchdog_timers[k] >= 0) syscall(SYS_timer_delete, watchdog_timers[k]);
        watchdog_timers[k] = -1;
    }
    if (watchdog_armed) sigaction(vaka_state.watchdog_signal, &watchdog_previous, NULL);
    watchdog_armed = 0;
    atomic_store(&vaka_run.capture_phase, VAKA_PHASE_IDLE);
}

void vaka_sig_watchdog_after_fork(void)
{
    for (int k = 0; k < 2; k++) watchdog_timers[k] = -1; /* timers are not inherited */
    watchdog_armed = 0;
}
