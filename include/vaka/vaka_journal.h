/*
 * Vaka journal — a crash-safe record ring in a memory-mapped file, one per run
 * (`<storage>/runs/<run-id>/journal`). Public C interface; the file format is in docs/journal.md.
 *
 * A record is (sequence number, timestamp, kind, level, category, body, attributes). Appending one is a
 * bounded copy into the mapping plus an atomic commit: no lock, no allocation, no system call on the fast
 * path, safe from any thread (and from a fork()ed child sharing the mapping). Because the mapping is
 * MAP_SHARED, every committed record survives the process dying in any way (crash, SIGKILL, OOM killer);
 * the next launch reads the file in sequence order and skips a record whose writer died mid-copy.
 *
 * The file holds three rings, one per kind:
 *   - breadcrumbs: overwritten oldest first (no reader consumes them; the newest always survive);
 *   - events, logs: "gated" — a record is never overwritten before the process's mover has consumed it
 *     (vaka_journal_consume). When a gated ring has no room, the record is appended to the spill file
 *     `<journal path>.spill` with one write(2) instead (same record format), and read back from there.
 *
 * When mmap(MAP_SHARED) of the file is refused (a filesystem without shared mappings, or
 * VAKA_JOURNAL_NO_MMAP), the rings live in anonymous shared memory and vaka_journal_sync() writes them to the
 * file (one pwrite(2) of the whole image); the crash handler calls it too (vaka_crash_set_journal), so only a
 * SIGKILL loses the records since the last sync.
 *
 * A record is accepted by a reader only where it is committed, names its own logical position and its 32-bit
 * check matches: a record torn by its writer's death, or overwritten while a reader copied it, is skipped.
 *
 * Everything here is ordinary code except where a function says "async-signal-safe".
 */
#ifndef VAKA_JOURNAL_H
#define VAKA_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Journal file size used when the options give 0, in bytes: 256 KiB. */
#define VAKA_JOURNAL_DEFAULT_SIZE (256 * 1024)
/** Smallest journal file, in bytes: 16 KiB (smaller sizes are raised to it). */
#define VAKA_JOURNAL_MIN_SIZE (16 * 1024)
/** Largest journal file, in bytes: 64 MiB (larger sizes are lowered to it). */
#define VAKA_JOURNAL_MAX_SIZE (64 * 1024 * 1024)
/** Largest spill file, in bytes: 64 MiB; an append that would grow it further fails with ENOSPC. The file
 *  starts over (truncated) once every record spilled to it is consumed. */
#define VAKA_JOURNAL_MAX_SPILL (64 * 1024 * 1024)
/** Largest record (header, category, body and attributes), in bytes: 4 MiB; larger appends fail with EFBIG. */
#define VAKA_JOURNAL_MAX_RECORD (4 * 1024 * 1024)

/** Record kinds; each kind has its own ring. */
enum vaka_journal_kind {
    VAKA_JOURNAL_BREADCRUMB = 1, /**< a breadcrumb (overwrite ring) */
    VAKA_JOURNAL_LOG = 2,        /**< a log record (gated ring) */
    VAKA_JOURNAL_EVENT = 3,      /**< an encoded event (gated ring) */
};

/** Record levels: the OpenTelemetry severity numbers Sentry logs use. */
enum vaka_journal_level {
    VAKA_JOURNAL_TRACE = 1, VAKA_JOURNAL_DEBUG = 5, VAKA_JOURNAL_INFO = 9,
    VAKA_JOURNAL_WARN = 13, VAKA_JOURNAL_ERROR = 17, VAKA_JOURNAL_FATAL = 21,
};

/** Attribute value types in the attribute encoding (see vaka_journal_entry.attributes). */
enum vaka_journal_attribute_type {
    VAKA_JOURNAL_STRING = 1,  /**< value: UTF-8 bytes */
    VAKA_JOURNAL_INTEGER = 2, /**< value: 8 bytes, int64 little-endian */
    VAKA_JOURNAL_DOUBLE = 3,  /**< value: 8 bytes, IEEE 754 binary64 little-endian */
    VAKA_JOURNAL_BOOLEAN = 4, /**< value: 1 byte, 0 or 1 */
};
/** Attribute flag: the attribute is the SDK's own (e.g. a breadcrumb's `type`), not user data. */
#define VAKA_JOURNAL_ATTRIBUTE_META 0x01

/** vaka_journal_options.flags: do not try mmap; use the anonymous-memory + write(2) fallback (tests). */
#define VAKA_JOURNAL_NO_MMAP 0x01

/** How to open a journal. Strings are copied. */
typedef struct vaka_journal_options {
    /** The journal file, created (mode 0600) or truncated; its directory must exist. */
    const char *path;
    /** File size in bytes; 0 selects VAKA_JOURNAL_DEFAULT_SIZE; clamped to [MIN, MAX], rounded to pages.
     *  Split: 3/8 breadcrumbs, 3/8 events, 2/8 logs (after a one-page header). */
    size_t size;
    /** VAKA_JOURNAL_NO_MMAP or 0. */
    int flags;
} vaka_journal_options;

/** An open journal (opaque). */
typedef struct vaka_journal vaka_journal;

/** One record to append. Pointers are read during the call only.
 *  `attributes` is a sequence of encoded attributes, each:
 *    u8 type (vaka_journal_attribute_type), u8 flags (VAKA_JOURNAL_ATTRIBUTE_META or 0),
 *    u16 key length (LE), u32 value length (LE), key bytes (UTF-8), value bytes. */
typedef struct vaka_journal_entry {
    uint8_t kind;                /**< vaka_journal_kind */
    uint8_t level;               /**< vaka_journal_level (0: none) */
    uint64_t time_ns;            /**< CLOCK_REALTIME, ns since the epoch; 0 = now */
    const void *category;        /**< UTF-8, may be NULL when category_len is 0 */
    uint32_t category_len;       /**< bytes */
    const void *body;            /**< UTF-8 text (breadcrumb message, log body) or event JSON */
    uint32_t body_len;           /**< bytes */
    const void *attributes;      /**< encoded attributes, see above */
    uint32_t attributes_len;     /**< bytes */
} vaka_journal_entry;

/** A record read back. Pointers point into the reader's or the caller's buffer. */
typedef struct vaka_journal_record {
    uint64_t seq;                /**< sequence number: 1, 2, 3 ... across all kinds, in append order */
    uint64_t time_ns;
    uint8_t kind, level;
    int consumed;                /**< 1: a gated record the mover had already consumed (offline reader only) */
    const uint8_t *category; uint32_t category_len;
    const uint8_t *body; uint32_t body_len;
    const uint8_t *attributes; uint32_t attributes_len;
    uint64_t cursor[2];          /**< opaque: where the record was (for vaka_journal_next / _consume) */
} vaka_journal_record;

/** Opens (creates) a journal. Returns 0 and sets *out, or an errno value (bad options, the file cannot be
 *  created or sized). A refused mmap is not an error: the fallback is used (vaka_journal_is_mapped == 0). */
int vaka_journal_open(const vaka_journal_options *options, vaka_journal **out);

/** 1 when the rings are a shared mapping of the file, 0 in the write(2) fallback. */
int vaka_journal_is_mapped(const vaka_journal *journal);

/** The errno of the refused mmap that selected the fallback (EINVAL, ENODEV...; EPERM when VAKA_JOURNAL_NO_MMAP
 *  asked for it), or 0. */
int vaka_journal_mmap_error(const vaka_journal *journal);

/** Appends one record: lock-free, no allocation, from any thread. Sets *seq_out (may be NULL).
 *  Returns 0; EINVAL (bad kind or pointers), EFBIG (over VAKA_JOURNAL_MAX_RECORD), or for a gated ring
 *  that is full, the errno of the spill write (ENOSPC when the spill is over VAKA_JOURNAL_MAX_SPILL). */
int vaka_journal_append(vaka_journal *journal, const vaka_journal_entry *entry, uint64_t *seq_out);

/** The last sequence number handed out (0 before the first append). Async-signal-safe (one atomic load). */
uint64_t vaka_journal_last_seq(const vaka_journal *journal);

/** Copies the next committed record of a gated kind (LOG or EVENT) after `after` (NULL: the first
 *  unconsumed one), ring and spill merged by seq, into `buf` (`cap` bytes) and fills *record (pointers into
 *  buf). Returns 1 when a record was copied, 0 when there is none committed yet after `after` (a record
 *  still being written stops the walk: order is kept), -1 with *needed set when `buf` is too small.
 *  Does not consume. One consumer per kind (the mover); `after` is a record this function returned. */
int vaka_journal_next(vaka_journal *journal, uint8_t kind, const vaka_journal_record *after, void *buf,
                      size_t cap, vaka_journal_record *record, size_t *needed);

/** How full the ring of `kind` is: bytes held (unconsumed, for gated kinds) per 1000 of its size, 0..1000. */
int vaka_journal_fill_permille(const vaka_journal *journal, uint8_t kind);

/** Marks `record` (from vaka_journal_next) and everything of its kind before it consumed: its space can be
 *  reused. Call only once what the record carried is durable elsewhere. */
void vaka_journal_consume(vaka_journal *journal, const vaka_journal_record *record);

/** Copies the breadcrumb ring's committed records, consistent against concurrent appends, into `buf` and
 *  returns the bytes used (parse with vaka_journal_reader_open_memory), or -1 with *needed when too small
 *  (*needed is the ring's size, enough for any snapshot). The records are in seq order; records a concurrent
 *  append may have overwritten while they were copied are left out. */
long vaka_journal_snapshot_breadcrumbs(vaka_journal *journal, void *buf, size_t cap, size_t *needed);

/** Fallback only (no-op when mapped): writes the header page and the rings to the file (pwrite(2) from offset 0).
 *  Normal context (the crash handler writes the registered journal itself). SIGXFSZ is blocked on the calling
 *  thread during the write, so past an RLIMIT_FSIZE quota it fails quietly instead of ending the process (the
 *  spill's write(2) does the same: the append fails with EFBIG or EIO). A record being appended meanwhile may
 *  reach the file torn (readers skip it). */
void vaka_journal_sync(vaka_journal *journal);

/** Closes the journal (syncs in the fallback; unmaps; unregisters it from the crash handler when it is the
 *  registered one). No other call on it may run or follow. The file stays. */
void vaka_journal_close(vaka_journal *journal);

/** Offline reader of a journal file (the next launch, `vaka journal show`): every valid record of every
 *  ring and the spill file, sorted by seq; records torn by the writer's death are skipped. */
typedef struct vaka_journal_reader vaka_journal_reader;

/** Reads `path` (and `path`.spill when present) whole into memory. Returns 0 or an errno value
 *  (ENOENT; EBADMSG for a file that is not a journal; EFBIG over the size limits). */
int vaka_journal_reader_open(const char *path, vaka_journal_reader **out);

/** A reader over a buffer filled by vaka_journal_snapshot_breadcrumbs (copied). */
int vaka_journal_reader_open_memory(const void *data, size_t len, vaka_journal_reader **out);

/** The next record in seq order into *record (pointers valid until the reader is closed); 1, or 0 at the end. */
int vaka_journal_reader_next(vaka_journal_reader *reader, vaka_journal_record *record);

/** Records skipped as torn or damaged. */
uint64_t vaka_journal_reader_skipped(const vaka_journal_reader *reader);

/** Frees the reader. */
void vaka_journal_reader_close(vaka_journal_reader *reader);

#ifdef __cplusplus
}
#endif

#endif /* VAKA_JOURNAL_H */
