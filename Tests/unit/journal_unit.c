/*
 * Unit tests of the journal (Sources/VakaCrash/journal.c, journal_read.c, sig_journal.c), compiled with the
 * runtime's objects (or, for the ThreadSanitizer run, with the three journal sources and -fsanitize=thread).
 * Run by VakaCrashTests.JournalUnitTests.
 *
 *   journal_unit DIR                   every check, scratch files in DIR; one line per check: `ok <name>` or
 *                                      `FAIL <name>: <what differed>`, then `checks <count> failed <count>`;
 *                                      exit status 1 when any check failed
 *   journal_unit --concurrency DIR     only the concurrency check (8 appending threads, one consuming and
 *                                      snapshotting thread)
 *   journal_unit --kill DIR N SEED     N times: a child appends 10,000 records and is SIGKILLed at a random
 *                                      moment; every record it appended before the kill must read back, in
 *                                      order, with at most one torn record
 */
#include "journal_internal.h"
#include "vaka/vaka_crash.h"
#include "unit_check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Scratch directory of the run (argv). */
static const char *scratch;

/* ------------------------------------------------------------------ helpers */

static char path_buf[4096];
static const char *path_for(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", scratch, name);
    return path_buf;
}

static vaka_journal *open_journal(const char *name, size_t size, int flags)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    vaka_journal_options o = { .path = path, .size = size, .flags = flags };
    vaka_journal *j = NULL;
    int rc = vaka_journal_open(&o, &j);
    EXPECT(rc == 0 && j != NULL, "vaka_journal_open(%s) = %d", path, rc);
    return rc == 0 ? j : NULL;
}

static int append_text(vaka_journal *j, uint8_t kind, uint8_t level, const char *cat, const char *body,
                       const void *attrs, uint32_t attrs_len, uint64_t *seq)
{
    vaka_journal_entry e = { .kind = kind, .level = level, .time_ns = 0,
                             .category = cat, .category_len = cat ? (uint32_t)strlen(cat) : 0,
                             .body = body, .body_len = (uint32_t)strlen(body),
                             .attributes = attrs, .attributes_len = attrs_len };
    return vaka_journal_append(j, &e, seq);
}

static int body_is(const vaka_journal_record *r, const char *s)
{
    return r->body_len == strlen(s) && memcmp(r->body, s, r->body_len) == 0;
}

/* Reads every record of `path` into out (at most max); returns the count, -errno on failure. */
static long read_all(const char *path, vaka_journal_record *out, size_t max, uint64_t *skipped,
                     vaka_journal_reader **keep)
{
    vaka_journal_reader *rd = NULL;
    int rc = vaka_journal_reader_open(path, &rd);
    if (rc) return -rc;
    size_t n = 0;
    vaka_journal_record r;
    while (vaka_journal_reader_next(rd, &r)) {
        if (n < max) out[n] = r;
        n++;
    }
    if (skipped) *skipped = vaka_journal_reader_skipped(rd);
    *keep = rd;
    return (long)n;
}

/* A body "<prefix> <i>" padded with a pattern derived from i to `len` bytes. */
static size_t make_body(char *buf, size_t len, const char *prefix, long i)
{
    int n = snprintf(buf, len + 1, "%s %ld ", prefix, i);
    for (size_t k = (size_t)n; k < len; k++) buf[k] = (char)('a' + (i + (long)k) % 26);
    buf[len] = '\0';
    return len;
}

static int body_matches(const vaka_journal_record *r, const char *prefix, long *index)
{
    char tmp[4096];
    if (r->body_len >= sizeof tmp) return 0;
    memcpy(tmp, r->body, r->body_len);
    tmp[r->body_len] = '\0';
    size_t pl = strlen(prefix);
    if (strncmp(tmp, prefix, pl) != 0 || tmp[pl] != ' ') return 0;
    long i = strtol(tmp + pl + 1, NULL, 10);
    char want[4096];
    make_body(want, r->body_len, prefix, i);
    if (memcmp(want, tmp, r->body_len) != 0) return 0;
    *index = i;
    return 1;
}

/* ------------------------------------------------------------------ checks */

static void test_round_trip(void)
{
    begin("round_trip_every_field");
    vaka_journal *j = open_journal("round.journal", 0, 0);
    if (j) {
        EXPECT(vaka_journal_is_mapped(j) == 1 && vaka_journal_mmap_error(j) == 0, "mapped %d error %d",
               vaka_journal_is_mapped(j), vaka_journal_mmap_error(j));
        EXPECT(vaka_journal_last_seq(j) == 0, "last_seq before any append: %llu",
               (unsigned long long)vaka_journal_last_seq(j));
        /* one attribute: string "user" = "ana", meta flag */
        uint8_t attrs[8 + 4 + 3];
        attrs[0] = VAKA_JOURNAL_STRING; attrs[1] = VAKA_JOURNAL_ATTRIBUTE_META;
        attrs[2] = 4; attrs[3] = 0; attrs[4] = 3; attrs[5] = attrs[6] = attrs[7] = 0;
        memcpy(attrs + 8, "user", 4);
        memcpy(attrs + 12, "ana", 3);
        uint64_t s1 = 0, s2 = 0, s3 = 0;
        vaka_journal_entry e = { .kind = VAKA_JOURNAL_BREADCRUMB, .level = VAKA_JOURNAL_WARN,
                                 .time_ns = 1700000000123456789ull, .category = "ui.click", .category_len = 8,
                                 .body = "pressed OK", .body_len = 10, .attributes = attrs,
                                 .attributes_len = sizeof attrs };
        EXPECT(vaka_journal_append(j, &e, &s1) == 0, "append breadcrumb");
        EXPECT(append_text(j, VAKA_JOURNAL_LOG, VAKA_JOURNAL_INFO, "", "a log line", NULL, 0, &s2) == 0, "log");
        EXPECT(append_text(j, VAKA_JOURNAL_EVENT, 0, NULL, "{\"event_id\":\"x\"}", NULL, 0, &s3) == 0, "event");
        EXPECT(s1 == 1 && s2 == 2 && s3 == 3, "seqs %llu %llu %llu", (unsigned long long)s1,
               (unsigned long long)s2, (unsigned long long)s3);
        EXPECT(vaka_journal_last_seq(j) == 3, "last_seq %llu", (unsigned long long)vaka_journal_last_seq(j));
        vaka_journal_record rs[8];
        uint64_t skipped = 9;
        vaka_journal_reader *rd = NULL;
        long n = read_all(path_for("round.journal"), rs, 8, &skipped, &rd);
        EXPECT(n == 3 && skipped == 0, "read %ld records, skipped %llu", n, (unsigned long long)skipped);
        if (n == 3) {
            EXPECT(rs[0].seq == 1 && rs[0].kind == VAKA_JOURNAL_BREADCRUMB && rs[0].level == VAKA_JOURNAL_WARN &&
                   rs[0].time_ns == 1700000000123456789ull, "breadcrumb header");
            EXPECT(rs[0].category_len == 8 && memcmp(rs[0].category, "ui.click", 8) == 0, "category");
            EXPECT(body_is(&rs[0], "pressed OK"), "body");
            EXPECT(rs[0].attributes_len == sizeof attrs && memcmp(rs[0].attributes, attrs, sizeof attrs) == 0,
                   "attributes");
            EXPECT(rs[1].seq == 2 && rs[1].kind == VAKA_JOURNAL_LOG && body_is(&rs[1], "a log line") &&
                   rs[1].time_ns > 1600000000000000000ull && rs[1].consumed == 0, "log record (time now)");
            EXPECT(rs[2].seq == 3 && rs[2].kind == VAKA_JOURNAL_EVENT && body_is(&rs[2], "{\"event_id\":\"x\"}"),
                   "event record");
        }
        vaka_journal_reader_close(rd);
        EXPECT(append_text(j, 9, 0, NULL, "x", NULL, 0, NULL) == EINVAL, "bad kind accepted");
        vaka_journal_close(j);
    }
    end_check();
}

/* A record whose writer died mid-copy (commit 0) or whose bytes were damaged is skipped, the others kept. */
static void test_torn(void)
{
    begin("torn_record_skipped");
    vaka_journal *j = open_journal("torn.journal", 0, 0);
    if (j) {
        for (int i = 0; i < 4; i++) {
            char b[64];
            snprintf(b, sizeof b, "log %d", i);
            append_text(j, VAKA_JOURNAL_LOG, VAKA_JOURNAL_INFO, "", b, NULL, 0, NULL);
        }
        vaka_jring *r = &j->rings[VAKA_JOURNAL_LOG];
        /* record 2 (0-based 1): flip a body byte; record 4: commit back to 0 (its writer died before it). */
        uint8_t *p0 = r->base;
        uint32_t size0 = (uint32_t)(((uint64_t *)(void *)p0)[0] >> 32);
        uint8_t *p1 = p0 + size0;
        uint32_t size1 = (uint32_t)(((uint64_t *)(void *)p1)[0] >> 32);
        p1[VAKA_JR_HEADER + 1] ^= 0x20;
        uint8_t *p2 = p1 + size1;
        uint32_t size2 = (uint32_t)(((uint64_t *)(void *)p2)[0] >> 32);
        uint8_t *p3 = p2 + size2;
        ((uint64_t *)(void *)p3)[VAKA_JR_W_COMMIT] = 0;
        vaka_journal_record rs[8];
        uint64_t skipped = 0;
        vaka_journal_reader *rd = NULL;
        long n = read_all(path_for("torn.journal"), rs, 8, &skipped, &rd);
        EXPECT(n == 2 && skipped == 2, "read %ld, skipped %llu (want 2 and 2)", n, (unsigned long long)skipped);
        if (n == 2) EXPECT(body_is(&rs[0], "log 0") && body_is(&rs[1], "log 2"), "kept the intact records");
        vaka_journal_reader_close(rd);
        /* The mover stops at the damaged record (it cannot be whole yet) rather than skip it. */
        uint8_t buf[4096];
        vaka_journal_record a, b;
        size_t needed = 0;
        EXPECT(vaka_journal_next(j, VAKA_JOURNAL_LOG, NULL, buf, sizeof buf, &a, &needed) == 1 && body_is(&a, "log 0"),
               "next: first record");
        uint8_t buf2[4096];
        EXPECT(vaka_journal_next(j, VAKA_JOURNAL_LOG, &a, buf2, sizeof buf2, &b, &needed) == 0,
               "next: the damaged record was handed out");
        vaka_journal_close(j);
    }
    end_check();

    begin("reader_refuses_non_journal");
    {
        int fd = open(path_for("not.journal"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char junk[8192];
        memset(junk, 'x', sizeof junk);
        EXPECT(fd >= 0 && write(fd, junk, sizeof junk) == (ssize_t)sizeof junk, "write junk");
        close(fd);
        vaka_journal_reader *rd = NULL;
        EXPECT(vaka_journal_reader_open(path_for("not.journal"), &rd) == EBADMSG, "junk accepted");
        EXPECT(vaka_journal_reader_open(path_for("absent.journal"), &rd) == ENOENT, "absent: not ENOENT");
    }
    end_check();
}

/* The breadcrumb ring overwrites its oldest records: after many laps, the snapshot and the offline reader
 * hold an unbroken run of the newest records, the last one appended included. */
static void test_breadcrumb_wrap(void)
{
    begin("breadcrumb_ring_wraps_keeping_newest");
    vaka_journal *j = open_journal("wrap.journal", VAKA_JOURNAL_MIN_SIZE, 0);
    if (j) {
        uint64_t ring = j->rings[VAKA_JOURNAL_BREADCRUMB].size;
        char body[512];
        uint64_t last = 0;
        for (long i = 0; i < 2000; i++) {
            make_body(body, 20 + (size_t)(i * 37 % 300), "crumb", i);
            EXPECT(append_text(j, VAKA_JOURNAL_BREADCRUMB, VAKA_JOURNAL_INFO, "c", body, NULL, 0, &last) == 0, "append %ld", i);
        }
        size_t needed = 0;
        EXPECT(vaka_journal_snapshot_breadcrumbs(j, NULL, 0, &needed) == -1 && needed >= ring, "needed %zu", needed);
        uint8_t *buf = malloc(needed);
        long used = vaka_journal_snapshot_breadcrumbs(j, buf, needed, &needed);
        EXPECT(used > 0 && (uint64_t)used <= ring, "snapshot bytes %ld (ring %llu)", used, (unsigned long long)ring);
        vaka_journal_reader *rd = NULL;
        EXPECT(vaka_journal_reader_open_memory(buf, used > 0 ? (size_t)used : 0, &rd) == 0, "memory reader");
        vaka_journal_record r;
        long count = 0, prev = -1, first = -1;
        int ordered = 1, intact = 1;
        while (rd && vaka_journal_reader_next(rd, &r)) {
            long idx;
            if (!body_matches(&r, "crumb", &idx)) intact = 0;
            else {
                if (prev >= 0 && idx != prev + 1) ordered = 0;
                if (first < 0) first = idx;
                prev = idx;
            }
            count++;
        }
        EXPECT(intact && ordered, "snapshot records intact %d, consecutive %d", intact, ordered);
        EXPECT(prev == 1999, "the newest breadcrumb is not the last of the snapshot (%ld)", prev);
        EXPECT(count >= 10 && first > 0, "snapshot holds %ld records from %ld (ring %llu bytes)", count, first,
               (unsigned long long)ring);
        vaka_journal_reader_close(rd);
        free(buf);
        /* The offline reader sees the same run. */
        vaka_journal_record rs[256];
        uint64_t skipped = 0;
        long n = read_all(path_for("wrap.journal"), rs, 256, &skipped, &rd);
        EXPECT(n == count && skipped == 0, "offline reader: %ld records (snapshot %ld), skipped %llu", n, count,
               (unsigned long long)skipped);
        long idx = -1;
        if (n > 0 && n <= 256) EXPECT(body_matches(&rs[n - 1], "crumb", &idx) && idx == 1999 && rs[n - 1].seq == last,
                                      "offline reader's last record %ld", idx);
        vaka_journal_reader_close(rd);
        EXPECT(vaka_journal_fill_permille(j, VAKA_JOURNAL_BREADCRUMB) == 1000, "breadcrumb fill %d",
               vaka_journal_fill_permille(j, VAKA_JOURNAL_BREADCRUMB));
        vaka_journal_close(j);
    }
    end_check();
}

/* Walks a gated kind with next(), checking "<prefix> <i>" bodies run from *expect on; consumes when asked. */
static long walk(vaka_journal *j, uint8_t kind, const char *prefix, long *expect, int consume, int *bad)
{
    uint8_t bufs[2][8192];
    vaka_journal_record rec[2];
    int cur = 0;
    const vaka_journal_record *after = NULL;
    long n = 0;
    size_t needed = 0;
    for (;;) {
        int rc = vaka_journal_next(j, kind, after, bufs[cur], sizeof bufs[cur], &rec[cur], &needed);
        if (rc != 1) break;
        long idx;
        if (!body_matches(&rec[cur], prefix, &idx) || idx != *expect) { *bad = 1; break; }
        (*expect)++;
        n++;
        after = &rec[cur];
        cur ^= 1;
    }
    if (consume && after) vaka_journal_consume(j, after);
    return n;
}

/* A gated ring never overwrites what the mover has not consumed: a full ring sends appends to the spill
 * file; the mover's walk and the offline reader give every record in order; consuming frees the ring. */
static void test_gated_spill(void)
{
    begin("gated_ring_spills_when_full");
    vaka_journal *j = open_journal("gated.journal", VAKA_JOURNAL_MIN_SIZE, 0);
    if (j) {
        char body[400];
        for (long i = 0; i < 300; i++) {
            make_body(body, 100 + (size_t)(i % 7) * 30, "log", i);
            EXPECT(append_text(j, VAKA_JOURNAL_LOG, VAKA_JOURNAL_INFO, "", body, NULL, 0, NULL) == 0, "append %ld", i);
        }
        struct stat st;
        EXPECT(stat(path_for("gated.journal.spill"), &st) == 0 && st.st_size > 0, "no spill file");
        int fill = vaka_journal_fill_permille(j, VAKA_JOURNAL_LOG);
        EXPECT(fill > 900, "log ring fill %d", fill);
        EXPECT(vaka_journal_fill_permille(j, VAKA_JOURNAL_EVENT) == 0, "event fill");
        long expect = 0;
        int bad = 0;
        long n = walk(j, VAKA_JOURNAL_LOG, "log", &expect, 0, &bad);
        EXPECT(n == 300 && !bad, "walk gave %ld records in order (bad %d)", n, bad);
        vaka_journal_record rs[400];
        uint64_t skipped = 0;
        vaka_journal_reader *rd = NULL;
        long m = read_all(path_for("gated.journal"), rs, 400, &skipped, &rd);
        int ok = m == 300;
        for (long i = 0; ok && i < m; i++) {
            long idx;
            ok = body_matches(&rs[i], "log", &idx) && idx == i && rs[i].consumed == 0 && rs[i].seq == (uint64_t)i + 1;
        }
        EXPECT(ok && skipped == 0, "offline reader: %ld records, in order %d, skipped %llu", m, ok,
               (unsigned long long)skipped);
        vaka_journal_reader_close(rd);

        /* Consume the first 100; the offline reader marks them consumed. */
        expect = 0;
        bad = 0;
        uint8_t buf[8192], buf2[8192];
        vaka_journal_record a, b;
        size_t needed = 0;
        const vaka_journal_record *after = NULL;
        for (int i = 0; i < 100; i++) {
            uint8_t *bb = (i & 1) ? buf2 : buf;
            vaka_journal_record *rr = (i & 1) ? &b : &a;
            if (vaka_journal_next(j, VAKA_JOURNAL_LOG, after, bb, sizeof buf, rr, &needed) != 1) { bad = 1; break; }
            after = rr;
        }
        if (after) vaka_journal_consume(j, after);
        EXPECT(!bad, "walk of 100");
        EXPECT(vaka_journal_fill_permille(j, VAKA_JOURNAL_LOG) < fill, "consuming freed nothing");
        m = read_all(path_for("gated.journal"), rs, 400, &skipped, &rd);
        long consumed = 0;
        for (long i = 0; i < m && i < 400; i++) consumed += rs[i].consumed;
        EXPECT(m == 300 && consumed == 100 && rs[99].consumed && !rs[100].consumed, "after consume: %ld records, %ld consumed",
               m, consumed);
        vaka_journal_reader_close(rd);
        /* The walk from the start now begins at record 100; new appends land in the freed ring space after
         * the spilled ones in seq order. */
        for (long i = 300; i < 340; i++) {
            make_body(body, 100, "log", i);
            append_text(j, VAKA_JOURNAL_LOG, VAKA_JOURNAL_INFO, "", body, NULL, 0, NULL);
        }
        expect = 100;
        bad = 0;
        n = walk(j, VAKA_JOURNAL_LOG, "log", &expect, 1, &bad);
        EXPECT(n == 240 && !bad, "walk after consume gave %ld (bad %d, at %ld)", n, bad, expect);
        EXPECT(vaka_journal_fill_permille(j, VAKA_JOURNAL_LOG) == 0, "all consumed: fill %d",
               vaka_journal_fill_permille(j, VAKA_JOURNAL_LOG));
        vaka_journal_record none;
        EXPECT(vaka_journal_next(j, VAKA_JOURNAL_LOG, NULL, buf, sizeof buf, &none, &needed) == 0, "nothing left");
        /* Too small a buffer: -1 and the size needed. */
        make_body(body, 300, "log", 340);
        append_text(j, VAKA_JOURNAL_LOG, VAKA_JOURNAL_INFO, "", body, NULL, 0, NULL);
        needed = 0;
        EXPECT(vaka_journal_next(j, VAKA_JOURNAL_LOG, NULL, buf, 64, &none, &needed) == -1 &&
               needed == VAKA_JR_HEADER + 304, "small buffer: needed %zu", needed);
        vaka_journal_close(j);
    }
    end_check();

    begin("spill_limit_enospc_and_record_limit_efbig");
    j = open_journal("limit.journal", VAKA_JOURNAL_MIN_SIZE, 0);
    if (j) {
        uint32_t big = VAKA_JOURNAL_MAX_RECORD;
        char *b = calloc(1, big);
        memset(b, 'x', big - 1);
        vaka_journal_entry e = { .kind = VAKA_JOURNAL_LOG, .body = b, .body_len = big };
        EXPECT(vaka_journal_append(j, &e, NULL) == EFBIG, "a record over the limit accepted");
        e.body_len = big - 1024;
        int rc = 0, i;
        for (i = 0; i < 40 && rc == 0; i++) rc = vaka_journal_append(j, &e, NULL);
        EXPECT(rc == ENOSPC && i > 10, "spill limit: rc %d after %d appends", rc, i);
        e.kind = VAKA_JOURNAL_BREADCRUMB;
        e.body_len = 8192;
        EXPECT(vaka_journal_append(j, &e, NULL) == EFBIG, "a breadcrumb over its ring accepted");
        free(b);
        vaka_journal_close(j);
    }
    end_check();
}

/* With mmap refused (flag), appends go to anonymous memory; the file holds them after sync (and close). */
static void test_no_mmap(void)
{
    begin("no_mmap_fallback_sync");
    vaka_journal *j = open_journal("nommap.journal", 0, VAKA_JOURNAL_NO_MMAP);
    if (j) {
        EXPECT(vaka_journal_is_mapped(j) == 0 && vaka_journal_mmap_error(j) != 0, "mapped %d error %d",
               vaka_journal_is_mapped(j), vaka_journal_mmap_error(j));
        append_text(j, VAKA_JOURNAL_LOG, VAKA_JOURNAL_WARN, "", "first", NULL, 0, NULL);
        append_text(j, VAKA_JOURNAL_BREADCRUMB, VAKA_JOURNAL_INFO, "nav", "second", NULL, 0, NULL);
        vaka_journal_record rs[8];
        uint64_t skipped = 0;
        vaka_journal_reader *rd = NULL;
        long n = read_all(path_for("nommap.journal"), rs, 8, &skipped, &rd);
        EXPECT(n == 0, "before sync the file holds %ld records (a valid empty journal expected)", n);
        vaka_journal_reader_close(rd);
        vaka_journal_sync(j);
        n = read_all(path_for("nommap.journal"), rs, 8, &skipped, &rd);
        EXPECT(n == 2 && body_is(&rs[0], "first") && body_is(&rs[1], "second"), "after sync: %ld records", n);
        vaka_journal_reader_close(rd);
        append_text(j, VAKA_JOURNAL_EVENT, 0, "", "third", NULL, 0, NULL);
        /* the crash handler's path: the registered journal's rings written by the handler-side sync */
        vaka_crash_set_journal(j);
        vaka_sig_journal_sync_registered();
        n = read_all(path_for("nommap.journal"), rs, 8, &skipped, &rd);
        EXPECT(n == 3 && body_is(&rs[2], "third"), "after the handler-side sync: %ld records", n);
        vaka_journal_reader_close(rd);
        append_text(j, VAKA_JOURNAL_EVENT, 0, "", "fourth", NULL, 0, NULL);
        vaka_journal_close(j);
        n = read_all(path_for("nommap.journal"), rs, 8, &skipped, &rd);
        EXPECT(n == 4 && body_is(&rs[3], "fourth"), "after close: %ld records", n);
        vaka_journal_reader_close(rd);
    }
    end_check();
}

/* The journal file is 0600 whatever the umask: under umask 0777 open(2)'s 0600 would leave a file of mode 0 that
 * the next launch could not read (a program not run as root). */
static void test_private_under_umask(void)
{
    begin("private_under_umask_0777");
    mode_t saved = umask(0777);
    vaka_journal *j = open_journal("umask.journal", 0, 0);
    umask(saved);
    if (j) {
        struct stat st;
        EXPECT(stat(path_for("umask.journal"), &st) == 0 && (st.st_mode & 07777) == 0600, "mode %o",
               (unsigned)(st.st_mode & 07777));
        vaka_journal_close(j);
    }
    end_check();
}

/* vaka_crash_set_journal: the handler-side copy gives the journal's last sequence number; NULL and close
 * unregister. */
static void test_registration(void)
{
    begin("crash_registration_journal_seq");
    vaka_journal *j = open_journal("reg.journal", 0, 0);
    if (j) {
        uint64_t seq = 77;
        EXPECT(vaka_sig_journal_seq(&seq) == 0, "registered before set");
        vaka_crash_set_journal(j);
        EXPECT(vaka_sig_journal_seq(&seq) == 1 && seq == 0, "registered, no record: %llu", (unsigned long long)seq);
        for (int i = 0; i < 5; i++) append_text(j, VAKA_JOURNAL_BREADCRUMB, 0, "", "x", NULL, 0, NULL);
        EXPECT(vaka_sig_journal_seq(&seq) == 1 && seq == 5, "seq %llu", (unsigned long long)seq);
        vaka_crash_set_journal(NULL);
        EXPECT(vaka_sig_journal_seq(&seq) == 0, "still registered after NULL");
        vaka_crash_set_journal(j);
        vaka_journal_close(j);
        EXPECT(vaka_sig_journal_seq(&seq) == 0, "still registered after close");
    }
    end_check();
}

/* A journal file (and spill) damaged at random places: the reader never reads outside what it loaded (run under
 * AddressSanitizer by hand: cc -fsanitize=address), returns only records that lie inside the file, and keeps
 * the records the damage did not touch. */
static void test_random_damage(void)
{
    begin("reader_survives_random_damage");
    vaka_journal *j = open_journal("damage.journal", VAKA_JOURNAL_MIN_SIZE, 0);
    if (j) {
        char body[200];
        for (long i = 0; i < 400; i++) {
            make_body(body, 30 + (size_t)(i % 50), "d", i);
            append_text(j, (uint8_t)(1 + i % 3), 9, "cat", body, "\x01\x00\x01\x00\x01\x00\x00\x00kv", 10, NULL);
        }
        vaka_journal_close(j);
        char path[4096], spill[4096];
        snprintf(path, sizeof path, "%s", path_for("damage.journal"));
        snprintf(spill, sizeof spill, "%s.spill", path);
        int fd = open(path, O_RDONLY);
        uint8_t *orig = malloc(VAKA_JOURNAL_MIN_SIZE);
        EXPECT(fd >= 0 && read(fd, orig, VAKA_JOURNAL_MIN_SIZE) == VAKA_JOURNAL_MIN_SIZE, "read back");
        close(fd);
        srand(7);
        long total = 0, bad = 0;
        for (int round = 0; round < 300; round++) {
            uint8_t *copy = malloc(VAKA_JOURNAL_MIN_SIZE);
            memcpy(copy, orig, VAKA_JOURNAL_MIN_SIZE);
            int flips = 1 + rand() % 16;
            for (int f = 0; f < flips; f++) {
                /* mostly the rings, sometimes the header page's numbers */
                size_t at = rand() % 4 == 0 ? (size_t)(rand() % 1100) : (size_t)(rand() % VAKA_JOURNAL_MIN_SIZE);
                copy[at] ^= (uint8_t)(1u << (rand() % 8));
            }
            fd = open(path, O_WRONLY | O_TRUNC);
            if (write(fd, copy, VAKA_JOURNAL_MIN_SIZE) != VAKA_JOURNAL_MIN_SIZE) bad++;
            close(fd);
            vaka_journal_reader *rd = NULL;
            if (vaka_journal_reader_open(path, &rd) == 0) {
                vaka_journal_record r;
                while (vaka_journal_reader_next(rd, &r)) {
                    long idx;
                    total++;
                    /* a record the damage did not touch reads back whole; one it touched is not returned */
                    if (!body_matches(&r, "d", &idx) || r.category_len != 3 || memcmp(r.category, "cat", 3) != 0 ||
                        r.attributes_len != 10)
                        bad++;
                }
                vaka_journal_reader_close(rd);
            }
            free(copy);
        }
        EXPECT(bad == 0 && total > 1000, "%ld damaged records returned of %ld", bad, total);
        free(orig);
    }
    end_check();
}

/* Bursts that overflow the gated rings, each consumed before the next: ~80 MB spilled in all (over the 64 MiB
 * spill limit) must all be accepted, the spill file starts over once consumed, and the offline reader still
 * finds the unconsumed records of the last burst (ring and spill) after the file restarted many times. */
static void test_spill_reclaimed(void)
{
    begin("spill_is_reclaimed_once_consumed");
    vaka_journal *j = open_journal("reclaim.journal", VAKA_JOURNAL_MIN_SIZE, 0);
    if (j) {
        static char body[1024];
        memset(body, 'r', sizeof body);
        vaka_journal_entry e = { .kind = VAKA_JOURNAL_LOG, .body = body, .body_len = sizeof body };
        static uint8_t buf[2][4096];
        vaka_journal_record rec[2];
        int failed = 0, round;
        long moved = 0;
        for (round = 0; round < 12000 && !failed; round++) {
            e.kind = round % 5 == 0 ? VAKA_JOURNAL_EVENT : VAKA_JOURNAL_LOG;
            for (int i = 0; i < 10 && !failed; i++) failed = vaka_journal_append(j, &e, NULL);
            for (uint8_t k = VAKA_JOURNAL_LOG; k <= VAKA_JOURNAL_EVENT; k++) {
                const vaka_journal_record *after = NULL;
                size_t need;
                int n = 0;
                while (vaka_journal_next(j, k, after, buf[n & 1], sizeof buf[0], &rec[n & 1], &need) == 1) {
                    after = &rec[n & 1];
                    n++;
                }
                if (after) vaka_journal_consume(j, after);
                moved += n;
            }
        }
        EXPECT(!failed && moved == 120000, "round %d: append failed (%s); %ld moved of %d", round, strerror(failed), moved,
               round * 10);
        /* The last burst stays unconsumed: 10 logs, most of them in the spill. */
        e.kind = VAKA_JOURNAL_LOG;
        for (int i = 0; i < 10; i++) append_text(j, VAKA_JOURNAL_LOG, 9, "", "last burst", NULL, 0, NULL);
        struct stat st;
        EXPECT(stat(path_for("reclaim.journal.spill"), &st) == 0 && st.st_size < 64 * 1024,
               "spill file %lld bytes after everything before the last burst was consumed", (long long)st.st_size);
        vaka_journal_record rs[64];
        vaka_journal_reader *rd = NULL;
        uint64_t skipped = 0;
        long m = read_all(path_for("reclaim.journal"), rs, 64, &skipped, &rd);
        long last = 0;
        for (long i = 0; i < m && i < 64; i++) last += !rs[i].consumed && body_is(&rs[i], "last burst");
        EXPECT(last == 10 && skipped == 0, "offline: %ld records, %ld of the last burst unconsumed, %llu skipped", m, last,
               (unsigned long long)skipped);
        vaka_journal_reader_close(rd);
        vaka_journal_close(j);
    }
    end_check();
}

/* ------------------------------------------------------------------ hostile files at the next launch */

/* Runs `fn(arg)` in a child with a 20 s alarm: returns its exit status, or 1000 + the signal that ended it
 * (SIGALRM: it blocked). */
static int in_child(int (*fn)(const char *), const char *arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        _exit(fn(arg) & 0xff);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The reader's result for `path`: 0 and the record count (< 100), or the errno + 100. */
static int reader_outcome(const char *path)
{
    vaka_journal_reader *rd = NULL;
    int rc = vaka_journal_reader_open(path, &rd);
    if (rc) return 100 + rc;
    int n = 0;
    vaka_journal_record r;
    while (vaka_journal_reader_next(rd, &r)) n++;
    vaka_journal_reader_close(rd);
    return n;
}

/* Appends 4 KiB logs to a 16 KiB journal (the log ring holds 3) until an append fails; exits with its errno.
 * The quota ends exactly after the 5th spilled record: the 6th write starts at the limit (EFBIG and, unless
 * the journal blocks it, SIGXFSZ, whose default action kills the process). */
static int spill_under_quota(const char *path)
{
    rlim_t quota = 5 * (VAKA_JR_HEADER + 4096);
    struct rlimit rl = { quota, quota };
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 90;
    vaka_journal_options o = { .path = path, .size = VAKA_JOURNAL_MIN_SIZE, .flags = 0 };
    vaka_journal *j = NULL;
    if (vaka_journal_open(&o, &j) != 0) return 91;
    static char body[4096];
    memset(body, 'q', sizeof body);
    vaka_journal_entry e = { .kind = VAKA_JOURNAL_LOG, .body = body, .body_len = sizeof body };
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++) rc = vaka_journal_append(j, &e, NULL);
    /* the ring's records are still there after the refused spill */
    e.kind = VAKA_JOURNAL_BREADCRUMB;
    e.body_len = 10;
    if (vaka_journal_append(j, &e, NULL) != 0) return 92;
    vaka_journal_close(j);
    return rc;
}

static void test_hostile_files(void)
{
    begin("reader_does_not_block_on_a_fifo");
    {
        char fifo[4096];
        snprintf(fifo, sizeof fifo, "%s", path_for("fifo.journal"));
        EXPECT(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
        int out = in_child(reader_outcome, fifo);
        EXPECT(out == 100 + EBADMSG, "reader on a FIFO: %d (1014: blocked until SIGALRM)", out);
    }
    end_check();

    begin("ring_records_survive_a_bad_spill_file");
    {
        vaka_journal *j = open_journal("badspill.journal", VAKA_JOURNAL_MIN_SIZE, 0);
        if (j) {
            for (int i = 0; i < 3; i++) append_text(j, VAKA_JOURNAL_EVENT, 9, "", "{}", NULL, 0, NULL);
            vaka_journal_close(j);
        }
        char path[4096], spill[4096];
        snprintf(path, sizeof path, "%s", path_for("badspill.journal"));
        snprintf(spill, sizeof spill, "%s.spill", path);
        /* a sparse 1 GiB spill (over the spill limit), a directory, a FIFO */
        int fd = open(spill, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        EXPECT(fd >= 0 && ftruncate(fd, (off_t)1 << 30) == 0, "sparse spill: %s", strerror(errno));
        if (fd >= 0) close(fd);
        int huge = in_child(reader_outcome, path);
        unlink(spill);
        EXPECT(mkdir(spill, 0700) == 0, "mkdir spill");
        int dir = in_child(reader_outcome, path);
        rmdir(spill);
        EXPECT(mkfifo(spill, 0600) == 0, "mkfifo spill");
        int fifo = in_child(reader_outcome, path);
        unlink(spill);
        EXPECT(huge == 3 && dir == 3 && fifo == 3,
               "records read with a 1 GiB spill %d, a directory %d, a FIFO %d (3 each; 100+errno: refused)", huge, dir,
               fifo);
    }
    end_check();

    begin("spill_past_the_file_size_limit_fails_with_efbig");
    {
        int out = in_child(spill_under_quota, path_for("quota.journal"));
        EXPECT(out == EFBIG, "spilling past RLIMIT_FSIZE: %d (%d: killed by SIGXFSZ)", out, 1000 + SIGXFSZ);
    }
    end_check();
}

/* The crash handler's read of the registered journal's seq (vaka_sig_journal_seq) in one thread while the
 * main thread opens, registers and closes journals: close must not unmap under the reader (SIGSEGV). */
static atomic_int handler_stop;
static void *handler_reads(void *arg)
{
    (void)arg;
    uint64_t seq;
    while (!atomic_load(&handler_stop)) (void)vaka_sig_journal_seq(&seq);
    return NULL;
}

static int close_under_handler(const char *path)
{
    pthread_t t;
    if (pthread_create(&t, NULL, handler_reads, NULL) != 0) return 90;
    /* 20,000 rounds, or as many as fit in 8 s on a loaded machine (the child's alarm is 20 s) */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 20000; i++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (i >= 1000 && now.tv_sec - t0.tv_sec >= 8) break;
        vaka_journal_options o = { .path = path, .size = VAKA_JOURNAL_MIN_SIZE, .flags = 0 };
        vaka_journal *j = NULL;
        if (vaka_journal_open(&o, &j) != 0) return 91;
        /* a mapping of varying size in between, so that the next journal is not mapped where this one was */
        size_t pad_len = 4096 * (size_t)(1 + i % 7);
        void *pad = mmap(NULL, pad_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        vaka_crash_set_journal(j);
        vaka_journal_close(j);
        if (pad != MAP_FAILED) munmap(pad, pad_len);
    }
    atomic_store(&handler_stop, 1);
    pthread_join(t, NULL);
    return 0;
}

static void test_close_under_handler(void)
{
    begin("close_waits_for_a_crash_handler_reading_the_journal");
    int out = in_child(close_under_handler, path_for("handler.journal"));
    EXPECT(out == 0, "child: %d (%d: SIGSEGV, the handler read an unmapped journal; %d: SIGALRM, over 20 s)", out,
           1000 + SIGSEGV, 1000 + SIGALRM);
    end_check();
}

/* ------------------------------------------------------------------ concurrency */

#define THREADS 8
#define PER_THREAD 4000
static vaka_journal *cj;
static atomic_int writers_done;

static void *appender(void *arg)
{
    long t = (long)arg;
    char body[256], prefix[16];
    snprintf(prefix, sizeof prefix, "t%ld", t);
    for (long i = 0; i < PER_THREAD; i++) {
        make_body(body, 40 + (size_t)((i * 13 + t) % 160), prefix, i);
        uint8_t kind = (i % 3 == 2) ? VAKA_JOURNAL_BREADCRUMB : VAKA_JOURNAL_LOG;
        if (vaka_journal_append(cj, &(vaka_journal_entry){ .kind = kind, .level = VAKA_JOURNAL_INFO,
                                                          .body = body, .body_len = (uint32_t)strlen(body) },
                                NULL) != 0)
            abort();
    }
    atomic_fetch_add(&writers_done, 1);
    return NULL;
}

static void test_concurrency(void)
{
    begin("concurrent_8_writers_one_mover");
    cj = open_journal("conc.journal", 64 * 1024, 0);
    if (cj) {
        pthread_t th[THREADS];
        atomic_store(&writers_done, 0);
        for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, appender, (void *)t);
        long next_log[THREADS] = { 0 };
        long logs = 0, snapshots = 0, snap_bad = 0, bad = 0;
        uint8_t bufs[2][8192];
        vaka_journal_record rec[2];
        int cur = 0, have = 0;
        size_t needed = 0;
        size_t snap_cap = 0;
        vaka_journal_snapshot_breadcrumbs(cj, NULL, 0, &snap_cap);
        uint8_t *snap = malloc(snap_cap);
        for (;;) {
            int done = atomic_load(&writers_done) == THREADS;
            int got = 0;
            for (;;) {
                int rc = vaka_journal_next(cj, VAKA_JOURNAL_LOG, have ? &rec[cur ^ 1] : NULL, bufs[cur],
                                           sizeof bufs[cur], &rec[cur], &needed);
                if (rc != 1) break;
                char prefix[16];
                long t = -1, idx = -1;
                if (rec[cur].body_len > 2 && rec[cur].body[0] == 't') t = rec[cur].body[1] - '0';
                if (t >= 0 && t < THREADS) {
                    snprintf(prefix, sizeof prefix, "t%ld", t);
                    if (!body_matches(&rec[cur], prefix, &idx)) idx = -1;
                }
                if (idx < 0 || idx < next_log[t]) { bad++; }
                else {
                    /* thread t's logs are the indexes with i % 3 != 2, in order, none missing */
                    long want = next_log[t];
                    while (want % 3 == 2) want++;
                    if (idx != want) bad++;
                    next_log[t] = idx + 1;
                }
                logs++;
                have = 1;
                cur ^= 1;
                got++;
                if (got % 64 == 0) vaka_journal_consume(cj, &rec[cur ^ 1]);
            }
            if (have) vaka_journal_consume(cj, &rec[cur ^ 1]);
            long used = vaka_journal_snapshot_breadcrumbs(cj, snap, snap_cap, &needed);
            vaka_journal_reader *rd = NULL;
            if (used >= 0 && vaka_journal_reader_open_memory(snap, (size_t)used, &rd) == 0) {
                vaka_journal_record r;
                uint64_t prev = 0;
                while (vaka_journal_reader_next(rd, &r)) {
                    long idx;
                    char prefix[16];
                    snprintf(prefix, sizeof prefix, "t%c", r.body_len > 1 ? r.body[1] : '?');
                    if (r.seq <= prev || !body_matches(&r, prefix, &idx) || idx % 3 != 2) snap_bad++;
                    prev = r.seq;
                }
                if (vaka_journal_reader_skipped(rd)) snap_bad++;
                vaka_journal_reader_close(rd);
                snapshots++;
            }
            if (done && got == 0) break;
        }
        for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
        long per_thread_logs = PER_THREAD - PER_THREAD / 3;
        long expect_logs = 0;
        for (long i = 0; i < PER_THREAD; i++) expect_logs += i % 3 != 2;
        (void)per_thread_logs;
        EXPECT(bad == 0, "%ld log records out of order, damaged or repeated", bad);
        EXPECT(logs == expect_logs * THREADS, "mover got %ld log records, appended %ld", logs, expect_logs * THREADS);
        for (int t = 0; t < THREADS; t++)
            EXPECT(next_log[t] >= PER_THREAD - 2, "thread %d: last log index %ld", t, next_log[t]);
        EXPECT(snap_bad == 0 && snapshots > 0, "%ld damaged snapshots of %ld", snap_bad, snapshots);
        EXPECT(vaka_journal_last_seq(cj) == (uint64_t)THREADS * PER_THREAD, "last_seq %llu",
               (unsigned long long)vaka_journal_last_seq(cj));
        free(snap);
        vaka_journal_close(cj);
        /* Offline: every breadcrumb kept is intact, and the reader skipped nothing. */
        vaka_journal_reader *rd = NULL;
        EXPECT(vaka_journal_reader_open(path_for("conc.journal"), &rd) == 0, "reader");
        EXPECT(vaka_journal_reader_skipped(rd) == 0, "offline reader skipped %llu",
               (unsigned long long)vaka_journal_reader_skipped(rd));
        vaka_journal_reader_close(rd);
    }
    end_check();
}

/* ------------------------------------------------------------------ SIGKILL */

#define KILL_RECORDS 10000

/* One round: a child appends KILL_RECORDS records (logs, events, breadcrumbs in turn), publishing after each
 * append how many it completed; the parent SIGKILLs it after `delay_us`. Returns 0 when the journal holds every
 * completed gated record in order and at most one torn one; else fills `why`. */
static int kill_round(const char *path, int flags, long delay_us, char *why, size_t why_len, long *completed)
{
    _Atomic long *done = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    atomic_store(done, 0);
    pid_t pid = fork();
    if (pid == 0) {
        vaka_journal_options o = { .path = path, .size = 64 * 1024, .flags = flags };
        vaka_journal *j = NULL;
        if (vaka_journal_open(&o, &j) != 0) _exit(3);
        atomic_store(done, -1); /* opened */
        char body[256];
        for (long i = 0; i < KILL_RECORDS; i++) {
            make_body(body, 200, "rec", i);
            uint8_t kind = i % 3 == 0 ? VAKA_JOURNAL_LOG : i % 3 == 1 ? VAKA_JOURNAL_EVENT : VAKA_JOURNAL_BREADCRUMB;
            if (vaka_journal_append(j, &(vaka_journal_entry){ .kind = kind, .level = 9, .body = body,
                                                              .body_len = 200 }, NULL) != 0)
                _exit(4);
            atomic_store(done, i + 1);
        }
        for (;;) pause();
    }
    while (atomic_load(done) == 0) usleep(100);
    struct timespec ts = { delay_us / 1000000, (delay_us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    long n = atomic_load(done);
    munmap((void *)done, 4096);
    *completed = n;
    if (!WIFSIGNALED(status)) { snprintf(why, why_len, "child ended with status %d", status); return 1; }
    vaka_journal_reader *rd = NULL;
    int rc = vaka_journal_reader_open(path, &rd);
    if (rc) { snprintf(why, why_len, "reader_open %d", rc); return 1; }
    vaka_journal_record r;
    long expect = 0, crumbs = 0, last_crumb = -1;
    uint64_t prev_seq = 0;
    int failed = 0;
    while (vaka_journal_reader_next(rd, &r)) {
        long idx;
        if (!body_matches(&r, "rec", &idx) || r.seq != (uint64_t)idx + 1 || r.seq <= prev_seq) {
            snprintf(why, why_len, "damaged or misordered record seq %llu", (unsigned long long)r.seq);
            failed = 1;
            break;
        }
        prev_seq = r.seq;
        if (r.kind == VAKA_JOURNAL_BREADCRUMB) { crumbs++; last_crumb = idx; continue; }
        while (expect % 3 == 2) expect++;
        if (idx != expect) {
            snprintf(why, why_len, "gated record %ld where %ld was expected (completed %ld)", idx, expect, n);
            failed = 1;
            break;
        }
        expect = idx + 1;
    }
    long want = n;
    while (want > 0 && (want - 1) % 3 == 2) want--; /* the last completed gated index + 1 */
    if (!failed && expect < want) {
        snprintf(why, why_len, "records lost: read up to %ld, the child completed %ld", expect, n);
        failed = 1;
    }
    if (!failed && expect > n + 1) {
        snprintf(why, why_len, "more records than appended: %ld > %ld", expect, n + 1);
        failed = 1;
    }
    if (!failed && vaka_journal_reader_skipped(rd) > 1) {
        snprintf(why, why_len, "%llu torn records", (unsigned long long)vaka_journal_reader_skipped(rd));
        failed = 1;
    }
    /* The newest completed breadcrumb survived. */
    long want_crumb = -1;
    for (long i = n - 1; i >= 0; i--) if (i % 3 == 2) { want_crumb = i; break; }
    if (!failed && last_crumb < want_crumb) {
        snprintf(why, why_len, "newest breadcrumb %ld, the child had appended %ld", last_crumb, want_crumb);
        failed = 1;
    }
    (void)crumbs;
    vaka_journal_reader_close(rd);
    return failed;
}

static void test_kill(int rounds, unsigned seed)
{
    begin("sigkill_at_random_moments");
    srand(seed);
    int failures = 0, mid = 0;
    for (int i = 0; i < rounds; i++) {
        char why[256] = "";
        long completed = 0;
        long delay = rand() % 4000; /* µs: 10,000 appends take a few ms */
        if (kill_round(path_for("kill.journal"), 0, delay, why, sizeof why, &completed)) {
            failures++;
            EXPECT(0, "round %d (delay %ld us, seed %u): %s", i, delay, seed, why);
        }
        if (completed > 0 && completed < KILL_RECORDS) mid++;
    }
    EXPECT(mid >= rounds / 4, "only %d of %d kills landed while appending", mid, rounds);
    printf("kill rounds %d, mid-append %d, failures %d\n", rounds, mid, failures);
    end_check();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--concurrency") == 0) {
        scratch = argv[2];
        test_concurrency();
    } else if (argc == 5 && strcmp(argv[1], "--kill") == 0) {
        scratch = argv[2];
        test_kill(atoi(argv[3]), (unsigned)strtoul(argv[4], NULL, 10));
    } else if (argc == 2) {
        scratch = argv[1];
        test_round_trip();
        test_torn();
        test_breadcrumb_wrap();
        test_gated_spill();
        test_no_mmap();
        test_private_under_umask();
        test_registration();
        test_random_damage();
        test_hostile_files();
        test_spill_reclaimed();
        test_close_under_handler();
        test_concurrency();
    } else {
        fprintf(stderr, "usage: journal_unit DIR | --concurrency DIR | --kill DIR N SEED\n");
        return 2;
    }
    printf("checks %d failed %d\n", checks_run, checks_failed);
    return checks_failed != 0;
}
