/*
 * Signal path: reading memory that may be unmapped, without faulting.
 *
 * Primary method: process_vm_readv(2) on our own pid — the kernel copies and reports EFAULT for an
 * unmapped page instead of delivering SIGSEGV. Containers and seccomp policies may refuse it (EPERM,
 * ENOSYS); then we write(2) the memory into a private pipe created at install and read it back: write(2)
 * from a bad user buffer also fails with EFAULT. Ranges are split at 4 KiB boundaries so a result is always
 * a prefix cut at the first unreadable page. The reader is set up by vaka_rt_safe_reader_init() (install.c).
 */
#include "vaka_internal.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* Split granularity in bytes. The smallest page size on our targets; splitting finer than the real page
 * size is harmless. */
#define VAKA_CHUNK 4096u
/* Most page-sized pieces handed to one process_vm_readv call. */
#define VAKA_PVR_IOV 16

void vaka_sig_copy(void *dst, const void *src, size_t n)
{
    volatile unsigned char *d = dst; /* volatile: keep the compiler from turning this into memcpy */
    const unsigned char *s = src;
    for (size_t i = 0; i < n; i++) d[i] = s[i];
}

void vaka_sig_zero(void *dst, size_t n)
{
    volatile unsigned char *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = 0;
}

size_t vaka_sig_strnlen(const char *s, size_t cap)
{
    size_t n = 0;
    if (s == NULL) return 0;
    while (n < cap && s[n] != '\0') n++;
    return n;
}

static void drain_pipe(vaka_safe_reader *r)
{
    char junk[256];
    for (int i = 0; i < 1024; i++) {
        ssize_t n = read(r->pipe_r, junk, sizeof junk);
        if (n <= 0) break;
    }
}

static int same_pipe(int fd, const vaka_safe_reader *r)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 0;
    return S_ISFIFO(st.st_mode) && st.st_dev == r->pipe_dev && st.st_ino == r->pipe_ino;
}

void vaka_safe_reader_begin(vaka_safe_reader *r)
{
    r->pid = (pid_t)syscall(SYS_getpid);
    if (r->pipe_w >= 0) {
        /* The app may have closed our descriptors or dup2'ed something else over them: writing memory
         * into an unrelated file would leak it, so verify identity first. */
        if (!same_pipe(r->pipe_r, r) || !same_pipe(r->pipe_w, r)) {
            r->pipe_r = r->pipe_w = -1;
            if (r->method == VAKA_SAFE_READ_PIPE) r->method = VAKA_SAFE_READ_NONE;
        } else {
            drain_pipe(r);
        }
    }
}

/* One process_vm_readv call for [src, src+len), len <= VAKA_PVR_IOV * VAKA_CHUNK.
 * Returns bytes read, or -1 with errno. */
static ssize_t pvr_read(vaka_safe_reader *r, void *dst, uintptr_t src, size_t len)
{
    struct iovec local = { dst, len };
    struct iovec remote[VAKA_PVR_IOV];
    unsigned long cnt = 0;
    uintptr_t a = src;
    size_t left = len;
    while (left > 0 && cnt < VAKA_PVR_IOV) {
        size_t piece = VAKA_CHUNK - (a % VAKA_CHUNK);
        if (piece > left) piece = left;
        remote[cnt].iov_base = (void *)a;
        remote[cnt].iov_len = piece;
        cnt++;
        a += piece;
        left -= piece;
    }
    local.iov_len = len - left;
    return process_vm_readv(r->pid, &local, 1, remote, cnt, 0);
}

/* One page-bounded chunk through the pipe. Returns bytes read (0 if unreadable). */
static size_t pipe_read(vaka_safe_reader *r, void *dst, uintptr_t src, size_t len)
{
    ssize_t n;
    for (int attempt = 0;; attempt++) {
        n = write(r->pipe_w, (const void *)src, len);
        if (n >= 0) break;
        if (errno == EINTR) continue;
        if (errno == EAGAIN && attempt == 0) { drain_pipe(r); continue; }
        return 0; /* EFAULT: unreadable */
    }
    size_t got = 0;
    while (got < (size_t)n) {
        ssize_t k = read(r->pipe_r, (char *)dst + got, (size_t)n - got);
        if (k > 0) { got += (size_t)k; continue; }
        if (k < 0 && errno == EINTR) continue;
        break;
    }
    return got;
}

size_t vaka_safe_read(vaka_safe_reader *r, void *dst, uintptr_t src, size_t len)
{
    size_t got = 0;
    if (len == 0 || src == 0 || src + len < src) return 0;
    while (got < len) {
        uintptr_t a = src + got;
        size_t want = len - got;
        if (r->method == VAKA_SAFE_READ_PVR) {
            size_t cap = VAKA_PVR_IOV * VAKA_CHUNK - (a % VAKA_CHUNK);
            if (want > cap) want = cap;
            ssize_t n = pvr_read(r, (char *)dst + got, a, want);
            if (n < 0) {
                int e = errno;
                if (e == EFAULT) return got;
                /* Refused now though it worked at install (e.g. a seccomp filter added later). */
                r->method = r->pipe_w >= 0 ? VAKA_SAFE_READ_PIPE : VAKA_SAFE_READ_NONE;
                continue;
            }
            got += (size_t)n;
            if ((size_t)n < want) return got;
        } else if (r->method == VAKA_SAFE_READ_PIPE) {
            size_t cap = VAKA_CHUNK - (a % VAKA_CHUNK);
            if (want > cap) want = cap;
            size_t n = pipe_read(r, (char *)dst + got, a, want);
            got += n;
            if (n < want) return got;
        } else {
            return got;
        }
    }
    return got;
}

int vaka_safe_read_word(vaka_safe_reader *r, uintptr_t src, uintptr_t *out)
{
    uintptr_t v = 0;
    if (vaka_safe_read(r, &v, src, sizeof v) != sizeof v) return 0;
    *out = v;
    return 1;
}

size_t vaka_safe_read_string(vaka_safe_reader *r, char *dst, uintptr_t src, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        uintptr_t a = src + got;
        size_t want = VAKA_CHUNK - (a % VAKA_CHUNK);
        if (want > cap - got) want = cap - got;
        size_t n = vaka_safe_read(r, dst + got, a, want);
        for (size_t i = 0; i < n; i++) {
            if (dst[got + i] == '\0') return got + i;
        }
        got += n;
        if (n < want) break;
    }
    return got;
}
