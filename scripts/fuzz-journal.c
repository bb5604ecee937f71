/*
 * libFuzzer target for the journal's offline reader (Sources/VakaCrash/journal_read.c), the code that reads a
 * dead run's journal at the next launch and in `vaka journal show`: the input is a journal file, optionally
 * followed by a spill file (split at the first occurrence of the 8 bytes "\nSPILL\n\n"). Every record the
 * reader returns must lie inside what it read. Built and run by scripts/fuzz (target `journal`).
 * With VAKA_FUZZ_JOURNAL_SEEDS=DIR it writes seed journals (real ones made with vaka_journal_open/append:
 * every kind, a wrapped breadcrumb ring, a spill) into DIR and exits.
 */
#include "vaka/vaka_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[256], spill[264];

static void write_file(const char *p, const uint8_t *data, size_t len)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n <= 0) abort();
        data += n;
        len -= (size_t)n;
    }
    close(fd);
}

static void check(vaka_journal_reader *rd)
{
    vaka_journal_record r;
    volatile uint8_t sink = 0;
    while (vaka_journal_reader_next(rd, &r) == 1) {
        /* Touch every byte the reader hands out: AddressSanitizer reports any outside its buffers. */
        for (uint32_t i = 0; i < r.category_len; i++) sink ^= r.category[i];
        for (uint32_t i = 0; i < r.body_len; i++) sink ^= r.body[i];
        for (uint32_t i = 0; i < r.attributes_len; i++) sink ^= r.attributes[i];
    }
    (void)sink;
}

static void seeds(const char *dir)
{
    static const uint8_t attrs[] = { 1, 0, 1, 0, 3, 0, 0, 0, 'k', 'v', 'a', 'l',
                                     2, 1, 1, 0, 8, 0, 0, 0, 'n', 42, 0, 0, 0, 0, 0, 0, 0 };
    for (int variant = 0; variant < 3; variant++) {
        char p[512];
        snprintf(p, sizeof p, "%s/journal-%d", dir, variant);
        vaka_journal_options o = { .path = p, .size = VAKA_JOURNAL_MIN_SIZE, .flags = variant == 2 ? VAKA_JOURNAL_NO_MMAP : 0 };
        vaka_journal *j = NULL;
        if (vaka_journal_open(&o, &j) != 0) abort();
        int n = variant == 0 ? 5 : 400; /* 400: the breadcrumb ring wraps and the gated rings spill */
        for (int i = 0; i < n; i++) {
            char body[96];
            int len = snprintf(body, sizeof body, "record %d", i);
            for (uint8_t kind = VAKA_JOURNAL_BREADCRUMB; kind <= VAKA_JOURNAL_EVENT; kind++) {
                vaka_journal_entry e = { .kind = kind, .level = VAKA_JOURNAL_INFO, .category = "cat", .category_len = 3,
                                         .body = body, .body_len = (uint32_t)len, .attributes = attrs,
                                         .attributes_len = sizeof attrs };
                vaka_journal_append(j, &e, NULL);
            }
        }
        vaka_journal_close(j);
        /* The input format: the journal, then the separator and the spill file when there is one. */
        char sp[520], seed[520];
        snprintf(sp, sizeof sp, "%s.spill", p);
        snprintf(seed, sizeof seed, "%s/seed-%d", dir, variant);
        FILE *out = fopen(seed, "wb"), *in = fopen(p, "rb");
        if (out == NULL || in == NULL) abort();
        int c;
        while ((c = fgetc(in)) != EOF) fputc(c, out);
        fclose(in);
        if ((in = fopen(sp, "rb")) != NULL) {
            fputs("\nSPILL\n\n", out);
            while ((c = fgetc(in)) != EOF) fputc(c, out);
            fclose(in);
            unlink(sp);
        }
        fclose(out);
        unlink(p);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    const char *dir = getenv("VAKA_FUZZ_JOURNAL_SEEDS");
    if (dir != NULL) { seeds(dir); exit(0); }
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/vaka-fuzz-journal-%d", tmp ? tmp : "/tmp", (int)getpid());
    snprintf(spill, sizeof spill, "%s.spill", path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memmem(data, size, "\nSPILL\n\n", 8);
    size_t jlen = sep ? (size_t)(sep - data) : size;
    write_file(path, data, jlen);
    if (sep) write_file(spill, sep + 8, size - jlen - 8);
    else unlink(spill);
    vaka_journal_reader *rd = NULL;
    if (vaka_journal_reader_open(path, &rd) == 0) { check(rd); vaka_journal_reader_close(rd); }
    /* The same bytes as a breadcrumb snapshot (the mover's reader). */
    if (vaka_journal_reader_open_memory(data, size, &rd) == 0) { check(rd); vaka_journal_reader_close(rd); }
    return 0;
}
