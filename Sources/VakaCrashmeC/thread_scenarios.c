/*
 * vaka-crashme C scenarios about every thread of the process (see include/vaka_crashme.h): threads parked in
 * known functions before the main thread crashes (`all-threads`), and a thread created before Vaka.start that
 * overflows its stack (`stack-overflow-early-thread`). Compiled like scenarios.c (-O0, frame pointers, noinline).
 */
#include "vaka_crashme.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CRASHME __attribute__((noinline, used))

static atomic_int parked;
static int park_pipe[2] = { -1, -1 };
static pthread_mutex_t contended = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never_signalled = PTHREAD_COND_INITIALIZER;
static atomic_int spin_forever = 1;

void crashme_name_thread(const char *name)
{
    pthread_setname_np(pthread_self(), name);
}

static void name_self(const char *name)
{
    crashme_name_thread(name);
}

CRASHME void *crashme_all_threads_read(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_READ);
    atomic_fetch_add(&parked, 1);
    char byte;
    for (;;) {
        ssize_t n = read(park_pipe[0], &byte, 1); /* nobody writes: blocked in read() */
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    return NULL;
}

CRASHME void *crashme_all_threads_mutex(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_MUTEX);
    atomic_fetch_add(&parked, 1);
    pthread_mutex_lock(&contended); /* the main thread holds it: waits forever */
    pthread_mutex_unlock(&contended);
    return NULL;
}

CRASHME void *crashme_all_threads_spin(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_SPIN);
    atomic_fetch_add(&parked, 1);
    volatile uint64_t n = 0;
    while (atomic_load_explicit(&spin_forever, memory_order_relaxed)) n++;
    return NULL;
}

CRASHME void *crashme_all_threads_sleep(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_SLEEP);
    atomic_fetch_add(&parked, 1);
    for (;;) {
        struct timespec ts = { 3600, 0 };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

CRASHME void *crashme_all_threads_cond(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_COND);
    pthread_mutex_lock(&cond_lock);
    atomic_fetch_add(&parked, 1);
    for (;;) pthread_cond_wait(&never_signalled, &cond_lock);
    return NULL;
}

CRASHME void *crashme_all_threads_blocked(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_BLOCKED);
    sigset_t all;
    sigfillset(&all);
    /* Every signal the C library lets a program block (the crash runtime keeps the synchronous crash signals
     * unblocked): also the one the crash runtime asks threads to unwind themselves with. */
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    atomic_fetch_add(&parked, 1);
    for (;;) {
        struct timespec ts = { 3600, 0 };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* A program thread whose name starts like Vaka's own threads' (`vaka.`): it is not one of them, so the crash-time
 * round asks it like any other. */
CRASHME void *crashme_all_threads_impostor(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_IMPOSTOR);
    atomic_fetch_add(&parked, 1);
    for (;;) {
        struct timespec ts = { 3600, 0 };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int crashme_all_threads_park(void)
{
    if (pipe(park_pipe) != 0) return errno;
    void *(*bodies[])(void *) = { crashme_all_threads_read, crashme_all_threads_mutex, crashme_all_threads_spin,
                                  crashme_all_threads_sleep, crashme_all_threads_cond, crashme_all_threads_blocked,
                                  crashme_all_threads_impostor };
    int count = (int)(sizeof bodies / sizeof bodies[0]);
    pthread_mutex_lock(&contended);
    for (int i = 0; i < count; i++) {
        pthread_t thread;
        int rc = pthread_create(&thread, NULL, bodies[i], NULL);
        if (rc != 0) return rc;
        pthread_detach(thread);
    }
    /* Each counts itself just before it parks; give the last ones a moment to get there. */
    for (int k = 0; k < 5000 && atomic_load(&parked) < count; k++) usleep(1000);
    if (atomic_load(&parked) < count) return ETIMEDOUT;
    usleep(50000);
    return 0;
}

CRASHME int crashme_all_threads(void)
{
    volatile int *p = NULL;
    return *p;
}

/* ------------------------------------------------------------------ stack-overflow-early-thread */

static int early_pipe[2] = { -1, -1 };
static pthread_t early_thread;
static int early_started;

CRASHME static int crashme_stack_overflow_early_thread_recurse(unsigned long depth)
{
    volatile char pad[256];
    pad[0] = (char)depth;
    int below = crashme_stack_overflow_early_thread_recurse(depth + 1);
    return below + pad[0];
}

CRASHME static void *crashme_stack_overflow_early_thread_body(void *unused)
{
    (void)unused;
    name_self(VAKA_CRASHME_THREAD_EARLY);
    char byte;
    for (;;) {
        ssize_t n = read(early_pipe[0], &byte, 1); /* until the scenario runs (after Vaka.start) */
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    return (void *)(intptr_t)crashme_stack_overflow_early_thread_recurse(0);
}

int crashme_early_thread_create(void)
{
    if (pipe(early_pipe) != 0) return errno;
    int rc = pthread_create(&early_thread, NULL, crashme_stack_overflow_early_thread_body, NULL);
    if (rc != 0) return rc;
    early_started = 1;
    return 0;
}

CRASHME int crashme_stack_overflow_early_thread(void)
{
    if (!early_started) return EINVAL;
    char go = 1;
    if (write(early_pipe[1], &go, 1) != 1) return errno;
    pthread_join(early_thread, NULL);
    return 0;
}

/* ------------------------------------------------------------------ --threads N (scripts/bench) */

CRASHME static void *crashme_parked_sleeper(void *unused)
{
    (void)unused;
    atomic_fetch_add(&parked, 1);
    for (;;) {
        struct timespec ts = { 3600, 0 };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int crashme_park_sleepers(int count)
{
    int before = atomic_load(&parked);
    for (int i = 0; i < count; i++) {
        pthread_t thread;
        int rc = pthread_create(&thread, NULL, crashme_parked_sleeper, NULL);
        if (rc != 0) return rc;
        pthread_detach(thread);
    }
    for (int k = 0; k < 5000 && atomic_load(&parked) - before < count; k++) usleep(1000);
    return atomic_load(&parked) - before < count ? ETIMEDOUT : 0;
}
