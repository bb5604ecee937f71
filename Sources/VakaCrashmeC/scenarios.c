/*
 * vaka-crashme C scenarios (see include/vaka_crashme.h for what each one must produce).
 * Compiled with -O0 -fno-omit-frame-pointer (Package.swift); every function is also marked noinline.
 */
#include "vaka_crashme.h"

#include <errno.h>
#include <pthread.h>
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
