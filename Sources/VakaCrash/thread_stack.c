/*
 * Install time: per-thread alternate signal stacks, so that a stack overflow can still be reported.
 * vaka_crash_thread_attach() maps `size` bytes plus a PROT_NONE guard page below them and installs them
 * with sigaltstack, unless the thread already has an alternate stack (that one is left alone). A
 * pthread key destructor disables and unmaps the stack when the thread exits. While installed, attach also
 * unblocks the synchronous crash signals in the calling thread (sig_mask.c). Threads created after install
 * get both automatically through the pthread_create interposer at the end of this file. The SDK's own threads are
 * created by vaka_crash_create_own_thread (last in this file): marked as Vaka's (threads.c) from the moment they
 * exist until they end.
 */
#include "vaka_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 28)
#include <threads.h>
#endif

typedef struct alt_stack {
    void *mapping;     /* guard page + stack */
    size_t mapping_size;
    void *sp;          /* ss_sp given to sigaltstack */
    size_t size;       /* ss_size, bytes */
} alt_stack;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static int key_error;
static atomic_size_t requested_size;

static void release(alt_stack *s)
{
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == s->sp && !(cur.ss_flags & SS_ONSTACK)) {
        stack_t off = { .ss_sp = NULL, .ss_flags = SS_DISABLE, .ss_size = 0 };
        sigaltstack(&off, NULL);
    }
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == s->sp && !(cur.ss_flags & SS_DISABLE))
        return; /* still in use (we are running on it): leak rather than unmap a live stack */
    munmap(s->mapping, s->mapping_size);
    free(s);
}

static void destructor(void *value)
{
    if (value != NULL) release(value);
}

static void make_key(void)
{
    key_error = pthread_key_create(&key, destructor);
}

void vaka_thread_stack_set_size(size_t bytes)
{
    atomic_store(&requested_size, bytes);
}

size_t vaka_thread_stack_size(size_t requested, size_t page)
{
    size_t size = requested != 0 ? requested : VAKA_DEFAULT_ALT_STACK_SIZE;
    size_t min = (size_t)MINSIGSTKSZ;
#ifdef _SC_MINSIGSTKSZ
    long dyn = sysconf(_SC_MINSIGSTKSZ);
    if (dyn > 0 && (size_t)dyn > min) min = (size_t)dyn;
#endif
    if (size < min) size = min;
    if (size > ((size_t)1 << 30)) size = (size_t)1 << 30; /* absurd request: 1 GiB of address space at most */
    return (size + page - 1) & ~(page - 1);
}

static size_t stack_size(size_t page) { return vaka_thread_stack_size(atomic_load(&requested_size), page); }

int vaka_crash_thread_attach(void)
{
    /* First the mask: a thread that existed before install may run under a mask inherited with the crash
     * signals blocked (over exec, or from its creator), where a fault kills the process without a handler.
     * Only this thread can change its own mask, so attach does it (a no-op while not installed). */
    vaka_rt_unblock_crash_signals();
    stack_t cur;
    if (sigaltstack(NULL, &cur) != 0) return errno;
    if (!(cur.ss_flags & SS_DISABLE)) return 0; /* the thread has one already: leave it alone */
    pthread_once(&key_once, make_key);
    if (key_error != 0) return key_error;

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = stack_size(page);
    alt_stack *s = malloc(sizeof *s);
    if (s == NULL) return ENOMEM;
    s->mapping_size = size + page;
    s->mapping = mmap(NULL, s->mapping_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    if (s->mapping == MAP_FAILED) {
        int e = errno;
        free(s);
        return e;
    }
    /* The guard page sits below the stack (stacks grow down): overflowing the alternate stack faults
     * instead of silently writing into whatever is mapped there. */
    if (mprotect(s->mapping, page, PROT_NONE) != 0) {
        int e = errno;
        munmap(s->mapping, s->mapping_size);
        free(s);
        return e;
    }
    s->sp = (char *)s->mapping + page;
    s->size = size;
    stack_t ss = { .ss_sp = s->sp, .ss_flags = 0, .ss_size = size };
    if (sigaltstack(&ss, NULL) != 0) {
        int e = errno;
        munmap(s->mapping, s->mapping_size);
        free(s);
        return e;
    }
    int rc = pthread_setspecific(key, s);
    if (rc != 0) {
        stack_t off = { .ss_sp = NULL, .ss_flags = SS_DISABLE, .ss_size = 0 };
        sigaltstack(&off, NULL);
        munmap(s->mapping, s->mapping_size);
        free(s);
        return rc;
    }
    return 0;
}

int vaka_thread_stack_is_ours(void)
{
    pthread_once(&key_once, make_key);
    if (key_error != 0) return 0;
    alt_stack *s = pthread_getspecific(key);
    if (s == NULL) return 0;
    stack_t cur;
    return sigaltstack(NULL, &cur) == 0 && cur.ss_sp == s->sp && !(cur.ss_flags & SS_DISABLE);
}

void vaka_thread_stack_detach(void)
{
    pthread_once(&key_once, make_key);
    if (key_error != 0) return;
    alt_stack *s = pthread_getspecific(key);
    if (s == NULL) return;
    pthread_setspecific(key, NULL);
    release(s);
}

/* ------------------------------------------------------------------ threads created after install */

/*
 * pthread_create is interposed: the crash runtime is linked into the executable, whose definition of
 * pthread_create comes first in the dynamic linker's search order, so every thread any library creates
 * (Foundation, Dispatch, the Swift concurrency pool, the app) starts here. While the runtime is installed,
 * the new thread first gets its alternate stack and its crash signals unblocked (vaka_crash_thread_attach)
 * and then runs the caller's start routine; otherwise the call goes straight on. See docs/crash-handling.md
 * ("Sanitizers and static programs") for the trade-off.
 *
 * "Straight on" is the next pthread_create in this order (the first one found is used):
 *   1. a sanitizer's interceptor, __interceptor_pthread_create (every clang and GCC sanitizer runtime that
 *      intercepts pthread_create defines it: ASan, TSan, MSan, LSan, HWASan, memprof...). A static sanitizer runtime (`swiftc -sanitize=address|thread`, clang
 *      -fsanitize=..., gcc -static-libasan/-static-libtsan) sits in the executable next to this file and
 *      defines pthread_create as a weak alias of its interceptor, which our strong definition replaces; the
 *      interceptor must still run, or the sanitizer never registers the thread (ASan aborts in pthread_join,
 *      TSan crashes in the new thread). With a shared sanitizer runtime this is the same function RTLD_NEXT
 *      would find.
 *   2. glibc's own entry in a fully static program (`cc -static`, `swiftc -static-executable`), where there is
 *      no dynamic linker and dlsym(RTLD_NEXT) finds nothing: __pthread_create_2_1, the function glibc's
 *      pthread_create is an alias of (libc.a, pthread_create.o). A weak reference alone does not make the
 *      static linker take pthread_create.o out of libc.a, so this file also refers to thrd_create (public in
 *      glibc >= 2.28, not referred to with an older one; its object calls __pthread_create), which does. In a dynamic program both weak
 *      references stay NULL (libc.so does not export them).
 *   3. dlsym(RTLD_NEXT, "pthread_create"): the C library's (or a preloaded library's) definition.
 * Weak references are resolved by the static or dynamic linker before any code runs, so steps 1 and 2 cost
 * nothing and need no dl* call.
 */
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

extern int __interceptor_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)
    __attribute__((weak));
extern int __pthread_create_2_1(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)
    __attribute__((weak));

/* The strong reference that makes a static link take glibc's pthread_create.o (see step 2 above). Only with a
 * glibc that has thrd_create (2.28+), so that linking against an older one still works. */
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 28)
__attribute__((used)) static int (*volatile const static_link_anchor)(thrd_t *, thrd_start_t, void *) = thrd_create;
#endif

static _Atomic(pthread_create_fn) real_pthread_create_ptr;
static atomic_int said_no_pthread_create;

typedef struct thread_start {
    void *(*start)(void *);
    void *arg;
} thread_start;

/* What the creator of one of Vaka's own threads and the thread share (vaka_crash_create_own_thread); freed by the
 * last of the two to be done with it. */
typedef struct own_start {
    void *(*start)(void *);
    void *arg;
    char name[VAKA_REPORT_THREAD_NAME_MAX + 1];
    atomic_int marked; /* 0: the creator is at it; 1: it marked the thread by its id; 2: it could not learn the id */
    atomic_int users; /* the creator and the thread, until each is done with this */
} own_start;

static void release_own_start(own_start *s)
{
    if (atomic_fetch_sub(&s->users, 1) == 1) free(s);
}

static pthread_create_fn real_pthread_create(void)
{
    pthread_create_fn fn = atomic_load(&real_pthread_create_ptr);
    if (fn != NULL) return fn;
    if (__interceptor_pthread_create != NULL) fn = __interceptor_pthread_create;
    else if (__pthread_create_2_1 != NULL) fn = __pthread_create_2_1;
    else {
        fn = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
        if (fn == pthread_create) fn = NULL; /* never ourselves */
    }
    if (fn != NULL) atomic_store(&real_pthread_create_ptr, fn);
    return fn;
}

void vaka_thread_stack_prepare(void)
{
    if (real_pthread_create() == NULL && !atomic_exchange(&said_no_pthread_create, 1)) {
        static const char line[] = "vaka: the C library's pthread_create was not found (neither a sanitizer's, "
                                   "glibc's static entry nor dlsym(RTLD_NEXT)): pthread_create fails with EAGAIN "
                                   "in this program\n";
        ssize_t ignored = write(2, line, sizeof line - 1);
        (void)ignored;
    }
    pthread_once(&key_once, make_key);
}

static void *thread_trampoline(void *data)
{
    thread_start start = *(thread_start *)data;
    free(data);
    /* Alternate stack (best effort: without it the thread still runs, just uncovered for stack overflows) and
     * the crash signals unblocked: the creator's mask is inherited, maybe with them blocked (sig_mask.c). */
    (void)vaka_crash_thread_attach();
    return start.start(start.arg);
}

static void *own_thread_trampoline(void *data)
{
    own_start *s = data;
    /* Its creator marks it as soon as pthread_create has returned: wait for that (microseconds, and only when this
     * thread runs first), so that no mark of the creator's comes after this thread's own (a rename) or after its
     * unmark (the entry would outlive the thread, and its id, given to a program thread, be taken for Vaka's). */
    int marked;
    while ((marked = atomic_load(&s->marked)) == 0)
        syscall(SYS_futex, &s->marked, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    if (marked == 2) vaka_crash_mark_own_thread(s->name); /* the creator could not: by itself, now */
    void *(*start)(void *) = s->start;
    void *arg = s->arg;
    release_own_start(s);
    if (vaka_crash_is_installed()) (void)vaka_crash_thread_attach();
    void *result = start(arg);
    vaka_crash_unmark_own_thread();
    return result;
}

/* The kernel thread id of `thread` (0: not known), from its CPU-time clock: the kernel's encoding of a thread's
 * clock id (CPUCLOCK_PID in include/linux/posix-timers.h: ~tid << 3, CPUCLOCK_PERTHREAD_MASK 4, CPUCLOCK_SCHED 2),
 * which glibc and musl compute from the id the kernel wrote into the thread's descriptor before clone returned
 * (CLONE_PARENT_SETTID). */
pid_t vaka_rt_thread_id_of(pthread_t thread)
{
    clockid_t clock;
    if (pthread_getcpuclockid(thread, &clock) != 0 || (clock & 7) != 6) return 0;
    pid_t tid = (pid_t)~(clock >> 3);
    return tid > 0 ? tid : 0;
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    pthread_create_fn real = real_pthread_create();
    if (real == NULL) return EAGAIN; /* no pthread_create anywhere: said once on stderr at install */
    if (!vaka_crash_is_installed()) return real(thread, attr, start, arg);
    thread_start *data = malloc(sizeof *data);
    if (data == NULL) return real(thread, attr, start, arg); /* uncovered, but never fail the app */
    data->start = start;
    data->arg = arg;
    int rc = real(thread, attr, thread_trampoline, data);
    if (rc != 0) free(data);
    return rc;
}

int vaka_crash_create_own_thread(pthread_t *thread, const char *name, void *(*start)(void *), void *arg)
{
    pthread_create_fn real = real_pthread_create();
    if (real == NULL) return EAGAIN;
    own_start *data = malloc(sizeof *data);
    if (data == NULL) return EAGAIN;
    data->start = start;
    data->arg = arg;
    vaka_rt_copy_thread_name(data->name, name);
    atomic_init(&data->marked, 0);
    atomic_init(&data->users, 2);
    /* Born SCHED_BATCH (the policy a new thread inherits from its creator: the creator's is SCHED_BATCH for the
     * time of the clone, then its own again; switching between the two needs no privilege). A SCHED_BATCH thread
     * never preempts the thread running where it wakes up: the kernel often queues a new thread on its creator's
     * CPU, and this one, woken there (by the clone, or by the mark below), took that CPU from Vaka.start's caller
     * for its whole start work, 1-3 ms, in about one start in nine (docs/cost.md). Only from the default policy:
     * a real-time, SCHED_IDLE or already SCHED_BATCH creator's is inherited as it is. */
    int batch = sched_getscheduler(0) == SCHED_OTHER;
    struct sched_param zero = { 0 };
    if (batch && sched_setscheduler(0, SCHED_BATCH, &zero) != 0) batch = 0;
    int rc = real(thread, NULL, own_thread_trampoline, data);
    if (batch) (void)sched_setscheduler(0, SCHED_OTHER, &zero);
    if (rc != 0) {
        free(data);
        return rc;
    }
    /* Marked now, by its id: a crash before the new thread first runs (usual right after Vaka.start, which
     * creates one) lists it as Vaka's rather than reading /proc for a thread that blocks every signal. */
    pid_t tid = vaka_rt_thread_id_of(*thread);
    if (tid > 0) vaka_rt_mark_own_thread_id(tid, name);
    atomic_store(&data->marked, tid > 0 ? 1 : 2);
    syscall(SYS_futex, &data->marked, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    release_own_start(data);
    return 0;
}
