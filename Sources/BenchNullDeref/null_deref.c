/* See include/bench_null_deref.h. Compiled with -O0 (Package.swift) so that the read stays. */
#include "bench_null_deref.h"

#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int bench_null_deref(void) {
    volatile int *p = 0;
    return *p;
}

void bench_settle(void) {
    struct timespec wait = { 0, BENCH_SETTLE_MS * 1000000L };
    while (nanosleep(&wait, &wait) != 0) {}
}

void bench_report_memory(void) {
    const char *path = getenv("BENCH_START_MEMORY");
    if (path == 0 || *path == 0) return;
    char buffer[4096];
    int in = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
    if (in < 0) return;
    ssize_t n = read(in, buffer, sizeof buffer);
    close(in);
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) return;
    if (n > 0) (void)!write(out, buffer, (size_t)n);
    close(out);
}
