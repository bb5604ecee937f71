/* scripts/bench's crash: the same NULL read as vaka-crashme's null-deref, for the bench-start-* programs
 * (a plain C library, so that the program without Vaka links nothing more). */
#ifndef BENCH_NULL_DEREF_H
#define BENCH_NULL_DEREF_H

/* Reads through a NULL pointer: SIGSEGV (SEGV_MAPERR, fault address 0). Does not return. */
int bench_null_deref(void);

/* Sleeps BENCH_SETTLE_MS (20 ms): a program that has run a while before it crashes (with Vaka, start's background
 * part done meanwhile, on its own thread), for scripts/bench's settled crash rows. */
#define BENCH_SETTLE_MS 20
void bench_settle(void);

/* When $BENCH_START_MEMORY names a file, copies /proc/self/smaps_rollup there (the process's resident memory
 * now: Rss, and Anonymous, the private memory no file backs); otherwise does nothing. With open/read/write only,
 * so that measuring adds nothing to what is measured. */
void bench_report_memory(void);

#endif
