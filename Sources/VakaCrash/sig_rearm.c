/*
 * Signal path: our handlers' actions — restoring the saved previous actions (only where ours is in place),
 * putting ours back, the re-arm after a signal the process survived, and the take-over from a winner whose
 * thread ended after its capture.
 */
#include "sig_state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int vaka_sig_set_default(int sig)
{
    struct sigaction dfl;
    vaka_sig_zero(&dfl, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    return sigaction(sig, &dfl, NULL);
}

/* 1 when `a` is our crash handler. */
static int is_ours(const struct sigaction *a)
{
    return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == vaka_sig_handler;
}

/* Puts the saved previous action of `sig` back, only where our handler is the current one: a handler
 * installed after ours (a library that chains to us, a JIT's SIGSEGV handler) is never replaced. */
void vaka_sig_restore_one(int sig)
{
    vaka_run.put_by_us[sig] = 0;
    struct sigaction now;
    if (sigaction(sig, NULL, &now) != 0 || !is_ours(&now)) return;
    struct sigaction action = vaka_state.previous[sig];
    if (is_ours(&action)) {
        vaka_sig_zero(&action, sizeof action);
        action.sa_handler = SIG_DFL;
    }
    if (sigaction(sig, &action, NULL) == 0) vaka_run.put_by_us[sig] = 1;
}

void vaka_sig_restore_previous(void)
{
    for (size_t i = 0; i < vaka_state.signal_count; i++) vaka_sig_restore_one(vaka_state.signals[i]);
    atomic_store(&vaka_state.installed, 0); /* our handlers are gone: a later install starts afresh */
    atomic_store(&vaka_sig_protected_mask, 0u); /* and programs may block those signals again */
}

/* Our handlers for every installed signal again; the action found in place is what the signal meets without
 * Vaka: the saved one, unless a previous handler changed it (Swift's backtracer resets every crash signal to
 * SIG_DFL; SA_RESETHAND left SIG_DFL), which becomes the previous action chained to next time. */
void vaka_sig_put_ours_back(void)
{
    atomic_store(&vaka_state.installed, 1);
    for (size_t i = 0; i < vaka_state.signal_count; i++) {
        int s = vaka_state.signals[i];
        struct sigaction now;
        /* Only over the previous action we put there ourselves: a handler installed after ours stays. */
        if (!vaka_run.put_by_us[s] || sigaction(s, NULL, &now) != 0) continue;
        vaka_run.put_by_us[s] = 0;
        if (is_ours(&now) || sigaction(s, &vaka_state.action, NULL) != 0) continue;
        vaka_state.previous[s] = now;
    }
    atomic_store(&vaka_sig_protected_mask, vaka_state.protect_mask);
}

/* The process survived the signal just captured (vaka_sig_chain() returned 1: the previous handler returned — e.g. a
 * seccomp handler that emulated the system call — or the signal is ignored). The report is not a crash: it
 * is removed (except for SIGABRT: abort() goes on to reset SIGABRT to SIG_DFL and raise it again, which ends
 * the process without entering any handler, so that report is the crash's; and see below). Then our handlers go back in
 * place with a fresh reserve, and the arbitration is reset, so the next crash is captured. Threads waiting
 * for this capture see crash_gen change and compete again. */
void vaka_sig_survived(int sig)
{
    /* SIGABRT (abort() resets it to SIG_DFL and raises it again after a returning handler), or a previous
     * handler that put SIG_DFL in place for this signal (Swift's backtracer, SA_RESETHAND: the next int3, or
     * the same faulting instruction re-run right after we return, may end the process): death may follow, so
     * that report stays — until the next capture replaces it, or a normal exit removes it (vaka_sig_at_exit).
     * Either way the slot is freed and our handlers re-armed: a fault the one-shot handler fixed is not the
     * last one captured. */
    struct sigaction now;
    int expects_death = sigaction(sig, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL;
    vaka_sig_settle_survived_report(sig == SIGABRT || expects_death);
    vaka_sig_put_ours_back();
    vaka_run.crash_sig = 0;
    atomic_store(&vaka_run.crash_done_ns, 0);
    atomic_store(&vaka_run.crash_done, 0);
    atomic_store(&vaka_run.crash_tid, 0);
    atomic_fetch_add(&vaka_run.crash_gen, 1u); /* after crash_tid: a waiter that saw the old value finds the slot free */
    vaka_sig_wake_waiters();
}

int vaka_sig_thread_gone(pid_t tid)
{
    return tid > 0 && syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), tid, 0) != 0 && errno == ESRCH;
}

/* The winner finished its capture, chained to the previous handler and ended inside it or after leaving it
 * with siglongjmp (vaka_sig_wait_verdict: VAKA_WAIT_TAKE_OVER): the process survived that signal, and nobody
 * will call vaka_sig_survived for it. Thread `tid`, a waiting one, claims the slot — one claimant only: the
 * compare-and-swap of crash_done_ns from the finished capture's time to 0 (a state the other waiters wait on)
 * — settles the earlier report as a survived signal's (vaka_sig_settle_survived_report: the next capture's
 * spare, or kept when death may follow), re-arms, frees the ended thread's entry slot, and takes crash_tid.
 * @return 1 when `tid` is the winner now (it captures its own signal next), 0 when another thread claimed it or
 *   the state changed. */
int vaka_sig_take_over(pid_t tid)
{
    int winner = atomic_load(&vaka_run.crash_tid);
    uint64_t done_ns = atomic_load(&vaka_run.crash_done_ns);
    if (winner == 0 || winner == (int)tid || !atomic_load(&vaka_run.crash_done) || done_ns <= 1 ||
        !vaka_sig_thread_gone(winner))
        return 0;
    if (!atomic_compare_exchange_strong(&vaka_run.crash_done_ns, &done_ns, 0)) return 0;
    atomic_store(&vaka_run.crash_tid, (int)tid);
    atomic_store(&vaka_run.crash_done, 0);
    int chained = winner; /* its call of the previous handler is over */
    atomic_compare_exchange_strong(&vaka_run.chain_tid, &chained, 0);
    vaka_sig_forget_thread(winner);
    int sig = vaka_run.crash_sig;
    struct sigaction now;
    int expects_death = sig > 0 && sigaction(sig, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
                        now.sa_handler == SIG_DFL;
    vaka_sig_settle_survived_report(sig == SIGABRT || expects_death);
    vaka_sig_put_ours_back();
    vaka_run.crash_sig = 0;
    return 1;
}
