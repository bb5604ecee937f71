/*
 * Signal path (callable from any signal handler): the synchronous crash signals are never blocked while the
 * runtime is installed.
 *
 * A hardware fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE), a trap (SIGTRAP) or a seccomp SIGSYS that arrives while
 * its signal is blocked in the faulting thread's mask is not left pending: the kernel resets the action to
 * SIG_DFL (for the whole process) and kills it, so no handler — ours or the application's — ever runs. Blocking
 * such a signal can therefore only ever mean "die without a report". While installed, this runtime:
 *   - unblocks them in the installing thread (install.c) and in every thread created afterwards
 *     (the pthread_create trampoline in thread_stack.c), since a mask is inherited over exec and pthread_create;
 *   - interposes pthread_sigmask and sigprocmask (the executable's definitions come first in the dynamic
 *     linker's search order, as for pthread_create) so that SIG_BLOCK and SIG_SETMASK leave them unblocked.
 * SIGABRT is not touched: it is asynchronous (raise/kill leave it pending while blocked, which a program may
 * rely on), and abort() unblocks it itself before raising it.
 *
 * The interposers only copy the set, clear bits and pass the call on — so they stay async-signal-safe, as POSIX
 * requires of both functions — to the first of:
 *   1. a sanitizer's interceptor (__interceptor_pthread_sigmask / __interceptor_sigprocmask, weak references):
 *      a static sanitizer runtime in the executable defines pthread_sigmask/sigprocmask as weak aliases of its
 *      interceptors, which these strong definitions replace (see thread_stack.c for pthread_create);
 *   2. the C library's function resolved with dlsym(RTLD_NEXT) at load time (resolve_sigmask_functions,
 *      install.c);
 *   3. glibc's own entries in a fully static program, where dlsym finds nothing (__pthread_sigmask,
 *      __sigprocmask: weak references, NULL in a dynamic program since libc.so does not export them);
 *   4. the rt_sigprocmask system call, made here.
 */
#include "vaka_internal.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Signals (bit `sig`) SIG_BLOCK/SIG_SETMASK must leave unblocked; 0 while not installed (pass-through). */
atomic_uint vaka_sig_protected_mask;
_Atomic(vaka_sigmask_fn) vaka_real_pthread_sigmask;
_Atomic(vaka_sigmask_fn) vaka_real_sigprocmask;

/* Bytes of the kernel's sigset_t (rt_sigprocmask wants that size exactly). */
#define VAKA_KERNEL_SIGSET_BYTES 8

/* Without the C library's function (called before it was resolved): the system call, leaving glibc's two
 * internal signals (32: thread cancellation, 33: setxid) alone as glibc's pthread_sigmask does.
 * @return 0 or an errno value. */
static int raw_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    if (set != NULL && how != SIG_UNBLOCK) {
        vaka_sig_copy(&copy, set, sizeof copy);
        ((unsigned long *)(void *)&copy)[0] &= ~(3UL << 31);
        set = &copy;
    }
    if (syscall(SYS_rt_sigprocmask, how, set, old, (size_t)VAKA_KERNEL_SIGSET_BYTES) != 0) return errno;
    return 0;
}

/* `set` without the protected signals, in `copy`, when SIG_BLOCK/SIG_SETMASK would block one of them. Works on
 * the first word of the set directly (Linux: signal `sig` is bit `sig - 1`; the classic signals all lie in it),
 * so a call costs a load and a mask test when nothing needs changing. */
static const sigset_t *filtered(int how, const sigset_t *set, sigset_t *copy)
{
    unsigned long protect = (unsigned long)atomic_load_explicit(&vaka_sig_protected_mask, memory_order_relaxed) >> 1;
    if (protect == 0 || set == NULL || (how != SIG_BLOCK && how != SIG_SETMASK)) return set;
    if ((((const unsigned long *)(const void *)set)[0] & protect) == 0) return set;
    vaka_sig_copy(copy, set, sizeof *copy);
    ((unsigned long *)(void *)copy)[0] &= ~protect;
    return copy;
}

extern int __interceptor_pthread_sigmask(int, const sigset_t *, sigset_t *) __attribute__((weak));
extern int __interceptor_sigprocmask(int, const sigset_t *, sigset_t *) __attribute__((weak));
extern int __pthread_sigmask(int, const sigset_t *, sigset_t *) __attribute__((weak));
extern int __sigprocmask(int, const sigset_t *, sigset_t *) __attribute__((weak));

int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    set = filtered(how, set, &copy);
    if (__interceptor_pthread_sigmask != NULL) return __interceptor_pthread_sigmask(how, set, old);
    vaka_sigmask_fn real = atomic_load_explicit(&vaka_real_pthread_sigmask, memory_order_relaxed);
    if (real != NULL) return real(how, set, old);
    if (__pthread_sigmask != NULL) return __pthread_sigmask(how, set, old);
    return raw_sigmask(how, set, old);
}

int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    set = filtered(how, set, &copy);
    if (__interceptor_sigprocmask != NULL) return __interceptor_sigprocmask(how, set, old);
    vaka_sigmask_fn real = atomic_load_explicit(&vaka_real_sigprocmask, memory_order_relaxed);
    if (real != NULL) return real(how, set, old);
    if (__sigprocmask != NULL) return __sigprocmask(how, set, old);
    int rc = raw_sigmask(how, set, old);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

void vaka_rt_unblock_crash_signals(void)
{
    unsigned protect = atomic_load(&vaka_sig_protected_mask);
    if (protect == 0) return;
    sigset_t set;
    sigemptyset(&set);
    for (int sig = 1; sig < VAKA_NSIG; sig++)
        if (protect & (1u << sig)) sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}
