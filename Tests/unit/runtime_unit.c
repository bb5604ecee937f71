/*
 * Unit tests of the crash runtime's pieces (Sources/VakaCrash), linked against the runtime's objects so the
 * internal functions are reachable: the report writer's escaping and number formatting, the message cap, the
 * GNU build-ID note reader over crafted note sections, the frame-pointer walk over a crafted stack, the
 * signal / si_code name table, and the loaded images (the public copy, the install list and the handler's
 * safe-read path agree), a waiting thread's verdict on another thread's capture, and the table of Vaka's own threads
 * (marked, renamed, unmarked, full, marked at creation, cleared in a fork child). Run by
 * VakaCrashTests.RuntimeUnitTests (swift test, scripts/test).
 *
 *   runtime_unit                       run every check; one line per check: `ok <name>` or
 *                                      `FAIL <name>: <what differed>`, then `checks <count> failed <count>`;
 *                                      exit status 1 when any check failed
 *   runtime_unit --contract-report DIR write two reports with the runtime's real writer functions into DIR
 *                                      (install, then each piece of the capture in turn): `contract-fault.crash`
 *                                      (a SIGSEGV with every key but `sender`, a journal registered) and
 *                                      `contract-sender.crash` (a SIGABRT sent by a process: `sender` instead of
 *                                      `fault_addr`, no journal: no `journal_seq`). Together they
 *                                      hold every key of vaka/vaka_report_format.h.
 */
#include "sig_state.h"
#include "sig_threads.h"
#include "vaka/vaka_journal.h"
#include "unit_check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <limits.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

/* ------------------------------------------------------------------ writer helpers */

static char out[1 << 17];
static size_t out_len;

/* A writer over a fresh memory file; finish() flushes it and reads the bytes back into `out`. */
static int start_writer(vaka_writer *w)
{
    int fd = (int)syscall(SYS_memfd_create, "vaka-unit", 0);
    vaka_w_init(w, fd);
    return fd;
}

static const char *finish(vaka_writer *w, int fd)
{
    vaka_w_flush(w);
    out_len = 0;
    lseek(fd, 0, SEEK_SET);
    ssize_t k;
    while (out_len < sizeof out - 1 && (k = read(fd, out + out_len, sizeof out - 1 - out_len)) > 0) out_len += (size_t)k;
    out[out_len] = '\0';
    close(fd);
    return out;
}

static const char *escaped(const char *s, size_t n)
{
    vaka_writer *w = &vaka_run.writer;
    int fd = start_writer(w);
    vaka_w_text(w, s, n);
    return finish(w, fd);
}

/* The escaping rule of docs/report-format.md, written independently of the writer. */
static size_t reference_escape(const unsigned char *s, size_t n, char *dst)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '\\') { dst[k++] = '\\'; dst[k++] = '\\'; }
        else if (c == '\n') { dst[k++] = '\\'; dst[k++] = 'n'; }
        else if (c == '\t') { dst[k++] = '\\'; dst[k++] = 't'; }
        else if (c < 0x20 || c == 0x7f) k += (size_t)sprintf(dst + k, "\\x%02x", c);
        else dst[k++] = (char)c;
    }
    dst[k] = '\0';
    return k;
}

/* ------------------------------------------------------------------ report writer */

static void test_writer(void)
{
    begin("escape_backslash");
    EXPECT(strcmp(escaped("a\\b\\\\", 5), "a\\\\b\\\\\\\\") == 0, "got [%s]", out);
    end_check();

    begin("escape_newline_and_tab");
    EXPECT(strcmp(escaped("x\ny\tz", 5), "x\\ny\\tz") == 0, "got [%s]", out);
    end_check();

    begin("escape_control_bytes");
    for (int c = 0; c < 0x20; c++) {
        if (c == '\n' || c == '\t') continue;
        char in = (char)c, want[8];
        snprintf(want, sizeof want, "\\x%02x", c);
        EXPECT(strcmp(escaped(&in, 1), want) == 0, "byte 0x%02x gave [%s], want [%s]", c, out, want);
    }
    end_check();

    begin("escape_nul_inside_value");
    escaped("a\0b", 3);
    EXPECT(out_len == 6 && memcmp(out, "a\\x00b", 6) == 0, "got %zu bytes [%s]", out_len, out);
    end_check();

    begin("escape_del_0x7f");
    EXPECT(strcmp(escaped("\x7f", 1), "\\x7f") == 0, "got [%s]", out);
    end_check();

    begin("escape_high_bytes_verbatim");
    for (int c = 0x80; c <= 0xff; c++) {
        char in = (char)c;
        escaped(&in, 1);
        EXPECT(out_len == 1 && (unsigned char)out[0] == c, "byte 0x%02x gave %zu bytes", c, out_len);
    }
    escaped("\xc3\xa9t\xc3\xa9", 5); /* UTF-8 "été" stays as it is */
    EXPECT(out_len == 5 && memcmp(out, "\xc3\xa9t\xc3\xa9", 5) == 0, "UTF-8 changed: [%s]", out);
    end_check();

    begin("escape_printable_verbatim");
    for (int c = 0x20; c < 0x7f; c++) {
        if (c == '\\') continue;
        char in = (char)c;
        escaped(&in, 1);
        EXPECT(out_len == 1 && out[0] == c, "byte 0x%02x gave [%s]", c, out);
    }
    end_check();

    begin("escape_long_value_across_buffer_flushes");
    static unsigned char big[20000];
    static char want[80001];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)((i * 37 + i / 251) & 0xff);
    size_t want_len = reference_escape(big, sizeof big, want);
    escaped((const char *)big, sizeof big);
    EXPECT(out_len == want_len && memcmp(out, want, want_len) == 0, "%zu bytes, want %zu (first difference at %zu)",
           out_len, want_len, (size_t)({ size_t d = 0; while (d < out_len && d < want_len && out[d] == want[d]) d++; d; }));
    end_check();

    begin("numbers_hex_and_decimal");
    {
        vaka_writer *w = &vaka_run.writer;
        int fd = start_writer(w);
        vaka_w_hex(w, 0); vaka_w_char(w, ' ');
        vaka_w_hex(w, 0xdeadbeefULL); vaka_w_char(w, ' ');
        vaka_w_hex(w, UINT64_MAX); vaka_w_char(w, ' ');
        vaka_w_dec(w, INT64_MIN); vaka_w_char(w, ' ');
        vaka_w_dec(w, -1); vaka_w_char(w, ' ');
        vaka_w_udec(w, 0); vaka_w_char(w, ' ');
        vaka_w_udec(w, UINT64_MAX); vaka_w_char(w, ' ');
        static const uint8_t id[] = { 0x00, 0x0f, 0xa0, 0xff };
        vaka_w_hexbytes(w, id, sizeof id);
        finish(w, fd);
        EXPECT(strcmp(out, "0x0 0xdeadbeef 0xffffffffffffffff -9223372036854775808 -1 0 18446744073709551615 000fa0ff") == 0,
               "got [%s]", out);
    }
    end_check();

    begin("frame_line_per_method");
    {
        vaka_writer *w = &vaka_run.writer;
        int fd = start_writer(w);
        vaka_w_frame(w, 0x10, VAKA_FRAME_CONTEXT);
        vaka_w_frame(w, 0x20, VAKA_FRAME_CFI);
        vaka_w_frame(w, 0x30, VAKA_FRAME_FP);
        vaka_w_frame(w, 0x40, VAKA_FRAME_SCAN);
        finish(w, fd);
        EXPECT(strcmp(out, "frame 0x10 context\nframe 0x20 cfi\nframe 0x30 fp\nframe 0x40 scan\n") == 0, "got [%s]", out);
    }
    end_check();

    begin("flush_lines_keeps_only_complete_lines");
    {
        vaka_writer *w = &vaka_run.writer;
        int fd = start_writer(w);
        vaka_w_str(w, "pid 1\ntid 2\npid 4");
        vaka_w_flush_lines(w);
        finish(w, fd);
        EXPECT(strcmp(out, "pid 1\ntid 2\n") == 0, "got [%s]", out);
    }
    end_check();

    /* The message cap (VAKA_REPORT_MESSAGE_MAX) and the trailing-newline rule, through the handler's own
     * message writer and safe reader. */
    vaka_rt_safe_reader_init(&vaka_state.reader, 0);
    vaka_safe_reader_begin(&vaka_state.reader);

    begin("message_capped_at_message_max");
    {
        static char msg[VAKA_REPORT_MESSAGE_MAX + 1000];
        memset(msg, 'm', sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        vaka_writer *w = &vaka_run.writer;
        int fd = start_writer(w);
        vaka_sig_write_message(VAKA_REPORT_KEY_FATAL_MESSAGE, (uintptr_t)msg, sizeof msg);
        finish(w, fd);
        size_t key = strlen(VAKA_REPORT_KEY_FATAL_MESSAGE) + 1;
        EXPECT(out_len == key + VAKA_REPORT_MESSAGE_MAX + 1 && out[out_len - 1] == '\n' && out[out_len - 2] == 'm',
               "line of %zu bytes, want %zu", out_len, key + VAKA_REPORT_MESSAGE_MAX + 1);
    }
    end_check();

    begin("message_trailing_newlines_removed_and_escaped");
    {
        static const char msg[] = "Fatal error: a\\b\tc\n\r\n";
        vaka_writer *w = &vaka_run.writer;
        int fd = start_writer(w);
        vaka_sig_write_message(VAKA_REPORT_KEY_ABORT_MESSAGE, (uintptr_t)msg, sizeof msg);
        vaka_sig_write_message(VAKA_REPORT_KEY_ABORT_MESSAGE, 0, 100);            /* no pointer: no line */
        vaka_sig_write_message(VAKA_REPORT_KEY_ABORT_MESSAGE, (uintptr_t)"\n\n", 3); /* empty: no line */
        vaka_sig_write_message(VAKA_REPORT_KEY_ABORT_MESSAGE, (uintptr_t)"abcdef", 3); /* own cap */
        finish(w, fd);
        EXPECT(strcmp(out, "abort_message Fatal error: a\\\\b\\tc\nabort_message abc\n") == 0, "got [%s]", out);
    }
    end_check();

    begin("message_unreadable_pointer_writes_nothing");
    {
        void *page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        vaka_writer *w = &vaka_run.writer;
        int fd = start_writer(w);
        vaka_sig_write_message(VAKA_REPORT_KEY_FATAL_MESSAGE, (uintptr_t)page, 100);
        finish(w, fd);
        munmap(page, 4096);
        EXPECT(out_len == 0, "got [%s]", out);
    }
    end_check();
}

/* ------------------------------------------------------------------ build-ID note reader */

static uint8_t notes[1024];

/* Appends one ELF note (header, name padded to `align`, descriptor padded to `align`) at *off. */
static void add_note(size_t *off, size_t align, const char *name, uint32_t namesz, uint32_t type, const uint8_t *desc,
                     uint32_t descsz)
{
    memcpy(notes + *off, &namesz, 4);
    memcpy(notes + *off + 4, &descsz, 4);
    memcpy(notes + *off + 8, &type, 4);
    *off += 12;
    memcpy(notes + *off, name, namesz);
    *off += (namesz + align - 1) & ~(align - 1);
    memcpy(notes + *off, desc, descsz);
    *off += (descsz + align - 1) & ~(align - 1);
}

static void test_build_id(void)
{
    uint8_t id[80], got[VAKA_REPORT_BUILD_ID_MAX + 16], abi[16] = { 0 };
    for (size_t i = 0; i < sizeof id; i++) id[i] = (uint8_t)(0xa0 + i);
    size_t off, n;

    begin("build_id_after_another_note");
    memset(notes, 0, sizeof notes); off = 0;
    add_note(&off, 4, "GNU", 4, NT_GNU_ABI_TAG, abi, 16);
    add_note(&off, 4, "GNU", 4, NT_GNU_BUILD_ID, id, 20);
    n = vaka_find_build_id(notes, off, 4, got);
    EXPECT(n == 20 && memcmp(got, id, 20) == 0, "length %zu", n);
    end_check();

    begin("build_id_align_8");
    memset(notes, 0, sizeof notes); off = 0;
    add_note(&off, 8, "GNU", 4, NT_GNU_PROPERTY_TYPE_0, abi, 12);
    add_note(&off, 8, "GNU", 4, NT_GNU_BUILD_ID, id, 20);
    n = vaka_find_build_id(notes, off, 8, got);
    EXPECT(n == 20 && memcmp(got, id, 20) == 0, "length %zu", n);
    end_check();

    begin("build_id_odd_descsz");
    memset(notes, 0, sizeof notes); off = 0;
    add_note(&off, 4, "GNU", 4, NT_GNU_BUILD_ID, id, 5);
    n = vaka_find_build_id(notes, off, 4, got);
    EXPECT(n == 5 && memcmp(got, id, 5) == 0, "length %zu", n);
    end_check();

    begin("build_id_after_odd_namesz_note");
    memset(notes, 0, sizeof notes); off = 0;
    add_note(&off, 4, "GNUX", 5, NT_GNU_BUILD_ID, abi, 3); /* not "GNU": skipped, padding honoured */
    add_note(&off, 4, "GNU", 4, NT_GNU_BUILD_ID, id, 20);
    n = vaka_find_build_id(notes, off, 4, got);
    EXPECT(n == 20 && memcmp(got, id, 20) == 0, "length %zu", n);
    end_check();

    begin("build_id_truncated_section");
    memset(notes, 0, sizeof notes); off = 0;
    add_note(&off, 4, "GNU", 4, NT_GNU_BUILD_ID, id, 20);
    n = vaka_find_build_id(notes, off - 4, 4, got); /* descriptor cut */
    EXPECT(n == 0, "cut descriptor gave length %zu", n);
    n = vaka_find_build_id(notes, 11, 4, got); /* header cut */
    EXPECT(n == 0, "cut header gave length %zu", n);
    n = vaka_find_build_id(notes, 0, 4, got);
    EXPECT(n == 0, "empty section gave length %zu", n);
    end_check();

    begin("build_id_no_gnu_note");
    memset(notes, 0, sizeof notes); off = 0;
    add_note(&off, 4, "FOO", 4, NT_GNU_BUILD_ID, id, 20);  /* another owner's type 3 */
    add_note(&off, 4, "GNU", 4, NT_GNU_ABI_TAG, abi, 16);  /* GNU, another type */
    add_note(&off, 4, "GNU", 4, NT_GNU_BUILD_ID, id, 0);   /* empty descriptor */
    n = vaka_find_build_id(notes, off, 4, got);
    EXPECT(n == 0, "length %zu", n);
    end_check();

    begin("build_id_longer_than_max_is_capped");
    memset(notes, 0, sizeof notes); off = 0;
    add_note(&off, 4, "GNU", 4, NT_GNU_BUILD_ID, id, 80);
    memset(got, 0xee, sizeof got);
    n = vaka_find_build_id(notes, off, 4, got);
    EXPECT(n == VAKA_REPORT_BUILD_ID_MAX && memcmp(got, id, n) == 0 && got[n] == 0xee, "length %zu", n);
    end_check();

    begin("build_id_huge_sizes_stop_the_walk");
    memset(notes, 0, sizeof notes);
    uint32_t huge = 0xfffffffcu, four = 4, type = NT_GNU_BUILD_ID;
    memcpy(notes, &huge, 4); memcpy(notes + 4, &four, 4); memcpy(notes + 8, &type, 4);
    n = vaka_find_build_id(notes, 64, 4, got);
    EXPECT(n == 0, "namesz 0xfffffffc gave length %zu", n);
    memcpy(notes, &four, 4); memcpy(notes + 4, &huge, 4); memcpy(notes + 12, "GNU", 4);
    n = vaka_find_build_id(notes, 64, 4, got);
    EXPECT(n == 0, "descsz 0xfffffffc gave length %zu", n);
    end_check();
}

/* ------------------------------------------------------------------ frame-pointer walk */

#define WORD sizeof(uintptr_t)

static void test_fp_walk(void)
{
    const char *method_names[] = { "pvr", "pipe" };
    int methods_to_try[] = { VAKA_SAFE_READ_PVR, VAKA_SAFE_READ_PIPE };
    long page = sysconf(_SC_PAGESIZE);
    /* Two pages: frames in the first, the second unmapped (a frame pointer into it must not fault). */
    uintptr_t *stack = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap((char *)stack + page, (size_t)page);
    uintptr_t base = (uintptr_t)stack, unmapped = base + (uintptr_t)page;
    char name[96];

    for (int m = 0; m < 2; m++) {
        vaka_safe_reader r;
        memset(&r, 0, sizeof r);
        r.pipe_r = r.pipe_w = -1;
        vaka_rt_safe_reader_init(&r, 0);
        r.method = methods_to_try[m];
        vaka_safe_reader_begin(&r);
        uintptr_t ips[16];
        uint8_t kinds[16];
        int truncated;
        size_t n;
#define FRAME(i, next, ret) (stack[(i)] = (next), stack[(i) + 1] = (ret))
#define AT(i) (base + (uintptr_t)(i) * WORD)

        snprintf(name, sizeof name, "fp_walk_chain_%s", method_names[m]);
        begin(name);
        memset(stack, 0, (size_t)page);
        FRAME(4, AT(10), 0x1111); FRAME(10, AT(20), 0x2222); FRAME(20, 0, 0x3333);
        truncated = 0;
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 3 && ips[0] == 0x1111 && ips[1] == 0x2222 && ips[2] == 0x3333 && kinds[0] == VAKA_FRAME_FP &&
                   kinds[2] == VAKA_FRAME_FP && !truncated, "%zu frames", n);
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 1, 16, &truncated); /* appends after ips[0] */
        EXPECT(n == 4 && ips[1] == 0x1111, "appending from 1 gave %zu frames", n);
        end_check();

        snprintf(name, sizeof name, "fp_walk_loop_stops_%s", method_names[m]);
        begin(name);
        memset(stack, 0, (size_t)page);
        FRAME(4, AT(10), 0x1111); FRAME(10, AT(4), 0x2222); /* points back: a loop */
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 2 && ips[1] == 0x2222, "%zu frames", n);
        FRAME(4, AT(4), 0x1111); /* points at itself */
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 1, "self loop gave %zu frames", n);
        end_check();

        snprintf(name, sizeof name, "fp_walk_misaligned_fp_%s", method_names[m]);
        begin(name);
        memset(stack, 0, (size_t)page);
        FRAME(4, AT(10), 0x1111); FRAME(10, AT(20), 0x2222);
        n = vaka_fp_walk(&r, AT(4) + 3, AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 0, "misaligned start gave %zu frames", n);
        FRAME(4, AT(10) + 4, 0x1111); /* misaligned link */
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 1 && ips[0] == 0x1111, "misaligned link gave %zu frames", n);
        end_check();

        snprintf(name, sizeof name, "fp_walk_unmapped_fp_%s", method_names[m]);
        begin(name);
        memset(stack, 0, (size_t)page);
        FRAME(4, unmapped + 64, 0x1111); /* next record in the unmapped page */
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 1 && ips[0] == 0x1111, "link into unmapped memory gave %zu frames", n);
        n = vaka_fp_walk(&r, unmapped, AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 0, "unmapped start gave %zu frames", n);
        stack[(size_t)page / WORD - 1] = AT(4); /* a record straddling the end of the mapping */
        n = vaka_fp_walk(&r, unmapped - WORD, AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 0, "straddling record gave %zu frames", n);
        end_check();

        snprintf(name, sizeof name, "fp_walk_stops_at_max_%s", method_names[m]);
        begin(name);
        memset(stack, 0, (size_t)page);
        for (int i = 0; i < 10; i++) FRAME(4 + 4 * i, AT(8 + 4 * i), (uintptr_t)(0x100 + i));
        truncated = 0;
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 0, 4, &truncated);
        EXPECT(n == 4 && truncated && ips[3] == 0x103, "%zu frames, truncated %d", n, truncated);
        end_check();

        snprintf(name, sizeof name, "fp_walk_rejects_fp_below_sp_and_zero_return_%s", method_names[m]);
        begin(name);
        memset(stack, 0, (size_t)page);
        FRAME(4, AT(10), 0x1111); FRAME(10, AT(20), 0); /* a zero return address ends the walk */
        n = vaka_fp_walk(&r, AT(4), AT(5), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 0, "fp below sp gave %zu frames", n);
        n = vaka_fp_walk(&r, AT(4), AT(0), ips, kinds, 0, 16, &truncated);
        EXPECT(n == 1, "zero return address gave %zu frames", n);
        n = vaka_fp_walk(&r, 0, 0, ips, kinds, 0, 16, &truncated);
        EXPECT(n == 0, "fp 0 gave %zu frames", n);
        end_check();
        if (r.pipe_r >= 0) close(r.pipe_r);
        if (r.pipe_w >= 0) close(r.pipe_w);
    }
    munmap(stack, (size_t)page);
}

/* ------------------------------------------------------------------ signal / si_code names */

/* ------------------------------------------------------------------ loaded images */

static vaka_image_cache unit_cache;

static int copy_entry(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(struct dl_phdr_info *)data = *info; /* the entry lives only during the call; its headers stay mapped */
    return 1; /* the main program only */
}

/* The public copy, the install list and the handler's safe-read path compute each image the same way. */
static void test_images(void)
{
    static vaka_crash_image copied[VAKA_MAX_IMAGES];
    char exe[VAKA_REPORT_PATH_MAX + 1];
    size_t exe_len = vaka_rt_executable_path(exe, sizeof exe);

    begin("images_copy_before_install");
    size_t total = vaka_crash_copy_images(NULL, 0);
    size_t n = vaka_crash_copy_images(copied, VAKA_MAX_IMAGES);
    uintptr_t here = (uintptr_t)&test_images;
    EXPECT(!vaka_crash_is_installed(), "installed");
    EXPECT(total > 2 && n == total, "count %zu then %zu", total, n);
    EXPECT(exe_len > 0 && copied[0].path_len == exe_len && memcmp(copied[0].path, exe, exe_len) == 0,
           "first image %.*s, executable %.200s", (int)(copied[0].path_len < 200 ? copied[0].path_len : 200),
           copied[0].path, exe);
    EXPECT(here >= copied[0].base && here - copied[0].base < copied[0].size, "this function outside the first image");
    EXPECT(copied[0].build_id_len == 20, "main program build ID of %zu bytes", copied[0].build_id_len);
    int libc = 0;
    for (size_t i = 0; i < n; i++)
        if (strstr(copied[i].path, "/libc.so.6") != NULL && copied[i].build_id_len > 0) libc = 1;
    EXPECT(libc, "no libc.so.6 with a build ID");
    end_check();

    begin("images_copy_room_for_one");
    vaka_crash_image one[2];
    memset(one, 0xab, sizeof one);
    size_t all = vaka_crash_copy_images(one, 1);
    EXPECT(all == total, "%zu images, %zu before", all, total);
    EXPECT(one[0].base == copied[0].base && one[0].size == copied[0].size, "first image differs");
    EXPECT(one[1].base == (uintptr_t)0xababababababababull, "wrote past max");
    end_check();

    begin("images_copy_main_image");
    memset(one, 0xab, sizeof one);
    EXPECT(vaka_crash_copy_main_image(one) == 1, "no main image");
    EXPECT(one[0].base == copied[0].base && one[0].size == copied[0].size, "main image differs from the first");
    EXPECT(one[0].build_id_len == copied[0].build_id_len &&
           memcmp(one[0].build_id, copied[0].build_id, one[0].build_id_len) == 0, "build ID differs");
    EXPECT(one[0].path_len == exe_len && memcmp(one[0].path, exe, exe_len) == 0, "path differs");
    EXPECT(one[1].base == (uintptr_t)0xababababababababull, "wrote past the one image");
    EXPECT(vaka_crash_copy_main_image(NULL) == 0, "NULL out");
    char path[VAKA_REPORT_PATH_MAX + 1];
    EXPECT(vaka_crash_executable_path(path, sizeof path) == exe_len && memcmp(path, exe, exe_len + 1) == 0,
           "executable path %.200s vs %.200s", path, exe);
    EXPECT(vaka_crash_executable_path(path, exe_len) == 0 && path[0] == '\0', "a cut path, not unknown");
    end_check();

    begin("images_copy_equals_install_list");
    vaka_state.executable_len = vaka_rt_executable_path(vaka_state.executable, sizeof vaka_state.executable);
    size_t cached = vaka_images_collect(&unit_cache);
    EXPECT(cached == n, "install list %zu, copy %zu", cached, n);
    for (size_t i = 0; i < cached && i < n; i++) {
        const vaka_image *img = &unit_cache.images[i];
        const vaka_crash_image *c = &copied[i];
        EXPECT(img->base == c->base && img->size == c->size, "image %zu: %#lx+%#lx vs %#lx+%#lx", i,
               (unsigned long)img->base, (unsigned long)img->size, (unsigned long)c->base, (unsigned long)c->size);
        EXPECT(img->build_id_len == c->build_id_len && memcmp(img->build_id, c->build_id, c->build_id_len) == 0,
               "image %zu: build ID differs", i);
        EXPECT(img->path_len == c->path_len && memcmp(unit_cache.pool + img->path_off, c->path, c->path_len) == 0,
               "image %zu: path %.*s vs %.*s", i, (int)img->path_len, unit_cache.pool + img->path_off,
               (int)c->path_len, c->path);
    }
    end_check();

    begin("images_safe_read_equals_in_place");
    struct dl_phdr_info main_entry;
    memset(&main_entry, 0, sizeof main_entry);
    dl_iterate_phdr(copy_entry, &main_entry);
    const struct dl_phdr_info *main_info = main_entry.dlpi_phdr != NULL ? &main_entry : NULL;
    vaka_safe_reader reader;
    vaka_image in_place, safe;
    int ok = main_info != NULL && vaka_rt_safe_reader_init(&reader, 0) == 0;
    EXPECT(ok, "no main program entry or no safe reader");
    if (ok) {
        vaka_safe_reader_begin(&reader);
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        int a = vaka_sig_image_from_phdrs(main_info->dlpi_phdr, main_info->dlpi_phnum, main_info->dlpi_addr, page,
                                          NULL, &in_place);
        int b = vaka_sig_image_from_phdrs(main_info->dlpi_phdr, main_info->dlpi_phnum, main_info->dlpi_addr, page,
                                          &reader, &safe);
        EXPECT(a == 1 && b == 1, "results %d %d", a, b);
        EXPECT(in_place.base == copied[0].base && in_place.size == copied[0].size, "layout differs from the copy");
        EXPECT(safe.base == in_place.base && safe.size == in_place.size && safe.text_lo == in_place.text_lo &&
                   safe.text_hi == in_place.text_hi && safe.l_ld == in_place.l_ld,
               "layout differs between the two reads");
        EXPECT(safe.build_id_len == 20 && safe.build_id_len == in_place.build_id_len &&
                   memcmp(safe.build_id, in_place.build_id, safe.build_id_len) == 0,
               "build ID %u vs %u bytes", safe.build_id_len, in_place.build_id_len);
        ElfW(Phdr) none[1] = { { .p_type = PT_NULL } };
        EXPECT(vaka_sig_image_from_phdrs(none, 1, 0, page, NULL, &in_place) == 0, "no PT_LOAD: not an image");
    }
    end_check();
}

static void test_format_udec(void)
{
    begin("format_udec_digits_and_room");
    char out[24];
    uint64_t values[] = { 0, 7, 10, 4294967295u, UINT64_MAX };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char want[24];
        int wn = snprintf(want, sizeof want, "%llu", (unsigned long long)values[i]);
        memset(out, '#', sizeof out);
        size_t n = vaka_sig_format_udec(out, sizeof out, values[i]);
        EXPECT(n == (size_t)wn && memcmp(out, want, n) == 0 && out[n] == '#', "%s: %zu digits", want, n);
        memset(out, '#', sizeof out);
        EXPECT(vaka_sig_format_udec(out, (size_t)wn - 1, values[i]) == 0 && out[0] == '#', "%s in %d bytes", want, wn - 1);
        EXPECT(vaka_sig_format_udec(out, (size_t)wn, values[i]) == (size_t)wn, "%s in exactly %d bytes", want, wn);
    }
    end_check();
}

static void test_names(void)
{
    begin("signal_names_match_glibc");
    for (int s = 1; s < 32; s++) {
        const char *abbrev = sigabbrev_np(s);
        const char *ours = vaka_signal_name(s);
        char want[32];
        snprintf(want, sizeof want, "SIG%s", abbrev ? abbrev : "?");
        if (s == SIGIO) { /* glibc names 29 by its other name, SIGPOLL */
            EXPECT(ours && strcmp(ours, "SIGIO") == 0, "signal %d: %s", s, ours ? ours : "NULL");
            continue;
        }
        EXPECT(ours && strcmp(ours, want) == 0, "signal %d: %s, glibc %s", s, ours ? ours : "NULL", want);
    }
    end_check();

    begin("signal_names_unknown_numbers");
    int unknown[] = { 0, -1, 32, SIGRTMIN, SIGRTMAX, 65, 1000 };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        EXPECT(vaka_signal_name(unknown[i]) == NULL, "signal %d: %s", unknown[i], vaka_signal_name(unknown[i]));
    end_check();

    begin("signal_names_public_is_the_handler_table");
    for (int s = -2; s < 70; s++) {
        EXPECT(vaka_signal_name(s) == vaka_sig_signal_name(s), "signal %d", s);
        for (int c = -8; c < 0x82; c++)
            EXPECT(vaka_si_code_name(s, c) == vaka_sig_si_code_name(s, c), "signal %d code %d", s, c);
    }
    end_check();

    begin("si_code_names");
    static const struct { int sig, code; const char *name; } table[] = {
        { SIGSEGV, SEGV_MAPERR, "SEGV_MAPERR" }, { SIGSEGV, SEGV_ACCERR, "SEGV_ACCERR" },
        { SIGBUS, BUS_ADRALN, "BUS_ADRALN" },    { SIGBUS, BUS_ADRERR, "BUS_ADRERR" },
        { SIGBUS, BUS_MCEERR_AO, "BUS_MCEERR_AO" }, { SIGILL, ILL_ILLOPC, "ILL_ILLOPC" },
        { SIGFPE, FPE_INTDIV, "FPE_INTDIV" },    { SIGTRAP, TRAP_BRKPT, "TRAP_BRKPT" },
        { SIGSYS, 1, "SYS_SECCOMP" },            { SIGCHLD, CLD_EXITED, "CLD_EXITED" },
        { SIGSEGV, SI_USER, "SI_USER" },         { SIGABRT, SI_TKILL, "SI_TKILL" },
        { SIGSEGV, SI_QUEUE, "SI_QUEUE" },       { SIGTRAP, SI_KERNEL, "SI_KERNEL" },
        { SIGALRM, SI_TIMER, "SI_TIMER" },       { SIGABRT, SI_ASYNCNL, "SI_ASYNCNL" },
        { SIGSEGV, 99, NULL },                   { SIGABRT, 1, NULL },
        { SIGSEGV, -99, NULL },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const char *got = vaka_si_code_name(table[i].sig, table[i].code);
        EXPECT(table[i].name == NULL ? got == NULL : got != NULL && strcmp(got, table[i].name) == 0,
               "signal %d code %d: %s, want %s", table[i].sig, table[i].code, got ? got : "NULL",
               table[i].name ? table[i].name : "NULL");
    }
    end_check();
}

/* ------------------------------------------------------------------ contract reports */

/* Writes one report with the capture's own pieces (sig_report.c) into the current target's file. */
static int contract_report(const char *dir, const char *name, int sig, const siginfo_t *info, int with_truncation)
{
    vaka_report_target *target = atomic_load(&vaka_state.target);
    int fd = vaka_sig_open_report(target);
    if (fd < 0) return 1;
    if (ftruncate(fd, 16384) != 0) return 1; /* a reused spare's size: the tail pads up to it */
    vaka_w_init(&vaka_run.writer, fd);
    vaka_safe_reader_begin(&vaka_state.reader);
    ucontext_t uc;
    getcontext(&uc);
    vaka_sig_write_identity(target, vaka_sig_gettid(), vaka_sig_now_ns(CLOCK_REALTIME));
    vaka_sig_write_signal(sig, info);
    vaka_sig_write_messages();
    vaka_sig_write_journal_seq();
    vaka_sig_write_registers(&uc);
    uintptr_t ips[] = { vaka_uc_pc(&uc), 0x401234, 0x401300, 0x401400 };
    uint8_t methods[] = { VAKA_FRAME_CONTEXT, VAKA_FRAME_CFI, VAKA_FRAME_FP, VAKA_FRAME_SCAN };
    vaka_sig_write_frames(ips, methods, 4, with_truncation);
    vaka_sig_write_images(&vaka_run.writer, &vaka_state.reader);
    vaka_sig_write_tail(fd, vaka_sig_now_ns(CLOCK_MONOTONIC));
    vaka_w_flush(&vaka_run.writer);
    close(fd);
    char from[PATH_MAX], to[PATH_MAX];
    snprintf(from, sizeof from, "%s", target->path);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    return rename(from, to) != 0;
}

static char *fatal_text = "Fatal error: contract \\ check\tone\n";
static struct { unsigned int size; char msg[64]; } abort_text = { sizeof abort_text, "assertion \x01 failed\n" };
static char *abort_ptr = (char *)&abort_text;

static int write_contract_reports(const char *dir)
{
    vaka_crash_config config = { .report_dir = dir, .run_id = "contract" };
    if (vaka_crash_install(&config) != 0) return 2;
    prctl(PR_SET_NAME, "vaka\tcontract", 0, 0, 0);
    vaka_state.swift_fatal_message = &fatal_text;
    vaka_state.abort_msg = (void **)&abort_ptr;
    siginfo_t fault;
    memset(&fault, 0, sizeof fault);
    fault.si_signo = SIGSEGV;
    fault.si_code = SEGV_MAPERR;
    fault.si_addr = (void *)0x10;
    siginfo_t sent;
    memset(&sent, 0, sizeof sent);
    sent.si_signo = SIGABRT;
    sent.si_code = SI_USER;
    sent.si_pid = 4242;
    sent.si_uid = 1000;
    /* A registered journal with 3 records: the fault report says `journal_seq 3`; the sender report is written
     * with none registered (no line). */
    char jpath[PATH_MAX];
    snprintf(jpath, sizeof jpath, "%s/contract.journal", dir);
    vaka_journal_options jo = { .path = jpath };
    vaka_journal *journal = NULL;
    if (vaka_journal_open(&jo, &journal) != 0) return 5;
    for (int i = 0; i < 3; i++)
        vaka_journal_append(journal, &(vaka_journal_entry){ .kind = VAKA_JOURNAL_BREADCRUMB, .body = "b", .body_len = 1 },
                            NULL);
    vaka_crash_set_journal(journal);
    if (contract_report(dir, "contract-fault.crash", SIGSEGV, &fault, 1)) return 3;
    vaka_crash_set_journal(NULL);
    vaka_journal_close(journal);
    if (contract_report(dir, "contract-sender.crash", SIGABRT, &sent, 0)) return 4;
    return 0;
}

/* ------------------------------------------------------------------ waiting for another thread's capture */

/* Sets the arbitration slot as a waiting thread sees it: winner `tid`, generation `gen`, done flag and time. */
static void slot_state(int tid, unsigned gen, int done, uint64_t done_ns)
{
    atomic_store(&vaka_run.crash_tid, tid);
    atomic_store(&vaka_run.crash_gen, gen);
    atomic_store(&vaka_run.crash_done, done);
    atomic_store(&vaka_run.crash_done_ns, done_ns);
}

/* The kernel tid of a thread that ran and ended (0 when it could not be made, or is still listed after 2 s). */
static void *note_tid(void *out_tid)
{
    *(pid_t *)out_tid = vaka_sig_gettid();
    return NULL;
}
static pid_t ended_thread_tid(void)
{
    pid_t tid = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, note_tid, &tid) != 0) return 0;
    pthread_join(t, NULL);
    struct timespec pause = { 0, 1000000 };
    for (int i = 0; i < 2000 && tid != 0 && !vaka_sig_thread_gone(tid); i++) nanosleep(&pause, NULL);
    return tid != 0 && vaka_sig_thread_gone(tid) ? tid : 0;
}

static void test_wait_verdict(void)
{
    const uint64_t now = 100ull * 1000000000ull;
    const uint64_t grace = (uint64_t)VAKA_WAIT_STEPS * VAKA_WAIT_STEP_NS;
    int steps = 0;
    /* A winner that is still running (this thread), and one whose thread ended. */
    const int alive = (int)vaka_sig_gettid();
    const int ended = (int)ended_thread_tid();

    begin("wait_verdict_thread_gone");
    EXPECT(ended != 0, "no ended thread's tid");
    EXPECT(!vaka_sig_thread_gone(alive), "this thread taken for gone");
    end_check();

    begin("wait_verdict_rearming_winner_not_let_through");
    /* The winner reset crash_done_ns, crash_done still set, generation not bumped yet. */
    slot_state(alive, 7, 1, 0);
    steps = 0;
    int v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_SLEEP, "verdict %d, want SLEEP %d", v, VAKA_WAIT_SLEEP);
    end_check();

    begin("wait_verdict_rearming_winner_not_stuck");
    /* crash_done reset too: waiting for the end of the capture again, with the steps already spent. */
    slot_state(alive, 7, 0, 0);
    steps = 5;
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_SLEEP && steps == 6, "verdict %d steps %d, want SLEEP %d steps 6", v, steps, VAKA_WAIT_SLEEP);
    end_check();

    begin("wait_verdict_competes_after_survival");
    slot_state(0, 7, 0, 0);
    steps = 0;
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_COMPETE, "free slot: verdict %d, want COMPETE %d", v, VAKA_WAIT_COMPETE);
    slot_state(alive, 8, 1, now);
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_COMPETE, "new generation: verdict %d, want COMPETE %d", v, VAKA_WAIT_COMPETE);
    end_check();

    begin("wait_verdict_grace_period_then_through");
    slot_state(alive, 7, 1, now - grace + 1);
    steps = 0;
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_SLEEP, "inside the grace period: verdict %d, want SLEEP %d", v, VAKA_WAIT_SLEEP);
    slot_state(alive, 7, 1, now - grace);
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_THROUGH, "after it: verdict %d, want THROUGH %d", v, VAKA_WAIT_THROUGH);
    slot_state(alive, 7, 1, 1); /* the handler ended the process itself */
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_THROUGH, "process ending: verdict %d, want THROUGH %d", v, VAKA_WAIT_THROUGH);
    end_check();

    begin("wait_verdict_stuck_winner");
    slot_state(alive, 7, 0, 0);
    steps = VAKA_WAIT_STEPS - 2;
    int first = vaka_sig_wait_verdict(7, &steps, now);
    int second = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(first == VAKA_WAIT_SLEEP && second == VAKA_WAIT_STUCK, "verdicts %d %d, want SLEEP %d then STUCK %d", first,
           second, VAKA_WAIT_SLEEP, VAKA_WAIT_STUCK);
    end_check();

    begin("wait_verdict_takes_over_from_ended_winner");
    /* The winner finished its capture, chained, and its thread ended inside the previous handler (or after a
     * siglongjmp out of it): take over at once, not after the grace period, and not before the capture ended. */
    slot_state(ended, 7, 1, now - 1);
    steps = 0;
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_TAKE_OVER, "ended winner: verdict %d, want TAKE_OVER %d", v, VAKA_WAIT_TAKE_OVER);
    slot_state(alive, 7, 1, now - 1);
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_SLEEP, "running winner: verdict %d, want SLEEP %d", v, VAKA_WAIT_SLEEP);
    slot_state(ended, 7, 1, 1); /* the handler ends the process itself */
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_THROUGH, "process ending: verdict %d, want THROUGH %d", v, VAKA_WAIT_THROUGH);
    slot_state(ended, 7, 1, 0); /* being re-armed */
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_SLEEP, "re-arming: verdict %d, want SLEEP %d", v, VAKA_WAIT_SLEEP);
    slot_state(ended, 7, 0, 0); /* still capturing */
    v = vaka_sig_wait_verdict(7, &steps, now);
    EXPECT(v == VAKA_WAIT_SLEEP, "capturing: verdict %d, want SLEEP %d", v, VAKA_WAIT_SLEEP);
    end_check();

    begin("take_over_claimed_once");
    slot_state(ended, 7, 1, now - 1);
    int claimed = vaka_sig_take_over((pid_t)alive);
    int again = vaka_sig_take_over((pid_t)alive + 1);
    EXPECT(claimed == 1 && again == 0, "claims %d %d, want 1 then 0", claimed, again);
    EXPECT(atomic_load(&vaka_run.crash_tid) == alive && atomic_load(&vaka_run.crash_done) == 0 &&
               atomic_load(&vaka_run.crash_done_ns) == 0 && atomic_load(&vaka_run.crash_gen) == 7,
           "after the claim: tid %d done %d done_ns %llu gen %u", atomic_load(&vaka_run.crash_tid),
           atomic_load(&vaka_run.crash_done), (unsigned long long)atomic_load(&vaka_run.crash_done_ns),
           atomic_load(&vaka_run.crash_gen));
    slot_state(alive, 7, 1, now - 1); /* a winner still running is never taken over */
    EXPECT(vaka_sig_take_over((pid_t)alive + 1) == 0, "took over from a running winner");
    end_check();
    atomic_store(&vaka_state.installed, 0);
    atomic_store(&vaka_sig_protected_mask, 0u);
    slot_state(0, 0, 0, 0);
}

static void test_entry_abandoned(void)
{
    const uintptr_t lo = 0x700000000000u, hi = lo + 0x10000u; /* an alternate stack */
    const uintptr_t stack = 0x7ff000000000u;                   /* the thread's own stack */

    begin("entry_abandoned_same_stack");
    /* No alternate stack: code nested in the entry runs below its frame; after a siglongjmp, above it. */
    EXPECT(!vaka_sig_entry_abandoned(stack, stack - 0x200, 0, 0), "nested code taken for abandoned");
    EXPECT(vaka_sig_entry_abandoned(stack, stack + 0x200, 0, 0), "code above the frame taken for nested");
    /* Frame on the alternate stack, code nested on it, or jumped back above the frame on it. */
    EXPECT(!vaka_sig_entry_abandoned(hi - 0x800, hi - 0x1000, lo, hi), "nested on the alternate stack");
    EXPECT(vaka_sig_entry_abandoned(hi - 0x800, hi - 0x100, lo, hi), "above the frame on the alternate stack");
    end_check();

    begin("entry_abandoned_left_alternate_stack");
    /* The entry ran on the alternate stack; the thread now runs on its own stack, above or below it. */
    EXPECT(vaka_sig_entry_abandoned(hi - 0x800, stack, lo, hi), "thread stack above the alternate stack");
    EXPECT(vaka_sig_entry_abandoned(hi - 0x800, lo - 0x1000000, lo, hi), "thread stack far below it");
    end_check();

    begin("entry_abandoned_not_for_overflow");
    /* The handler overflowed the alternate stack into the guard page below it: still running (the kernel
     * delivers the nested fault at the top of the same stack, a fault that repeats). */
    EXPECT(!vaka_sig_entry_abandoned(hi - 0x800, lo - 8, lo, hi), "overflow by 8 bytes taken for abandoned");
    EXPECT(!vaka_sig_entry_abandoned(hi - 0x800, lo - VAKA_ALT_OVERFLOW_SLACK, lo, hi), "overflow by the slack");
    EXPECT(!vaka_sig_entry_abandoned(hi - 0x800, lo, lo, hi), "at the bottom of the alternate stack");
    /* A handler on the alternate stack run inside an entry on the thread's own stack. */
    EXPECT(!vaka_sig_entry_abandoned(stack, hi - 0x100, lo, hi), "alternate stack inside a thread-stack entry");
    end_check();
}

/* The entries of Vaka's own threads (threads.c) that the crash-time round lists without reading /proc: `tid` of
 * this process, named `name`; how many there are. */
static int own_entries(int tid, const char *name)
{
    int found = 0;
    for (unsigned i = 0; i < VAKA_OWN_THREADS; i++) {
        vaka_own_thread *e = &vaka_own_threads[i];
        if (atomic_load(&e->tid) == tid && e->pid == (int)getpid() && (name == NULL || strcmp(e->name, name) == 0))
            found++;
    }
    return found;
}

static void *mark_and_unmark(void *arg)
{
    int *tid = arg;
    *tid = (int)syscall(SYS_gettid);
    vaka_crash_mark_own_thread("vaka.other");
    int marked = own_entries(*tid, "vaka.other");
    vaka_crash_unmark_own_thread();
    return (void *)(intptr_t)marked;
}

struct crowd_member { int order; int tid; };
static pthread_barrier_t crowd_marked, crowd_checked;
static pthread_mutex_t crowd_order = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t crowd_turn = PTHREAD_COND_INITIALIZER;
static int crowd_next;

/* Marks itself when its turn comes (members mark in order), waits for the check, unmarks itself. */
static void *crowd_thread(void *arg)
{
    struct crowd_member *m = arg;
    m->tid = (int)syscall(SYS_gettid);
    pthread_mutex_lock(&crowd_order);
    while (crowd_next != m->order) pthread_cond_wait(&crowd_turn, &crowd_order);
    vaka_crash_mark_own_thread("vaka.crowd");
    crowd_next++;
    pthread_cond_broadcast(&crowd_turn);
    pthread_mutex_unlock(&crowd_order);
    pthread_barrier_wait(&crowd_marked);
    pthread_barrier_wait(&crowd_checked);
    vaka_crash_unmark_own_thread();
    return NULL;
}

/* An own thread's first instruction: is it in the table already, under its name? */
static void *own_thread_first_step(void *arg)
{
    *(int *)arg = own_entries((int)syscall(SYS_gettid), "vaka.early");
    return NULL;
}

/* Waits (at most ~1 s) until `go` is set, then says its id. */
static atomic_int own_thread_go;
/* Its own scheduling policy, into *(int *)arg. */
static void *thread_policy(void *arg)
{
    *(int *)arg = sched_getscheduler(0);
    return NULL;
}

static void *own_thread_waiting(void *arg)
{
    for (int i = 0; i < 1000 && !atomic_load(&own_thread_go); i++) usleep(1000);
    *(int *)arg = (int)syscall(SYS_gettid);
    return NULL;
}

static void test_own_threads(void)
{
    int tid = (int)syscall(SYS_gettid);
    begin("own_thread_marked_with_its_name");
    vaka_crash_mark_own_thread("vaka.start");
    EXPECT(own_entries(tid, "vaka.start") == 1, "%d entries", own_entries(tid, NULL));
    end_check();

    begin("own_thread_renamed_in_place");
    vaka_crash_mark_own_thread("vaka.journal");
    EXPECT(own_entries(tid, NULL) == 1 && own_entries(tid, "vaka.journal") == 1, "%d entries, %d renamed",
           own_entries(tid, NULL), own_entries(tid, "vaka.journal"));
    end_check();

    begin("own_thread_name_cut_at_the_thread_name_max");
    vaka_crash_mark_own_thread("vaka.a-name-longer-than-fifteen");
    EXPECT(own_entries(tid, "vaka.a-name-lon") == 1, "%d entries", own_entries(tid, NULL));
    end_check();

    begin("own_thread_unmarked_when_it_ends");
    int other = 0;
    pthread_t thread;
    void *marked = NULL;
    EXPECT(pthread_create(&thread, NULL, mark_and_unmark, &other) == 0 && pthread_join(thread, &marked) == 0, "thread");
    EXPECT((intptr_t)marked == 1, "the other thread was not marked (%d)", (int)(intptr_t)marked);
    EXPECT(own_entries(other, NULL) == 0, "its entry stayed after unmark");
    EXPECT(own_entries(tid, NULL) == 1, "this thread's entry went with the other's");
    end_check();

    begin("own_thread_table_full_reuses_an_entry");
    /* This thread and VAKA_OWN_THREADS + 1 more marked at once (one after another): the last to mark still gets an
     * entry (the oldest one's), and no id is in two. */
    enum { MORE = VAKA_OWN_THREADS + 1 };
    static pthread_t crowd[MORE];
    static struct crowd_member members[MORE];
    pthread_barrier_init(&crowd_marked, NULL, MORE + 1);
    pthread_barrier_init(&crowd_checked, NULL, MORE + 1);
    int started = 0;
    for (int i = 0; i < MORE; i++) {
        members[i].order = i;
        if (pthread_create(&crowd[i], NULL, crowd_thread, &members[i]) != 0) break;
        started++;
    }
    EXPECT(started == MORE, "%d of %d threads", started, MORE);
    if (started == MORE) {
        pthread_barrier_wait(&crowd_marked);
        EXPECT(own_entries(members[MORE - 1].tid, "vaka.crowd") == 1, "the last marked has no entry");
        int twice = 0;
        for (int i = 0; i < MORE; i++) twice += own_entries(members[i].tid, NULL) > 1;
        EXPECT(twice == 0, "%d ids in two entries", twice);
        pthread_barrier_wait(&crowd_checked);
    }
    for (int i = 0; i < started; i++) pthread_join(crowd[i], NULL);
    pthread_barrier_destroy(&crowd_marked);
    pthread_barrier_destroy(&crowd_checked);
    for (int i = 0; i < started; i++)
        EXPECT(own_entries(members[i].tid, NULL) == 0, "thread %d's entry stayed after unmark", i);
    end_check();

    begin("own_thread_created_marked");
    /* Marked before its start function runs, not when it gets to mark itself. */
    int entries = -1;
    pthread_t early;
    EXPECT(vaka_crash_create_own_thread(&early, "vaka.early", own_thread_first_step, &entries) == 0 &&
               pthread_join(early, NULL) == 0, "thread");
    EXPECT(entries == 1, "%d entries at its first step", entries);
    end_check();

    begin("own_thread_id_from_its_clock");
    /* The id vaka_crash_create_own_thread marks a new thread with, learnt from its pthread_t. */
    EXPECT(vaka_rt_thread_id_of(pthread_self()) == tid, "%d, not %d", (int)vaka_rt_thread_id_of(pthread_self()), tid);
    int waited = 0;
    pthread_t late;
    atomic_store(&own_thread_go, 0);
    int created = pthread_create(&late, NULL, own_thread_waiting, &waited) == 0;
    EXPECT(created, "thread");
    pid_t learnt = created ? vaka_rt_thread_id_of(late) : 0;
    atomic_store(&own_thread_go, 1);
    if (created) pthread_join(late, NULL);
    EXPECT(learnt > 0 && learnt == waited, "learnt %d, the thread says %d", (int)learnt, waited);
    end_check();

    begin("own_thread_marked_by_its_creator");
    /* Before it ever runs its start function (it waits): marked by its creator; unmarked once it has ended. */
    waited = 0;
    atomic_store(&own_thread_go, 0);
    created = vaka_crash_create_own_thread(&late, "vaka.late", own_thread_waiting, &waited) == 0;
    EXPECT(created, "thread");
    learnt = created ? vaka_rt_thread_id_of(late) : 0;
    int marked_before = created ? own_entries((int)learnt, "vaka.late") : 0;
    atomic_store(&own_thread_go, 1);
    if (created) pthread_join(late, NULL);
    EXPECT(marked_before >= 1, "not marked when vaka_crash_create_own_thread returned");
    EXPECT(own_entries(waited, NULL) == 0, "entry left after it ended");
    end_check();

    begin("own_thread_born_batch");
    /* Vaka's own threads are SCHED_BATCH (they never preempt the thread running where they wake up) when their
     * creator has the default policy, which the creator keeps; a program's threads keep the default. */
    int policy = -1;
    pthread_t own;
    EXPECT(sched_getscheduler(0) == SCHED_OTHER, "the test runs with the default policy");
    EXPECT(vaka_crash_create_own_thread(&own, "vaka.batch", thread_policy, &policy) == 0 && pthread_join(own, NULL) == 0,
           "thread");
    EXPECT(policy == SCHED_BATCH, "own thread's policy %d", policy);
    EXPECT(sched_getscheduler(0) == SCHED_OTHER, "the creator's policy is now %d", sched_getscheduler(0));
    policy = -1;
    EXPECT(pthread_create(&own, NULL, thread_policy, &policy) == 0 && pthread_join(own, NULL) == 0, "thread");
    EXPECT(policy == SCHED_OTHER, "a program thread's policy %d", policy);
    /* Another creator's policy is inherited as it is (SCHED_IDLE: in a child, which cannot leave it again). */
    fflush(stdout);
    pid_t idle_child = fork();
    if (idle_child == 0) {
        struct sched_param zero = { 0 };
        if (sched_setscheduler(0, SCHED_IDLE, &zero) != 0) _exit(2);
        int inherited = -1;
        if (vaka_crash_create_own_thread(&own, "vaka.idle", thread_policy, &inherited) != 0 || pthread_join(own, NULL) != 0)
            _exit(3);
        _exit(inherited == SCHED_IDLE && sched_getscheduler(0) == SCHED_IDLE ? 0 : 4);
    }
    int idle_status = -1;
    EXPECT(idle_child > 0 && waitpid(idle_child, &idle_status, 0) == idle_child, "fork");
    EXPECT(WIFEXITED(idle_status) && WEXITSTATUS(idle_status) == 0, "SCHED_IDLE creator: status %d", idle_status);
    end_check();

    begin("own_thread_table_cleared_in_a_fork_child");
    /* The parent's threads are not in the child (whose pid may even be the parent's, in a new PID namespace). */
    vaka_crash_mark_own_thread("vaka.start");
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        vaka_sig_after_fork_child();
        int left = 0;
        for (unsigned i = 0; i < VAKA_OWN_THREADS; i++) left += atomic_load(&vaka_own_threads[i].tid) != 0;
        _exit(left == 0 ? 0 : 1);
    }
    int status = -1;
    EXPECT(child > 0 && waitpid(child, &status, 0) == child, "fork");
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "entries left in the child (status %d)", status);
    EXPECT(own_entries(tid, "vaka.start") == 1, "the parent's entry went too");
    end_check();

    begin("own_thread_unmark");
    vaka_crash_mark_own_thread("vaka.start");
    vaka_crash_unmark_own_thread();
    EXPECT(own_entries(tid, NULL) == 0, "unmark left %d entries", own_entries(tid, NULL));
    vaka_crash_unmark_own_thread(); /* not marked: nothing happens */
    EXPECT(own_entries(tid, NULL) == 0, "a second unmark");
    end_check();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--contract-report") == 0) return write_contract_reports(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: runtime_unit [--contract-report DIR]\n");
        return 2;
    }
    test_writer();
    test_build_id();
    test_fp_walk();
    test_names();
    test_format_udec();
    test_images();
    test_wait_verdict();
    test_entry_abandoned();
    test_own_threads();
    printf("checks %d failed %d\n", checks_run, checks_failed);
    return checks_failed != 0;
}
