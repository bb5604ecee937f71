// vaka_libelf: libelf's functions forwarded through dlopen/dlsym. See include/vaka_libelf.h.
#include "vaka_libelf.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

// Hidden from here on: libelf's declarations, so that the definitions below are, and are not exported.
#pragma GCC visibility push(hidden)
#include <gelf.h>
#include <libelf.h>

#define VAKA_LIBELF_SONAME "libelf.so.1"

/* Every libelf function Vaka calls (VakaSymbolication and CVakaDw). */
#define VAKA_LIBELF_FUNCTIONS(X) \
    X(elf_begin) X(elf_cntl) X(elf_compress) X(elf_end) X(elf_errmsg) X(elf_getdata) X(elf_getdata_rawchunk) \
    X(elf_getphdrnum) X(elf_getscn) X(elf_getshdrnum) X(elf_getshdrstrndx) X(elf_kind) X(elf_ndxscn) \
    X(elf_nextscn) X(elf_rawdata) X(elf_rawfile) X(elf_strptr) X(elf_version) \
    X(gelf_fsize) X(gelf_getchdr) X(gelf_getclass) X(gelf_getehdr) X(gelf_getnote) X(gelf_getphdr) \
    X(gelf_getshdr) X(gelf_getsym) X(gelf_update_shdr) X(gelf_xlatetom)

static struct {
#define VAKA_LIBELF_MEMBER(name) __typeof__(name) *name;
    VAKA_LIBELF_FUNCTIONS(VAKA_LIBELF_MEMBER)
#undef VAKA_LIBELF_MEMBER
} functions;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char error[512];

static void load(void)
{
    void *handle = dlopen(VAKA_LIBELF_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(error, sizeof error, "%s", why != NULL ? why : VAKA_LIBELF_SONAME ": dlopen failed");
        return;
    }
#define VAKA_LIBELF_LOOKUP(name)                                                  \
    functions.name = (__typeof__(name) *)dlsym(handle, #name);                   \
    if (functions.name == NULL) {                                                 \
        snprintf(error, sizeof error, VAKA_LIBELF_SONAME ": no %s", #name);       \
        return;                                                                   \
    }
    VAKA_LIBELF_FUNCTIONS(VAKA_LIBELF_LOOKUP)
#undef VAKA_LIBELF_LOOKUP
    loaded = 1;
}

/* 1 when libelf is there (loading it on the first call). */
static int ready(void)
{
    pthread_once(&once, load);
    return loaded;
}

#pragma GCC visibility pop

const char *vaka_libelf_error(void)
{
    return ready() ? NULL : error;
}

#pragma GCC visibility push(hidden)

/* Each forwarder: libelf's function when libelf is there, else its failure value. */
#define VAKA_FORWARD(type, name, failure, params, args) \
    type name params { return ready() ? functions.name args : failure; }

VAKA_FORWARD(Elf *, elf_begin, NULL, (int fd, Elf_Cmd cmd, Elf *ref), (fd, cmd, ref))
VAKA_FORWARD(int, elf_cntl, -1, (Elf *elf, Elf_Cmd cmd), (elf, cmd))
VAKA_FORWARD(int, elf_compress, -1, (Elf_Scn *scn, int type, unsigned int flags), (scn, type, flags))
VAKA_FORWARD(int, elf_end, 0, (Elf *elf), (elf))
VAKA_FORWARD(Elf_Data *, elf_getdata, NULL, (Elf_Scn *scn, Elf_Data *data), (scn, data))
VAKA_FORWARD(Elf_Data *, elf_getdata_rawchunk, NULL, (Elf *elf, int64_t offset, size_t size, Elf_Type type),
             (elf, offset, size, type))
VAKA_FORWARD(int, elf_getphdrnum, -1, (Elf *elf, size_t *dst), (elf, dst))
VAKA_FORWARD(Elf_Scn *, elf_getscn, NULL, (Elf *elf, size_t index), (elf, index))
VAKA_FORWARD(int, elf_getshdrnum, -1, (Elf *elf, size_t *dst), (elf, dst))
VAKA_FORWARD(int, elf_getshdrstrndx, -1, (Elf *elf, size_t *dst), (elf, dst))
VAKA_FORWARD(Elf_Kind, elf_kind, ELF_K_NONE, (Elf *elf), (elf))
VAKA_FORWARD(size_t, elf_ndxscn, SHN_UNDEF, (Elf_Scn *scn), (scn))
VAKA_FORWARD(Elf_Scn *, elf_nextscn, NULL, (Elf *elf, Elf_Scn *scn), (elf, scn))
VAKA_FORWARD(Elf_Data *, elf_rawdata, NULL, (Elf_Scn *scn, Elf_Data *data), (scn, data))
VAKA_FORWARD(char *, elf_rawfile, NULL, (Elf *elf, size_t *nbytes), (elf, nbytes))
VAKA_FORWARD(char *, elf_strptr, NULL, (Elf *elf, size_t index, size_t offset), (elf, index, offset))
VAKA_FORWARD(unsigned int, elf_version, EV_NONE, (unsigned int version), (version))
VAKA_FORWARD(size_t, gelf_fsize, 0, (Elf *elf, Elf_Type type, size_t count, unsigned int version),
             (elf, type, count, version))
VAKA_FORWARD(GElf_Chdr *, gelf_getchdr, NULL, (Elf_Scn *scn, GElf_Chdr *dst), (scn, dst))
VAKA_FORWARD(int, gelf_getclass, ELFCLASSNONE, (Elf *elf), (elf))
VAKA_FORWARD(GElf_Ehdr *, gelf_getehdr, NULL, (Elf *elf, GElf_Ehdr *dest), (elf, dest))
VAKA_FORWARD(size_t, gelf_getnote, 0,
             (Elf_Data *data, size_t offset, GElf_Nhdr *result, size_t *name_offset, size_t *desc_offset),
             (data, offset, result, name_offset, desc_offset))
VAKA_FORWARD(GElf_Phdr *, gelf_getphdr, NULL, (Elf *elf, int ndx, GElf_Phdr *dst), (elf, ndx, dst))
VAKA_FORWARD(GElf_Shdr *, gelf_getshdr, NULL, (Elf_Scn *scn, GElf_Shdr *dst), (scn, dst))
VAKA_FORWARD(GElf_Sym *, gelf_getsym, NULL, (Elf_Data *data, int ndx, GElf_Sym *dst), (data, ndx, dst))
VAKA_FORWARD(int, gelf_update_shdr, 0, (Elf_Scn *scn, GElf_Shdr *src), (scn, src))
VAKA_FORWARD(Elf_Data *, gelf_xlatetom, NULL, (Elf *elf, Elf_Data *dest, const Elf_Data *src, unsigned int encode),
             (elf, dest, src, encode))

/* Without libelf: the loader's message, for every error number. */
const char *elf_errmsg(int err)
{
    return ready() ? functions.elf_errmsg(err) : error;
}

#pragma GCC visibility pop
