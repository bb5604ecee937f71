/*
 * Install time: per-thread alternate signal stacks, so that a stack overflow can still be reported.
 * vaka_crash_thread_attach() maps `size` bytes plus a PROT_NONE guard page below them and installs them
 * with sigaltstack, unless the thread already has an alternate stack (that one is left alone). A
 * pthread key destructor disables and unmaps the stack when the thread exits. Threads created after
 * install get theirs automatically through the pthread_create interposer at the end of this file.
 */
#include "vaka_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

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

static size_t stack_size(size_t page)
{
    size_t size = atomic_load(&requested_size);
    if (size == 0) size = VAKA_DEFAULT_ALT_STACK_SIZE;
    size_t min = (size_t)MINSIGSTKSZ;
#ifdef _SC_MINSIGSTKSZ
    long dyn = sysconf(_SC_MINSIGSTKSZ);
    if (dyn > 0 && (size_t)dyn > min) min = (size_t)dyn;
#endif
    if (size < min) size = min;
    if (size > SIZE_MAX / 2) return 0; /* absurd request: mmap would fail anyway */
    return (size + page - 1) & ~(page - 1);
}

int vaka_crash_thread_attach(void)
{
    stack_t cur;
    if (sigaltstack(NULL, &cur) != 0) return errno;
    if (!(cur.ss_flags & SS_DISABLE)) return 0; /* the thread has one already: leave it alone */
    pthread_once(&key_once, make_key);
    if (key_error != 0) return key_error;

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = stack_size(page);
    if (size == 0) return ENOMEM;
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
 * the new thread first gets its alternate stack (vaka_crash_thread_attach) and then runs the caller's start
 * routine; otherwise the call goes straight to the C library. See docs/crash-handling.md for the trade-off.
 */
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static _Atomic(pthread_create_fn) real_pthread_create_ptr;

typedef struct thread_start {
    void *(*start)(void *);
    void *arg;
} thread_start;

static pthread_create_fn real_pthread_create(void)
{
    pthread_create_fn fn = atomic_load(&real_pthread_create_ptr);
    if (fn == NULL) {
        fn = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
        if (fn != NULL) atomic_store(&real_pthread_create_ptr, fn);
    }
    return fn;
}

void vaka_thread_stack_prepare(void)
{
    (void)real_pthread_create();
    pthread_once(&key_once, make_key);
}

static void *thread_trampoline(void *data)
{
    thread_start start = *(thread_start *)data;
    free(data);
    (void)vaka_crash_thread_attach(); /* best effort: without it the thread still runs, just uncovered */
    vaka_sig_unblock_crash_signals(); /* the creator's mask is inherited, maybe with them blocked (sig_mask.c) */
    return start.start(start.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    pthread_create_fn real = real_pthread_create();
    if (real == NULL) return EAGAIN; /* no C library definition: cannot happen with glibc */
    if (!vaka_crash_is_installed()) return real(thread, attr, start, arg);
    thread_start *data = malloc(sizeof *data);
    if (data == NULL) return real(thread, attr, start, arg); /* uncovered, but never fail the app */
    data->start = start;
    data->arg = arg;
    int rc = real(thread, attr, thread_trampoline, data);
    if (rc != 0) free(data);
    return rc;
}
