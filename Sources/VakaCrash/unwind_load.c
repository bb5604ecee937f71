/*
 * Ordinary context (not for signal handlers): libunwind opened with dlopen and its local-unwinding entry points
 * looked up with dlsym into vaka_unw, the table the handler calls through (sig_unwind.c).
 *
 * libunwind is not linked (no -lunwind), so a program linking Vaka does not load it, nor liblzma (which
 * libunwind needs), at process start. The first caller loads it: install.c's warm-up (on the `vaka.start` thread
 * in vaka_crash_finish_install, in fork's prepare hook, or in an install that does not defer), or
 * vaka_crash_capture_frames (capture.c) when a handled error is captured before that. Without libunwind the
 * handler keeps its frame-pointer walk and stack scan, and handled errors their frame-pointer walk.
 */
#include "vaka_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* The run-time names of the functions: the header's macros expanded, then made strings (`unw_step` is
 * `UNW_OBJ(step)`, `_ULx86_64_step` on x86_64; unw_getcontext is `unw_tdep_getcontext`, `_Ux86_64_getcontext`). */
#define VAKA_UNW_NAME_(name) #name
#define VAKA_UNW_NAME(name) VAKA_UNW_NAME_(name)

#define VAKA_LIBUNWIND_SONAME "libunwind.so.8"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const vaka_libunwind *loaded;
static char load_error[256];
/* 1 once a load was tried (vaka_crash_libunwind_error answers only then). */
static atomic_int load_tried;
/* &vaka_unw once the load succeeded (release; vaka_rt_libunwind_if_loaded reads it without waiting). */
static _Atomic(const vaka_libunwind *) published;

static void load(void)
{
    void *handle = dlopen(VAKA_LIBUNWIND_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error, "%s", why != NULL ? why : VAKA_LIBUNWIND_SONAME ": dlopen failed");
        atomic_store(&load_tried, 1);
        return;
    }
    struct {
        const char *name;
        void **slot;
    } symbols[] = {
        { VAKA_UNW_NAME(unw_tdep_getcontext), (void **)&vaka_unw.getcontext },
        { VAKA_UNW_NAME(unw_init_local), (void **)&vaka_unw.init_local },
        { VAKA_UNW_NAME(unw_init_local2), (void **)&vaka_unw.init_local2 },
        { VAKA_UNW_NAME(unw_get_reg), (void **)&vaka_unw.get_reg },
        { VAKA_UNW_NAME(unw_step), (void **)&vaka_unw.step },
        { VAKA_UNW_NAME(unw_set_caching_policy), (void **)&vaka_unw.set_caching_policy },
        { VAKA_UNW_NAME(unw_local_addr_space), (void **)&vaka_unw.local_addr_space },
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *found = dlsym(handle, symbols[i].name);
        if (found == NULL) {
            snprintf(load_error, sizeof load_error, VAKA_LIBUNWIND_SONAME ": no %s", symbols[i].name);
            /* Kept open (other code in the process may use it too); the table is not published. */
            atomic_store(&load_tried, 1);
            return;
        }
        *symbols[i].slot = found;
    }
    loaded = &vaka_unw;
    atomic_store_explicit(&published, &vaka_unw, memory_order_release);
    atomic_store(&load_tried, 1);
}

const vaka_libunwind *vaka_rt_libunwind(void)
{
    pthread_once(&load_once, load);
    return loaded;
}

const vaka_libunwind *vaka_rt_libunwind_if_loaded(void)
{
    return atomic_load_explicit(&published, memory_order_acquire);
}

const char *vaka_crash_libunwind_error(void)
{
    if (!atomic_load(&load_tried)) return NULL;
    pthread_once(&load_once, load); /* the load's writes are seen after the once */
    return loaded != NULL ? NULL : load_error;
}
