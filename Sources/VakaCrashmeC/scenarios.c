/*
 * vaka-crashme C scenarios (see include/vaka_crashme.h for what each one must produce).
 * Compiled with -O0 -fno-omit-frame-pointer (Package.swift); every function is also marked noinline.
 */
#include "vaka_crashme.h"

#undef NDEBUG /* c-assert needs assert() also in release builds */
#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

/* From include/vaka/vaka_crash.h (the harness executable links the crash runtime; this target does not
 * depend on it so that it stays a plain C library). */
void vaka_crash_test_fault_in_handler(int stage);
int vaka_crash_finish_install(void);
int vaka_crash_is_installed(void);

#define CRASHME __attribute__((noinline, used))

CRASHME int crashme_null_deref(void) {
    volatile int *volatile pointer = NULL;
    return *pointer;
}

CRASHME int crashme_wild_write(void) {
    volatile int *volatile pointer = (volatile int *)VAKA_CRASHME_WILD_ADDRESS;
    *pointer = 42;
    return 0;
}

CRASHME int crashme_abort(void) {
    abort();
}

CRASHME int crashme_divide_by_zero(void) {
    volatile int numerator = 42;
    volatile int denominator = 0;
    return numerator / denominator;
}

CRASHME int crashme_illegal_instruction(void) {
#if defined(__x86_64__)
    __asm__ volatile("ud2");
#elif defined(__aarch64__)
    __asm__ volatile("udf #0");
#else
    __builtin_trap();
#endif
    return 0;
}

CRASHME int crashme_breakpoint(void) {
    /* A handler that returns from SIGTRAP resumes AFTER int3 (Swift's backtracer does exactly that: it
     * prints its backtrace, resets SIGTRAP to SIG_DFL and returns). Trap again until the default action
     * ends the process, as it would in a program without handlers. */
    for (;;) {
#if defined(__x86_64__)
        __asm__ volatile("int3");
#elif defined(__aarch64__)
        __asm__ volatile("brk #0");
#else
        __builtin_debugtrap();
#endif
    }
    return 0;
}

CRASHME int crashme_bus_error(const char *dir) {
    char path[4096];
    if (dir == NULL || snprintf(path, sizeof path, "%s/crashme-bus-XXXXXX", dir) >= (int)sizeof path) {
        return ENAMETOOLONG;
    }
    int fd = mkstemp(path);
    if (fd < 0) return errno;
    unlink(path); /* the mapping keeps the file alive; nothing is left behind */
    long page = sysconf(_SC_PAGESIZE);
    if (ftruncate(fd, 2 * page) != 0) { int e = errno; close(fd); return e; }
    void *mapping = mmap(NULL, (size_t)(2 * page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapping == MAP_FAILED) { int e = errno; close(fd); return e; }
    /* Shrink the file: the second page of the mapping now lies past its end. */
    if (ftruncate(fd, page) != 0) { int e = errno; close(fd); return e; }
    close(fd);
    volatile char *bytes = (volatile char *)mapping;
    bytes[page] = 1; /* SIGBUS, BUS_ADRERR */
    return 0;
}

#if defined(__x86_64__)
#define CRASHME_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define CRASHME_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

CRASHME int crashme_bad_syscall(void) {
#ifdef CRASHME_AUDIT_ARCH
    /* Trap getppid(VAKA_CRASHME_SECCOMP_MAGIC, ...) only; allow everything else. On a foreign
     * architecture (arch field mismatch) allow too: this filter must never break anything else. */
    struct sock_filter program[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CRASHME_AUDIT_ARCH, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 3),
        /* Low 32 bits of args[0] (little-endian). */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, VAKA_CRASHME_SECCOMP_MAGIC, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog filter = { .len = (unsigned short)(sizeof program / sizeof program[0]), .filter = program };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter, 0, 0) != 0) return errno;
    /* SIGSYS, SYS_SECCOMP. A trapped syscall is skipped, and a handler that returns resumes after it:
     * call again until the default action (SIGSYS is not handled by the Swift runtime) ends the process. */
    for (;;) {
        syscall(SYS_getppid, (long)VAKA_CRASHME_SECCOMP_MAGIC);
    }
    return 0;
#else
    return ENOSYS;
#endif
}

CRASHME void *crashme_background_thread_fault(void *unused) {
    (void)unused;
    pthread_setname_np(pthread_self(), VAKA_CRASHME_THREAD_NAME);
    volatile int *volatile pointer = NULL;
    int value = *pointer; /* SIGSEGV on this thread */
    return (void *)(intptr_t)value;
}

CRASHME int crashme_background_thread(void) {
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, crashme_background_thread_fault, NULL);
    if (rc != 0) return rc;
    pthread_join(thread, NULL);
    return 0;
}

CRASHME int crashme_stack_overflow(unsigned long depth) {
    volatile char frame[512];
    frame[0] = (char)depth;
    frame[sizeof frame - 1] = (char)(depth >> 8);
    /* Not a tail call: the result is used after the recursive call returns. */
    int below = crashme_stack_overflow(depth + 1);
    return below + frame[0] + frame[sizeof frame - 1];
}

/* ------------------------------------------------------------------ hardening scenarios */

CRASHME int crashme_write_readonly(void) {
    long page = sysconf(_SC_PAGESIZE);
    void *mapping = mmap(NULL, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) return errno;
    volatile int *pointer = (volatile int *)mapping;
    *pointer = 42; /* SIGSEGV, SEGV_ACCERR */
    return 0;
}

CRASHME int crashme_c_assert(int value) {
    assert(value == 42 && "crashme: the answer must be 42");
    return 0;
}

/* The plugin's entry point, looked up with dlsym after dlopen. */
typedef int (*crashme_plugin_fn)(void);

CRASHME int crashme_dlopen_plugin(const char *path) {
    if (path == NULL) return ENOENT;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        fprintf(stderr, "vaka-crashme: dlopen %s: %s\n", path, dlerror());
        return ENOENT;
    }
    crashme_plugin_fn crash = (crashme_plugin_fn)dlsym(handle, VAKA_CRASHME_PLUGIN_SYMBOL);
    if (crash == NULL) return ENOSYS;
    return crash();
}

/* Same recursion as crashme_stack_overflow, under this scenario's name (so the newest frames carry it). */
CRASHME static int crashme_stack_overflow_thread_recurse(unsigned long depth) {
    volatile char frame[512];
    frame[0] = (char)depth;
    frame[sizeof frame - 1] = (char)(depth >> 8);
    int below = crashme_stack_overflow_thread_recurse(depth + 1);
    return below + frame[0] + frame[sizeof frame - 1];
}

CRASHME static void *crashme_stack_overflow_thread_body(void *unused) {
    (void)unused;
    pthread_setname_np(pthread_self(), VAKA_CRASHME_OVERFLOW_THREAD_NAME);
    return (void *)(intptr_t)crashme_stack_overflow_thread_recurse(0);
}

CRASHME int crashme_stack_overflow_thread(void) {
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, crashme_stack_overflow_thread_body, NULL);
    if (rc != 0) return rc;
    pthread_join(thread, NULL);
    return 0;
}

/* concurrent: every worker waits at a barrier, then all read through NULL at once. */
static pthread_barrier_t concurrent_barrier;

CRASHME static void *crashme_concurrent_worker(void *index) {
    char name[16];
    snprintf(name, sizeof name, "crashme-cc-%d", (int)(intptr_t)index);
    pthread_setname_np(pthread_self(), name);
    pthread_barrier_wait(&concurrent_barrier);
    volatile int *volatile pointer = NULL;
    return (void *)(intptr_t)*pointer;
}

CRASHME int crashme_concurrent(void) {
    pthread_t threads[VAKA_CRASHME_CONCURRENT_THREADS];
    int rc = pthread_barrier_init(&concurrent_barrier, NULL, VAKA_CRASHME_CONCURRENT_THREADS);
    if (rc != 0) return rc;
    for (int i = 0; i < VAKA_CRASHME_CONCURRENT_THREADS; i++) {
        rc = pthread_create(&threads[i], NULL, crashme_concurrent_worker, (void *)(intptr_t)i);
        if (rc != 0) return rc; /* the barrier never opens; the caller reports the error and exits */
    }
    for (int i = 0; i < VAKA_CRASHME_CONCURRENT_THREADS; i++) pthread_join(threads[i], NULL);
    return 0;
}

CRASHME int crashme_heap_corruption(void) {
    /* A tcache-sized block freed twice: glibc detects it inside free() and aborts with
     * "free(): double free detected in tcache 2". */
    char *volatile block = malloc(48);
    if (block == NULL) return ENOMEM;
    block[0] = 1;
    free(block);
    free(block);
    return 0;
}

CRASHME int crashme_corrupt_frame_pointer(void) {
#if defined(__x86_64__)
    /* Overwrite the frame pointer with garbage, then fault. At -O0 this function's CFI computes the CFA
     * from rbp, so CFI unwinding (and a frame-pointer walk) cannot get past the crash site. */
    __asm__ volatile(
        "movabs $0x4141414141414140, %%rbp\n\t"
        "xor %%eax, %%eax\n\t"
        "movl (%%rax), %%eax\n\t"
        : : : "rax", "memory");
    return 0;
#else
    return ENOSYS;
#endif
}

CRASHME int crashme_crash_in_handler(void) {
    /* The next capture faults on purpose while unwinding (stage 2 of the test hook). */
    vaka_crash_test_fault_in_handler(2);
    volatile int *volatile pointer = NULL;
    return *pointer;
}

void crashme_arm_fault_in_handler(int stage) {
    vaka_crash_test_fault_in_handler(stage);
}

void crashme_finish_crash_preparation(void) {
    (void)vaka_crash_finish_install();
}

int crashme_crash_handlers_installed(void) {
    return vaka_crash_is_installed();
}

CRASHME int crashme_locks_held(void) {
    /* Hold stdout's FILE lock and an application mutex, then fault while holding both: a handler that
     * used stdio or that lock would deadlock here. */
    static pthread_mutex_t app_lock = PTHREAD_MUTEX_INITIALIZER;
    flockfile(stdout);
    flockfile(stderr);
    pthread_mutex_lock(&app_lock);
    volatile int *volatile pointer = NULL;
    return *pointer;
}

#ifdef CRASHME_AUDIT_ARCH
CRASHME int crashme_deny_process_vm_readv(void) {
    /* process_vm_readv and process_vm_writev fail with EPERM (as under some container policies). */
    struct sock_filter program[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CRASHME_AUDIT_ARCH, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog filter = { .len = (unsigned short)(sizeof program / sizeof program[0]), .filter = program };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter, 0, 0) != 0) return errno;
    return 0;
}
#else
CRASHME int crashme_deny_process_vm_readv(void) { return ENOSYS; }
#endif

/* ---------------------------------------------------------------- blocked-signal scenarios */

CRASHME void *crashme_blocked_signals_thread_fault(void *unused) {
    (void)unused;
    pthread_setname_np(pthread_self(), VAKA_CRASHME_BLOCKED_THREAD_NAME);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    volatile int *volatile pointer = NULL;
    return (void *)(intptr_t)*pointer;
}

CRASHME int crashme_blocked_signals_thread(void) {
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, crashme_blocked_signals_thread_fault, NULL);
    if (rc != 0) return rc;
    pthread_join(thread, NULL);
    return 0;
}

int crashme_block_signals(const char *how) {
    sigset_t all;
    sigfillset(&all);
    if (strcmp(how, "pthread_sigmask-block") == 0) return pthread_sigmask(SIG_BLOCK, &all, NULL);
    if (strcmp(how, "pthread_sigmask-setmask") == 0) return pthread_sigmask(SIG_SETMASK, &all, NULL);
    if (strcmp(how, "sigprocmask-block") == 0) return sigprocmask(SIG_BLOCK, &all, NULL) == 0 ? 0 : errno;
    if (strcmp(how, "sigprocmask-setmask") == 0) return sigprocmask(SIG_SETMASK, &all, NULL) == 0 ? 0 : errno;
    if (strcmp(how, "raw-syscall") == 0) {
        uint64_t kernel_set = ~(uint64_t)0;
        return syscall(SYS_rt_sigprocmask, SIG_SETMASK, &kernel_set, NULL, sizeof kernel_set) == 0 ? 0 : errno;
    }
    return EINVAL;
}
