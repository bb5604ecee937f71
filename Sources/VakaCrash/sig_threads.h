/*
 * Every thread of the process: the thread signal, its per-thread slots and the alternate stacks prepared for
 * the threads that existed before install. Shared by the signal-path side (sig_threads.c: the crash-time round
 * and the thread signal's handler) and the install-time side (threads.c: choosing the signal, installing its
 * handler, the install-time round that gives existing threads an alternate stack). Private to the runtime.
 * docs/crash-handling.md, *Every thread*, says why it works this way.
 */
#ifndef VAKA_SIG_THREADS_H
#define VAKA_SIG_THREADS_H

#include "vaka_internal.h"

#pragma GCC visibility push(hidden)

/** Slots of the crash-time round: the threads listed (VAKA_REPORT_MAX_THREADS, the crashed one included). */
#define VAKA_THREAD_SLOTS VAKA_REPORT_MAX_THREADS
/** Words of stack each answering thread reads per safe read in its stack scan (its own buffer: they scan at once). */
#define VAKA_THREAD_SCAN_WORDS 64
/** How long the crashed thread waits, in all, for the others to unwind themselves (ns). */
#define VAKA_THREADS_DEADLINE_NS 500000000LL
/** After this long (ns) the crashed thread looks which of the threads that have not answered block the thread
 *  signal, and stops waiting for those. */
#define VAKA_THREADS_FIRST_WAIT_NS 200000LL
/** Then how often it looks again (ns): a thread may block the signal, or start ending, meanwhile. */
#define VAKA_THREADS_RECHECK_NS 2000000LL
/** At most this long (ns) the crashed thread waits, after the thread lines, for the threads that answered to
 *  leave the thread signal's handler (their signal mask is restored only then). */
#define VAKA_THREADS_LEAVE_NS 50000000LL
/** How long install waits, in all, for the existing threads to take their alternate stacks (ns). */
#define VAKA_THREADS_ATTACH_DEADLINE_NS 100000000LL
/** Most threads given an alternate stack by install (the pool prepared for them). */
#define VAKA_THREADS_ATTACH_MAX 64

/** si_value of the thread signal: what it asks (a signal without one of these is not ours). */
#define VAKA_THREADS_ASK_UNWIND 0x56414b55 /* "VAKU" */
#define VAKA_THREADS_ASK_ATTACH 0x56414b41 /* "VAKA" */

/* State of a slot of the crash-time round. */
enum {
    VAKA_TSLOT_FREE = 0,
    VAKA_TSLOT_ASKED = 1,   /* the crashed thread sent the signal and waits */
    VAKA_TSLOT_BUSY = 2,    /* the thread is unwinding itself */
    VAKA_TSLOT_DONE = 3,    /* its frames are in the slot */
    VAKA_TSLOT_MISSED = 4,  /* the deadline passed before it started: it no longer may */
    VAKA_TSLOT_GONE = 5,    /* it ended before the signal (tgsigqueueinfo: ESRCH) */
    VAKA_TSLOT_UNSENT = 6,  /* not asked: no thread signal, its action no longer ours, or it could not be sent */
    VAKA_TSLOT_BLOCKED = 7, /* it blocks the thread signal (seen while waiting): not waited for */
    VAKA_TSLOT_OWN = 8,     /* one of Vaka's own threads (in the table the SDK marks): not asked, nothing read from /proc */
};

/** One thread of the crash-time round. Written by the crashed thread (tid, state ASKED) and then by the thread
 *  itself (name, frames, count, state DONE). */
typedef struct vaka_thread_slot {
    atomic_int tid;
    atomic_int state;          /* VAKA_TSLOT_* */
    atomic_uint count;         /* frames in ips[] (stored after them) */
    int truncated;             /* the walk stopped at VAKA_REPORT_MAX_THREAD_FRAMES */
    uint8_t method;            /* how the frames after the first were found (VAKA_FRAME_*) */
    char name[VAKA_REPORT_THREAD_NAME_MAX + 2];
    uintptr_t ips[VAKA_REPORT_MAX_THREAD_FRAMES];
    uint8_t methods[VAKA_REPORT_MAX_THREAD_FRAMES];
} vaka_thread_slot;

/** What the thread signal needs; set at install (threads.c), read by its handler and the crash-time round. */
typedef struct vaka_threads_state {
    int signal;                   /* the thread signal (a real-time signal chosen at install); 0: none */
    struct sigaction previous;    /* its action before install (a foreign sender's signal goes there) */
    atomic_int round;             /* 1 while the crash-time round waits for answers */
    atomic_uint answered;         /* futex word: threads that finished unwinding in this round */
    atomic_uint left;             /* of those, the ones at the last instruction of the handler (then only its return
                                     and rt_sigreturn, which restores their signal mask, are left) */
    atomic_uint attached;         /* futex word: threads that answered the install-time round */
    uintptr_t pool;               /* the alternate stacks for existing threads: guard page + stack, each */
    size_t pool_count;
    size_t pool_stack;            /* bytes of one stack (without its guard page) */
    atomic_size_t pool_next;      /* next stack to hand out */
    int task_dir;                 /* /proc/self/task opened at install (a crash at the descriptor limit still lists
                                     the threads); -1: none. Used only by task_dir_pid, when it is still that directory */
    pid_t task_dir_pid;
    dev_t task_dir_dev;
    ino_t task_dir_ino;
} vaka_threads_state;

extern vaka_threads_state vaka_threads;

/** How many of Vaka's own threads can be marked at once (vaka_crash_mark_own_thread, threads.c). */
#define VAKA_OWN_THREADS 32
/** One of Vaka's own threads as the SDK marked it: written by vaka_crash_mark_own_thread and cleared by
 *  vaka_crash_unmark_own_thread (threads.c) in normal context, read by the crash-time round (sig_threads.c, which
 *  defines the table). A writer holds the entry (tid -1, taken by compare-and-swap) and brackets its writes of
 *  `pid` and `name` with `seq` (odd while writing): a reader that sees the same even `seq` before and after reading
 *  them has whole ones. */
typedef struct {
    atomic_int tid;                                /* the kernel thread id; 0: a free entry, -1: being written */
    atomic_uint seq;                               /* odd while pid and name are being written */
    int pid;                                       /* the process that marked it (a fork child inherits the table,
                                                      not the threads) */
    char name[VAKA_REPORT_THREAD_NAME_MAX + 1];    /* its name as the SDK gave it, NUL-terminated */
} vaka_own_thread;
extern vaka_own_thread vaka_own_threads[VAKA_OWN_THREADS];
extern vaka_thread_slot vaka_thread_slots[VAKA_THREAD_SLOTS];

/** The thread signal's handler (sig_threads.c): unwinds the calling thread into its slot, or gives it an
 *  alternate stack from the pool; anything not sent by this process for one of those goes to the previous action. */
void vaka_sig_thread_signal(int sig, siginfo_t *info, void *context);
/** Signal safe (sig_threads.c). Sends the thread signal with `ask` (VAKA_THREADS_ASK_*) to thread `tid` of this
 *  process (rt_tgsigqueueinfo, si_code SI_QUEUE). @return 0 or the errno. */
int vaka_sig_thread_ask(pid_t tid, int ask);
/** Signal safe (sig_threads.c). Lists the threads (every entry of /proc/self/task, open + getdents64) into
 *  `tids` (at most `max`). @return how many there are in all (may exceed `max`), or -1 when unreadable. */
int vaka_sig_list_threads(pid_t *tids, int max);
/** Signal safe (sig_threads.c). The crash-time round and the thread lines of the report (after the `image`
 *  lines): asks every other thread to unwind itself, waits at most VAKA_THREADS_DEADLINE_NS, describes the ones
 *  that did not from /proc, and writes `threads`, `thread`, `thread_proc`, `thread_frames`. The crashed thread is
 *  `crashed_tid`. */
void vaka_sig_write_threads(pid_t crashed_tid);
/** Signal safe (sig_threads.c). A thread waiting for the winner lets the thread signal in (the crash handler's
 *  mask blocks it), so the crash-time round still reaches it. */
void vaka_sig_threads_allow_while_waiting(void);

/** Install time (threads.c): chooses the thread signal, installs its handler, and asks every thread that exists
 *  now to take an alternate stack (at most VAKA_THREADS_ATTACH_MAX, waiting at most
 *  VAKA_THREADS_ATTACH_DEADLINE_NS). `stack_size` is the size of each stack, bytes. */
void vaka_rt_threads_install(size_t stack_size);
/** Install time (threads.c): puts the thread signal's previous action back. */
void vaka_rt_threads_uninstall(void);

/** Images as the report's `image` lines list them (sig_images.c), for `thread_frames`' image-relative frames. */
typedef struct vaka_written_image {
    uintptr_t base;
    uintptr_t size;
} vaka_written_image;
extern vaka_written_image vaka_written_images[VAKA_MAX_IMAGES];
extern size_t vaka_written_image_count;

#pragma GCC visibility pop

#endif /* VAKA_SIG_THREADS_H */
