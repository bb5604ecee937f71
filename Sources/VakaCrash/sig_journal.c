/*
 * Signal path: the journal's async-signal-safe parts — vaka_journal_last_seq (one atomic load), the
 * fallback's pwrite of the rings to the file (vaka_journal_sync in journal.c uses it too) and what the crash handler does with the
 * registered journal (vaka_crash_set_journal, journal.c): read its last sequence number into the report
 * (`journal_seq`, sig_report.c) and, in the fallback, write its rings to the file.
 *
 * Only memory reads and write/pwrite: the handler uses a copy of the journal's fields taken at registration
 * (static storage), never the journal's heap allocation.
 */
#include "journal_internal.h"
#include "sig_state.h"

#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

vaka_sig_journal_slot vaka_sig_journal_slots[2];
atomic_int vaka_sig_journal_current = -1;
atomic_int vaka_sig_journal_readers;

uint64_t vaka_journal_last_seq(const vaka_journal *journal)
{
    if (journal == NULL) return 0;
    return atomic_load_explicit(journal->seq, memory_order_relaxed);
}

int vaka_sig_journal_write_image(int fd, const uint8_t *mem, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, mem + done, len - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return EIO;
        done += (size_t)n;
    }
    return 0;
}

/* A write over RLIMIT_FSIZE made the kernel raise SIGXFSZ on this thread, where it is blocked (the handler's
 * sa_mask; block_sigxfsz in journal.c). It is ours, not the application's: take it off the pending set (the
 * crash handler after its report or the journal's image; the journal's file writes in normal context). Here
 * rather than in sig_report_file.c so that the journal's own sources link without the rest of the runtime. */
void vaka_sig_discard_own_sigxfsz(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGXFSZ);
    struct timespec zero = { 0, 0 };
    syscall(SYS_rt_sigtimedwait, &set, NULL, &zero, (size_t)(VAKA_KERNEL_NSIG / 8));
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
        /* Past the hard RLIMIT_FSIZE the write raised SIGXFSZ (blocked while the handler runs): it is ours, not
         * the application's; left pending it would end a process that survives the signal being handled. */
        if (!s->mapped && s->mem != NULL && s->fd >= 0 &&
            vaka_sig_journal_write_image(s->fd, s->mem, s->size) == EFBIG)
            vaka_sig_discard_own_sigxfsz();
    }
    atomic_fetch_sub(&vaka_sig_journal_readers, 1);
}
