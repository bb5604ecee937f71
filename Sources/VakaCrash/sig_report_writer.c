/*
 * Signal path: a buffered line writer over a file descriptor, flushed with write(2) only.
 * Formats integers in decimal and hex and escapes text values as docs/report-format.md says.
 * The buffer lives inside the (static) vaka_writer; nothing is allocated.
 */
#include "vaka_internal.h"

#include <errno.h>
#include <unistd.h>

static void write_all(vaka_writer *w, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k > 0) { p += k; n -= (size_t)k; continue; }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EFBIG) {
            /* RLIMIT_FSIZE reached: the kernel also raised SIGXFSZ (blocked in our handler). Write no more. */
            w->file_too_big = 1;
            w->fd = -1;
        }
        return; /* disk full, EIO...: nothing more we can do from a signal handler */
    }
}

void vaka_w_init(vaka_writer *w, int fd)
{
    w->fd = fd;
    w->file_too_big = 0;
    w->len = 0;
    w->written = 0;
}

void vaka_w_flush(vaka_writer *w)
{
    if (w->fd >= 0 && w->len > 0) {
        write_all(w, w->buf, w->len);
        w->written += w->len;
    }
    w->len = 0;
}

void vaka_w_flush_lines(vaka_writer *w)
{
    size_t n = w->len;
    if (n > sizeof w->buf) n = sizeof w->buf; /* the writer may have been interrupted mid-update */
    while (n > 0 && w->buf[n - 1] != '\n') n--;
    if (w->fd >= 0 && n > 0) {
        write_all(w, w->buf, n);
        w->written += n;
    }
    w->len = 0;
}

void vaka_w_char(vaka_writer *w, char c)
{
    if (w->len >= sizeof w->buf) vaka_w_flush(w);
    w->buf[w->len++] = c;
}

/* Bulk copy into the buffer (the handler's cost is dominated by per-byte calls otherwise). */
void vaka_w_bytes(vaka_writer *w, const char *s, size_t n)
{
    while (n > 0) {
        if (w->len >= sizeof w->buf) vaka_w_flush(w);
        size_t room = sizeof w->buf - w->len;
        size_t k = n < room ? n : room;
        char *d = w->buf + w->len;
        for (size_t i = 0; i < k; i++) d[i] = s[i];
        w->len += k;
        s += k;
        n -= k;
    }
}

void vaka_w_str(vaka_writer *w, const char *s)
{
    if (s == NULL) return;
    vaka_w_bytes(w, s, vaka_sig_strnlen(s, (size_t)-1));
}

size_t vaka_sig_format_udec(char *out, size_t cap, uint64_t v)
{
    char tmp[20]; /* UINT64_MAX has 20 digits */
    size_t n = sizeof tmp;
    do {
        tmp[--n] = (char)('0' + (v % 10));
        v /= 10;
    } while (v != 0);
    size_t len = sizeof tmp - n;
    if (len > cap) return 0;
    vaka_sig_copy(out, tmp + n, len);
    return len;
}

void vaka_w_udec(vaka_writer *w, uint64_t v)
{
    char tmp[20];
    vaka_w_bytes(w, tmp, vaka_sig_format_udec(tmp, sizeof tmp, v));
}

void vaka_w_dec(vaka_writer *w, int64_t v)
{
    if (v < 0) {
        vaka_w_char(w, '-');
        vaka_w_udec(w, (uint64_t)0 - (uint64_t)v);
    } else {
        vaka_w_udec(w, (uint64_t)v);
    }
}

static const char hex_digits[] = "0123456789abcdef";

void vaka_w_hexdigits(vaka_writer *w, uint64_t v)
{
    char tmp[16];
    size_t n = sizeof tmp;
    do {
        tmp[--n] = hex_digits[v & 0xf];
        v >>= 4;
    } while (v != 0);
    vaka_w_bytes(w, tmp + n, sizeof tmp - n);
}

void vaka_w_hex(vaka_writer *w, uint64_t v)
{
    vaka_w_bytes(w, "0x", 2);
    vaka_w_hexdigits(w, v);
}

void vaka_w_hexbytes(vaka_writer *w, const uint8_t *b, size_t n)
{
    char tmp[64];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        tmp[k++] = hex_digits[b[i] >> 4];
        tmp[k++] = hex_digits[b[i] & 0xf];
        if (k == sizeof tmp) {
            vaka_w_bytes(w, tmp, k);
            k = 0;
        }
    }
    vaka_w_bytes(w, tmp, k);
}

static int needs_escape(unsigned char c)
{
    return c == '\\' || c < 0x20 || c == 0x7f;
}

void vaka_w_text(vaka_writer *w, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && !needs_escape((unsigned char)s[run])) run++;
        vaka_w_bytes(w, s + i, run - i); /* plain bytes (also >= 0x80) in one copy */
        if (run == n) break;
        unsigned char c = (unsigned char)s[run];
        char esc[4] = { '\\', 0, 0, 0 };
        size_t len = 2;
        if (c == '\\') {
            esc[1] = '\\';
        } else if (c == '\n') {
            esc[1] = 'n';
        } else if (c == '\t') {
            esc[1] = 't';
        } else {
            esc[1] = 'x';
            esc[2] = hex_digits[c >> 4];
            esc[3] = hex_digits[c & 0xf];
            len = 4;
        }
        vaka_w_bytes(w, esc, len);
        i = run + 1;
    }
}

void vaka_w_key(vaka_writer *w, const char *key)
{
    vaka_w_str(w, key);
    vaka_w_char(w, ' ');
}

void vaka_w_nl(vaka_writer *w)
{
    vaka_w_char(w, '\n');
}

void vaka_w_frame(vaka_writer *w, uintptr_t ip, uint8_t method)
{
    vaka_w_key(w, VAKA_REPORT_KEY_FRAME);
    vaka_w_hex(w, ip);
    vaka_w_char(w, ' ');
    vaka_w_str(w, method == VAKA_FRAME_CONTEXT ? VAKA_REPORT_FRAME_METHOD_CONTEXT
                  : method == VAKA_FRAME_CFI   ? VAKA_REPORT_FRAME_METHOD_CFI
                  : method == VAKA_FRAME_FP    ? VAKA_REPORT_FRAME_METHOD_FP
                                               : VAKA_REPORT_FRAME_METHOD_SCAN);
    vaka_w_nl(w);
}
