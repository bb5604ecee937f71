/*
 * Signal path: the process hooks that may run while our handler is on the stack — the fork() child hook
 * (fork from a previous handler chained to) and the atexit hook (exit() from that handler) — and the
 * test fault hook.
 */
#include "sig_state.h"
#include "sig_threads.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void vaka_sig_after_fork_child(void)
{
    pid_t pid = (pid_t)syscall(SYS_getpid);
    vaka_state.owner_pid = pid;
    /* A crash in progress in the parent (fork from a previous handler) is not the child's. */
    atomic_store(&vaka_run.crash_tid, 0);
    atomic_store(&vaka_run.crash_done, 0);
    atomic_store(&vaka_run.waiters, 0); /* the parent's other threads are not in the child */
    atomic_store(&vaka_run.capture_phase, VAKA_PHASE_IDLE);
    vaka_run.report_fd = -1;
    /* A report the parent kept (a survived signal death may follow) is the parent's: the child's normal exit
     * must not remove it, nor its death close the parent's file. */
    if (vaka_run.kept_fd >= 0) close(vaka_run.kept_fd);
    vaka_run.kept_fd = -1;
    vaka_run.kept_survived = 0;
    vaka_run.report_name_used = NULL;
    /* So is the spare (the parent's open file, under the parent's name): never written, nor unlinked here. */
    vaka_run.spare_fd = -1;
    vaka_sig_watchdog_after_fork();
    /* Vaka's own threads are the parent's: none of them is in the child (whose pid may even equal the parent's, in
     * a new PID namespace), and an entry a parent thread was writing would stay held. */
    for (unsigned i = 0; i < VAKA_OWN_THREADS; i++) atomic_store(&vaka_own_threads[i].tid, 0);

    /* The child's own report file: `<dir>/<run_id>-<pid>.crash`, so parent and child never overwrite each
     * other's report. */
    vaka_report_target *current = atomic_load(&vaka_state.target);
    if (current == NULL) return;
    vaka_report_target *next = current == &vaka_state.targets[0] ? &vaka_state.targets[1] : &vaka_state.targets[0];
    /* The target it replaces (an earlier install's, kept open in case a crash was reading it at the re-install):
     * its descriptors are the child's own copies, and nobody reads that target in the child. Closed, so the child
     * holds neither its directory nor its reserve (a named one would keep its slot locked while the child lives). */
    vaka_sig_close_target(next, current);
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
    if (p == 0 || p + current->run_id_len + 1 + 10 + sizeof VAKA_REPORT_FILE_SUFFIX > sizeof next->path) return;
    vaka_sig_copy(next->path + p, current->run_id, current->run_id_len);
    p += current->run_id_len;
    next->path[p++] = '-';
    p += vaka_sig_format_udec(next->path + p, 10, (uint32_t)pid);
    vaka_sig_copy(next->path + p, VAKA_REPORT_FILE_SUFFIX, sizeof VAKA_REPORT_FILE_SUFFIX);
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

/* A normal exit: a survived signal's kept report and the spare are not crashes. */
void vaka_sig_at_exit(void)
{
    /* The winner's thread ended after its capture (pthread_exit inside the previous handler, or a siglongjmp
     * out of it and the thread's end): the process survived that signal. Settle its report as a survived
     * signal's and free the slot, as a crash on another thread would have (vaka_sig_take_over). */
    if (atomic_load(&vaka_run.crash_tid) != 0 && vaka_sig_take_over(vaka_sig_gettid())) atomic_store(&vaka_run.crash_tid, 0);
    if (atomic_load(&vaka_run.crash_tid) == 0) vaka_sig_drop_spare();
    if (vaka_run.kept_survived && atomic_load(&vaka_run.crash_tid) == 0) vaka_sig_remove_kept_report();
    if (atomic_load(&vaka_run.chain_tid) != (int)vaka_sig_gettid()) return;
    /* exit() called by the previous handler itself (on the alternate stack, or below vaka_sig_chain()'s frame): the
     * crash stands. Otherwise that handler left with siglongjmp and the process now exits normally. */
    stack_t ss;
    volatile char here = 0;
    uintptr_t sp = (uintptr_t)&here;
    if (sigaltstack(NULL, &ss) != 0 || (ss.ss_flags & SS_ONSTACK)) return;
    if ((ss.ss_flags & SS_DISABLE) && sp < vaka_run.chain_sp && vaka_run.chain_sp - sp < ((uintptr_t)8 << 20)) return;
    atomic_store(&vaka_run.chain_tid, 0);
    vaka_sig_remove_kept_report();
}
