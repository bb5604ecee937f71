/*
 * Signal path: the state the crash handler's files (sig_handler.c, sig_report.c, sig_report_file.c,
 * sig_chain.c, sig_rearm.c, sig_death.c, sig_watchdog.c, sig_lifecycle.c) share, and their functions. The
 * every-thread capture's state is in sig_threads.h.
 * Private to the runtime; everything is static storage (vaka_run), hidden like the rest of vaka_internal.h.
 * The order in which these run from entry to death is mapped at the top of sig_handler.c.
 */
#ifndef VAKA_SIG_STATE_H
#define VAKA_SIG_STATE_H

#include "vaka_internal.h"

#include <time.h>

#pragma GCC visibility push(hidden)

/* How long a non-winning thread waits for the winner: 1000 x 10 ms. */
#define VAKA_WAIT_STEPS 1000
#define VAKA_WAIT_STEP_NS 10000000L
/* Size of the kernel's signal set (rt_sigtimedwait's and rt_sigprocmask's last argument wants it in bytes). */
#define VAKA_KERNEL_NSIG 64

/* Where the winner's capture stands, for the watchdog (sig_watchdog.c). */
enum { VAKA_PHASE_IDLE = 0, VAKA_PHASE_UNWINDING = 1, VAKA_PHASE_WRITING = 2, VAKA_PHASE_ABANDONED = 3 };

/** The crash handler's run state: who captures, the report file being written or kept, the chained call.
 *  Written only inside the handler, and by the install-time hooks while no crash runs (lifecycle.c). */
typedef struct vaka_sig_run {
    /* Arbitration (sig_handler.c). Kernel tid of the thread writing the report; 0 while no crash has started. */
    atomic_int crash_tid;
    /* Set once the winner has restored the previous handlers (or given up). */
    atomic_int crash_done;
    /* CLOCK_MONOTONIC ns when the winner finished its capture and restored the previous handlers; 0 before (and
     * again once the process survived that capture); 1 when the handler ends the process itself (sig_death.c).
     * Stored before crash_done = 1: crash_done set with crash_done_ns 0 is a capture being reset, not finished. */
    _Atomic uint64_t crash_done_ns;
    /* Bumped each time a capture ends in a signal the process survived and the handlers are re-armed: a waiting
     * thread that sees it change competes again instead of waiting out the grace period. */
    atomic_uint crash_gen;
    /* Threads waiting for the winner (sig_handler.c). They sleep on crash_gen (futex, one wait step at most) and
     * are woken when it is bumped; while any waits, a thread entering the handler afresh lets them take the slot
     * a survived signal freed before it competes, so a thread that survives signals in a loop cannot keep it
     * from a real crash on another thread. */
    atomic_int waiters;
    /* The signal the winner is handling (for the nested-fault path). */
    int crash_sig;

    /* The report (sig_report.c, sig_report_file.c). The descriptor being written, -1 when none. */
    int report_fd;
    /* The last report written, still open after its capture: when the process survives the signal, that file
     * (blocks and all) becomes the next reserve; when death follows, it is closed (vaka_sig_close_kept_report()).
     * -1 when none. */
    int kept_fd;
    /* 1 while a report of a signal the process survived is kept because death may still follow (SIGABRT:
     * abort() raises it again; a previous handler that put SIG_DFL in place): a normal exit removes it. */
    int kept_survived;
    /* The report of a signal the process survived, kept as the next reserve (blocks and all: on a full disk,
     * freeing them would let another thread take them before a new reserve could): renamed to the hidden
     * `.<run_id>-<pid>.spare` in the report directory, still open. The next capture writes it from offset 0,
     * cuts it to the written length and renames it to the report's name; a normal exit or uninstall unlinks it.
     * spare_dir is the directory descriptor the name is relative to (spare_path + spare_rel), or AT_FDCWD
     * (spare_path is absolute). spare_fd -1 when none. */
    int spare_fd;
    int spare_dir;
    dev_t spare_dev;
    ino_t spare_ino;
    pid_t spare_pid;
    size_t spare_rel;
    char spare_path[VAKA_REPORT_FILE_PATH_MAX + 8];
    /* Where the current report was created (directory descriptor or AT_FDCWD, and name), to remove it when the
     * process survives the signal; name NULL when none. */
    int report_dir_used;
    const char *report_name_used;
    /* The report writer (its buffer is static storage too). */
    vaka_writer writer;

    /* Chaining (sig_chain.c). While the winner runs a previous handler function with our handlers in place:
     * its thread and the stack pointer of vaka_sig_chain()'s frame. A later entry on that thread tells a signal
     * raised inside that handler (interrupted code below that frame / on the alternate stack) from one after
     * the handler left with siglongjmp (the signal was survived). 0 when none. */
    atomic_int chain_tid;
    volatile uintptr_t chain_sp;
    /* Signals whose current action is the previous one that we put back in place ourselves
     * (vaka_sig_restore_one()): only those, and those still carrying our handler, are ever changed by us again. */
    volatile uint8_t put_by_us[VAKA_NSIG];

    /* Watchdog (sig_watchdog.c): the capture's phase (VAKA_PHASE_*), and the frames from the frame-pointer
     * walk done before libunwind runs (written by the watchdog if libunwind hangs). */
    atomic_int capture_phase;
    uintptr_t pre_ips[VAKA_REPORT_MAX_FRAMES];
    uint8_t pre_methods[VAKA_REPORT_MAX_FRAMES];
    size_t pre_count;
} vaka_sig_run;

extern vaka_sig_run vaka_run;

/* ---- small helpers (sig_handler.c) */
/** CLOCK_* time in ns. */
uint64_t vaka_sig_now_ns(clockid_t clock);
/** Kernel thread id of the calling thread. */
pid_t vaka_sig_gettid(void);
/** Sends `sig` to thread `tid` of this process (tgkill). */
void vaka_sig_send_self(int sig, pid_t tid);

/* What a thread waiting for the winner of generation `gen` does after one look at the slot (sig_handler.c):
 * VAKA_WAIT_COMPETE (the process survived the winner's signal: the generation changed or the slot is free),
 * VAKA_WAIT_SLEEP (one more step), VAKA_WAIT_STUCK (no end of capture in VAKA_WAIT_STEPS steps, counted in
 * `*steps`), VAKA_WAIT_THROUGH (the winner finished its capture VAKA_WAIT_STEPS * VAKA_WAIT_STEP_NS before
 * `now_ns`, CLOCK_MONOTONIC, or the handler ended the process itself: let this signal through),
 * VAKA_WAIT_TAKE_OVER (the winner finished its capture and its thread is gone — it ended inside the previous
 * handler or after leaving it with siglongjmp: claim the slot with vaka_sig_take_over and capture this signal). */
enum { VAKA_WAIT_COMPETE, VAKA_WAIT_SLEEP, VAKA_WAIT_STUCK, VAKA_WAIT_THROUGH, VAKA_WAIT_TAKE_OVER };
int vaka_sig_wait_verdict(unsigned gen, int *steps, uint64_t now_ns);
/* Wakes the threads waiting for the winner (after crash_gen was bumped). */
void vaka_sig_wake_waiters(void);
/* How far below the alternate stack an interrupted stack pointer still counts as the handler overflowing it. */
#define VAKA_ALT_OVERFLOW_SLACK ((uintptr_t)64 << 10)
/* 1 when the handler entry whose vaka_sig_handler frame is at `frame` cannot still be running under a new entry
 * of the same thread that interrupted code at stack pointer `sp` (the thread's alternate stack [alt_lo, alt_hi),
 * both 0 when none): `sp` above that frame on the same stack (stack grows down), or off the alternate stack the
 * frame is on (other than up to VAKA_ALT_OVERFLOW_SLACK below it: the handler overflowed it). Such an entry was
 * left with siglongjmp (sig_handler.c). */
int vaka_sig_entry_abandoned(uintptr_t frame, uintptr_t sp, uintptr_t alt_lo, uintptr_t alt_hi);
/* Frees the entry slot of thread `tid` (a thread that ended inside a handler). */
void vaka_sig_forget_thread(pid_t tid);

/* ---- report content (sig_report.c) */
/** Writes the whole report of signal `sig` to the current target's file; leaves it open in vaka_run.kept_fd. */
void vaka_sig_capture(int sig, siginfo_t *info, ucontext_t *uc, uint64_t start_ns, pid_t tid);
/* The pieces of a report, in the order vaka_sig_capture() writes them, each into vaka_run.writer (the C
 * unit tests call them one by one to write a report with every key: Tests/unit/runtime_unit.c). */
/** The format line, `run_id`, `pid`, `tid`, `thread_name`, `timestamp_ns` (`wall_ns`), `arch`, `executable`. */
void vaka_sig_write_identity(const vaka_report_target *target, pid_t tid, uint64_t wall_ns);
/** `signal`, `code`, and `fault_addr` (si_code > 0, a fault signal) or `sender` (si_code <= 0). */
void vaka_sig_write_signal(int sig, const siginfo_t *info);
/** `fatal_message` and `abort_message`, read (safely) from the Swift runtime's and glibc's message pointers. */
void vaka_sig_write_messages(void);
/** One message line `key` with the text at address `p`: at most min(`cap`, VAKA_REPORT_MESSAGE_MAX) bytes,
 *  trailing newlines removed; nothing when `p` is 0 or the text is empty. */
void vaka_sig_write_message(const char *key, uintptr_t p, size_t cap);
/** `journal_seq`: the registered journal's last sequence number (nothing when no journal is registered). */
void vaka_sig_write_journal_seq(void);
/** The `register` line of `uc` (every general register, `<name> <hex>` pairs). */
void vaka_sig_write_registers(const ucontext_t *uc);
/** The `frame` lines and `frames_truncated` (when `truncated`). */
void vaka_sig_write_frames(const uintptr_t *ips, const uint8_t *methods, size_t n, int truncated);
/** `memory_read`, `capture_ns` (since `start_ns`), `pad` up to the size of the reused file `fd`, `end`. */
void vaka_sig_write_tail(int fd, uint64_t start_ns);

/* ---- report file: target, reserve, spare (sig_report_file.c) */
/** Opens the report file of `target` (spare, reserve, by directory descriptor, by path). @return fd or -1. */
int vaka_sig_open_report(vaka_report_target *target);
/** Cuts the report being written at `fd` to what was written so far. */
void vaka_sig_cut_at_offset(int fd);
/** Raises a soft RLIMIT_FSIZE to the hard one for the capture; vaka_sig_restore_fsize_limit() puts it back. */
void vaka_sig_raise_fsize_limit(void);
void vaka_sig_restore_fsize_limit(void);
/** Death follows the kept report: closes it (the reserve's blocks past its end stay allocated). */
void vaka_sig_close_kept_report(void);
/** Takes the SIGXFSZ our own report (or journal) write raised off the pending set (defined in sig_journal.c). */
void vaka_sig_discard_own_sigxfsz(void);
/** The process survived the captured signal: keeps the report (`keep`: death may follow), else makes it the
 *  next reserve (spare) or removes it; then makes sure a reserve exists for the next capture. */
void vaka_sig_settle_survived_report(int keep);
/** A normal exit or uninstall: removes the kept report of a survived signal. */
void vaka_sig_remove_kept_report(void);

/* ---- chaining to the previous handler (sig_chain.c) */
/** 1 for a synchronous hardware fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE with si_code > 0, except BUS_MCEERR_AO):
 *  returning re-runs the faulting instruction. */
int vaka_sig_is_hardware_fault(int sig, const siginfo_t *info);
/** 1 when the previous action of `sig` is a handler function (not SIG_DFL/SIG_IGN, not ours). */
int vaka_sig_previous_is_function(int sig);
/** Lets the signal reach whatever was installed before us. @return 1 when the process survived it. */
int vaka_sig_chain(int sig, siginfo_t *info, void *context, pid_t tid, int winner);
/** Puts the saved previous action of `sig` back (only over our own handler). */
void vaka_sig_put_previous_back(int sig);
/** 1 when `context` interrupted code inside the previous handler vaka_sig_chain() called on this thread. */
int vaka_sig_inside_chained_handler(const void *context);

/* ---- signal actions: restore and re-arm (sig_rearm.c) */
/** Sets the action of `sig` to SIG_DFL (no flags, empty mask). @return sigaction's result. */
int vaka_sig_set_default(int sig);
/** Puts back the saved previous action of `sig`, only where our handler is the current one. */
void vaka_sig_restore_one(int sig);
/** Our handlers back over every previous action we put in place ourselves. */
void vaka_sig_put_ours_back(void);
/** The process survived signal `sig` just captured: settle the report, re-arm, free the arbitration slot. */
void vaka_sig_survived(int sig);
/** 1 when thread `tid` of this process no longer exists (tgkill with signal 0 fails with ESRCH). */
int vaka_sig_thread_gone(pid_t tid);
/** The winner's thread ended after its capture: thread `tid` claims the slot from it and settles its report as a
 *  survived signal's. @return 1 when `tid` is the winner now. */
int vaka_sig_take_over(pid_t tid);

/* ---- death paths (sig_death.c) */
/** The capture faulted (or was stopped) on the winner: keep the complete lines, die with the original signal. */
__attribute__((noreturn)) void vaka_sig_die_after_nested_fault(int nested_sig, pid_t tid);
/** The winner is stuck: end the process with the original signal's default action from this thread. */
__attribute__((noreturn)) void vaka_sig_die_from_other_thread(void);
/** 1 when the death of this process by a core-dumping signal would write no core anyway: a soft RLIMIT_CORE of 0
 * and a core_pattern (/proc/sys/kernel/core_pattern) that names a file, not a program (`|`) or a socket (`@`), which
 * the kernel feeds whatever the limit. 0 when either cannot be read. (sig_death.c) */
int vaka_sig_no_core_file(void);
/** Called by the winner right before the default action of `sig` (each crash signal's dumps core) ends the
 *  process: when that action is the one in place (SIG_DFL, or SIG_IGN, which the kernel turns into it for
 *  a fault) and vaka_sig_no_core_file(), makes the process non-dumpable (PR_SET_DUMPABLE 0). The kernel's core-dump
 *  stage, which runs whether or not a core will be written, first kills every other thread and waits until each
 *  has left the address space (the dying thread sleeps until the others get a CPU); a process that is not dumpable
 *  skips that stage and dies at once, with the same signal and the same wait status (no core either way). Costs a
 *  prlimit64 and a read of core_pattern (~5 µs) where no core is written. (sig_death.c) */
void vaka_sig_before_default_death(int sig);
/** The signal hit a process the state does not belong to (vfork child, raw clone): default action. */
void vaka_sig_not_our_process(int sig, const siginfo_t *info);

/* ---- watchdog (sig_watchdog.c) */
/** Arms the two capture timers (one at the winner `tid`, one process-directed). */
void vaka_sig_arm_watchdog(pid_t tid);
/** Deletes the timers, puts the watchdog signal's action back, phase IDLE. */
void vaka_sig_disarm_watchdog(void);
/** fork() child: the parent's timers are not inherited; forget them. */
void vaka_sig_watchdog_after_fork(void);

#pragma GCC visibility pop

#endif /* VAKA_SIG_STATE_H */
