/*
 * Signal path: the crash handler's entry and the arbitration between crashing threads.
 *
 * The signal path, in the order things happen from entry to death (file: function):
 *
 *   1. sig_handler.c: vaka_sig_handler      this thread's entry slot (kernel tid, depth, newest entry); the same
 *                                           signal at the same PC and ucontext as an entry of this thread that has
 *                                           not returned is a fault the handler repeats: SIG_DFL, return, die. An
 *                                           entry left with siglongjmp is noticed first and forgotten
 *                                           (vaka_sig_entry_abandoned: the interrupted SP is above its frame, or
 *                                           off the alternate stack it ran on).
 *   2. sig_handler.c: vaka_sig_handler_body
 *                                           not our process (vfork child) -> sig_death.c: vaka_sig_not_our_process;
 *                                           sent from outside to a signal ignored before us -> return.
 *   3. sig_chain.c: vaka_sig_inside_chained_handler
 *                                           raised inside the previous handler this thread is running -> step 9 with
 *                                           no capture; after a siglongjmp out of it -> sig_rearm.c: vaka_sig_survived.
 *   4. sig_handler.c: vaka_sig_handler_body
 *                                           compare-and-swap on vaka_run.crash_tid: the first thread wins; a second
 *                                           entry on the winner's thread (the capture faulted) ->
 *                                           sig_death.c: vaka_sig_die_after_nested_fault; any other thread waits
 *                                           (bounded; vaka_sig_wait_verdict) for the winner, then goes to step 9
 *                                           (or, woken when the process survived the winner's signal, competes
 *                                           again, before threads entering afresh: defer_to_waiters; or, the
 *                                           winner's thread ended after its capture, takes over:
 *                                           sig_rearm.c: vaka_sig_take_over, then step 5 as the winner).
 *   5. sig_watchdog.c: vaka_sig_arm_watchdog
 *                                           two timers bound the capture (a stuck winner -> the watchdog handler ->
 *                                           sig_death.c).
 *   6. sig_report.c: vaka_sig_capture       the report: sig_report_file.c: vaka_sig_open_report (spare, reserve,
 *                                           by directory, by path), header lines (with `journal_seq` from
 *                                           sig_journal.c; a journal in its fallback is written to its file
 *                                           right after them), registers, frames
 *                                           (sig_unwind.c), images (sig_images.c), every other thread
 *                                           (sig_threads.c: vaka_sig_write_threads — the thread signal to each,
 *                                           a bounded wait, /proc for the ones that cannot answer), `end`;
 *                                           written with sig_report_writer.c, memory read with sig_safe_memory.c.
 *   7. sig_watchdog.c: vaka_sig_disarm_watchdog; sig_report_file.c: vaka_sig_restore_fsize_limit;
 *                                           sig_journal.c: vaka_sig_discard_own_sigxfsz.
 *   8. sig_rearm.c: vaka_sig_restore_previous
 *                                           the previous actions back (not when a previous handler function is
 *                                           called directly: ours stay in place around it).
 *   9. sig_chain.c: vaka_sig_chain          to the previous action: a handler function called directly, SIG_DFL
 *                                           re-sent (tgkill), or a hardware fault left to repeat on return
 *                                           (sig_report_file.c: vaka_sig_close_kept_report first; before a default
 *                                           action, sig_death.c: vaka_sig_before_default_death) -> death by that action.
 *  10. sig_rearm.c: vaka_sig_survived       the previous handler returned (or the signal is ignored): the report is
 *                                           kept, made the next reserve or removed (sig_report_file.c:
 *                                           vaka_sig_settle_survived_report), our handlers re-armed, the slot freed.
 *                                           Not when it returned from a repeating fault or abort()'s SIGABRT and
 *                                           put SIG_DFL in place itself (Swift's backtracer; win:
 *                                           death_follows_return): the signal comes back and ends the process, the
 *                                           report is kept and the slot stays taken.
 *
 * Process hooks that may run while the handler is on the stack (fork, exit from a previous handler):
 * sig_lifecycle.c. The thread signal's own handler (another thread unwinding itself for step 6, or taking an
 * alternate stack at install): sig_threads.c: vaka_sig_thread_signal. Install-time counterparts (normal
 * context): install.c, lifecycle.c, threads.c.
 *
 * Only async-signal-safe syscalls, libunwind and other sig_*.c code are used here; all storage is static.
 */
#include "sig_state.h"
#include "sig_threads.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

vaka_sig_state vaka_state = {
    .reader = { .method = VAKA_SAFE_READ_NONE, .pipe_r = -1, .pipe_w = -1 },
    .targets = { { .dir_fd = -1, .reserve_fd = -1, .reserve_slot = -1 }, { .dir_fd = -1, .reserve_fd = -1, .reserve_slot = -1 } },
};

vaka_sig_run vaka_run = { .report_fd = -1, .kept_fd = -1, .spare_fd = -1, .report_dir_used = -1 };

uint64_t vaka_sig_now_ns(clockid_t clock)
{
    struct timespec ts;
    ts.tv_sec = 0; /* assignments, not `= {0}`: some compilers emit memset for that at -O0 */
    ts.tv_nsec = 0;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

pid_t vaka_sig_gettid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

void vaka_sig_send_self(int sig, pid_t tid)
{
    syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), tid, sig);
}

/* Handler entries, per handling thread: a thread's slot holds its kernel tid (0: free), how many of its entries
 * have not returned (depth), and the signal, interrupted PC and ucontext address of the newest of them. A slot
 * is taken at a thread's first entry and freed when its depth is back to 0. An entry left with siglongjmp (a
 * previous handler that recovered) or with pthread_exit never returns: the next entry of that thread sees, from
 * where the code it interrupted runs, that the newest entry's frame is gone (vaka_sig_entry_abandoned) and
 * starts the slot afresh; the slot of a thread that ended inside a handler is freed by the thread that takes
 * over from it (vaka_sig_forget_thread). Per thread, so a second thread
 * crashing at the same time never overwrites the first one's entry. When every slot is taken, an entry goes
 * without the repeated-fault check. */
#define VAKA_ENTRY_SLOTS 64
typedef struct vaka_entry_slot {
    atomic_int tid;
    int depth;
    int sig;
    uintptr_t pc;
    void *uc;
    uintptr_t frame; /* address of a local of the newest entry's vaka_sig_handler frame */
} vaka_entry_slot;
static vaka_entry_slot entry_slots[VAKA_ENTRY_SLOTS];

int vaka_sig_entry_abandoned(uintptr_t frame, uintptr_t sp, uintptr_t alt_lo, uintptr_t alt_hi)
{
    /* On the alternate stack as the kernel counts it (on_sig_stack): lo < sp <= hi. */
    int sp_on_alt = alt_lo < alt_hi && sp > alt_lo && sp <= alt_hi;
    int frame_on_alt = alt_lo < alt_hi && frame > alt_lo && frame <= alt_hi;
    if (frame_on_alt && !sp_on_alt) /* just below the alternate stack: the handler overflowed it, still running */
        return !(sp <= alt_lo && alt_lo - sp <= VAKA_ALT_OVERFLOW_SLACK);
    if (!frame_on_alt && sp_on_alt) return 0; /* a handler on the alternate stack, run inside the earlier entry */
    return sp > frame; /* the same stack: code nested in the earlier entry runs below its frame */
}

void vaka_sig_forget_thread(pid_t tid)
{
    if (tid == 0) return;
    for (int i = 0; i < VAKA_ENTRY_SLOTS; i++) {
        int t = (int)tid;
        if (atomic_load(&entry_slots[i].tid) == t) {
            entry_slots[i].depth = 0;
            atomic_compare_exchange_strong(&entry_slots[i].tid, &t, 0);
        }
    }
}

/* The slot of thread `tid`: its own, else a free one taken for it; NULL when all are taken. */
static vaka_entry_slot *entry_slot(pid_t tid)
{
    for (int i = 0; i < VAKA_ENTRY_SLOTS; i++)
        if (atomic_load(&entry_slots[i].tid) == (int)tid) return &entry_slots[i];
    for (int i = 0; i < VAKA_ENTRY_SLOTS; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&entry_slots[i].tid, &free_slot, (int)tid)) {
            entry_slots[i].depth = 0;
            entry_slots[i].sig = 0;
            return &entry_slots[i];
        }
    }
    return NULL;
}

static void vaka_sig_handler_body(int sig, siginfo_t *info, void *context);

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
     * Detected before the capture or any state change but the entry slot's (gettid, a scan of the entry slots
     * and the abandoned-entry check always fit): the same signal, the same PC and the same ucontext address as
     * an entry of this thread that has not returned. Bail out: the default action for the signal,
     * and return to the faulting instruction, which now ends the process with that signal (or, when this thread
     * was capturing another signal, the default action for that one, re-sent). */
    volatile char here = 0;
    uintptr_t frame = (uintptr_t)&here;
    uintptr_t pc = context != NULL ? context_pc(context) : 0;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    vaka_entry_slot *slot = entry_slot(tid);
    if (slot != NULL && slot->depth > 0 && context != NULL) {
        /* The newest entry left without returning (a previous handler's siglongjmp): the code interrupted now
         * does not run inside it. That entry, and any it interrupted, are gone; the same signal at the same PC
         * and ucontext is then a new one (a probe repeated from the same place), not a repeating fault. */
        const ucontext_t *uc = context;
        uintptr_t lo = 0, hi = 0;
        if (!(uc->uc_stack.ss_flags & SS_DISABLE)) {
            lo = (uintptr_t)uc->uc_stack.ss_sp;
            hi = lo + uc->uc_stack.ss_size;
        }
        if (vaka_sig_entry_abandoned(slot->frame, vaka_uc_sp(uc), lo, hi)) {
            slot->depth = 0;
            slot->sig = 0;
        }
    }
    if (slot != NULL && slot->depth > 0 && slot->sig == sig && slot->pc == pc && slot->uc == context && pc != 0) {
        vaka_sig_set_default(sig);
        /* The capture of a different signal (e.g. SIGABRT) was under way on this thread: die with that one. */
        int orig = vaka_run.crash_sig;
        if (orig != 0 && orig != sig && atomic_load(&vaka_run.crash_tid) == (int)tid) {
            vaka_sig_set_default(orig);
            vaka_sig_send_self(orig, tid);
        }
        return;
    }
    int outer_sig = 0;
    uintptr_t outer_pc = 0;
    void *outer_uc = NULL;
    uintptr_t outer_frame = 0;
    if (slot != NULL) {
        outer_sig = slot->sig;
        outer_pc = slot->pc;
        outer_uc = slot->uc;
        outer_frame = slot->frame;
        slot->depth++;
        slot->sig = sig;
        slot->pc = pc;
        slot->uc = context;
        slot->frame = frame;
    }
    vaka_sig_handler_body(sig, info, context);
    /* Still this thread's slot with this entry in it (an entry taken for abandoned by a nested one was reset). */
    if (slot != NULL && atomic_load(&slot->tid) == (int)tid && slot->depth > 0) {
        slot->sig = outer_sig; /* the entry this one interrupted, if any, is the newest again */
        slot->pc = outer_pc;
        slot->uc = outer_uc;
        slot->frame = outer_frame;
        if (--slot->depth == 0) atomic_store(&slot->tid, 0);
    }
}

int vaka_sig_wait_verdict(unsigned gen, int *steps, uint64_t now_ns)
{
    /* crash_done and crash_done_ns are read before crash_gen: when crash_gen is still `gen` they are this
     * capture's. A winner re-arming after surviving its signal resets them before it bumps crash_gen; that
     * state (not done, or done with no time) is waited on, never taken for a stuck or finished winner. */
    int winner = atomic_load(&vaka_run.crash_tid);
    int done = atomic_load(&vaka_run.crash_done);
    uint64_t done_ns = atomic_load(&vaka_run.crash_done_ns);
    if (atomic_load(&vaka_run.crash_gen) != gen || atomic_load(&vaka_run.crash_tid) == 0) return VAKA_WAIT_COMPETE;
    if (done && done_ns > 1 && atomic_load(&vaka_run.crash_tid) == winner && vaka_sig_thread_gone(winner)) {
        /* The winner finished its capture and then ended without coming back (pthread_exit inside the previous
         * handler, or a siglongjmp out of it and the thread's end): the process survived that signal and
         * nobody is handling it any more. Take over (vaka_sig_take_over), at once. */
        return VAKA_WAIT_TAKE_OVER;
    }
    if (done && done_ns != 0) {
        /* The winner has chained to the previous handler, which normally ends the process (Swift's
         * backtracer prints one backtrace, then the default action runs). Give it that time, counted from
         * when the winner finished, before entering the previous handler from this thread too: arriving while
         * it runs made Swift's backtracer start a second backtrace (and, under load, run out of time). A
         * fault long after a capture the process survived goes straight through, and so does one after the
         * handler ended the process itself (crash_done_ns 1). */
        return now_ns - done_ns >= (uint64_t)VAKA_WAIT_STEPS * VAKA_WAIT_STEP_NS ? VAKA_WAIT_THROUGH : VAKA_WAIT_SLEEP;
    }
    return ++*steps >= VAKA_WAIT_STEPS ? VAKA_WAIT_STUCK : VAKA_WAIT_SLEEP;
}

/* One wait step: sleeps until crash_gen is no longer `gen` (vaka_sig_wake_waiters) or `step` has passed. A futex
 * call refused (ENOSYS, or EPERM from a seccomp filter) sleeps the whole step instead: the steps bound the wait. */
static void wait_step(unsigned gen, const struct timespec *step)
{
    if (syscall(SYS_futex, &vaka_run.crash_gen, FUTEX_WAIT_PRIVATE, gen, step, NULL, 0) != 0 && errno != ETIMEDOUT &&
        errno != EAGAIN && errno != EINTR)
        nanosleep(step, NULL);
}

void vaka_sig_wake_waiters(void)
{
    if (atomic_load(&vaka_run.waiters) > 0) syscall(SYS_futex, &vaka_run.crash_gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* A thread entering the handler afresh while others wait and the slot is free (the process just survived the
 * winner's signal): gives the waiters, just woken, one wait step at most to take the slot first. Without it a
 * thread whose signals the process survives in a loop (a trap handler that returns) re-took the slot each time
 * within microseconds, and a real crash on another thread waited for a gap, up to seconds. */
static void defer_to_waiters(void)
{
    struct timespec pause = { 0, VAKA_WAIT_STEP_NS / 100 };
    for (int k = 0; k < 100 && atomic_load(&vaka_run.waiters) > 0 && atomic_load(&vaka_run.crash_tid) == 0; k++)
        nanosleep(&pause, NULL);
}

/* 1 when the previous handler function the winner called returned (vaka_sig_chain returned 1) from a signal
 * that comes back by itself and left SIG_DFL in place for it itself (Swift's backtracer resets every crash signal
 * to SIG_DFL): it then meets that default action and ends the process without reaching Vaka. Such a signal is a
 * fault that repeats (returning re-runs the faulting instruction), or SIGABRT this process raised at its own
 * thread (SI_TKILL): abort() raises it again after a handler returns. Not when Vaka put SIG_DFL there
 * (SA_RESETHAND, put_by_us): vaka_sig_survived re-arms our handler, and the signal comes back to it. A plain
 * raise(SIGABRT) under such a handler is survived instead: its report stays, as the last crash captured, and a
 * later signal Vaka still handles waits the bounded time, then goes to its previous action. */
static int death_follows_return(int sig, const siginfo_t *info)
{
    struct sigaction now;
    int comes_back = vaka_sig_is_hardware_fault(sig, info) ||
                     (sig == SIGABRT && info != NULL && info->si_code == SI_TKILL && info->si_pid == vaka_state.owner_pid);
    return comes_back && !vaka_run.put_by_us[sig] && sigaction(sig, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
           now.sa_handler == SIG_DFL;
}

/* This thread won the arbitration slot (crash_tid is its tid): capture, then chain to the previous action. */
static void win(int sig, siginfo_t *info, void *context, pid_t tid, uint64_t start_ns)
{
    vaka_run.crash_sig = sig;
    int armed = atomic_load(&vaka_state.installed);
    if (armed) {
        vaka_sig_arm_watchdog(tid);
        vaka_sig_capture(sig, info, (ucontext_t *)context, start_ns, tid);
        vaka_sig_disarm_watchdog();
        vaka_sig_restore_fsize_limit();
        if (vaka_run.writer.file_too_big) vaka_sig_discard_own_sigxfsz();
    }
    /* A previous handler function is called directly by vaka_sig_chain() with our handlers in place (it puts them
     * back itself): no window where every previous action is in place process-wide, so another thread's
     * real fault meanwhile still reaches Vaka (it waits for this slot and competes again after the
     * survival). A signal raised on this thread inside that handler goes to its previous action
     * (chain_tid, vaka_sig_inside_chained_handler()). Otherwise the previous actions go back now. */
    if (!(armed && vaka_sig_previous_is_function(sig))) vaka_sig_restore_previous();
    atomic_store(&vaka_run.crash_done_ns, vaka_sig_now_ns(CLOCK_MONOTONIC));
    atomic_store(&vaka_run.crash_done, 1);
    if (vaka_sig_chain(sig, info, context, tid, armed) && armed) {
        if (death_follows_return(sig, info)) {
            /* The report is this crash's: kept (a normal exit still removes it), the slot stays this
             * capture's, done. Threads waiting for it keep waiting for the death (bounded, as after a signal
             * re-sent to SIG_DFL) instead of competing again: a second capture reopened the same report
             * path, and the death on return cut it short (no `end` line, or no report at all), after the
             * previous handler (Swift's backtracer) had also run a second time. */
            vaka_sig_settle_survived_report(1);
            return;
        }
        vaka_sig_survived(sig);
    }
}

static void vaka_sig_handler_body(int sig, siginfo_t *info, void *context)
{
    int saved_errno = errno;
    if ((pid_t)syscall(SYS_getpid) != vaka_state.owner_pid) {
        vaka_sig_not_our_process(sig, info);
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
    pid_t tid = vaka_sig_gettid();
    struct timespec step = { 0, VAKA_WAIT_STEP_NS };

    if (atomic_load(&vaka_run.chain_tid) == (int)tid) {
        if (vaka_sig_inside_chained_handler(context)) {
            /* Raised inside the previous handler we are running (e.g. it calls abort()): what it would meet
             * without Vaka, no capture (the report is the signal it is handling). */
            vaka_sig_put_previous_back(sig);
            vaka_sig_chain(sig, info, context, tid, 0);
            errno = saved_errno;
            return;
        }
        /* The previous handler left with siglongjmp and the program went on: it survived that signal. */
        atomic_store(&vaka_run.chain_tid, 0);
        vaka_sig_survived(vaka_run.crash_sig);
    }

    int waited = 0;
compete:;
    if (!waited) defer_to_waiters();
    unsigned gen = atomic_load(&vaka_run.crash_gen);
    start_ns = vaka_sig_now_ns(CLOCK_MONOTONIC); /* again after a wait: capture_ns is the capture's own time */
    int expected = 0;
    if (atomic_compare_exchange_strong(&vaka_run.crash_tid, &expected, (int)tid)) {
        win(sig, info, context, tid, start_ns);
    } else if (expected == (int)tid && !atomic_load(&vaka_run.crash_done)) {
        vaka_sig_die_after_nested_fault(sig, tid);
    } else {
        /* Another thread is writing the report (or wrote it, and our handler was put back since): wait for
         * it, one look at the slot per step. */
        int steps = 0;
        atomic_fetch_add(&vaka_run.waiters, 1);
        vaka_sig_threads_allow_while_waiting(); /* the winner's round of every thread reaches this one too */
        for (;;) {
            int verdict = vaka_sig_wait_verdict(gen, &steps, vaka_sig_now_ns(CLOCK_MONOTONIC));
            if (verdict == VAKA_WAIT_COMPETE) {
                atomic_fetch_sub(&vaka_run.waiters, 1);
                waited = 1;
                goto compete;
            }
            if (verdict == VAKA_WAIT_TAKE_OVER && vaka_sig_take_over(tid)) {
                atomic_fetch_sub(&vaka_run.waiters, 1);
                win(sig, info, context, tid, vaka_sig_now_ns(CLOCK_MONOTONIC));
                errno = saved_errno;
                return;
            }
            if (verdict == VAKA_WAIT_STUCK) vaka_sig_restore_previous(); /* the winner is stuck: give up on it */
            if (verdict != VAKA_WAIT_SLEEP) break;
            wait_step(gen, &step);
        }
        atomic_fetch_sub(&vaka_run.waiters, 1);
        /* Then let this signal through to the previous action, which must really be in place. */
        vaka_sig_put_previous_back(sig);
        vaka_sig_chain(sig, info, context, tid, 0);
    }
    errno = saved_errno;
}

