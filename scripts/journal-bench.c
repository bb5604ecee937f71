/*
 * Journal benchmark (built and run by scripts/bench): for 200-byte messages at 1k, 10k and 50k entries, the
 * nanoseconds per record of
 *   - vaka_journal_append of a breadcrumb into a default-size (256 KiB) journal (the ring wraps: steady state),
 *   - vaka_journal_append of a log record into a 64 MiB journal (the log ring holds all 50k: no spill),
 *   - write(2) of one line per record (O_APPEND file),
 *   - fwrite + fflush of one line per record,
 * each the best of REPS passes (after one warm-up pass), on one thread; and the ratios write/append and
 * fwrite/append. Also: append_given_time_ns (the breadcrumb append with the caller's timestamp, no clock read)
 * and clock_ns (one clock_gettime(CLOCK_REALTIME), the part of append_ns that reads the time). The log figure
 * writes into memory not in any cache (a 64 MiB ring filled once); the breadcrumb ring (96 KiB of a default
 * journal) stays in cache, as a journal's rings do while the mover keeps up. Prints one JSON object on stdout.
 *
 *   journal-bench DIR     scratch files in DIR
 */
#include "vaka/vaka_journal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REPS 5
#define MESSAGE 200

static char message[MESSAGE + 1];

static uint64_t now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static vaka_journal *open_journal(const char *dir, const char *name, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    vaka_journal_options o = { .path = path, .size = size };
    vaka_journal *j = NULL;
    if (vaka_journal_open(&o, &j) != 0 || !vaka_journal_is_mapped(j)) {
        fprintf(stderr, "journal-bench: cannot open a mapped journal at %s\n", path);
        exit(1);
    }
    return j;
}

static double bench_append(const char *dir, uint8_t kind, size_t size, long n, uint64_t time_ns)
{
    double best = 1e18;
    for (int rep = 0; rep <= REPS; rep++) {
        vaka_journal *j = open_journal(dir, "bench.journal", size);
        vaka_journal_entry e = { .kind = kind, .level = VAKA_JOURNAL_INFO, .category = "bench", .category_len = 5,
                                 .body = message, .body_len = MESSAGE, .time_ns = time_ns };
        /* touch every page once (as a long-running process has) */
        for (long i = 0; i < n; i++) vaka_journal_append(j, &e, NULL);
        vaka_journal_close(j);
        j = open_journal(dir, "bench.journal", size);
        for (long i = 0; i < n && kind == VAKA_JOURNAL_BREADCRUMB; i++) vaka_journal_append(j, &e, NULL);
        uint64_t t0 = now();
        for (long i = 0; i < n; i++) {
            if (vaka_journal_append(j, &e, NULL) != 0) { fprintf(stderr, "journal-bench: append failed\n"); exit(1); }
        }
        uint64_t t1 = now();
        vaka_journal_close(j);
        if (rep > 0 && (double)(t1 - t0) / n < best) best = (double)(t1 - t0) / n;
    }
    return best;
}

/* ns per line of writing n lines (the message and a newline) to a file in `dir`, best of REPS passes: one
 * write(2) per line, or (stdio) fwrite + fflush per line. */
static double bench_lines(const char *dir, long n, int stdio)
{
    char path[4096], line[MESSAGE + 1];
    memcpy(line, message, MESSAGE);
    line[MESSAGE] = '\n';
    snprintf(path, sizeof path, "%s/%s", dir, stdio ? "bench-fwrite.log" : "bench-write.log");
    double best = 1e18;
    for (int rep = 0; rep <= REPS; rep++) {
        int fd = stdio ? -1 : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        FILE *f = stdio ? fopen(path, "we") : NULL;
        if (stdio ? f == NULL : fd < 0) { perror("journal-bench: open"); exit(1); }
        uint64_t t0 = now();
        for (long i = 0; i < n; i++) {
            int ok = stdio ? fwrite(line, 1, sizeof line, f) == sizeof line && fflush(f) == 0
                           : write(fd, line, sizeof line) == (ssize_t)sizeof line;
            if (!ok) { perror("journal-bench: write"); exit(1); }
        }
        uint64_t t1 = now();
        if (stdio) fclose(f); else close(fd);
        if (rep > 0 && (double)(t1 - t0) / n < best) best = (double)(t1 - t0) / n;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: journal-bench DIR\n"); return 2; }
    const char *dir = argv[1];
    for (int i = 0; i < MESSAGE; i++) message[i] = (char)('a' + i % 26);
    static const long counts[] = { 1000, 10000, 50000 };
    printf("{\"message_bytes\":%d,\"reps\":%d,\"entries\":{", MESSAGE, REPS);
    for (int c = 0; c < 3; c++) {
        long n = counts[c];
        double crumb = bench_append(dir, VAKA_JOURNAL_BREADCRUMB, 0, n, 0);
        double given = bench_append(dir, VAKA_JOURNAL_BREADCRUMB, 0, n, 1700000000000000000ull);
        double log = bench_append(dir, VAKA_JOURNAL_LOG, VAKA_JOURNAL_MAX_SIZE, n, 0);
        double wr = bench_lines(dir, n, 0);
        double fw = bench_lines(dir, n, 1);
        printf("%s\"%ld\":{\"append_ns\":%.1f,\"append_given_time_ns\":%.1f,\"append_log_ns\":%.1f,\"write_ns\":%.1f,\"fwrite_fflush_ns\":%.1f,"
               "\"write_over_append\":%.1f,\"fwrite_fflush_over_append\":%.1f}",
               c ? "," : "", n, crumb, given, log, wr, fw, wr / crumb, fw / crumb);
    }
    struct timespec ts;
    double clock_best = 1e18;
    for (int rep = 0; rep <= REPS; rep++) {
        uint64_t t0 = now();
        for (int i = 0; i < 100000; i++) clock_gettime(CLOCK_REALTIME, &ts);
        double ns = (double)(now() - t0) / 100000;
        if (rep > 0 && ns < clock_best) clock_best = ns;
    }
    printf("},\"clock_ns\":%.1f,\"goal\":{\"append_ns\":100,\"write_over_append\":50}}\n", clock_best);
    return 0;
}
