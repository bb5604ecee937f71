/*
 * Signal path: the ways the handler ends the process itself — after a fault inside the capture (on the
 * winner), from another thread when the winner is stuck (the watchdog), and in a process the state does not
 * belong to (a vfork child). Otherwise the process dies by the chained previous action (sig_chain.c), made
 * non-dumpable first when that is the default action and no core file would be written
 * (vaka_sig_before_default_death).
 */
#include "sig_state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The default action for `sig`, unblocked, re-sent to thread `tid`: the process ends with that signal (exit
 * status 128 + sig if even that returns: a default action that ignores it). */
__attribute__((noreturn)) static void die_by_default(int sig, pid_t tid)
{
    vaka_sig_set_default(sig);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, sig);
    sigprocmask(SIG_UNBLOCK, &unblock, NULL);
    vaka_sig_send_self(sig, tid);
    syscall(SYS_exit_group, 128 + sig); /* not reached unless the default action is to ignore */
    for (;;) {
    }
}

/* The capture faulted (or another signal hit the winner mid-capture): keep the complete lines written
 * so far (no `end` line: readers see a truncated report) and die with the original signal. */
__attribute__((noreturn)) void vaka_sig_die_after_nested_fault(int nested_sig, pid_t tid)
{
    int sig = vaka_run.crash_sig;
    if (vaka_run.report_fd >= 0) {
        vaka_w_flush_lines(&vaka_run.writer);
        vaka_sig_cut_at_offset(vaka_run.report_fd);
        close(vaka_run.report_fd);
        vaka_run.report_fd = -1;
    }
    vaka_run.writer.fd = -1;
    vaka_sig_disarm_watchdog();
    vaka_sig_restore_previous();
    atomic_store(&vaka_run.crash_done_ns, 1); /* long past: waiting threads go straight through */
    atomic_store(&vaka_run.crash_done, 1);

    vaka_sig_send_self(sig, tid); /* the previous handler, or the default action */

    /* Still alive: the previous handler returned or ignores the signal. Force the default action. */
    if (nested_sig != sig) vaka_sig_set_default(nested_sig);
    die_by_default(sig, tid);
}

/* Ends the process with the original signal from a thread other than the (stuck) winner: the default
 * action for that signal, so no previous handler runs on a thread that did not crash. */
__attribute__((noreturn)) void vaka_sig_die_from_other_thread(void)
{
    int sig = vaka_run.crash_sig;
    pid_t tid = vaka_sig_gettid();
    vaka_sig_restore_previous();
    atomic_store(&vaka_run.crash_done_ns, 1); /* long past: waiting threads go straight through */
    atomic_store(&vaka_run.crash_done, 1);
    die_by_default(sig, tid);
}

int vaka_sig_no_core_file(void)
{
    struct { uint64_t cur, max; } core = { 1, 1 };
    if (syscall(SYS_prlimit64, 0, RLIMIT_CORE, NULL, &core) != 0 || core.cur != 0) return 0;
    int fd = open("/proc/sys/kernel/core_pattern", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char first = '|';
    long n = read(fd, &first, 1);
    close(fd);
    return n == 1 && first != '|' && first != '@';
}

void vaka_sig_before_default_death(int sig)
{
    struct sigaction now;
    if (sigaction(sig, NULL, &now) != 0 || (now.sa_flags & SA_SIGINFO) ||
        (now.sa_handler != SIG_DFL && now.sa_handler != SIG_IGN))
        return; /* a handler put in after ours: the signal goes there, the process may live on */
    if (vaka_sig_no_core_file()) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

/* The signal hit a process the state does not belong to: a vfork child (shares our memory) or a raw
 * clone(). Touch no shared state: the default action for this signal, then let it through. */
void vaka_sig_not_our_process(int sig, const siginfo_t *info)
{
    vaka_sig_set_default(sig);
    if (vaka_sig_is_hardware_fault(sig, info)) return; /* returning re-runs the fault, which meets SIG_DFL */
    syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
}
