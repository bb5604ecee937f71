/*
 * Vaka journal — open, append, the mover's walk of a gated ring (next, consume, fill), the breadcrumb
 * snapshot, the fallback's sync, close, and the crash handler's registration (vaka_crash_set_journal). Normal
 * context; the async-signal-safe parts (last_seq, the image write) are in sig_journal.c, the offline reader in
 * journal_read.c. Every write to a journal file here runs with SIGXFSZ blocked (block_sigxfsz).
 * Layout and record format: journal_internal.h and docs/journal.md.
 *
 * Memory model: every word of a ring is accessed with atomic loads and stores only. A writer reserves its
 * bytes with a compare-and-swap on the ring's head, stores commit = 0, the header and payload words with
 * relaxed stores, then commit = seq with a release store. Readers load commit with acquire, copy the words
 * and accept the record only when it names its own position and its check matches (a record being written,
 * or overwritten under the reader, fails one of them). The breadcrumb snapshot also re-reads the head after
 * an acquire fence and drops records a later reservation may have overwritten (a seqlock).
 */
#include "journal_internal.h"
#include "sig_state.h"
#include "vaka_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static inline _Atomic uint64_t *word_at(uint8_t *p) { return (_Atomic uint64_t *)(void *)p; }
static inline void store_w(uint8_t *p, uint64_t v) { atomic_store_explicit(word_at(p), v, memory_order_relaxed); }
static inline uint64_t load_w(const uint8_t *p)
{
    return atomic_load_explicit(word_at((uint8_t *)p), memory_order_relaxed);
}

static int is_gated(uint8_t kind) { return kind == VAKA_JOURNAL_LOG || kind == VAKA_JOURNAL_EVENT; }

/* ---------------------------------------------------------------- open / close */

static int size_file(int fd, size_t size)
{
    if (ftruncate(fd, (off_t)size) != 0) return errno;
    /* Blocks for the whole file now: a shared mapping of a sparse file raises SIGBUS when the disk fills. */
    int rc = posix_fallocate(fd, 0, (off_t)size);
    if (rc == 0 || rc == EOPNOTSUPP || rc == EINVAL) return 0;
    return rc;
}

static void init_layout(vaka_journal *j)
{
    uint8_t *m = j->mem;
    memcpy(m, VAKA_JH_MAGIC, 8);
    uint32_t v = VAKA_JH_VERSION, page = VAKA_JH_PAGE, mapped = (uint32_t)j->mapped;
    uint64_t size = j->size;
    memcpy(m + VAKA_JH_OFF_VERSION, &v, 4);
    memcpy(m + VAKA_JH_OFF_PAGE, &page, 4);
    memcpy(m + VAKA_JH_OFF_SIZE, &size, 8);
    memcpy(m + VAKA_JH_OFF_MAPPED, &mapped, 4);
    j->seq = word_at(m + VAKA_JH_OFF_SEQ);
    uint64_t total = j->size - VAKA_JH_PAGE;
    uint64_t sizes[4] = { 0, 0, 0, 0 };
    sizes[VAKA_JOURNAL_BREADCRUMB] = (total * 3 / 8) & ~(uint64_t)7;
    sizes[VAKA_JOURNAL_EVENT] = (total * 3 / 8) & ~(uint64_t)7;
    sizes[VAKA_JOURNAL_LOG] = (total - sizes[1] - sizes[3]) & ~(uint64_t)7;
    static const uint8_t order[3] = { VAKA_JOURNAL_BREADCRUMB, VAKA_JOURNAL_EVENT, VAKA_JOURNAL_LOG };
    uint64_t offset = VAKA_JH_PAGE;
    for (int i = 0; i < 3; i++) {
        uint8_t k = order[i];
        uint8_t *d = m + VAKA_JH_RING(k);
        memcpy(d + VAKA_JH_R_OFFSET, &offset, 8);
        memcpy(d + VAKA_JH_R_SIZE, &sizes[k], 8);
        j->rings[k].base = m + offset;
        j->rings[k].size = sizes[k];
        j->rings[k].head = word_at(d + VAKA_JH_R_HEAD);
        j->rings[k].tail = word_at(d + VAKA_JH_R_TAIL);
        j->rings[k].spill_consumed = word_at(d + VAKA_JH_R_SPILL_CONSUMED);
        offset += sizes[k];
    }
}

int vaka_journal_open(const vaka_journal_options *options, vaka_journal **out)
{
    if (options == NULL || out == NULL || options->path == NULL || options->path[0] == '\0') return EINVAL;
    *out = NULL;
    size_t size = options->size == 0 ? VAKA_JOURNAL_DEFAULT_SIZE : options->size;
    if (size < VAKA_JOURNAL_MIN_SIZE) size = VAKA_JOURNAL_MIN_SIZE;
    if (size > VAKA_JOURNAL_MAX_SIZE) size = VAKA_JOURNAL_MAX_SIZE;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (page < VAKA_JH_PAGE) page = VAKA_JH_PAGE;
    size = (size + page - 1) / page * page;

    vaka_journal *j = calloc(1, sizeof *j);
    if (j == NULL) return ENOMEM;
    j->fd = -1;
    j->spill_fd = -1;
    size_t plen = strlen(options->path);
    j->path = malloc(plen + 1);
    j->spill_path = malloc(plen + 7);
    if (j->path == NULL || j->spill_path == NULL) { free(j->path); free(j->spill_path); free(j); return ENOMEM; }
    memcpy(j->path, options->path, plen + 1);
    memcpy(j->spill_path, options->path, plen);
    memcpy(j->spill_path + plen, ".spill", 7);
    pthread_mutex_init(&j->spill_lock, NULL);
    j->size = size;

    int rc = 0;
    j->fd = open(j->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (j->fd < 0) { rc = errno; goto fail; }
    /* 0600 whatever the umask (under 0377 or 0777 the next launch could not read a file of mode 0). */
    (void)fchmod(j->fd, 0600);
    if ((rc = size_file(j->fd, size)) != 0) goto fail;
    (void)unlink(j->spill_path); /* an older run's spill under the same name */

    void *m = MAP_FAILED;
    if (!(options->flags & VAKA_JOURNAL_NO_MMAP)) {
        /* MAP_POPULATE: the pages are mapped now, not by faults on the append path. */
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, j->fd, 0);
        if (m == MAP_FAILED) j->mmap_error = errno;
    } else {
        j->mmap_error = EPERM;
    }
    if (m != MAP_FAILED) {
        j->mapped = 1;
    } else {
        /* shared with fork children, as the file mapping is */
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (m == MAP_FAILED) { rc = errno; goto fail; }
    }
    j->mem = m;
    init_layout(j);
    if (!j->mapped) vaka_journal_sync(j); /* a valid, empty journal on disk from the start */
    *out = j;
    return 0;
fail:
    if (j->fd >= 0) close(j->fd);
    pthread_mutex_destroy(&j->spill_lock);
    free(j->path);
    free(j->spill_path);
    free(j);
    return rc;
}

int vaka_journal_is_mapped(const vaka_journal *journal) { return journal != NULL && journal->mapped; }

int vaka_journal_mmap_error(const vaka_journal *journal) { return journal != NULL ? journal->mmap_error : 0; }

void vaka_journal_close(vaka_journal *journal)
{
    if (journal == NULL) return;
    int c = atomic_load(&vaka_sig_journal_current);
    int unmap = 1;
    if (c >= 0 && vaka_sig_journal_slots[c].seq == journal->seq) {
        vaka_crash_set_journal(NULL);
        /* A crash handler that loaded the registration before it went may still read the mapping: wait for
         * it (at most about a second: one that never returns, e.g. left by longjmp, keeps the mapping). */
        for (int i = 0; i < 2000 && atomic_load(&vaka_sig_journal_readers) != 0; i++) {
            if (i < 1000) {
                sched_yield();
            } else {
                struct timespec ms = { 0, 1000000 };
                nanosleep(&ms, NULL);
            }
        }
        unmap = atomic_load(&vaka_sig_journal_readers) == 0;
    }
    vaka_journal_sync(journal);
    if (unmap) munmap(journal->mem, journal->size);
    close(journal->fd);
    if (journal->spill_fd >= 0) close(journal->spill_fd);
    pthread_mutex_destroy(&journal->spill_lock);
    free(journal->path);
    free(journal->spill_path);
    free(journal);
}

void vaka_crash_set_journal(vaka_journal *journal)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (journal == NULL) {
        atomic_store(&vaka_sig_journal_current, -1); /* sequentially consistent: see vaka_sig_journal_readers */
    } else {
        int c = atomic_load_explicit(&vaka_sig_journal_current, memory_order_relaxed);
        int n = c == 0 ? 1 : 0; /* the slot not in use */
        vaka_sig_journal_slot *s = &vaka_sig_journal_slots[n];
        s->seq = journal->seq;
        s->mem = journal->mem;
        s->size = journal->size;
        s->fd = journal->fd;
        s->mapped = journal->mapped;
        atomic_store_explicit(&vaka_sig_journal_current, n, memory_order_release);
    }
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- append */

/* Copies `len` bytes from `src` into the ring at `dst` as zero-padded words; mixes them into *c. */
static inline void copy_words(uint8_t *dst, const uint8_t *src, uint32_t len, vaka_jr_check *c)
{
    vaka_jr_check cc = *c;
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        vaka_jr_mix(&cc, w);
        store_w(dst + i, w);
    }
    if (i < len) {
        uint64_t w = 0;
        memcpy(&w, src + i, len - i);
        vaka_jr_mix(&cc, w);
        store_w(dst + i, w);
    }
    *c = cc;
}

/* Mixes `len` bytes at `src` as zero-padded words into *c. */
static inline void hash_words(const uint8_t *src, uint32_t len, vaka_jr_check *c)
{
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, 8);
        vaka_jr_mix(c, w);
    }
    if (i < len) {
        uint64_t w = 0;
        memcpy(&w, src + i, len - i);
        vaka_jr_mix(c, w);
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- file writes under a file size quota */

/* Blocks SIGXFSZ on the calling thread around a write to a journal file (the spill's writev, the fallback's
 * pwrite), so that a write past an RLIMIT_FSIZE quota fails with EFBIG instead of the kernel's SIGXFSZ ending
 * the process. Returns 1 when blocked (*old: the mask before). */
static int block_sigxfsz(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGXFSZ);
    return pthread_sigmask(SIG_BLOCK, &set, old) == 0;
}

/* Puts back the mask block_sigxfsz changed. After a failed write (`rc` its errno) the SIGXFSZ it raised, pending
 * on this thread, is taken off first, as the crash handler does for its report (sig_report_file.c) — unless the
 * thread had SIGXFSZ blocked already (then a pending one is the application's business). */
static void unblock_sigxfsz(int blocked, const sigset_t *old, int rc)
{
    if (!blocked) return;
    if (rc != 0 && !sigismember(old, SIGXFSZ)) vaka_sig_discard_own_sigxfsz();
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

void vaka_journal_sync(vaka_journal *journal)
{
    if (journal == NULL || journal->mapped) return;
    sigset_t old;
    int blocked = block_sigxfsz(&old);
    int rc = vaka_sig_journal_write_image(journal->fd, journal->mem, journal->size);
    unblock_sigxfsz(blocked, &old, rc);
}

/* One record to the spill file with one writev(2) (under spill_lock). */
static int spill(vaka_journal *j, const vaka_journal_entry *e, uint64_t rec, uint64_t seq, uint64_t t)
{
    static const uint8_t zeros[8];
    pthread_mutex_lock(&j->spill_lock);
    int rc = 0;
    uint64_t base = atomic_load_explicit(&j->spill_base, memory_order_relaxed);
    if (j->spill_len - base + rec > VAKA_JOURNAL_MAX_SPILL) { rc = ENOSPC; goto out; }
    if (j->spill_fd < 0) {
        j->spill_fd = open(j->spill_path, O_RDWR | O_CREAT | O_APPEND | O_TRUNC | O_CLOEXEC, 0600);
        if (j->spill_fd < 0) { rc = errno; goto out; }
        (void)fchmod(j->spill_fd, 0600); /* readable by the next launch whatever the umask */
    }
    uint64_t pos = j->spill_len;
    uint64_t w[6];
    w[0] = vaka_jr_w0(e->kind, e->level, (uint32_t)rec);
    w[1] = pos;
    w[2] = seq;
    w[3] = t;
    w[4] = (uint64_t)e->category_len | (uint64_t)e->body_len << 32;
    vaka_jr_check h = vaka_jr_header_hash(w[0], pos, seq, t, w[4], e->attributes_len);
    hash_words(e->category, e->category_len, &h);
    hash_words(e->body, e->body_len, &h);
    hash_words(e->attributes, e->attributes_len, &h);
    w[5] = (uint64_t)e->attributes_len | (uint64_t)vaka_jr_fold(h) << 32;
    struct iovec iov[7];
    int n = 0;
    iov[n++] = (struct iovec){ w, sizeof w };
    const void *parts[3] = { e->category, e->body, e->attributes };
    uint32_t lens[3] = { e->category_len, e->body_len, e->attributes_len };
    for (int i = 0; i < 3; i++) {
        if (lens[i] == 0) continue;
        iov[n++] = (struct iovec){ (void *)parts[i], lens[i] };
        uint32_t pad = (uint32_t)(vaka_jr_a8(lens[i]) - lens[i]);
        if (pad) iov[n++] = (struct iovec){ (void *)zeros, pad };
    }
    sigset_t old;
    int blocked = block_sigxfsz(&old);
    ssize_t wr = writev(j->spill_fd, iov, n);
    if (wr != (ssize_t)rec) rc = wr < 0 ? errno : EIO; /* a write cut short at the quota: EIO, no signal */
    unblock_sigxfsz(blocked, &old, rc);
    if (rc != 0) {
        /* The file holds the logical positions from spill_base on. */
        if (ftruncate(j->spill_fd, (off_t)(j->spill_len - base)) != 0) { /* keeps whatever was written; readers resync */ }
        goto out;
    }
    j->spill_len += rec;
    j->spill_end[e->kind] = j->spill_len;
    atomic_store_explicit(&j->spill_published, j->spill_len, memory_order_release);
out:
    pthread_mutex_unlock(&j->spill_lock);
    return rc;
}

int vaka_journal_append(vaka_journal *j, const vaka_journal_entry *e, uint64_t *seq_out)
{
    if (j == NULL || e == NULL || e->kind < VAKA_JOURNAL_BREADCRUMB || e->kind > VAKA_JOURNAL_EVENT) return EINVAL;
    if ((e->category_len && e->category == NULL) || (e->body_len && e->body == NULL) ||
        (e->attributes_len && e->attributes == NULL))
        return EINVAL;
    uint64_t rec = VAKA_JR_HEADER + vaka_jr_a8(e->category_len) + vaka_jr_a8(e->body_len) +
                   vaka_jr_a8(e->attributes_len);
    if (rec > VAKA_JOURNAL_MAX_RECORD) return EFBIG;
    vaka_jring *r = &j->rings[e->kind];
    int gated = is_gated(e->kind);
    if (!gated && rec > r->size) return EFBIG;
    uint64_t seq = atomic_fetch_add_explicit(j->seq, 1, memory_order_relaxed) + 1;
    uint64_t t = e->time_ns ? e->time_ns : now_ns();
    if (seq_out) *seq_out = seq;
    if (gated && rec > r->size) return spill(j, e, rec, seq, t);

    /* Reserve [start, start + rec) on the ring's logical positions; a record never straddles the ring's end. */
    uint64_t h = atomic_load_explicit(r->head, memory_order_relaxed), start, end;
    for (;;) {
        uint64_t off = h % r->size, room = r->size - off;
        start = room < rec ? h + room : h;
        end = start + rec;
        if (gated && end - atomic_load_explicit(r->tail, memory_order_acquire) > r->size)
            return spill(j, e, rec, seq, t);
        if (atomic_compare_exchange_weak_explicit(r->head, &h, end, memory_order_acquire, memory_order_relaxed))
            break;
    }
    if (start != h && start - h >= VAKA_JR_HEADER) { /* pad record to the end of the lap */
        uint8_t *p = r->base + h % r->size;
        uint32_t padlen = (uint32_t)(start - h);
        store_w(p + 8 * VAKA_JR_W_COMMIT, 0);
        atomic_thread_fence(memory_order_release);
        uint64_t w0 = vaka_jr_w0(0, 0, padlen);
        vaka_jr_check ph = vaka_jr_header_hash(w0, h, seq, 0, 0, 0);
        store_w(p, w0);
        store_w(p + 8, h);
        store_w(p + 24, 0);
        store_w(p + 32, 0);
        store_w(p + 40, (uint64_t)vaka_jr_fold(ph) << 32);
        atomic_store_explicit(word_at(p + 8 * VAKA_JR_W_COMMIT), seq, memory_order_release);
    }
    uint8_t *p = r->base + start % r->size;
    store_w(p + 8 * VAKA_JR_W_COMMIT, 0);
    atomic_thread_fence(memory_order_release);
    uint64_t w0 = vaka_jr_w0(e->kind, e->level, (uint32_t)rec);
    uint64_t w4 = (uint64_t)e->category_len | (uint64_t)e->body_len << 32;
    vaka_jr_check hh = vaka_jr_header_hash(w0, start, seq, t, w4, e->attributes_len);
    store_w(p, w0);
    store_w(p + 8, start);
    store_w(p + 24, t);
    store_w(p + 32, w4);
    uint8_t *q = p + VAKA_JR_HEADER;
    copy_words(q, e->category, e->category_len, &hh);
    q += vaka_jr_a8(e->category_len);
    copy_words(q, e->body, e->body_len, &hh);
    q += vaka_jr_a8(e->body_len);
    copy_words(q, e->attributes, e->attributes_len, &hh);
    store_w(p + 40, (uint64_t)e->attributes_len | (uint64_t)vaka_jr_fold(hh) << 32);
    atomic_store_explicit(word_at(p + 8 * VAKA_JR_W_COMMIT), seq, memory_order_release);
    return 0;
}

/* ---------------------------------------------------------------- the mover's walk of a gated ring */

int vaka_journal_fill_permille(const vaka_journal *j, uint8_t kind)
{
    if (j == NULL || kind < VAKA_JOURNAL_BREADCRUMB || kind > VAKA_JOURNAL_EVENT) return 0;
    const vaka_jring *r = &j->rings[kind];
    uint64_t head = atomic_load_explicit(r->head, memory_order_acquire);
    uint64_t used = is_gated(kind) ? head - atomic_load_explicit(r->tail, memory_order_acquire)
                                   : (head < r->size ? head : r->size);
    uint64_t pm = used * 1000 / r->size;
    return (int)(pm > 1000 ? 1000 : pm);
}

/* Copies the ring's words [off, off+len) (wrapping is impossible: records never straddle) into dst. */
static void copy_out(const uint8_t *src, uint8_t *dst, uint64_t len)
{
    for (uint64_t i = 0; i < len; i += 8) {
        uint64_t w = load_w(src + i);
        memcpy(dst + i, &w, 8);
    }
}

/* The ring record at logical position *pos (skipping pads and the implicit padding at the end of a lap).
 * Returns 1 with *at set (the record in the ring, committed and whole) and *pos at its start; 0 when the
 * position is the head (nothing there); -1 while a record there is still being written. */
static int ring_peek(const vaka_jring *r, uint64_t *pos, const uint8_t **at)
{
    uint64_t head = atomic_load_explicit(r->head, memory_order_acquire);
    for (;;) {
        if (*pos >= head) return 0;
        uint64_t off = *pos % r->size, room = r->size - off;
        if (room < VAKA_JR_HEADER) { *pos += room; continue; }
        const uint8_t *p = r->base + off;
        uint64_t commit = atomic_load_explicit(word_at((uint8_t *)p + 8 * VAKA_JR_W_COMMIT), memory_order_acquire);
        if (commit == 0) return -1;
        uint64_t w0 = load_w(p), w1 = load_w(p + 8);
        uint32_t size = (uint32_t)(w0 >> 32);
        if (w1 != *pos || (w0 & 0xFFFF) != VAKA_JR_MAGIC || size < VAKA_JR_HEADER || size > room || (size & 7))
            return -1;
        if (((w0 >> 16) & 0xFF) == 0) { *pos += size; continue; } /* pad */
        *at = p;
        return 1;
    }
}

int vaka_journal_next(vaka_journal *j, uint8_t kind, const vaka_journal_record *after, void *buf, size_t cap,
                      vaka_journal_record *record, size_t *needed)
{
    if (j == NULL || !is_gated(kind) || record == NULL) return 0;
    vaka_jring *r = &j->rings[kind];
    uint64_t rpos = after ? after->cursor[0] : atomic_load_explicit(r->tail, memory_order_acquire);
    uint64_t spos = after ? after->cursor[1] : atomic_load_explicit(r->spill_consumed, memory_order_acquire);

    /* Ring candidate. */
    const uint8_t *rp = NULL;
    int rs = ring_peek(r, &rpos, &rp);
    if (rs < 0) return 0; /* a record still being written: order is kept */
    uint64_t rseq = 0;
    uint32_t rsize = 0;
    if (rs == 1) {
        uint64_t w0 = load_w(rp);
        rsize = (uint32_t)(w0 >> 32);
        rseq = atomic_load_explicit(word_at((uint8_t *)rp + 8 * VAKA_JR_W_COMMIT), memory_order_acquire);
    }
    /* Spill candidate: the next record of this kind at or after spos. */
    uint64_t published = atomic_load_explicit(&j->spill_published, memory_order_acquire);
    uint64_t base = atomic_load_explicit(&j->spill_base, memory_order_acquire);
    if (spos < base) spos = base; /* everything before the base was consumed and truncated away */
    uint8_t sh[VAKA_JR_HEADER];
    int have_spill = 0;
    while (spos + VAKA_JR_HEADER <= published && j->spill_fd >= 0) {
        if (pread(j->spill_fd, sh, sizeof sh, (off_t)(spos - base)) != (ssize_t)sizeof sh) break;
        uint64_t w0;
        memcpy(&w0, sh, 8);
        uint32_t size = (uint32_t)(w0 >> 32);
        if ((w0 & 0xFFFF) != VAKA_JR_MAGIC || size < VAKA_JR_HEADER || (size & 7) || spos + size > published) break;
        if (((w0 >> 16) & 0xFF) == kind) { have_spill = 1; break; }
        spos += size;
    }
    if (rs == 0 && !have_spill) return 0;
    uint64_t sseq = 0;
    if (have_spill) memcpy(&sseq, sh + 8 * VAKA_JR_W_COMMIT, 8);
    int from_ring = rs == 1 && (!have_spill || rseq < sseq);
    uint64_t size;
    if (from_ring) {
        size = rsize;
    } else {
        uint64_t w0;
        memcpy(&w0, sh, 8);
        size = w0 >> 32;
    }
    if (cap < size || buf == NULL) {
        if (needed) *needed = (size_t)size;
        return -1;
    }
    if (from_ring) {
        copy_out(rp, buf, size);
        if (!vaka_jr_valid(buf, size, rpos, 1)) return 0; /* overwritten under us cannot happen (gated): torn */
        vaka_jr_decode(buf, record);
        record->cursor[0] = rpos + size;
        record->cursor[1] = spos;
    } else {
        if (pread(j->spill_fd, buf, size, (off_t)(spos - base)) != (ssize_t)size) return 0;
        /* Truncated and restarted meanwhile (a consumer of the other kind): nothing read is trusted. */
        if (atomic_load_explicit(&j->spill_base, memory_order_acquire) != base) return 0;
        if (!vaka_jr_valid(buf, size, spos, 1)) {
            /* A damaged spill record: step over it (its header's size was sane). */
            vaka_journal_record skip;
            memset(&skip, 0, sizeof skip);
            skip.cursor[0] = rpos;
            skip.cursor[1] = spos + size;
            return vaka_journal_next(j, kind, &skip, buf, cap, record, needed);
        }
        vaka_jr_decode(buf, record);
        record->cursor[0] = rpos;
        record->cursor[1] = spos + size;
    }
    record->consumed = 0;
    return 1;
}

void vaka_journal_consume(vaka_journal *j, const vaka_journal_record *record)
{
    if (j == NULL || record == NULL || !is_gated(record->kind)) return;
    vaka_jring *r = &j->rings[record->kind];
    if (record->cursor[0] > atomic_load_explicit(r->tail, memory_order_relaxed))
        atomic_store_explicit(r->tail, record->cursor[0], memory_order_release);
    if (record->cursor[1] > atomic_load_explicit(r->spill_consumed, memory_order_relaxed))
        atomic_store_explicit(r->spill_consumed, record->cursor[1], memory_order_release);
    /* Every spilled record of both gated kinds consumed: the spill file starts over (see spill_base). */
    if (atomic_load_explicit(&j->spill_published, memory_order_acquire) ==
        atomic_load_explicit(&j->spill_base, memory_order_relaxed))
        return;
    pthread_mutex_lock(&j->spill_lock);
    if (j->spill_fd >= 0 && j->spill_len > atomic_load_explicit(&j->spill_base, memory_order_relaxed) &&
        atomic_load_explicit(j->rings[VAKA_JOURNAL_LOG].spill_consumed, memory_order_acquire) >= j->spill_end[VAKA_JOURNAL_LOG] &&
        atomic_load_explicit(j->rings[VAKA_JOURNAL_EVENT].spill_consumed, memory_order_acquire) >= j->spill_end[VAKA_JOURNAL_EVENT] &&
        ftruncate(j->spill_fd, 0) == 0)
        atomic_store_explicit(&j->spill_base, j->spill_len, memory_order_release);
    pthread_mutex_unlock(&j->spill_lock);
}

/* ---------------------------------------------------------------- the breadcrumb snapshot */

typedef struct { uint64_t seq; uint64_t off; uint32_t size; } snap_entry;

static int by_seq(const void *a, const void *b)
{
    uint64_t x = ((const snap_entry *)a)->seq, y = ((const snap_entry *)b)->seq;
    return x < y ? -1 : x > y;
}

long vaka_journal_snapshot_breadcrumbs(vaka_journal *j, void *buf, size_t cap, size_t *needed)
{
    if (j == NULL) return 0;
    vaka_jring *r = &j->rings[VAKA_JOURNAL_BREADCRUMB];
    if (cap < r->size || buf == NULL) {
        if (needed) *needed = (size_t)r->size;
        return -1;
    }
    uint8_t *copy = malloc(r->size);
    snap_entry *idx = malloc(r->size / VAKA_JR_HEADER * sizeof *idx + sizeof *idx);
    if (copy == NULL || idx == NULL) { free(copy); free(idx); return 0; }
    (void)atomic_load_explicit(r->head, memory_order_acquire);
    copy_out(r->base, copy, r->size);
    atomic_thread_fence(memory_order_acquire);
    uint64_t h2 = atomic_load_explicit(r->head, memory_order_relaxed);
    uint64_t lo = h2 > r->size ? h2 - r->size : 0;
    size_t n = 0;
    for (uint64_t off = 0; off + VAKA_JR_HEADER <= r->size;) {
        const uint8_t *p = copy + off;
        uint64_t w0, pos;
        memcpy(&w0, p, 8);
        memcpy(&pos, p + 8, 8);
        if ((w0 & 0xFFFF) == VAKA_JR_MAGIC && pos % r->size == off && pos >= lo && pos < h2 &&
            vaka_jr_valid(p, r->size - off, pos, 1)) {
            uint32_t size = (uint32_t)(w0 >> 32);
            if (((w0 >> 16) & 0xFF) != 0) {
                uint64_t seq;
                memcpy(&seq, p + 16, 8);
                idx[n++] = (snap_entry){ seq, off, size };
            }
            off += size;
        } else {
            off += 8;
        }
    }
    if (n > 1) qsort(idx, n, sizeof *idx, by_seq);
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy((uint8_t *)buf + used, copy + idx[i].off, idx[i].size);
        used += idx[i].size;
    }
    free(copy);
    free(idx);
    return (long)used;
}
