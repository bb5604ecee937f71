/*
 * Vaka journal — private layout shared by journal.c (open, append, the mover's walk, snapshot, close),
 * journal_read.c (the offline reader) and sig_journal.c (last_seq, the fallback sync, the crash handler's
 * registration). The file format is described in docs/journal.md; the numbers are here.
 *
 * The file: a VAKA_JH_PAGE-byte header page, then the breadcrumb ring, the event ring and the log ring.
 * Every number is little-endian (the in-memory layout is the file layout; x86_64 and aarch64 only).
 */
#ifndef VAKA_JOURNAL_INTERNAL_H
#define VAKA_JOURNAL_INTERNAL_H

#include "vaka/vaka_journal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* ---------------------------------------------------------------- the header page */
#define VAKA_JH_PAGE 4096u
#define VAKA_JH_MAGIC "VAKAJRNL"   /* bytes 0..7 */
#define VAKA_JH_VERSION 1u         /* u32 at 8 */
/* u32 at 12: VAKA_JH_PAGE; u64 at 16: file size; u32 at 24: 1 when mapped, 0 in the fallback. */
#define VAKA_JH_OFF_VERSION 8
#define VAKA_JH_OFF_PAGE 12
#define VAKA_JH_OFF_SIZE 16
#define VAKA_JH_OFF_MAPPED 24
/* u64 at 64: the last sequence number handed out (own cache line). */
#define VAKA_JH_OFF_SEQ 64
/* Ring descriptor of kind k (1..3) at 256*k: u64 offset (from the file start), u64 size (bytes), u64 head at
 * +64 (logical position after the last reservation), u64 tail at +128 (gated: logical position up to which the
 * mover consumed), u64 spill_consumed at +136 (gated: spill offset up to which records of this kind are
 * consumed). Head and tail sit on their own cache lines. */
#define VAKA_JH_RING(k) (256u * (unsigned)(k))
#define VAKA_JH_R_OFFSET 0
#define VAKA_JH_R_SIZE 8
#define VAKA_JH_R_HEAD 64
#define VAKA_JH_R_TAIL 128
#define VAKA_JH_R_SPILL_CONSUMED 136

/* ---------------------------------------------------------------- a record */
/* Header, 6 little-endian u64 words (VAKA_JR_HEADER bytes), then the category, the body and the attributes,
 * each zero-padded to 8 bytes:
 *   w0: u16 magic VAKA_JR_MAGIC, u8 kind (0: pad), u8 level, u32 size (whole record, a multiple of 8)
 *   w1: logical position (ring: monotonic byte position; spill: monotonic too, the file offset plus the
 *       position of the file's first record) — a header is valid only where it names its own position
 *   w2: commit: the sequence number, stored last with release; 0 while the record is being written
 *   w3: time_ns
 *   w4: u32 category length, u32 body length
 *   w5: u32 attributes length, u32 check (vaka_jr_check over w0, w1, seq, w3, w4, the low half of w5 and the
 *       padded payload words)
 * A pad record (kind 0) fills the end of a lap; an end of lap shorter than a header is padding implicitly. */
#define VAKA_JR_MAGIC 0x4A56u
#define VAKA_JR_HEADER 48u
#define VAKA_JR_W_COMMIT 2

static inline uint64_t vaka_jr_a8(uint64_t n) { return (n + 7u) & ~(uint64_t)7u; }
/* The check: two lanes over the words, x = rotl(x, 5) ^ w and s = s + w (independent one- and two-cycle
 * chains: no added latency on the append path), folded to 32 bits as f = x ^ s * K, f ^ f >> 32. It catches a
 * record whose words come from two different writes (a torn or overwritten record) and damage: a difference
 * in one word always changes it; differences in several words cancel in both lanes with a chance of about
 * 2^-32. */
typedef struct vaka_jr_check { uint64_t x, s; } vaka_jr_check;
static inline void vaka_jr_mix(vaka_jr_check *c, uint64_t w)
{
    c->x = ((c->x << 5) | (c->x >> 59)) ^ w;
    c->s += w;
}
static inline uint32_t vaka_jr_fold(vaka_jr_check c)
{
    uint64_t f = c.x ^ (c.s * 0x9E3779B97F4A7C15ull);
    return (uint32_t)(f ^ (f >> 32));
}
#define VAKA_JR_SEED 0x6A6F75726E616C31ull
/* The check of a header's fields (payload words are mixed in after this). */
static inline vaka_jr_check vaka_jr_header_hash(uint64_t w0, uint64_t pos, uint64_t seq, uint64_t t, uint64_t w4,
                                                uint32_t attr_len)
{
    vaka_jr_check c = { VAKA_JR_SEED, 0 };
    vaka_jr_mix(&c, w0);
    vaka_jr_mix(&c, pos);
    vaka_jr_mix(&c, seq);
    vaka_jr_mix(&c, t);
    vaka_jr_mix(&c, w4);
    vaka_jr_mix(&c, attr_len);
    return c;
}
static inline uint64_t vaka_jr_w0(uint8_t kind, uint8_t level, uint32_t size)
{
    return (uint64_t)VAKA_JR_MAGIC | (uint64_t)kind << 16 | (uint64_t)level << 24 | (uint64_t)size << 32;
}

/* Validates the record at `p` (`avail` bytes readable, 8-aligned): 1 when the magic, the size, the position
 * (`expect_pos`, or any when `check_pos` is 0), a non-zero commit and the check all hold. */
int vaka_jr_valid(const uint8_t *p, uint64_t avail, uint64_t expect_pos, int check_pos);
/* Fills *r from the valid record at `p`. */
void vaka_jr_decode(const uint8_t *p, vaka_journal_record *r);

/* ---------------------------------------------------------------- the open journal */
typedef struct vaka_jring {
    uint8_t *base;               /* first byte of the ring in `mem` */
    uint64_t size;               /* bytes, a multiple of 8 */
    _Atomic uint64_t *head;      /* in the header page */
    _Atomic uint64_t *tail;
    _Atomic uint64_t *spill_consumed;
} vaka_jring;

struct vaka_journal {
    uint8_t *mem;                /* header page + rings: the shared mapping, or anonymous memory (fallback) */
    size_t size;
    int fd;                      /* the journal file, O_RDWR */
    int mapped;
    int mmap_error;
    _Atomic uint64_t *seq;       /* in the header page */
    vaka_jring rings[4];         /* by kind; [0] unused */
    /* The spill file: opened at the first spill, appended under spill_lock (the only lock, never on the
     * ring path). spill_len: bytes written; spill_published: the same, stored after each write (release). */
    pthread_mutex_t spill_lock;
    int spill_fd;
    uint64_t spill_len;
    _Atomic uint64_t spill_published;
    /* Spill positions are logical (they only grow); the file holds those from spill_base on, at file offset
     * position - spill_base. Once every spilled record is consumed the file is truncated to 0 and spill_base
     * moves to spill_len (under spill_lock), so the 64 MiB limit bounds what is unconsumed, not what was ever
     * spilled. spill_end[k]: the position after the last record of kind k written (under spill_lock). */
    _Atomic uint64_t spill_base;
    uint64_t spill_end[4];
    char *path;
    char *spill_path;
};

/* ---------------------------------------------------------------- crash handler registration (sig_journal.c) */
/* What the handler needs of the registered journal, copied at registration into static storage. */
typedef struct vaka_sig_journal_slot {
    _Atomic uint64_t *seq;
    const uint8_t *mem;
    size_t size;
    int fd;
    int mapped;
} vaka_sig_journal_slot;
/* The two slots; vaka_sig_journal_current is the index of the registered one, -1 when none. */
extern vaka_sig_journal_slot vaka_sig_journal_slots[2];
extern atomic_int vaka_sig_journal_current;
/* Crash handlers inside vaka_sig_journal_seq / vaka_sig_journal_sync_registered right now: vaka_journal_close
 * waits for them (bounded) before it unmaps a journal that was registered. */
extern atomic_int vaka_sig_journal_readers;
/* Writes `len` bytes at `mem` to `fd` from offset 0 with pwrite (async-signal-safe). Returns 0, or the errno of
 * the write that failed (EFBIG past RLIMIT_FSIZE, which also raises SIGXFSZ; EIO for a write of 0 bytes). */
int vaka_sig_journal_write_image(int fd, const uint8_t *mem, size_t len);
/* The registered journal's last sequence number into *seq: 1, or 0 when no journal is registered
 * (async-signal-safe: two loads). */
int vaka_sig_journal_seq(uint64_t *seq);
/* In the fallback, writes the registered journal's rings to its file (async-signal-safe). */
void vaka_sig_journal_sync_registered(void);

#pragma GCC visibility pop

#endif /* VAKA_JOURNAL_INTERNAL_H */
