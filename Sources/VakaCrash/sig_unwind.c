/*
 * Signal path: unwinding the crashed thread from the signal's ucontext.
 *
 * First choice: libunwind local unwinding from the interrupted context
 * (unw_init_local2(..., UNW_INIT_SIGNAL_FRAME)), which follows DWARF CFI (.eh_frame). When it yields fewer
 * than two frames (no CFI for the crash site, or a failed init/step), a frame-pointer walk with safe memory
 * reads takes over; when that too yields fewer than two, a stack scan looks for return addresses (words
 * pointing just after a call instruction in an image's executable segment). Each frame records how it was
 * found: `context`, `cfi`, `fp` or `scan`.
 *
 * libunwind is not linked: it is called through vaka_unw (defined here, the handler's own storage), which
 * unwind_load.c fills with dlsym outside the handler. libunwind's caches take a mutex; the handler switches the
 * local address space to UNW_CACHE_NONE before unwinding (the process is about to die anyway). In libunwind 1.6
 * that is a field store plus an atomic increment of the cache generation; it would also free .debug_frame
 * tables, which builds without .debug_frame support (Debian's x86_64 libunwind) never allocate. libunwind is
 * opened and its one-time initialisation run outside the handler (install.c warms it up, at install or in
 * vaka_crash_finish_install) and only then is vaka_state.unwind_ready set (release; read here with acquire):
 * a crash before that, or in a process where libunwind cannot be opened, skips libunwind (frame pointers, then
 * the stack scan). The cursor is static to keep the alternate stack usage small.
 */
#include "vaka_internal.h"

vaka_libunwind vaka_unw;

/* Largest plausible distance between two consecutive frame records, in bytes. */
#define VAKA_FP_MAX_STEP (64u * 1024 * 1024)

static unw_cursor_t cursor;

uintptr_t vaka_uc_pc(const ucontext_t *uc)
{
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0;
#endif
}

uintptr_t vaka_uc_sp(const ucontext_t *uc)
{
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.sp;
#else
    (void)uc;
    return 0;
#endif
}

uintptr_t vaka_uc_fp(const ucontext_t *uc)
{
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.regs[29];
#else
    (void)uc;
    return 0;
#endif
}

size_t vaka_fp_walk(vaka_safe_reader *r, uintptr_t fp, uintptr_t sp, uintptr_t *ips, uint8_t *methods,
                    size_t n, size_t max, int *truncated)
{
    /* A frame record is two words at fp: the caller's fp, then the return address (x86_64 and aarch64). */
    while (fp != 0 && (fp & (sizeof(uintptr_t) - 1)) == 0 && fp >= sp) {
        uintptr_t rec[2];
        if (vaka_safe_read(r, rec, fp, sizeof rec) != sizeof rec) break;
        if (rec[1] == 0) break;
        if (n >= max) {
            *truncated = 1;
            break;
        }
        ips[n] = rec[1];
        methods[n] = VAKA_FRAME_FP;
        n++;
        if (rec[0] <= fp || rec[0] - fp > VAKA_FP_MAX_STEP) break;
        sp = fp;
        fp = rec[0];
    }
    return n;
}

size_t vaka_sig_unwind(ucontext_t *uc, vaka_safe_reader *r, uintptr_t *ips, uint8_t *methods, size_t max,
                       int *truncated)
{
    return vaka_sig_unwind_with(&cursor, NULL, 0, uc, r, ips, methods, max, truncated);
}

size_t vaka_sig_unwind_with(void *cursor_memory, uintptr_t *scan_buffer, size_t scan_count, ucontext_t *uc,
                            vaka_safe_reader *r, uintptr_t *ips, uint8_t *methods, size_t max, int *truncated)
{
    unw_cursor_t *c = cursor_memory;
    size_t n = 0;
    *truncated = 0;
    if (max == 0) return 0;

    /* Not before libunwind's one-time initialisation has run outside the handler (it allocates): until then the
     * frame-pointer walk and the stack scan below are all there is. */
    int use_libunwind = atomic_load_explicit(&vaka_state.unwind_ready, memory_order_acquire);
    const vaka_libunwind *unw = &vaka_unw; /* filled before unwind_ready was set */
    if (use_libunwind) unw->set_caching_policy(*unw->local_addr_space, UNW_CACHE_NONE);
    if (use_libunwind && unw->init_local2(c, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) == 0) {
        unw_word_t ip = 0, sp = 0, prev_ip, prev_sp;
        if (unw->get_reg(c, UNW_REG_IP, &ip) == 0 && ip != 0) {
            unw->get_reg(c, UNW_REG_SP, &sp);
            ips[n] = (uintptr_t)ip;
            methods[n] = VAKA_FRAME_CONTEXT;
            n++;
            for (;;) {
                int step = unw->step(c);
                vaka_sig_test_fault(2);
                if (step <= 0) break;
                prev_ip = ip;
                prev_sp = sp;
                if (unw->get_reg(c, UNW_REG_IP, &ip) != 0 || ip == 0) break;
                unw->get_reg(c, UNW_REG_SP, &sp);
                if (ip == prev_ip && sp == prev_sp) break; /* no progress: corrupt unwind info */
                if (n >= max) {
                    *truncated = 1;
                    break;
                }
                ips[n] = (uintptr_t)ip;
                methods[n] = VAKA_FRAME_CFI;
                n++;
            }
        }
    }
    if (n >= 2 || r == NULL) return n;

    /* Fallback: the PC from the context, then the frame-pointer chain. */
    vaka_sig_test_fault(2);
    *truncated = 0;
    n = 0;
    ips[n] = vaka_uc_pc(uc);
    methods[n] = VAKA_FRAME_CONTEXT;
    n++;
    n = vaka_fp_walk(r, vaka_uc_fp(uc), vaka_uc_sp(uc), ips, methods, n, max, truncated);
    if (n >= 2) return n;

    /* Last resort (e.g. a corrupt frame pointer in a function whose CFI uses it): scan the stack for
     * return addresses. Such frames may include stale ones, hence their own method `scan`. */
    if (scan_buffer != NULL && scan_count > 0)
        return vaka_scan_stack_into(scan_buffer, scan_count, r, vaka_uc_sp(uc), ips, methods, n, max, truncated);
    return vaka_scan_stack(r, vaka_uc_sp(uc), ips, methods, n, max, truncated);
}

/* ------------------------------------------------------------------ stack scan */

/* Words of stack read per safe read. Static: keeps the alternate stack usage small. The winner's only: the threads
 * answering the thread signal scan at the same time, each into a buffer of its own (vaka_scan_stack_into). */
#define VAKA_SCAN_CHUNK_WORDS 512
static uintptr_t scan_words[VAKA_SCAN_CHUNK_WORDS];

/* 1 when `addr` lies in the executable segment of an image known at install. */
static int in_text(uintptr_t addr)
{
    vaka_image_cache *cache = atomic_load(&vaka_state.images);
    if (cache == NULL) return 0;
    for (size_t i = 0; i < cache->count; i++) {
        const vaka_image *img = &cache->images[i];
        if (addr > img->text_lo && addr <= img->text_hi) return 1; /* a return address follows a call */
    }
    return 0;
}

/* 1 when the bytes before `ret` decode as a call instruction that returns to `ret`. */
static int follows_call(vaka_safe_reader *r, uintptr_t ret)
{
#if defined(__x86_64__)
    uint8_t b[8];
    if (vaka_safe_read(r, b, ret - 8, sizeof b) != sizeof b) return 0;
    /* b[i] is the byte at ret - 8 + i. `call rel32` is E8 + 4 bytes (starts at ret - 5). */
    if (b[3] == 0xe8) return 1;
    /* `call r/m64` is FF /2 (ModRM reg field 2), 2 to 7 bytes long (ModRM, SIB, displacement, REX). */
    for (int len = 2; len <= 7; len++) {
        int at = 8 - len;
        if (b[at] == 0xff && ((b[at + 1] >> 3) & 7) == 2) return 1;
        if (at > 0 && b[at - 1] >= 0x40 && b[at - 1] <= 0x4f && b[at] == 0xff && ((b[at + 1] >> 3) & 7) == 2)
            return 1;
    }
    return 0;
#elif defined(__aarch64__)
    /* bl / blr: the instruction at ret - 4. */
    uint32_t insn = 0;
    if (vaka_safe_read(r, &insn, ret - 4, sizeof insn) != sizeof insn) return 0;
    return (insn & 0xfc000000u) == 0x94000000u || (insn & 0xfffffc1fu) == 0xd63f0000u;
#else
    (void)r;
    (void)ret;
    return 1;
#endif
}

size_t vaka_scan_stack(vaka_safe_reader *r, uintptr_t sp, uintptr_t *ips, uint8_t *methods, size_t n, size_t max,
                       int *truncated)
{
    return vaka_scan_stack_into(scan_words, VAKA_SCAN_CHUNK_WORDS, r, sp, ips, methods, n, max, truncated);
}

size_t vaka_scan_stack_into(uintptr_t *buffer, size_t buffer_words, vaka_safe_reader *r, uintptr_t sp,
                            uintptr_t *ips, uint8_t *methods, size_t n, size_t max, int *truncated)
{
    size_t added = 0;
    size_t chunk = buffer_words * sizeof(uintptr_t);
    sp &= ~(uintptr_t)(sizeof(uintptr_t) - 1);
    for (uintptr_t at = sp; at - sp < VAKA_SCAN_BYTES && added < VAKA_SCAN_MAX_FRAMES;) {
        size_t got = vaka_safe_read(r, buffer, at, chunk);
        size_t words = got / sizeof(uintptr_t);
        for (size_t i = 0; i < words && added < VAKA_SCAN_MAX_FRAMES; i++) {
            uintptr_t w = buffer[i];
            if (!in_text(w) || !follows_call(r, w)) continue;
            if (n >= max) {
                *truncated = 1;
                return n;
            }
            ips[n] = w;
            methods[n] = VAKA_FRAME_SCAN;
            n++;
            added++;
        }
        if (got < chunk) break; /* end of the readable stack */
        at += got;
    }
    return n;
}
