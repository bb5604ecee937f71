// vaka_dw_inflate: the compressed DWARF sections of an ELF file inflated ahead of libdw. See Sources/CLibdw/shim.h.
#include "../CLibdw/shim.h"
#include "../CZlib/shim.h"

#include <dlfcn.h>
#include <libdeflate.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* libdeflate (libdeflate.so.0, 1.7 or later for libdeflate_zlib_decompress_ex), opened with dlopen on first use;
   NULL functions when it is not installed. */
static pthread_once_t deflate_once = PTHREAD_ONCE_INIT;
static __typeof__(libdeflate_alloc_decompressor) *deflate_alloc;
static __typeof__(libdeflate_zlib_decompress_ex) *deflate_zlib;
static __typeof__(libdeflate_free_decompressor) *deflate_free;

static void load_deflate(void) {
    void *handle = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    __typeof__(libdeflate_alloc_decompressor) *alloc = (__typeof__(alloc))dlsym(handle, "libdeflate_alloc_decompressor");
    __typeof__(libdeflate_zlib_decompress_ex) *zlib = (__typeof__(zlib))dlsym(handle, "libdeflate_zlib_decompress_ex");
    __typeof__(libdeflate_free_decompressor) *release = (__typeof__(release))dlsym(handle, "libdeflate_free_decompressor");
    if (alloc && zlib && release) {
        deflate_alloc = alloc;
        deflate_zlib = zlib;
        deflate_free = release;
    }
}

int vaka_dw_has_libdeflate(void) {
    pthread_once(&deflate_once, load_deflate);
    return deflate_zlib != NULL;
}

/* One SHF_COMPRESSED section to inflate. */
struct section {
    Elf_Scn *scn;
    const unsigned char *input;  /* the zlib stream, after the compression header */
    size_t input_size;
    size_t size;                 /* ch_size: the inflated size */
    size_t align;                /* ch_addralign */
    unsigned char *output;       /* mmap'd, `size` bytes; NULL when mmap failed, or after inflating failed */
    int inflated;                /* 1 once the stream inflated to exactly `size` bytes and ended with the input */
};

struct vaka_dw_inflated {
    size_t count;
    struct section sections[];
};

/* Sections libdw would inflate at dwarf_begin_elf that no lookup reads (location lists and macros: Vaka
   evaluates no DW_AT_location / DW_AT_frame_base and reads no macro information). */
int vaka_dw_section_is_unread(const char *name) {
    static const char *const names[] = {".debug_loc", ".debug_loclists", ".debug_macro", ".debug_macinfo",
                                        ".debug_pubnames", ".debug_pubtypes"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0) return 1;
    return 0;
}

/* Largest inflated size accepted for `input_size` compressed bytes: deflate cannot expand more than 1032:1. */
static int plausible(size_t input_size, size_t size) {
    return size > 0 && input_size > 0 && size / 1032 <= input_size + 1;
}

/* Maps `section->output` (anonymous, not yet touched); NULL when mmap fails. */
static void map_output(struct section *section) {
    void *output = mmap(NULL, section->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (output == MAP_FAILED) return;
    /* Fewer page faults for the large ones (.debug_info is megabytes) where transparent huge pages are on. */
    if (section->size >= (size_t)2 << 20) madvise(output, section->size, MADV_HUGEPAGE);
    section->output = output;
}

/* Inflates the section into its mapping; `inflated` says whether the stream gave exactly ch_size bytes and ended
   at the end of the section (libelf's __libelf_decompress fails on either, so libdw leaves such a section out).
   The mapping stays (the other thread may be faulting it in); vaka_dw_inflate_sections unmaps it after the
   threads are done when it failed. */
static void inflate_one(struct section *section, const struct vaka_zlib_functions *zlib) {
    unsigned char *output = section->output;
    if (!output) return;
    int ok = 0;
    if (deflate_zlib) {
        struct libdeflate_decompressor *decompressor = deflate_alloc();
        if (decompressor) {
            /* No actual_out_nbytes: the stream must inflate to exactly ch_size bytes; and, as libelf requires,
               it must end where the section ends (no bytes after it). */
            size_t consumed = 0;
            ok = deflate_zlib(decompressor, section->input, section->input_size, output, section->size, &consumed, NULL)
                     == LIBDEFLATE_SUCCESS
                 && consumed == section->input_size;
            deflate_free(decompressor);
        }
    } else if (zlib) {
        z_stream stream;
        memset(&stream, 0, sizeof stream);
        if (vaka_inflate_init_zlib(zlib, &stream) == Z_OK) {
            int status = Z_OK;
            const unsigned char *input = section->input;
            size_t input_left = section->input_size;
            unsigned char *out = output;
            size_t output_left = section->size;
            /* avail_in / avail_out are 32-bit: feed sections above 4 GiB in parts. */
            while (status == Z_OK) {
                uInt in_part = input_left > 0x40000000 ? 0x40000000 : (uInt)input_left;
                uInt out_part = output_left > 0x40000000 ? 0x40000000 : (uInt)output_left;
                stream.next_in = (Bytef *)input;
                stream.avail_in = in_part;
                stream.next_out = out;
                stream.avail_out = out_part;
                status = zlib->inflate(&stream, Z_NO_FLUSH);
                input += in_part - stream.avail_in;
                input_left -= in_part - stream.avail_in;
                out += out_part - stream.avail_out;
                output_left -= out_part - stream.avail_out;
                if (status == Z_OK && in_part == stream.avail_in && out_part == stream.avail_out) status = Z_BUF_ERROR;
            }
            ok = status == Z_STREAM_END && output_left == 0 && input_left == 0;
            zlib->inflateEnd(&stream);
        }
    }
    section->inflated = ok;
}

struct group {
    struct section **sections;
    size_t count;
    /* zlib's functions when libdeflate is missing, else NULL (libdeflate inflates). */
    const struct vaka_zlib_functions *zlib;
    /* The other group, whose mappings this one faults in first (NULL: none). */
    const struct group *prefault;
};

static void *inflate_group(void *argument) {
    const struct group *group = argument;
    /* The second thread first faults in (zero-fills) the pages the first thread is about to write: that is
       faster than inflating, so the first thread, which has the longest section, finds them ready. At most 32
       times the compressed size (DWARF inflates 2-8 times), so a header claiming a far larger size than its
       stream gives does not make this commit that memory. */
    if (group->prefault)
        for (size_t i = 0; i < group->prefault->count; i++) {
            const struct section *section = group->prefault->sections[i];
            size_t bound = section->input_size > SIZE_MAX / 32 ? SIZE_MAX : section->input_size * 32;
            if (section->output) madvise(section->output, section->size < bound ? section->size : bound, MADV_POPULATE_WRITE);
        }
    for (size_t i = 0; i < group->count; i++) inflate_one(group->sections[i], group->zlib);
    return NULL;
}

/* Marks `scn` as holding no bytes (SHT_NOBITS) in libelf's copy of its header: libdw then skips it, as it skips
   a section whose inflating fails. */
static void hide(Elf_Scn *scn) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == NULL) return;
    shdr.sh_type = SHT_NOBITS;
    gelf_update_shdr(scn, &shdr);
}

struct vaka_dw_inflated *vaka_dw_inflate_sections(Elf *elf, int threads) {
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0) return NULL;
    size_t total = 0;
    if (elf_getshdrnum(elf, &total) != 0 || total == 0 || total > SIZE_MAX / 4 / sizeof(struct section)) return NULL;
    struct vaka_dw_inflated *result = calloc(1, sizeof *result + total * sizeof(struct section));
    if (!result) return NULL;
    pthread_once(&deflate_once, load_deflate);
    int class = gelf_getclass(elf);
    size_t header = class == ELFCLASS32 ? sizeof(Elf32_Chdr) : sizeof(Elf64_Chdr);
    for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn; scn = elf_nextscn(elf, scn)) {
        GElf_Shdr shdr;
        if (gelf_getshdr(scn, &shdr) == NULL || shdr.sh_type == SHT_NOBITS || (shdr.sh_flags & SHF_COMPRESSED) == 0)
            continue;
        if ((shdr.sh_flags & SHF_GROUP) != 0) continue;
        /* DWARF is SHT_PROGBITS (SHT_MIPS_DWARF on MIPS, in the processor range). Other types are left to libdw:
           libelf would convert their inflated bytes to the host's byte order as that type's records. */
        if (shdr.sh_type != SHT_PROGBITS && (shdr.sh_type < SHT_LOPROC || shdr.sh_type > SHT_HIPROC)) continue;
        const char *name = elf_strptr(elf, shstrndx, shdr.sh_name);
        if (!name || strncmp(name, ".debug_", 7) != 0) continue;
        if (vaka_dw_section_is_unread(name)) {
            hide(scn);
            continue;
        }
        GElf_Chdr chdr;
        Elf_Data *raw = elf_rawdata(scn, NULL);
        if (gelf_getchdr(scn, &chdr) == NULL || chdr.ch_type != ELFCOMPRESS_ZLIB || !raw || !raw->d_buf
            || (chdr.ch_addralign & (chdr.ch_addralign - 1)) != 0 || raw->d_size <= header
            || !plausible(raw->d_size - header, chdr.ch_size)) {
            /* Left to libdw (another compression it may know, or a damaged header it rejects itself: libelf
               refuses an alignment that is not a power of two and a size above 1032 times the stream's). */
            continue;
        }
        struct section *section = &result->sections[result->count++];
        section->scn = scn;
        section->input = (const unsigned char *)raw->d_buf + header;
        section->input_size = raw->d_size - header;
        section->size = chdr.ch_size;
        section->align = chdr.ch_addralign;
    }
    if (result->count == 0) return result;
    /* zlib (opened here, on first use) only when libdeflate is missing; with neither, nothing changed yet:
       libdw inflates the sections itself (or, as it fails without zlib too, leaves them out). */
    const struct vaka_zlib_functions *zlib = deflate_zlib ? NULL : vaka_zlib();
    if (!deflate_zlib && !zlib) {
        result->count = 0;
        return result;
    }

    /* Two groups of about equal inflated size (largest first into the lighter group); the second runs on a new
       thread when `threads` > 1. */
    struct section **order = malloc(3 * result->count * sizeof(struct section *));
    if (!order) {
        /* Nothing changed yet: libdw inflates the sections itself. */
        result->count = 0;
        return result;
    }
    for (size_t i = 0; i < result->count; i++) order[i] = &result->sections[i];
    for (size_t i = 1; i < result->count; i++)
        for (size_t j = i; j > 0 && order[j]->size > order[j - 1]->size; j--) {
            struct section *swap = order[j];
            order[j] = order[j - 1];
            order[j - 1] = swap;
        }
    for (size_t i = 0; i < result->count; i++) map_output(&result->sections[i]);
    struct group groups[2] = {{order + result->count, 0, zlib, NULL}, {order + 2 * result->count, 0, zlib, NULL}};
    size_t sizes[2] = {0, 0};
    for (size_t i = 0; i < result->count; i++) {
        int lighter = sizes[1] < sizes[0];
        groups[lighter].sections[groups[lighter].count++] = order[i];
        sizes[lighter] += order[i]->size;
    }
    groups[1].prefault = &groups[0];
    pthread_t thread;
    int threaded = threads > 1 && groups[1].count > 0 && pthread_create(&thread, NULL, inflate_group, &groups[1]) == 0;
    inflate_group(&groups[0]);
    if (threaded) {
        pthread_join(thread, NULL);
    } else {
        groups[1].prefault = NULL;
        inflate_group(&groups[1]);
    }
    free(order);

    for (size_t i = 0; i < result->count; i++) {
        struct section *section = &result->sections[i];
        if (section->output && !section->inflated) {
            munmap(section->output, section->size);
            section->output = NULL;
        }
        if (!section->output) {
            /* Damaged: libdw would fail to inflate it too and leave it out. */
            hide(section->scn);
            continue;
        }
        /* The section's data descriptor now holds the inflated bytes and its header no longer says
           SHF_COMPRESSED, as libelf's elf_compress(scn, 0, 0) leaves them; libdw's dwarf_begin_elf then takes the
           descriptor as it is. */
        Elf_Data *data = elf_getdata(section->scn, NULL);
        GElf_Shdr shdr;
        if (!data || gelf_getshdr(section->scn, &shdr) == NULL) {
            hide(section->scn);
            continue;
        }
        data->d_buf = section->output;
        data->d_size = section->size;
        data->d_type = ELF_T_BYTE;
        data->d_align = section->align;
        data->d_off = 0;
        shdr.sh_flags &= ~(GElf_Xword)SHF_COMPRESSED;
        shdr.sh_size = section->size;
        shdr.sh_addralign = section->align;
        gelf_update_shdr(section->scn, &shdr);
    }
    return result;
}

void vaka_dw_inflated_free(struct vaka_dw_inflated *inflated) {
    if (!inflated) return;
    for (size_t i = 0; i < inflated->count; i++)
        if (inflated->sections[i].output) munmap(inflated->sections[i].output, inflated->sections[i].size);
    free(inflated);
}
