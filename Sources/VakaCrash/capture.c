/*
 * Ordinary context (not for signal handlers): stack traces of the calling thread for handled errors.
 * libunwind local unwinding first; a frame-pointer walk with safe reads when it yields fewer than two
 * frames. Uses its own safe-memory reader (and pipe), separate from the handler's, under a mutex.
 * libunwind is opened on demand here (vaka_rt_libunwind: dlopen on the first call in the process, from this
 * ordinary context), so a handled error captured before vaka_crash_finish_install has run still unwinds by
 * CFI; when libunwind cannot be opened, the frame-pointer walk is all there is.
 */
#include "vaka_internal.h"

#include <pthread.h>

static pthread_mutex_t reader_lock = PTHREAD_MUTEX_INITIALIZER;
static vaka_safe_reader reader = { .method = VAKA_SAFE_READ_NONE, .pipe_r = -1, .pipe_w = -1 };
static int reader_ready;

__attribute__((noinline)) size_t vaka_crash_capture_frames(uintptr_t *out, size_t max, size_t skip)
{
    if (out == NULL || max == 0) return 0;
    size_t n = 0, seen = 0;
    unw_context_t context;
    unw_cursor_t cursor;
    const vaka_libunwind *unw = vaka_rt_libunwind();
    if (unw != NULL && unw->getcontext(&context) == 0 && unw->init_local(&cursor, &context) == 0) {
        /* The cursor starts in this function; the first step reaches our caller (skip 0). */
        while (n < max && unw->step(&cursor) > 0) {
            unw_word_t ip = 0;
            if (unw->get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
            if (seen++ < skip) continue;
            out[n++] = (uintptr_t)ip;
        }
    }
    if (seen >= 2 || n >= 2) return n;

    /* Fallback: frame pointers. Our own frame record holds the caller's return address first: taking
     * __builtin_frame_address(0) makes the compiler give this function a frame record even in a build that omits
     * frame pointers, and noinline keeps that record this function's own. */
    uintptr_t ips[VAKA_REPORT_MAX_FRAMES];
    uint8_t methods[VAKA_REPORT_MAX_FRAMES];
    int truncated = 0;
    size_t limit = max + skip < VAKA_REPORT_MAX_FRAMES ? max + skip : VAKA_REPORT_MAX_FRAMES;
    pthread_mutex_lock(&reader_lock);
    if (!reader_ready) {
        vaka_rt_safe_reader_init(&reader, 0);
        reader_ready = 1;
    }
    vaka_safe_reader_begin(&reader);
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    size_t count = vaka_fp_walk(&reader, fp, fp, ips, methods, 0, limit, &truncated);
    pthread_mutex_unlock(&reader_lock);
    n = 0;
    for (size_t i = skip; i < count && n < max; i++) out[n++] = ips[i];
    return n;
}
