// vaka_zlib: zlib through dlopen/dlsym. See Sources/CZlib/shim.h.
#include "../CZlib/shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct vaka_zlib_functions functions;
static const struct vaka_zlib_functions *loaded;
static char error[512];

int vaka_zlib_open(const char *library, struct vaka_zlib_functions *out, char *why, size_t why_size) {
    void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *reason = dlerror();
        if (why && why_size) snprintf(why, why_size, "%s", reason ? reason : "dlopen failed");
        return 0;
    }
    struct vaka_zlib_functions found;
#define VAKA_ZLIB_LOOKUP(name)                                                   \
    found.name = (__typeof__(name) *)dlsym(handle, #name);                      \
    if (!found.name) {                                                           \
        if (why && why_size) snprintf(why, why_size, "%s: no %s", library, #name); \
        dlclose(handle);                                                         \
        return 0;                                                                \
    }
    VAKA_ZLIB_FUNCTIONS(VAKA_ZLIB_LOOKUP)
#undef VAKA_ZLIB_LOOKUP
    *out = found;
    return 1;
}

static void load(void) {
    if (vaka_zlib_open(VAKA_ZLIB_LIBRARY, &functions, error, sizeof error)) loaded = &functions;
}

const struct vaka_zlib_functions *vaka_zlib(void) {
    pthread_once(&once, load);
    return loaded;
}

const char *vaka_zlib_error(void) {
    pthread_once(&once, load);
    return loaded ? NULL : error;
}
