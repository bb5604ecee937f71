/*
 * vaka-crashme C scenarios: functions that crash the calling process in one precise way each.
 *
 * Every scenario function is named `crashme_<scenario>` (the scenario name with '-' replaced by '_'),
 * is never inlined, and the C target is compiled with -O0 -fno-omit-frame-pointer, so the crashing
 * frame (or the newest frame in this image, when the fault happens inside libc) carries the scenario's
 * name after symbolication. The crash tests rely on that.
 *
 * A scenario function that returns did NOT crash: it returns 0 when the fault did not happen, or an
 * errno value when setting the fault up failed (e.g. mkstemp, mmap, prctl). The caller reports that and
 * exits with a non-signal status.
 *
 * Nothing here is meant for production code.
 */
#ifndef VAKA_CRASHME_H
#define VAKA_CRASHME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Address written by `crashme_wild_write()`: 0xdeadbeef008 (about 15 TiB).
 *
 * It is a canonical x86_64 user-space address (below 2^47) that nothing maps: PIE executables, the heap,
 * shared libraries and stacks all live far higher (0x55..., 0x7f...), and bottom-up mmap starts at
 * TASK_SIZE/3 (~47 TiB). So the write faults with SIGSEGV / SEGV_MAPERR and si_addr equal to exactly this
 * value (not rounded to a page: the low bits 0x008 show the exact address is kept).
 *
 * Why not a "wilder" address such as 0xdead0000beef0: that one is above 2^47, i.e. non-canonical on CPUs
 * without 5-level paging, and a non-canonical access raises #GP instead of a page fault: the kernel then
 * sends SIGSEGV with si_code SI_KERNEL and si_addr 0, losing the address.
 */
#define VAKA_CRASHME_WILD_ADDRESS ((uintptr_t)0xdeadbeef008ULL)

/**
 * Name given to the thread that crashes in `crashme_background_thread()` (with pthread_setname_np;
 * at most 15 bytes, the kernel's limit). Reports show it as the crashed thread's name.
 */
#define VAKA_CRASHME_THREAD_NAME "crashme-bg"

/**
 * Value of the first syscall argument that the seccomp filter of `crashme_bad_syscall()` traps, together
 * with the syscall number of getppid. Only `syscall(SYS_getppid, VAKA_CRASHME_SECCOMP_MAGIC)` traps;
 * any other getppid call (which ignores its arguments) still works. ("VAKA" in ASCII.)
 */
#define VAKA_CRASHME_SECCOMP_MAGIC 0x56414b41u

/** Reads an int through a NULL pointer. Expect SIGSEGV, SEGV_MAPERR, fault address 0x0. */
int crashme_null_deref(void);

/** Writes an int to VAKA_CRASHME_WILD_ADDRESS. Expect SIGSEGV, SEGV_MAPERR, fault address = that constant. */
int crashme_wild_write(void);

/** Calls abort(). Expect SIGABRT, si_code SI_TKILL (glibc raises it with tgkill). */
int crashme_abort(void);

/**
 * Integer division by zero (operands are volatile, so the compiler cannot fold or remove it).
 * Expect SIGFPE, FPE_INTDIV, fault address = the address of the idiv instruction.
 */
int crashme_divide_by_zero(void);

/** Executes `ud2` (x86_64) / `udf #0` (aarch64). Expect SIGILL, ILL_ILLOPN on x86_64. */
int crashme_illegal_instruction(void);

/**
 * Executes `int3` (x86_64) / `brk #0` (aarch64). On x86_64 Linux the kernel sends SIGTRAP with si_code
 * SI_KERNEL (128) and si_addr 0 for int3, and the saved PC is the instruction AFTER int3: returning from a
 * handler continues execution. The Swift runtime's backtracer does return (after printing its backtrace and
 * resetting SIGTRAP to SIG_DFL), so this function executes int3 in a loop until the process dies: the first
 * trap reaches the handlers, a later one the default action. Expect termination by SIGTRAP.
 */
int crashme_breakpoint(void);

/**
 * Maps two pages of a fresh file (mkstemp in `dir`, unlinked right away), shrinks the file to one page, then
 * writes to the second page, which now lies past the end of the file. Expect SIGBUS, BUS_ADRERR, fault
 * address = the start of the second page. `dir` must be an existing writable directory.
 * @return an errno value if the file or mapping cannot be set up.
 */
int crashme_bus_error(const char *dir);

/**
 * Installs a seccomp BPF filter (prctl PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP / SECCOMP_MODE_FILTER) that
 * returns SECCOMP_RET_TRAP for getppid called with first argument VAKA_CRASHME_SECCOMP_MAGIC and allows
 * everything else, then makes exactly that call through syscall(2). Expect SIGSYS, SYS_SECCOMP.
 * Like int3, a trapped syscall is skipped and a handler that returns resumes after it, so the call is
 * repeated in a loop until the process dies (by SIGSYS once the handler has restored SIG_DFL).
 * @return an errno value if prctl fails (e.g. seccomp unavailable).
 */
int crashme_bad_syscall(void);

/**
 * Starts a pthread that names itself VAKA_CRASHME_THREAD_NAME and reads through a NULL pointer in
 * `crashme_background_thread_fault()`, while the calling (main) thread waits in pthread_join.
 * Expect SIGSEGV, SEGV_MAPERR, fault address 0x0, crashed thread = that thread (its tid differs from the pid).
 * @return an errno value if the thread cannot be created.
 */
int crashme_background_thread(void);

/** The background thread's body: names the thread, then reads through NULL. Not called directly. */
void *crashme_background_thread_fault(void *unused);

/**
 * Unbounded recursion on the calling thread, each level holding a 512-byte volatile array (so the
 * recursion is neither turned into a loop nor optimised away) until the stack's guard page is hit.
 * Expect SIGSEGV, SEGV_MAPERR (fault address just below the stack).
 * @param depth the recursion depth so far; call with 0.
 */
int crashme_stack_overflow(unsigned long depth);


/* ---------------------------------------------------------------- hardening scenarios */

/** Name given to the thread that overflows its stack in `crashme_stack_overflow_thread()`. */
#define VAKA_CRASHME_OVERFLOW_THREAD_NAME "crashme-so"

/** Number of threads that fault together in `crashme_concurrent()`. */
#define VAKA_CRASHME_CONCURRENT_THREADS 8

/** Symbol the dlopen plugin (Sources/VakaCrashmePlugin, libVakaCrashmePlugin.so) exports: `int f(void)`,
 *  which reads through NULL inside the plugin. */
#define VAKA_CRASHME_PLUGIN_SYMBOL "crashme_dlopen_plugin_crash"

/** Writes an int into a fresh read-only anonymous page. Expect SIGSEGV, SEGV_ACCERR, fault address = the page.
 *  @return an errno value if mmap fails. */
int crashme_write_readonly(void);

/** `assert(value == 42 && ...)` with NDEBUG undefined: call with anything but 42. Expect SIGABRT (SI_TKILL) and
 *  glibc's assertion text ("... Assertion `value == 42 && ...' failed.") as the abort message. */
int crashme_c_assert(int value);

/** dlopen()s the shared library at `path` (RTLD_NOW) and calls its VAKA_CRASHME_PLUGIN_SYMBOL, which reads
 *  through NULL. Expect SIGSEGV, SEGV_MAPERR at 0x0, the crashing frame in the plugin image.
 *  @return ENOENT when the library cannot be loaded, ENOSYS when the symbol is missing. */
int crashme_dlopen_plugin(const char *path);

/** Starts a pthread (default attributes, no alternate stack set up by this code) named
 *  VAKA_CRASHME_OVERFLOW_THREAD_NAME that recurses without bound (like crashme_stack_overflow, in a function
 *  named after this scenario) and waits for it.
 *  Expect SIGSEGV on that thread (SEGV_ACCERR at glibc's PROT_NONE guard page, or SEGV_MAPERR).
 *  @return an errno value if the thread cannot be created. */
int crashme_stack_overflow_thread(void);

/** Starts VAKA_CRASHME_CONCURRENT_THREADS threads (named `crashme-cc-<i>`) that wait at a barrier and then
 *  all read through NULL at the same instant. Expect SIGSEGV SEGV_MAPERR on one of them, exactly one report.
 *  @return an errno value if the barrier or a thread cannot be created. */
int crashme_concurrent(void);

/** Frees a 48-byte block twice. glibc detects it inside free() and aborts ("free(): double free detected
 *  in tcache 2"). Expect SIGABRT and that message as the abort message. */
int crashme_heap_corruption(void);

/** x86_64 only: loads a garbage value into rbp, then reads through NULL. Expect SIGSEGV SEGV_MAPERR at 0x0;
 *  the frames past the crash site cannot come from CFI or frame pointers (both use rbp here).
 *  @return ENOSYS on other architectures. */
int crashme_corrupt_frame_pointer(void);

/** Arms the crash runtime's test hook (vaka_crash_test_fault_in_handler(2): fault while unwinding), then
 *  reads through NULL. Expect SIGSEGV (the original signal) and a truncated report (no `end` line) or none. */
int crashme_crash_in_handler(void);

/** Arms the crash runtime's test hook: the next capture faults at `stage` (1 = right after the header is
 *  flushed, 2 = while unwinding). Used by the harness option --fault-in-handler STAGE (after Vaka.start). */
void crashme_arm_fault_in_handler(int stage);

/** Runs the part of the crash runtime's install that `Vaka.start` leaves to its background thread
 *  (vaka_crash_finish_install: the report's space reserve, libunwind's warm-up) on the calling thread now, so
 *  that a scenario's crash right after start finds the runtime fully prepared whichever thread runs first. */
void crashme_finish_crash_preparation(void);

/** 1 while the crash runtime's handlers are installed (vaka_crash_is_installed), else 0. */
int crashme_crash_handlers_installed(void);

/** Locks stdout's and stderr's FILE locks (flockfile) and an application mutex, then reads through NULL
 *  while holding all three. Expect SIGSEGV SEGV_MAPERR at 0x0 and a complete report (the handler takes none
 *  of those locks). */
int crashme_locks_held(void);

/** Installs a seccomp filter under which process_vm_readv/process_vm_writev fail with EPERM (as in some
 *  containers). Does not crash. Used by the harness option --deny-process-vm-readv before Vaka.start.
 *  @return 0, or an errno value if prctl fails (ENOSYS on architectures without a filter here). */
int crashme_deny_process_vm_readv(void);

/* ---------------------------------------------------------------- blocked-signal scenarios */

/** Name given to the thread that blocks every signal and crashes in `crashme_blocked_signals_thread()`. */
#define VAKA_CRASHME_BLOCKED_THREAD_NAME "crashme-blk"

/** Starts a pthread named VAKA_CRASHME_BLOCKED_THREAD_NAME that blocks every signal in its own mask
 *  (pthread_sigmask SIG_SETMASK with a full set) and then reads through NULL, and waits for it.
 *  Expect SIGSEGV SEGV_MAPERR at 0x0 on that thread. Without Vaka the kernel kills the process at once (a
 *  blocked synchronous fault runs no handler, so no Swift backtrace either); with Vaka the interposed
 *  pthread_sigmask left SIGSEGV unblocked, so the report is written.
 *  @return an errno value if the thread cannot be created. */
int crashme_blocked_signals_thread(void);

/** The blocked-signals thread's body. Not called directly. */
void *crashme_blocked_signals_thread_fault(void *unused);

/** Blocks every signal in the calling thread's mask, the way `how` names: "pthread_sigmask-block",
 *  "pthread_sigmask-setmask", "sigprocmask-block", "sigprocmask-setmask" (the C library functions, which the
 *  crash runtime interposes), or "raw-syscall" (rt_sigprocmask without the C library: nothing can see it).
 *  Does not crash. Used by the harness option --block-signals HOW (after Vaka.start).
 *  @return 0, or an errno value (EINVAL for an unknown `how`). */
int crashme_block_signals(const char *how);

/* ---- every thread (thread_scenarios.c) */

/** Names of the threads `crashme_all_threads_park()` starts (at most 15 bytes each), one per known function:
 *  blocked in read() on a pipe nobody writes (`crashme_all_threads_read`), waiting for a mutex the main thread
 *  holds (`crashme_all_threads_mutex`), spinning (`crashme_all_threads_spin`), in nanosleep
 *  (`crashme_all_threads_sleep`), in pthread_cond_wait (`crashme_all_threads_cond`), in nanosleep with every
 *  signal blocked (`crashme_all_threads_blocked`), and in nanosleep under a name that starts like Vaka's own
 *  threads' (`crashme_all_threads_impostor`, named VAKA_CRASHME_THREAD_IMPOSTOR). The harness adds a Dispatch worker and the thread of a Swift
 *  Task that suspends on a continuation (Scenarios.swift). */
#define VAKA_CRASHME_THREAD_READ "crashme-read"
#define VAKA_CRASHME_THREAD_MUTEX "crashme-mutex"
#define VAKA_CRASHME_THREAD_SPIN "crashme-spin"
#define VAKA_CRASHME_THREAD_SLEEP "crashme-sleep"
#define VAKA_CRASHME_THREAD_COND "crashme-cond"
#define VAKA_CRASHME_THREAD_BLOCKED "crashme-blocked"
#define VAKA_CRASHME_THREAD_IMPOSTOR "vaka.impostor"
/** Name of the thread `crashme_early_thread_create()` starts. */
#define VAKA_CRASHME_THREAD_EARLY "crashme-early"

/** Starts `count` threads that sleep in nanosleep for good, and waits until each runs (at most 5 s): the harness
 *  option --threads N (scripts/bench's thread table). @return 0 or an errno value. */
int crashme_park_sleepers(int count);
/** Names the calling thread (pthread_setname_np; at most 15 bytes are kept). */
void crashme_name_thread(const char *name);
/** Starts the seven parked threads above (the main thread keeps the contended mutex) and waits until each is
 *  about to park (at most 5 s). Does not crash. @return 0, or an errno value (ETIMEDOUT: they did not all start). */
int crashme_all_threads_park(void);
/** Reads through NULL on the calling thread (the `all-threads` scenario's crash, after the threads are parked). */
int crashme_all_threads(void);
/** Starts the thread of `stack-overflow-early-thread`, named VAKA_CRASHME_THREAD_EARLY, which waits in read() on
 *  a pipe. The harness calls it before Vaka.start, so the thread exists before install. @return 0 or an errno. */
int crashme_early_thread_create(void);
/** Lets that thread go: it recurses without bound (`crashme_stack_overflow_early_thread_recurse`) and dies of
 *  SIGSEGV on its guard page; waits for it. @return EINVAL when the thread was not created, else an errno. */
int crashme_stack_overflow_early_thread(void);

#ifdef __cplusplus
}
#endif

#endif /* VAKA_CRASHME_H */
