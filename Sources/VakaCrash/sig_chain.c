/*
 * Signal path: chaining to the action that was installed before Vaka — called directly (a handler function,
 * under the mask the kernel would have given it), re-sent (SIG_DFL), or left to repeat (a hardware fault);
 * and telling a signal raised inside that previous handler from one after it left with siglongjmp.
 */
#include "sig_state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* 1 for a synchronous hardware fault: returning re-runs the faulting instruction. */
int vaka_sig_is_hardware_fault(int sig, const siginfo_t *info)
{
    int code = info != NULL ? info->si_code : 0;
    int repeats = (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) && code > 0;
#ifdef BUS_MCEERR_AO
    if (sig == SIGBUS && code == BUS_MCEERR_AO) repeats = 0;
#endif
    return repeats;
}

/* 1 when the previous action of `sig` is a handler function (not SIG_DFL/SIG_IGN, not ours): vaka_sig_chain() calls
 * it directly. */
int vaka_sig_previous_is_function(int sig)
{
    const struct sigaction *prev = &vaka_state.previous[sig];
    return (prev->sa_flags & SA_SIGINFO) ? prev->sa_sigaction != vaka_sig_handler && prev->sa_sigaction != NULL
                                         : prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN;
}

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
 *     (vaka_sig_put_ours_back) and chain_tid/chain_sp mark the call, so a siglongjmp out of it leaves Vaka armed;
 *   - SIG_DFL: re-send the signal to this thread with tgkill (the default action then ends the process);
 *   - SIG_IGN: for a signal the kernel raised for this thread's own instruction (si_code > 0: SIGTRAP from
 *     int3/brk, SIGSYS from seccomp) what the kernel does for a forced synchronous signal: SIG_DFL, re-sent,
 *     so the process ends as it would without Vaka; for any other signal (sent with kill, raise...) return.
 * @return 1 when the signal was delivered and the process is still here (the previous handler returned, or
 *   the signal is ignored): the process survived it; 0 when the signal is left to repeat or was re-sent. */
int vaka_sig_chain(int sig, siginfo_t *info, void *context, pid_t tid, int winner)
{
    int code = info != NULL ? info->si_code : 0;
    struct sigaction prev = vaka_state.previous[sig];
    int siginfo_handler = (prev.sa_flags & SA_SIGINFO) != 0;
    int function = siginfo_handler ? prev.sa_sigaction != vaka_sig_handler && prev.sa_sigaction != NULL
                                   : prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN;
    /* A hardware fault repeats: returning re-runs the instruction, which reaches the previous action. The
     * winner calls a previous handler function directly instead (below), to see it return or leave. */
    if (vaka_sig_is_hardware_fault(sig, info) && !(winner && function)) {
        vaka_sig_close_kept_report();
        if (winner && !function) vaka_sig_before_default_death(sig); /* the fault repeats into the previous action */
        return 0;
    }

    if (siginfo_handler && (prev.sa_sigaction == vaka_sig_handler || prev.sa_sigaction == NULL)) {
        vaka_sig_send_self(sig, tid); /* never call ourselves */
        return 0;
    }
    if (!siginfo_handler && prev.sa_handler == SIG_IGN) {
        if (code <= 0) return 1;
        vaka_sig_set_default(sig); /* force_sig: an ignored synchronous trap still ends the process */
        vaka_sig_close_kept_report();
        if (winner) vaka_sig_before_default_death(sig);
        vaka_sig_send_self(sig, tid);
        return 0;
    }
    if (!siginfo_handler && prev.sa_handler == SIG_DFL) {
        /* A handler installed after ours is in place (it called us, as the action it saved): the default
         * action must still end the process, as without Vaka, instead of re-entering that handler forever. */
        struct sigaction now;
        int dfl_now = sigaction(sig, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL;
        vaka_sig_close_kept_report();
        if (!dfl_now) vaka_sig_set_default(sig);
        if (winner) vaka_sig_before_default_death(sig);
        if (dfl_now && vaka_sig_is_hardware_fault(sig, info)) return 0;
        vaka_sig_send_self(sig, tid);
        return 0;
    }
    /* The winner runs the previous handler with our handlers back in place: if it leaves with siglongjmp
     * (recovered), the next crash is still captured (see chain_tid). */
    if (winner) vaka_sig_put_ours_back();
    if (prev.sa_flags & SA_RESETHAND) { /* what the kernel would have done on delivery */
        if (vaka_sig_set_default(sig) == 0 && winner) vaka_run.put_by_us[sig] = 1; /* ours to re-arm if it survives */
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
        vaka_run.chain_sp = (uintptr_t)&frame;
        atomic_store(&vaka_run.chain_tid, (int)tid);
    }
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &mask, &ours, sizeof mask);
    if (siginfo_handler) prev.sa_sigaction(sig, info, context);
    else prev.sa_handler(sig);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &ours, NULL, sizeof ours);
    if (winner) atomic_store(&vaka_run.chain_tid, 0);
    (void)frame;
    return 1;
}

/* Puts the saved previous action of `sig` back in place (SIG_DFL if what was saved is our own handler), so
 * that chaining reaches it even when a library re-installed our handler after the capture. */
void vaka_sig_put_previous_back(int sig)
{
    vaka_sig_restore_one(sig); /* only where our handler is in place: never over a handler installed after ours */
}

/* 1 when the code `context` interrupted runs inside the previous handler vaka_sig_chain() called on this thread: below
 * vaka_sig_chain()'s frame, on the same stack (the alternate stack, whose range the ucontext carries; without one,
 * within 8 MiB). After a siglongjmp out of that handler the thread runs on its own stack again. */
int vaka_sig_inside_chained_handler(const void *context)
{
    if (context == NULL) return 1;
    const ucontext_t *uc = context;
    uintptr_t sp = vaka_uc_sp(uc);
    if (sp >= vaka_run.chain_sp) return 0;
    if (!(uc->uc_stack.ss_flags & SS_DISABLE)) {
        uintptr_t lo = (uintptr_t)uc->uc_stack.ss_sp;
        uintptr_t hi = lo + uc->uc_stack.ss_size;
        return vaka_run.chain_sp >= lo && vaka_run.chain_sp <= hi && sp >= lo;
    }
    return vaka_run.chain_sp - sp < ((uintptr_t)8 << 20);
}

