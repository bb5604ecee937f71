/* See include/bench_null_deref.h. Compiled with -O0 (Package.swift) so that the read stays. */
#include "bench_null_deref.h"

__attribute__((noinline)) int bench_null_deref(void) {
    volatile int *p = 0;
    return *p;
}
