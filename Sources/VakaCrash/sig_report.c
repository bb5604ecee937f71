/*
 * Signal path: the report's content — the header lines (run, process, thread, time, executable, signal,
 * si_code, fault address or sender, messages, the journal's last sequence number), the registers, the frames, the images,
 * the other threads (sig_threads.c), how memory was read,
 * the capture time and `end`, in the order docs/report-format.md gives, every key from
 * vaka/vaka_report_format.h. The file it goes into comes from sig_report_file.c; a registered journal's
 * fallback is written to its file after the header (sig_journal.c).
 */
#include "sig_state.h"
#include "sig_threads.h"
#include "journal_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uintptr_t frame_ips[VAKA_REPORT_MAX_FRAMES];
static uint8_t frame_methods[VAKA_REPORT_MAX_FRAMES];
static char message_buf[VAKA_REPORT_MESSAGE_MAX];
#include <sys/prctl.h>

static void write_text_line(const char *key, const char *s, size_t n)
{
    vaka_w_key(&vaka_run.writer, key);
    vaka_w_text(&vaka_run.writer, s, n);
    vaka_w_nl(&vaka_run.writer);
}

/* One `<name> <hex>` pair of the `register` line (a space before every pair but the first). */
static void write_register(const char *name, uint64_t value, int first)
{
    if (!first) vaka_w_char(&vaka_run.writer, ' ');
    vaka_w_str(&vaka_run.writer, name);
    vaka_w_char(&vaka_run.writer, ' ');
    vaka_w_hex(&vaka_run.writer, value);
}

/* The one `register` line: every general register of `uc` as `<name> <hex>` pairs. */
void vaka_sig_write_registers(const ucontext_t *uc)
{
#if defined(__x86_64__) || defined(__aarch64__)
    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_REGISTER);
#endif
#if defined(__x86_64__)
    static const struct { const char *name; int index; } regs[] = {
        { "rax", REG_RAX }, { "rbx", REG_RBX }, { "rcx", REG_RCX }, { "rdx", REG_RDX },
        { "rsi", REG_RSI }, { "rdi", REG_RDI }, { "rbp", REG_RBP }, { "rsp", REG_RSP },
        { "r8", REG_R8 },   { "r9", REG_R9 },   { "r10", REG_R10 }, { "r11", REG_R11 },
        { "r12", REG_R12 }, { "r13", REG_R13 }, { "r14", REG_R14 }, { "r15", REG_R15 },
        { "rip", REG_RIP }, { "eflags", REG_EFL },
    };
    for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++)
        write_register(regs[i].name, (uint64_t)uc->uc_mcontext.gregs[regs[i].index], i == 0);
#elif defined(__aarch64__)
    for (int i = 0; i <= 28; i++) {
        if (i > 0) vaka_w_char(&vaka_run.writer, ' ');
        vaka_w_char(&vaka_run.writer, 'x');
        vaka_w_udec(&vaka_run.writer, (uint64_t)i);
        vaka_w_char(&vaka_run.writer, ' ');
        vaka_w_hex(&vaka_run.writer, uc->uc_mcontext.regs[i]);
    }
    write_register("fp", uc->uc_mcontext.regs[29], 0);
    write_register("lr", uc->uc_mcontext.regs[30], 0);
    write_register("sp", uc->uc_mcontext.sp, 0);
    write_register("pc", uc->uc_mcontext.pc, 0);
#else
    (void)uc;
#endif
#if defined(__x86_64__) || defined(__aarch64__)
    vaka_w_nl(&vaka_run.writer);
#endif
}

/* Text of at most VAKA_REPORT_MESSAGE_MAX bytes at `p`, trailing newlines removed. */
void vaka_sig_write_message(const char *key, uintptr_t p, size_t cap)
{
    if (p == 0) return;
    if (cap > VAKA_REPORT_MESSAGE_MAX) cap = VAKA_REPORT_MESSAGE_MAX;
    size_t n = vaka_safe_read_string(&vaka_state.reader, message_buf, p, cap);
    while (n > 0 && (message_buf[n - 1] == '\n' || message_buf[n - 1] == '\r')) n--;
    if (n > 0) write_text_line(key, message_buf, n);
}

void vaka_sig_write_messages(void)
{
    vaka_safe_reader *r = &vaka_state.reader;
    uintptr_t p = 0;
    /* Swift: swift_getFatalErrorMessageBuffer() returned the address of a `char *`. */
    if (vaka_state.swift_fatal_message != NULL &&
        vaka_safe_read_word(r, (uintptr_t)vaka_state.swift_fatal_message, &p) && p != 0)
        vaka_sig_write_message(VAKA_REPORT_KEY_FATAL_MESSAGE, p, VAKA_REPORT_MESSAGE_MAX);
    /* glibc: `struct abort_msg_s { unsigned int size; char msg[]; } *__abort_msg`; size is the whole
     * allocation in bytes, msg is NUL-terminated. */
    p = 0;
    if (vaka_state.abort_msg != NULL && vaka_safe_read_word(r, (uintptr_t)vaka_state.abort_msg, &p) && p != 0) {
        unsigned int size = 0;
        if (vaka_safe_read(r, &size, p, sizeof size) == sizeof size && size > sizeof size)
            vaka_sig_write_message(VAKA_REPORT_KEY_ABORT_MESSAGE, p + sizeof size, size - sizeof size);
    }
}

void vaka_sig_write_journal_seq(void)
{
    uint64_t seq = 0;
    if (!vaka_sig_journal_seq(&seq)) return;
    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_JOURNAL_SEQ);
    vaka_w_udec(&vaka_run.writer, seq);
    vaka_w_nl(&vaka_run.writer);
}

static int has_fault_address(int sig, int code)
{
    return code > 0 && (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP);
}

/* The lines that say which run, process, thread, time and executable: the format line, `run_id`, `pid`,
 * `tid`, `thread_name`, `timestamp_ns`, `arch`, `executable`. */
void vaka_sig_write_identity(const vaka_report_target *target, pid_t tid, uint64_t wall_ns)
{
    vaka_w_key(&vaka_run.writer, VAKA_REPORT_MAGIC);
    vaka_w_udec(&vaka_run.writer, VAKA_REPORT_VERSION);
    vaka_w_nl(&vaka_run.writer);
    write_text_line(VAKA_REPORT_KEY_RUN_ID, target->run_id, target->run_id_len);
    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_PID);
    vaka_w_dec(&vaka_run.writer, (int64_t)syscall(SYS_getpid));
    vaka_w_nl(&vaka_run.writer);
    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_TID);
    vaka_w_dec(&vaka_run.writer, tid);
    vaka_w_nl(&vaka_run.writer);

    char thread_name[VAKA_REPORT_THREAD_NAME_MAX + 2]; /* PR_GET_NAME stores up to 16 bytes with the NUL */
    vaka_sig_zero(thread_name, sizeof thread_name);
    if (prctl(PR_GET_NAME, thread_name, 0, 0, 0) != 0) thread_name[0] = '\0';
    write_text_line(VAKA_REPORT_KEY_THREAD_NAME, thread_name,
                    vaka_sig_strnlen(thread_name, VAKA_REPORT_THREAD_NAME_MAX + 1));

    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_TIMESTAMP_NS);
    vaka_w_udec(&vaka_run.writer, wall_ns);
    vaka_w_nl(&vaka_run.writer);
#if defined(__x86_64__)
    vaka_w_str(&vaka_run.writer, VAKA_REPORT_KEY_ARCH " " VAKA_REPORT_ARCH_X86_64 "\n");
#elif defined(__aarch64__)
    vaka_w_str(&vaka_run.writer, VAKA_REPORT_KEY_ARCH " " VAKA_REPORT_ARCH_AARCH64 "\n");
#endif
    if (vaka_state.executable_len > 0)
        write_text_line(VAKA_REPORT_KEY_EXECUTABLE, vaka_state.executable, vaka_state.executable_len);
    else
        vaka_w_str(&vaka_run.writer, VAKA_REPORT_KEY_EXECUTABLE " " VAKA_REPORT_VALUE_UNKNOWN "\n");
}

/* The signal lines: `signal`, `code`, and `fault_addr` (a fault the kernel raised) or `sender` (si_code <= 0). */
void vaka_sig_write_signal(int sig, const siginfo_t *info)
{
    int code = info != NULL ? info->si_code : 0;
    const char *name;

    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_SIGNAL);
    vaka_w_dec(&vaka_run.writer, sig);
    vaka_w_char(&vaka_run.writer, ' ');
    name = vaka_sig_signal_name(sig);
    vaka_w_str(&vaka_run.writer, name != NULL ? name : VAKA_REPORT_NAME_UNKNOWN);
    vaka_w_nl(&vaka_run.writer);

    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_CODE);
    vaka_w_dec(&vaka_run.writer, code);
    vaka_w_char(&vaka_run.writer, ' ');
    name = vaka_sig_si_code_name(sig, code);
    vaka_w_str(&vaka_run.writer, name != NULL ? name : VAKA_REPORT_NAME_UNKNOWN);
    vaka_w_nl(&vaka_run.writer);

    if (info != NULL && has_fault_address(sig, code)) {
        vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_FAULT_ADDR);
        vaka_w_hex(&vaka_run.writer, (uintptr_t)info->si_addr);
        vaka_w_nl(&vaka_run.writer);
    }
    if (info != NULL && code <= 0) {
        vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_SENDER);
        vaka_w_dec(&vaka_run.writer, info->si_pid);
        vaka_w_char(&vaka_run.writer, ' ');
        vaka_w_udec(&vaka_run.writer, info->si_uid);
        vaka_w_nl(&vaka_run.writer);
    }
}

/* A reused spare longer than this report: `pad` lines (a key readers ignore, at most 4 KiB each) fill it up to
 * its old size less the `end` line, so the report ends exactly where the file does without a truncate (one
 * would free the blocks past the new end, and those allocated past it with FALLOC_FL_KEEP_SIZE: another
 * thread on a full disk takes them before the process knows whether it survives this signal). */
static void pad_to_file_size(int fd)
{
    struct stat st;
    vaka_w_flush(&vaka_run.writer);
    long pos = (long)syscall(SYS_lseek, fd, 0L, SEEK_CUR);
    if (pos < 0 || fstat(fd, &st) != 0) return;
    long fill = (long)st.st_size - pos - 4; /* 4: `end\n` */
    if (fill <= 0) return;
    if (fill < 4) fill += 4096; /* shorter than `pad\n`: into the blocks past the end */
    while (fill > 0) {
        long n = fill > 4096 ? 4096 : fill;
        if (fill - n > 0 && fill - n < 4) n -= 4; /* leave room for a last `pad\n` */
        vaka_w_str(&vaka_run.writer, VAKA_REPORT_KEY_PAD);
        if (n >= 5) {
            vaka_w_char(&vaka_run.writer, ' ');
            for (long i = 0; i < n - 5; i++) vaka_w_char(&vaka_run.writer, '.');
        }
        vaka_w_char(&vaka_run.writer, '\n');
        fill -= n;
    }
}

/* The `frame` lines, newest first, and `frames_truncated` when the walk stopped at the cap. */
void vaka_sig_write_frames(const uintptr_t *ips, const uint8_t *methods, size_t n, int truncated)
{
    for (size_t i = 0; i < n; i++) vaka_w_frame(&vaka_run.writer, ips[i], methods[i]);
    if (truncated) {
        vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_FRAMES_TRUNCATED);
        vaka_w_udec(&vaka_run.writer, n);
        vaka_w_nl(&vaka_run.writer);
    }
}

/* The last lines: `memory_read`, `capture_ns` (since `start_ns`, CLOCK_MONOTONIC), `pad` up to the size of a
 * reused file `fd`, `end`. */
void vaka_sig_write_tail(int fd, uint64_t start_ns)
{
    /* How memory was read (after the reads: a method refused mid-capture has been replaced by then). */
    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_MEMORY_READ);
    vaka_w_str(&vaka_run.writer, vaka_state.reader.method == VAKA_SAFE_READ_PVR    ? VAKA_REPORT_MEMORY_READ_PVR
                        : vaka_state.reader.method == VAKA_SAFE_READ_PIPE ? VAKA_REPORT_MEMORY_READ_PIPE
                                                                          : VAKA_REPORT_MEMORY_READ_NONE);
    vaka_w_nl(&vaka_run.writer);

    vaka_w_key(&vaka_run.writer, VAKA_REPORT_KEY_CAPTURE_NS);
    vaka_w_udec(&vaka_run.writer, vaka_sig_now_ns(CLOCK_MONOTONIC) - start_ns);
    vaka_w_nl(&vaka_run.writer);
    pad_to_file_size(fd);
    vaka_w_str(&vaka_run.writer, VAKA_REPORT_KEY_END "\n");
}

void vaka_sig_capture(int sig, siginfo_t *info, ucontext_t *uc, uint64_t start_ns, pid_t tid)
{
    uint64_t wall_ns = vaka_sig_now_ns(CLOCK_REALTIME);
    vaka_report_target *target = atomic_load(&vaka_state.target);
    if (target == NULL || target->path[0] == '\0') return;
    if (vaka_run.kept_fd >= 0) close(vaka_run.kept_fd); /* an earlier survived report, replaced by this one */
    vaka_run.kept_fd = -1;
    vaka_run.kept_survived = 0;

    vaka_sig_raise_fsize_limit();
    int fd = vaka_sig_open_report(target);
    if (fd < 0) { /* nowhere to write; chaining still happens */
        vaka_sig_journal_sync_registered();
        return;
    }
    vaka_run.report_fd = fd;
    vaka_w_init(&vaka_run.writer, fd);
    vaka_safe_reader_begin(&vaka_state.reader);

    vaka_sig_write_identity(target, tid, wall_ns);
    vaka_sig_write_signal(sig, info);
    vaka_sig_write_messages();
    vaka_sig_write_journal_seq();
    /* Flush the header now: if anything below faults or hangs, it is already on disk. */
    vaka_w_flush(&vaka_run.writer);
    /* A journal in its write(2) fallback: its records to its file now, before the unwinding that may hang. */
    vaka_sig_journal_sync_registered();
    vaka_sig_test_fault(1);

    vaka_sig_write_registers(uc);
    vaka_w_flush(&vaka_run.writer); /* the registers too: the unwinding below may hang (see the watchdog) */

    /* Frame-pointer frames first, into their own buffer: if libunwind hangs, the watchdog writes these. */
    int pre_truncated = 0;
    vaka_run.pre_ips[0] = vaka_uc_pc(uc);
    vaka_run.pre_methods[0] = VAKA_FRAME_CONTEXT;
    vaka_run.pre_count = vaka_fp_walk(&vaka_state.reader, vaka_uc_fp(uc), vaka_uc_sp(uc), vaka_run.pre_ips, vaka_run.pre_methods, 1,
                             VAKA_REPORT_MAX_FRAMES, &pre_truncated);
    atomic_store(&vaka_run.capture_phase, VAKA_PHASE_UNWINDING);

    int truncated = 0;
    size_t n = vaka_sig_unwind(uc, &vaka_state.reader, frame_ips, frame_methods, VAKA_REPORT_MAX_FRAMES, &truncated);
    int expected_phase = VAKA_PHASE_UNWINDING;
    if (!atomic_compare_exchange_strong(&vaka_run.capture_phase, &expected_phase, VAKA_PHASE_WRITING)) {
        /* The watchdog gave up on us and is ending the process: write nothing more. */
        struct timespec step = { 0, VAKA_WAIT_STEP_NS };
        for (int i = 0; i < VAKA_WAIT_STEPS; i++) nanosleep(&step, NULL);
        syscall(SYS_exit_group, 128 + sig);
    }
    vaka_sig_write_frames(frame_ips, frame_methods, n, truncated);

    vaka_sig_write_images(&vaka_run.writer, &vaka_state.reader);
    /* The crashed thread's lines on disk before the other threads are asked (their round has its own deadline). */
    vaka_w_flush(&vaka_run.writer);
    vaka_sig_write_threads(tid);

    vaka_sig_write_tail(fd, start_ns);
    vaka_w_flush(&vaka_run.writer);
    /* No fsync: the data is in the page cache, which outlives this process (only a kernel crash or power
     * loss would lose it), and fsync costs milliseconds on real disks — more than the whole capture. */
    /* The file stays open (kept_fd) until it is known whether death follows. */
    long len = (long)syscall(SYS_lseek, fd, 0L, SEEK_CUR);
    if (len >= 0) vaka_sig_cut_at_offset(fd); /* a reused spare may be longer */
    vaka_run.kept_fd = len >= 0 ? fd : -1;
    if (vaka_run.kept_fd < 0) close(fd);
    vaka_run.report_fd = -1;
}
