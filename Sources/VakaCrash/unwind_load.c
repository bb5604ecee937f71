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
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ------------------------------------------------------------ the executable's unwind table, for static programs
 *
 * In a fully static program dlopen brings in a second libc.so.6 (and ld.so) for libunwind, whose dl_iterate_phdr
 * lists only the libraries opened that way, not the executable: libunwind would find no unwind table for any of
 * the program's own frames (all of them, its C library included). Then the executable's table is handed to
 * libunwind as dynamic unwind information (_U_dyn_register, UNW_INFO_FORMAT_REMOTE_TABLE: a sorted array of
 * (start, FDE) offset pairs, the format of .eh_frame_hdr's search table), which libunwind consults before
 * dl_iterate_phdr, without a lock. The table is .eh_frame_hdr's when the executable has one (PT_GNU_EH_FRAME);
 * GCC links static programs without it, and then it is built here from .eh_frame's FDEs. */

/* One entry of the search table: offsets from the table's segment base (libunwind's `struct table_entry`). */
struct vaka_unw_table_entry {
    int32_t start_ip_offset;
    int32_t fde_offset;
};

/* Reads a DW_EH_PE-encoded pointer at *p (absolute or pc-relative; 4- or 8-byte data), advancing *p. */
static int read_encoded(const unsigned char **p, const unsigned char *end, unsigned encoding, uintptr_t *out)
{
    const unsigned char *q = *p;
    int64_t value;
    switch (encoding & 0x0f) {
    case 0x00: /* DW_EH_PE_absptr */
    case 0x04: /* udata8 */
    case 0x0c: { /* sdata8 */
        if (end - q < 8) return 0;
        uint64_t u;
        memcpy(&u, q, 8);
        value = (int64_t)u;
        q += 8;
        break;
    }
    case 0x03: { /* udata4 */
        if (end - q < 4) return 0;
        uint32_t u;
        memcpy(&u, q, 4);
        value = u;
        q += 4;
        break;
    }
    case 0x0b: { /* sdata4 */
        if (end - q < 4) return 0;
        int32_t i;
        memcpy(&i, q, 4);
        value = i;
        q += 4;
        break;
    }
    default:
        return 0;
    }
    switch (encoding & 0x70) {
    case 0x00: break;
    case 0x10: value += (int64_t)(uintptr_t)*p; break; /* DW_EH_PE_pcrel */
    default: return 0;
    }
    *p = q;
    *out = (uintptr_t)value;
    return 1;
}

static const unsigned char *skip_leb128(const unsigned char *p, const unsigned char *end)
{
    while (p < end && (*p & 0x80)) p++;
    return p < end ? p + 1 : end + 1;
}

/* The pointer encoding of the initial locations of the FDEs that use the CIE at `cie` (its length field). */
static int cie_fde_encoding(const unsigned char *cie, const unsigned char *end, unsigned *encoding)
{
    if (end - cie < 8) return 0;
    uint32_t length, id;
    memcpy(&length, cie, 4);
    memcpy(&id, cie + 4, 4);
    if (length == 0xffffffffu || id != 0 || (size_t)(end - cie - 4) < length) return 0;
    const unsigned char *stop = cie + 4 + length, *p = cie + 8;
    if (p >= stop) return 0;
    unsigned version = *p++;
    const char *augmentation = (const char *)p;
    size_t augmentation_length = strnlen(augmentation, (size_t)(stop - p));
    if (augmentation_length == (size_t)(stop - p)) return 0;
    p += augmentation_length + 1;
    p = skip_leb128(p, stop); /* code alignment */
    p = skip_leb128(p, stop); /* data alignment */
    p = version == 1 ? p + 1 : skip_leb128(p, stop); /* return address register */
    *encoding = 0x00; /* DW_EH_PE_absptr */
    if (augmentation[0] != 'z') return augmentation[0] == '\0' && p <= stop;
    p = skip_leb128(p, stop); /* augmentation data length */
    for (const char *a = augmentation + 1; *a != '\0'; a++) {
        if (p >= stop) return 0;
        if (*a == 'R') {
            *encoding = *p++;
        } else if (*a == 'L') {
            p++;
        } else if (*a == 'P') {
            unsigned personality = *p++;
            uintptr_t ignored;
            if (!read_encoded(&p, stop, personality & 0x7f, &ignored)) return 0;
        } else if (*a != 'S' && *a != 'B') {
            return 0;
        }
    }
    return p <= stop;
}

static int compare_entries(const void *a, const void *b)
{
    int32_t x = ((const struct vaka_unw_table_entry *)a)->start_ip_offset;
    int32_t y = ((const struct vaka_unw_table_entry *)b)->start_ip_offset;
    return (x > y) - (x < y);
}

/* A search table over the FDEs of the .eh_frame at `eh_frame` (`size` bytes), offsets from `eh_frame`. Allocates
 * (never freed: libunwind reads it for the process's lifetime). @return the entry count, 0 when none. */
static size_t build_eh_frame_table(const unsigned char *eh_frame, size_t size, struct vaka_unw_table_entry **out)
{
    const unsigned char *end = eh_frame + size;
    size_t capacity = size / 16 + 1, n = 0;
    struct vaka_unw_table_entry *table = malloc(capacity * sizeof *table);
    if (table == NULL) return 0;
    const unsigned char *next;
    for (const unsigned char *p = eh_frame; end - p >= 8; p = next) {
        uint32_t length, id;
        memcpy(&length, p, 4);
        if (length == 0 || length == 0xffffffffu || (size_t)(end - p - 4) < length) break;
        next = p + 4 + length;
        memcpy(&id, p + 4, 4);
        if (id == 0 || id > (size_t)(p + 4 - eh_frame)) continue; /* a CIE, or a CIE pointer out of range */
        unsigned encoding;
        const unsigned char *location = p + 8;
        uintptr_t start;
        if (!cie_fde_encoding(p + 4 - id, end, &encoding) || !read_encoded(&location, next, encoding, &start) ||
            start == 0)
            continue;
        int64_t start_offset = (int64_t)start - (int64_t)(uintptr_t)eh_frame;
        if (start_offset < INT32_MIN || start_offset > INT32_MAX || n == capacity) continue;
        table[n].start_ip_offset = (int32_t)start_offset;
        table[n].fde_offset = (int32_t)(p - eh_frame);
        n++;
    }
    if (n == 0) {
        free(table);
        return 0;
    }
    qsort(table, n, sizeof *table, compare_entries);
    *out = table;
    return n;
}

/* The run-time address and size of the executable's .eh_frame section (from /proc/self/exe's section headers;
 * `bias` is its load bias). @return 1 when found. */
static int find_eh_frame(uintptr_t bias, const unsigned char **address, size_t *size)
{
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int found = 0;
    ElfW(Ehdr) ehdr;
    ElfW(Shdr) *sections = NULL;
    char *names = NULL;
    if (pread(fd, &ehdr, sizeof ehdr, 0) != (ssize_t)sizeof ehdr || memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 ||
        ehdr.e_shentsize != sizeof(ElfW(Shdr)) || ehdr.e_shnum == 0 || ehdr.e_shstrndx >= ehdr.e_shnum)
        goto out;
    sections = malloc((size_t)ehdr.e_shnum * sizeof *sections);
    size_t table_bytes = (size_t)ehdr.e_shnum * sizeof *sections;
    if (sections == NULL || pread(fd, sections, table_bytes, (off_t)ehdr.e_shoff) != (ssize_t)table_bytes) goto out;
    const ElfW(Shdr) *strings = &sections[ehdr.e_shstrndx];
    if (strings->sh_size == 0 || strings->sh_size > (1u << 20) || (names = malloc(strings->sh_size + 1)) == NULL ||
        pread(fd, names, strings->sh_size, (off_t)strings->sh_offset) != (ssize_t)strings->sh_size)
        goto out;
    names[strings->sh_size] = '\0';
    for (size_t i = 0; i < ehdr.e_shnum; i++) {
        const ElfW(Shdr) *section = &sections[i];
        if (section->sh_name < strings->sh_size && (section->sh_flags & SHF_ALLOC) && section->sh_type == SHT_PROGBITS &&
            strcmp(names + section->sh_name, ".eh_frame") == 0 && section->sh_size > 0) {
            *address = (const unsigned char *)(bias + section->sh_addr);
            *size = section->sh_size;
            found = 1;
            break;
        }
    }
out:
    free(names);
    free(sections);
    close(fd);
    return found;
}

/* The executable, from the first entry of a dl_iterate_phdr walk. */
struct executable_table {
    const ElfW(Phdr) *phdr;
    uintptr_t bias, low, high;
    const unsigned char *eh_frame_hdr;
    int seen; /* set by the walk of libunwind's own dl_iterate_phdr when it lists the executable */
};

static int find_executable(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct executable_table *table = data;
    table->phdr = info->dlpi_phdr;
    table->bias = info->dlpi_addr;
    table->low = UINTPTR_MAX;
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_GNU_EH_FRAME) table->eh_frame_hdr = (const unsigned char *)start;
        if (ph->p_type != PT_LOAD) continue;
        if (start < table->low) table->low = start;
        if (start + ph->p_memsz > table->high) table->high = start + ph->p_memsz;
    }
    return 1; /* the first entry is the executable */
}

static int look_for_executable(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct executable_table *table = data;
    if (info->dlpi_phdr == table->phdr) table->seen = 1;
    return table->seen;
}

static unw_dyn_info_t executable_unwind_info;

/* Registers the executable's search table with libunwind when libunwind's dl_iterate_phdr does not list it. */
static void register_executable_if_unseen(void *handle)
{
    int (*their_iterate)(int (*)(struct dl_phdr_info *, size_t, void *), void *) =
        (int (*)(int (*)(struct dl_phdr_info *, size_t, void *), void *))dlsym(handle, "dl_iterate_phdr");
    void (*dyn_register)(unw_dyn_info_t *) = (void (*)(unw_dyn_info_t *))dlsym(handle, "_U_dyn_register");
    if (their_iterate == NULL || dyn_register == NULL) return;
    struct executable_table table;
    memset(&table, 0, sizeof table);
    dl_iterate_phdr(find_executable, &table);
    if (table.phdr == NULL || table.low >= table.high) return;
    their_iterate(look_for_executable, &table);
    if (table.seen) return; /* a dynamically linked program: libunwind finds the executable itself */
    uintptr_t segbase, entries;
    size_t count;
    const unsigned char *hdr = table.eh_frame_hdr;
    /* .eh_frame_hdr: version 1; eh_frame_ptr pcrel|sdata4; fde_count udata4; table datarel|sdata4 */
    if (hdr != NULL && hdr[0] == 1 && hdr[1] == 0x1b && hdr[2] == 0x03 && hdr[3] == 0x3b) {
        uint32_t fde_count;
        memcpy(&fde_count, hdr + 8, sizeof fde_count);
        segbase = (uintptr_t)hdr;
        entries = (uintptr_t)(hdr + 12);
        count = fde_count;
    } else {
        const unsigned char *eh_frame;
        size_t size;
        struct vaka_unw_table_entry *built;
        if (!find_eh_frame(table.bias, &eh_frame, &size)) return;
        count = build_eh_frame_table(eh_frame, size, &built);
        segbase = (uintptr_t)eh_frame;
        entries = (uintptr_t)built;
    }
    if (count == 0) return;
    executable_unwind_info.start_ip = table.low;
    executable_unwind_info.end_ip = table.high;
    executable_unwind_info.format = UNW_INFO_FORMAT_REMOTE_TABLE;
    executable_unwind_info.u.rti.segbase = segbase;
    executable_unwind_info.u.rti.table_len = count * sizeof(struct vaka_unw_table_entry) / sizeof(unw_word_t);
    executable_unwind_info.u.rti.table_data = entries;
    dyn_register(&executable_unwind_info);
}

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
    register_executable_if_unseen(handle);
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
