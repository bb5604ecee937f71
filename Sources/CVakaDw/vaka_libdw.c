// vaka_libdw: libdw through dlopen/dlsym. See Sources/CLibdw/shim.h.
#include "../CLibdw/shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct vaka_libdw_functions functions;
static const struct vaka_libdw_functions *loaded;
static char error[512];
static Dwfl_Callbacks offline_callbacks;

static int no_debuginfo(Dwfl_Module *module, void **userdata, const char *modname, Dwarf_Addr base,
                        const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
                        char **debuginfo_file_name) {
    (void)module, (void)userdata, (void)modname, (void)base, (void)file_name, (void)debuglink_file;
    (void)debuglink_crc, (void)debuginfo_file_name;
    return -1;
}

static void load(void) {
    void *handle = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        snprintf(error, sizeof error, "%s", why ? why : "libdw.so.1: dlopen failed");
        return;
    }
#define VAKA_LIBDW_LOOKUP(name)                                                  \
    functions.name = (__typeof__(name) *)dlsym(handle, #name);                  \
    if (!functions.name) {                                                       \
        snprintf(error, sizeof error, "libdw.so.1: no %s", #name);               \
        return;                                                                  \
    }
    VAKA_LIBDW_FUNCTIONS(VAKA_LIBDW_LOOKUP)
#undef VAKA_LIBDW_LOOKUP
    offline_callbacks.find_elf = functions.dwfl_build_id_find_elf;
    offline_callbacks.find_debuginfo = no_debuginfo;
    offline_callbacks.section_address = functions.dwfl_offline_section_address;
    loaded = &functions;
}

const Dwfl_Callbacks *vaka_libdw_offline_callbacks(void) {
    pthread_once(&once, load);
    return loaded ? &offline_callbacks : NULL;
}

const struct vaka_libdw_functions *vaka_libdw(void) {
    pthread_once(&once, load);
    return loaded;
}

const char *vaka_libdw_error(void) {
    pthread_once(&once, load);
    return loaded ? NULL : error;
}
