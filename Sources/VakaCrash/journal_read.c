/*
 * Vaka journal — the offline reader (the next launch, `vaka journal show`) and the record checks every
 * reader shares. Reads the journal file (and its spill) whole into memory, collects every valid record of
 * every ring — a record is valid where it names its own position, is committed and its check matches — and
 * hands them out in sequence order. Record format: journal_internal.h, docs/journal.md.
 */
#include "journal_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int vaka_jr_valid(const uint8_t *p, uint64_t avail, uint64_t expect_pos, int check_pos)
{
    if (avail < VAKA_JR_HEADER) return 0;
    uint64_t w[6];
    memcpy(w, p, sizeof w);
    uint32_t size = (uint32_t)(w[0] >> 32);
    if ((w[0] & 0xFFFF) != VAKA_JR_MAGIC || size < VAKA_JR_HEADER || (size & 7) || size > avail) return 0;
    if (check_pos && w[1] != expect_pos) return 0;
    if (w[2] == 0) return 0;
    uint8_t kind = (uint8_t)(w[0] >> 16);
    uint32_t cat = (uint32_t)w[4], body = (uint32_t)(w[4] >> 32), attr = (uint32_t)w[5];
    vaka_jr_check h = vaka_jr_header_hash(w[0], w[1], w[2], w[3], w[4], attr);
    if (kind != 0) {
        uint64_t payload = vaka_jr_a8(cat) + vaka_jr_a8(body) + vaka_jr_a8(attr);
        if (VAKA_JR_HEADER + payload != size) return 0;
        for (uint64_t i = 0; i < payload; i += 8) {
            uint64_t x;
            memcpy(&x, p + VAKA_JR_HEADER + i, 8);
            vaka_jr_mix(&h, x);
        }
    } else if (w[3] != 0 || w[4] != 0 || attr != 0) {
        return 0;
    }
    return vaka_jr_fold(h) == (uint32_t)(w[5] >> 32);
}

void vaka_jr_decode(const uint8_t *p, vaka_journal_record *r)
{
    uint64_t w[6];
    memcpy(w, p, sizeof w);
    memset(r, 0, sizeof *r);
    r->seq = w[2];
    r->time_ns = w[3];
    r->kind = (uint8_t)(w[0] >> 16);
    r->level = (uint8_t)(w[0] >> 24);
    r->category_len = (uint32_t)w[4];
    r->body_len = (uint32_t)(w[4] >> 32);
    r->attributes_len = (uint32_t)w[5];
    const uint8_t *q = p + VAKA_JR_HEADER;
    r->category = q;
    q += vaka_jr_a8(r->category_len);
    r->body = q;
    q += vaka_jr_a8(r->body_len);
    r->attributes = q;
}

struct vaka_journal_reader {
    uint8_t *data;                /* the journal file (or the snapshot copy) */
    uint8_t *spill;               /* the spill file, NULL when none */
    vaka_journal_record *records; /* sorted by seq */
    size_t count, next;
    uint64_t skipped;
};

static int read_whole(const char *path, uint64_t limit, uint8_t **out, size_t *len)
{
    /* O_NONBLOCK: opening a FIFO left where a journal belongs must not wait for a writer (it is refused
     * below as not a regular file). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return errno;
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); return e; }
    if (!S_ISREG(st.st_mode)) { close(fd); return EBADMSG; }
    if ((uint64_t)st.st_size > limit) { close(fd); return EFBIG; }
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n + 8);
    if (b == NULL) { close(fd); return ENOMEM; }
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, b + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        done += (size_t)r;
    }
    close(fd);
    memset(b + done, 0, 8);
    *out = b;
    *len = done;
    return 0;
}

static int add(vaka_journal_reader *rd, size_t *cap, const vaka_journal_record *r)
{
    if (rd->count == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        vaka_journal_record *n = realloc(rd->records, nc * sizeof *n);
        if (n == NULL) return ENOMEM;
        rd->records = n;
        *cap = nc;
    }
    rd->records[rd->count++] = *r;
    return 0;
}

/* A plausible header (magic, self position, size) whose commit or check fails: a torn or damaged record. */
static int looks_like_header(const uint8_t *p, uint64_t avail, uint64_t pos)
{
    if (avail < VAKA_JR_HEADER) return 0;
    uint64_t w0, w1;
    memcpy(&w0, p, 8);
    memcpy(&w1, p + 8, 8);
    uint32_t size = (uint32_t)(w0 >> 32);
    return (w0 & 0xFFFF) == VAKA_JR_MAGIC && w1 == pos && size >= VAKA_JR_HEADER && !(size & 7);
}

/* Scans `len` bytes at `base` whose offset o holds logical positions pos with pos % modulo == o (modulo 0:
 * the spill, pos == o + the position of its first valid record); keeps valid records with pos in [lo, hi) of
 * `kind` (0: any). `consumed_below`: records before it are marked consumed. */
static int scan(vaka_journal_reader *rd, size_t *cap, const uint8_t *base, uint64_t len, uint64_t modulo,
                uint64_t lo, uint64_t hi, uint64_t consumed_below, const uint64_t *spill_consumed)
{
    uint64_t spill_base = UINT64_MAX; /* the spill's: learnt from its first valid record */
    for (uint64_t off = 0; off + VAKA_JR_HEADER <= len;) {
        const uint8_t *p = base + off;
        uint64_t w0, pos;
        memcpy(&w0, p, 8);
        memcpy(&pos, p + 8, 8);
        if (!modulo && spill_base == UINT64_MAX && pos >= off && vaka_jr_valid(p, len - off, pos, 1)) spill_base = pos - off;
        int self = modulo ? pos % modulo == off : spill_base != UINT64_MAX && pos - off == spill_base;
        if (self && pos >= lo && pos < hi && vaka_jr_valid(p, len - off, pos, 1)) {
            vaka_journal_record r;
            vaka_jr_decode(p, &r);
            if (r.kind != 0) {
                if (spill_consumed != NULL)
                    r.consumed = r.kind <= VAKA_JOURNAL_EVENT && pos < spill_consumed[r.kind];
                else
                    r.consumed = pos < consumed_below;
                int e = add(rd, cap, &r);
                if (e) return e;
            }
            off += (uint32_t)(w0 >> 32);
            continue;
        }
        if (self && pos >= lo && pos < hi && looks_like_header(p, len - off, pos)) rd->skipped++;
        off += 8;
    }
    return 0;
}

static int by_seq(const void *a, const void *b)
{
    uint64_t x = ((const vaka_journal_record *)a)->seq, y = ((const vaka_journal_record *)b)->seq;
    return x < y ? -1 : x > y;
}

static uint64_t u64_at(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

int vaka_journal_reader_open(const char *path, vaka_journal_reader **out)
{
    if (path == NULL || out == NULL) return EINVAL;
    *out = NULL;
    vaka_journal_reader *rd = calloc(1, sizeof *rd);
    if (rd == NULL) return ENOMEM;
    size_t len = 0, cap = 0;
    int rc = read_whole(path, VAKA_JOURNAL_MAX_SIZE, &rd->data, &len);
    if (rc) { free(rd); return rc; }
    const uint8_t *m = rd->data;
    uint32_t version, page;
    if (len < VAKA_JH_PAGE || memcmp(m, VAKA_JH_MAGIC, 8) != 0) { rc = EBADMSG; goto fail; }
    memcpy(&version, m + VAKA_JH_OFF_VERSION, 4);
    memcpy(&page, m + VAKA_JH_OFF_PAGE, 4);
    if (version != VAKA_JH_VERSION || page != VAKA_JH_PAGE || u64_at(m + VAKA_JH_OFF_SIZE) != len) {
        rc = EBADMSG;
        goto fail;
    }
    uint64_t spill_consumed[4] = { 0, 0, 0, 0 };
    for (uint8_t k = VAKA_JOURNAL_BREADCRUMB; k <= VAKA_JOURNAL_EVENT; k++) {
        const uint8_t *d = m + VAKA_JH_RING(k);
        uint64_t off = u64_at(d + VAKA_JH_R_OFFSET), size = u64_at(d + VAKA_JH_R_SIZE);
        uint64_t head = u64_at(d + VAKA_JH_R_HEAD), tail = u64_at(d + VAKA_JH_R_TAIL);
        spill_consumed[k] = u64_at(d + VAKA_JH_R_SPILL_CONSUMED);
        if (off < VAKA_JH_PAGE || size == 0 || (size & 7) || off > len || size > len - off) { rc = EBADMSG; goto fail; }
        uint64_t lo = head > size ? head - size : 0;
        if ((rc = scan(rd, &cap, m + off, size, size, lo, head, tail, NULL)) != 0) goto fail;
    }
    /* The spill file, when present. */
    {
        size_t plen = strlen(path);
        char *sp = malloc(plen + 7);
        if (sp == NULL) { rc = ENOMEM; goto fail; }
        memcpy(sp, path, plen);
        memcpy(sp + plen, ".spill", 7);
        size_t slen = 0;
        int src = read_whole(sp, VAKA_JOURNAL_MAX_SPILL, &rd->spill, &slen);
        free(sp);
        if (src == 0) {
            if ((rc = scan(rd, &cap, rd->spill, slen & ~(size_t)7, 0, 0, UINT64_MAX, 0, spill_consumed)) != 0) goto fail;
        } else if (src == ENOMEM) {
            rc = src;
            goto fail;
        }
        /* Any other spill that cannot be read (none, not a regular file, over the spill limit, unreadable)
         * leaves the rings' records: they are still returned. */
    }
    if (rd->count > 1) qsort(rd->records, rd->count, sizeof *rd->records, by_seq);
    *out = rd;
    return 0;
fail:
    vaka_journal_reader_close(rd);
    return rc;
}

int vaka_journal_reader_open_memory(const void *data, size_t len, vaka_journal_reader **out)
{
    if (out == NULL || (data == NULL && len)) return EINVAL;
    *out = NULL;
    vaka_journal_reader *rd = calloc(1, sizeof *rd);
    if (rd == NULL) return ENOMEM;
    rd->data = malloc(len + 8);
    if (rd->data == NULL) { free(rd); return ENOMEM; }
    if (len) memcpy(rd->data, data, len);
    size_t cap = 0;
    for (uint64_t off = 0; off + VAKA_JR_HEADER <= len;) {
        const uint8_t *p = rd->data + off;
        if (vaka_jr_valid(p, len - off, 0, 0)) {
            vaka_journal_record r;
            vaka_jr_decode(p, &r);
            if (r.kind != 0 && add(rd, &cap, &r) != 0) { vaka_journal_reader_close(rd); return ENOMEM; }
            off += (uint32_t)(u64_at(p) >> 32);
        } else {
            if ((u64_at(p) & 0xFFFF) == VAKA_JR_MAGIC) rd->skipped++;
            off += 8;
        }
    }
    if (rd->count > 1) qsort(rd->records, rd->count, sizeof *rd->records, by_seq);
    *out = rd;
    return 0;
}

int vaka_journal_reader_next(vaka_journal_reader *rd, vaka_journal_record *record)
{
    if (rd == NULL || record == NULL || rd->next >= rd->count) return 0;
    *record = rd->records[rd->next++];
    return 1;
}

uint64_t vaka_journal_reader_skipped(const vaka_journal_reader *rd) { return rd != NULL ? rd->skipped : 0; }

void vaka_journal_reader_close(vaka_journal_reader *rd)
{
    if (rd == NULL) return;
    free(rd->data);
    free(rd->spill);
    free(rd->records);
    free(rd);
}
