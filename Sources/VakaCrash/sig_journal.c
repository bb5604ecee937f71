/*
 * Signal path: the journal's async-signal-safe parts — vaka_journal_last_seq (one atomic load),
 * vaka_journal_sync (the fallback's pwrite of the rings to the file) and what the crash handler does with the
 * registered journal (vaka_crash_set_journal, journal.c): read its last sequence number into the report
 * (`journal_seq`, sig_report.c) and, in the fallback, write its rings to the file.
 *
 * Only memory reads and write/pwrite: the handler uses a copy of the journal's fields taken at registration
 * (static storage), never the journal's heap allocation.
 */
#include "journal_internal.h"

#include <errno.h>
#include <unistd.h>

vaka_sig_journal_slot vaka_sig_journal_slots[2];
atomic_int vaka_sig_journal_current = -1;
atomic_int vaka_sig_journal_readers;

uint64_t vaka_journal_last_seq(const vaka_journal *journal)
{
    if (journal == NULL) return 0;
    return atomic_load_explicit(journal->seq, memory_order_relaxed);
}

void vaka_sig_journal_write_image(int fd, const uint8_t *mem, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, mem + done, len - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        done += (size_t)n;
    }
}

void vaka_journal_sync(vaka_journal *journal)
{
    if (journal == NULL || journal->mapped) return;
    vaka_sig_journal_write_image(journal->fd, journal->mem, journal->size);
}

/* Both count themselves in vaka_sig_journal_readers before loading the registration (sequentially
 * consistent, as the unregistering store and vaka_journal_close's load of the count are): close either sees
 * the reader and waits before unmapping, or the reader sees no journal registered. */
int vaka_sig_journal_seq(uint64_t *seq)
{
    atomic_fetch_add(&vaka_sig_journal_readers, 1);
    int c = atomic_load(&vaka_sig_journal_current);
    int found = c >= 0 && c <= 1 && vaka_sig_journal_slots[c].seq != NULL;
    if (found) *seq = atomic_load_explicit(vaka_sig_journal_slots[c].seq, memory_order_relaxed);
    atomic_fetch_sub(&vaka_sig_journal_readers, 1);
    return found;
}

void vaka_sig_journal_sync_registered(void)
{
    atomic_fetch_add(&vaka_sig_journal_readers, 1);
    int c = atomic_load(&vaka_sig_journal_current);
    if (c >= 0 && c <= 1) {
        const vaka_sig_journal_slot *s = &vaka_sig_journal_slots[c];
        if (!s->mapped && s->mem != NULL && s->fd >= 0) vaka_sig_journal_write_image(s->fd, s->mem, s->size);
    }
    atomic_fetch_sub(&vaka_sig_journal_readers, 1);
}
