/*
 * Signal path: the `image` lines of a report.
 *
 * Images known at install (or at the last vaka_crash_refresh_images()) come from a cache filled by
 * images.c with dl_iterate_phdr. To also cover libraries dlopen'ed later, the handler walks the dynamic
 * linker's list (`_r_debug.r_map`, whose first five link_map fields are public ABI) with safe reads:
 * entries matching a cached image (same l_addr and l_ld) are written from the cache; any other entry is
 * read from memory — ELF header and program headers at l_addr, the PT_NOTE segments for the build ID,
 * the path from l_name. Cached images no longer in the list (dlclose'd) are left out. The cached entries and their
 * paths are read in one batch first (batch_read_cached, below).
 *
 * vaka_sig_image_from_phdrs() is the one per-image computation (base, size, text range, build ID) from an image's
 * program headers: used here on headers read from memory, and by images.c on dl_iterate_phdr's headers for the
 * install list and for vaka_crash_copy_images().
 */
#include "vaka_internal.h"
#include "sig_threads.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <sys/uio.h>

vaka_image_cache vaka_image_caches[2];

#if UINTPTR_MAX == 0xffffffffffffffffu
typedef Elf64_Ehdr vaka_ehdr;
typedef Elf64_Phdr vaka_phdr;
#define VAKA_ELFCLASS ELFCLASS64
#else
typedef Elf32_Ehdr vaka_ehdr;
typedef Elf32_Phdr vaka_phdr;
#define VAKA_ELFCLASS ELFCLASS32
#endif

#define VAKA_MAX_PHDRS 128
#define VAKA_NOTE_READ_MAX 2048
#define VAKA_LINK_MAP_MAX 4096
/* Most link-map namespaces walked (glibc has 16: DL_NNS). */
#define VAKA_LINK_NAMESPACES_MAX 16

/* The handler's buffer for a PT_NOTE segment read with safe reads (the single crashing thread only). */
static uint8_t note_buf[VAKA_NOTE_READ_MAX];

size_t vaka_find_build_id(const uint8_t *notes, size_t len, size_t align, uint8_t *out)
{
    size_t off = 0;
    if (align != 8) align = 4;
    while (off + 12 <= len) {
        uint32_t namesz, descsz, type;
        vaka_sig_copy(&namesz, notes + off, 4);
        vaka_sig_copy(&descsz, notes + off + 4, 4);
        vaka_sig_copy(&type, notes + off + 8, 4);
        size_t name_off = off + 12;
        size_t desc_off = name_off + ((namesz + align - 1) & ~(align - 1));
        size_t next = desc_off + ((descsz + align - 1) & ~(align - 1));
        if (namesz > len || descsz > len || desc_off > len || next > len || next <= off) break;
        if (type == NT_GNU_BUILD_ID && namesz == 4 && notes[name_off] == 'G' && notes[name_off + 1] == 'N' &&
            notes[name_off + 2] == 'U' && notes[name_off + 3] == '\0' && descsz > 0) {
            size_t n = descsz < VAKA_REPORT_BUILD_ID_MAX ? descsz : VAKA_REPORT_BUILD_ID_MAX;
            vaka_sig_copy(out, notes + desc_off, n);
            return n;
        }
        off = next;
    }
    return 0;
}

int vaka_sig_image_from_phdrs(const ElfW(Phdr) *ph, size_t phnum, uintptr_t l_addr, uintptr_t page,
                          vaka_safe_reader *r, vaka_image *img)
{
    uintptr_t lo = UINTPTR_MAX, hi = 0, ld = 0, text_lo = 0, text_hi = 0;
    int have_text = 0;
    for (size_t i = 0; i < phnum; i++) {
        if (ph[i].p_type == PT_LOAD) {
            if (ph[i].p_vaddr < lo) lo = ph[i].p_vaddr;
            if (ph[i].p_vaddr + ph[i].p_memsz > hi) hi = ph[i].p_vaddr + ph[i].p_memsz;
            if (ph[i].p_flags & PF_X) {
                if (!have_text || ph[i].p_vaddr < text_lo) text_lo = ph[i].p_vaddr;
                have_text = 1;
                if (ph[i].p_vaddr + ph[i].p_memsz > text_hi) text_hi = ph[i].p_vaddr + ph[i].p_memsz;
            }
        } else if (ph[i].p_type == PT_DYNAMIC) {
            ld = l_addr + ph[i].p_vaddr;
        }
    }
    if (lo == UINTPTR_MAX) return 0; /* nothing mapped */

    vaka_sig_zero(img, sizeof *img);
    lo &= ~(page - 1);
    hi = (hi + page - 1) & ~(page - 1);
    img->base = l_addr + lo;
    img->size = hi - lo;
    img->l_addr = l_addr;
    img->l_ld = ld;
    if (have_text && text_hi > text_lo) {
        img->text_lo = l_addr + text_lo;
        img->text_hi = l_addr + text_hi;
    }

    /* Build ID: the first GNU build ID note of a PT_NOTE segment that lies in a PT_LOAD segment's file bytes
     * (only those are mapped). */
    for (size_t i = 0; i < phnum && img->build_id_len == 0; i++) {
        if (ph[i].p_type != PT_NOTE) continue;
        int mapped = 0;
        for (size_t j = 0; j < phnum && !mapped; j++)
            mapped = ph[j].p_type == PT_LOAD && ph[i].p_vaddr >= ph[j].p_vaddr &&
                     ph[i].p_vaddr + ph[i].p_filesz <= ph[j].p_vaddr + ph[j].p_filesz;
        if (!mapped) continue;
        const uint8_t *notes = (const uint8_t *)(l_addr + ph[i].p_vaddr);
        size_t n = ph[i].p_filesz;
        if (r != NULL) {
            n = n < VAKA_NOTE_READ_MAX ? n : VAKA_NOTE_READ_MAX;
            n = vaka_safe_read(r, note_buf, (uintptr_t)notes, n);
            notes = note_buf;
        }
        img->build_id_len = (uint8_t)vaka_find_build_id(notes, n, ph[i].p_align, img->build_id);
    }
    return 1;
}

/* One link_map entry not in the cache. */
typedef struct extra_entry {
    uintptr_t l_addr, l_name, l_ld;
    int first; /* first entry of the list: the main program */
} extra_entry;

/* Scratch storage for the (single) crashing thread. */
static extra_entry extras[VAKA_MAX_IMAGES];
static vaka_phdr phdrs[VAKA_MAX_PHDRS];
static char path_buf[VAKA_REPORT_PATH_MAX];
static vaka_image scratch_image;

/* The images as written, in order: the thread lines give frames relative to them (sig_threads.c). */
vaka_written_image vaka_written_images[VAKA_MAX_IMAGES];
size_t vaka_written_image_count;

/* 1 when an image at `base` with that build ID was written already (the vDSO is in the install list as `[vdso]`
 * and in the dynamic linker's list as `linux-vdso.so.1`). */
static int written_already(const vaka_image *img)
{
    for (size_t k = 0; k < vaka_written_image_count; k++)
        if (vaka_written_images[k].base == img->base && vaka_written_images[k].size == img->size) return 1;
    return 0;
}

static void write_image_line(vaka_writer *w, const vaka_image *img, const char *path, size_t path_len)
{
    if (vaka_written_image_count < VAKA_MAX_IMAGES) {
        vaka_written_images[vaka_written_image_count].base = img->base;
        vaka_written_images[vaka_written_image_count].size = img->size;
        vaka_written_image_count++;
    }
    vaka_w_key(w, VAKA_REPORT_KEY_IMAGE);
    vaka_w_hex(w, img->base);
    vaka_w_char(w, ' ');
    vaka_w_hex(w, img->size);
    vaka_w_char(w, ' ');
    if (img->build_id_len > 0) vaka_w_hexbytes(w, img->build_id, img->build_id_len);
    else vaka_w_str(w, VAKA_REPORT_VALUE_UNKNOWN);
    vaka_w_char(w, ' ');
    if (path_len > 0) vaka_w_text(w, path, path_len);
    else vaka_w_str(w, VAKA_REPORT_VALUE_UNKNOWN);
    vaka_w_nl(w);
}

/* Most pages searched below the dynamic section for the ELF header of an image whose first PT_LOAD does not
 * start at p_vaddr 0 (16 MiB with 4 KiB pages). */
#define VAKA_HEADER_SEARCH_PAGES 4096

/* Reads the ELF header at `at` and its program headers into `phdrs`. @return the number of program headers
 * read, 0 if `at` holds no valid header. */
static size_t read_headers(vaka_safe_reader *r, uintptr_t at, vaka_ehdr *eh)
{
    if (vaka_safe_read(r, eh, at, sizeof *eh) != sizeof *eh) return 0;
    if (eh->e_ident[EI_MAG0] != ELFMAG0 || eh->e_ident[EI_MAG1] != ELFMAG1 || eh->e_ident[EI_MAG2] != ELFMAG2 ||
        eh->e_ident[EI_MAG3] != ELFMAG3 || eh->e_ident[EI_CLASS] != VAKA_ELFCLASS ||
        eh->e_phentsize != sizeof(vaka_phdr) || eh->e_phnum == 0)
        return 0;
    size_t phnum = eh->e_phnum < VAKA_MAX_PHDRS ? eh->e_phnum : VAKA_MAX_PHDRS;
    size_t bytes = phnum * sizeof(vaka_phdr);
    if (vaka_safe_read(r, phdrs, at + eh->e_phoff, bytes) != bytes) return 0;
    return phnum;
}

/* 1 when the program headers in `phdrs` put the dynamic section at `l_ld` for load bias `l_addr`. */
static int dynamic_matches(size_t phnum, uintptr_t l_addr, uintptr_t l_ld)
{
    for (size_t i = 0; i < phnum; i++)
        if (phdrs[i].p_type == PT_DYNAMIC) return l_addr + phdrs[i].p_vaddr == l_ld;
    return 0;
}

/* Reads an image's layout and build ID from memory. The ELF header is mapped at l_addr + the first PT_LOAD's
 * p_vaddr: usually l_addr itself; for an image linked at a non-zero address (e.g. -Ttext-segment) it is found
 * by searching page by page downward from its dynamic section (l_ld), checked by its PT_DYNAMIC.
 * @return 1 if its ELF header was readable. */
static int image_from_memory(vaka_safe_reader *r, uintptr_t l_addr, uintptr_t l_ld, vaka_image *img)
{
    vaka_ehdr eh;
    uintptr_t page = vaka_state.page_size ? vaka_state.page_size : 4096;
    /* l_addr 0: a non-PIE main program, or a library mapped exactly at its link address. */
    size_t phnum = l_addr != 0 ? read_headers(r, l_addr, &eh) : 0;
    if (phnum == 0 && l_ld > l_addr) {
        uintptr_t at = l_ld & ~(page - 1);
        for (size_t k = 0; k < VAKA_HEADER_SEARCH_PAGES && at >= l_addr && at != 0; k++, at -= page) {
            uint8_t magic[4];
            if (vaka_safe_read(r, magic, at, sizeof magic) != sizeof magic || magic[0] != ELFMAG0 ||
                magic[1] != ELFMAG1 || magic[2] != ELFMAG2 || magic[3] != ELFMAG3)
                continue;
            phnum = read_headers(r, at, &eh);
            if (phnum != 0 && dynamic_matches(phnum, l_addr, l_ld)) break;
            phnum = 0;
        }
    }
    if (phnum == 0) return 0;
    return vaka_sig_image_from_phdrs(phdrs, phnum, l_addr, page, r, img);
}

/* 1 when the link map entry's l_name (read safely) is the cached image's path. A library dlclose'd after
 * install and another one dlopen'ed at the same address (same l_addr, and the same l_ld when the layouts
 * match) would otherwise be written with the old library's path and build ID. */
static int same_path(vaka_safe_reader *r, const vaka_image *img, const vaka_image_cache *cache, uintptr_t l_name)
{
    if (img->path_len == 0 || l_name == 0) return 1; /* nothing to compare: keep the l_addr/l_ld match */
    size_t want = img->path_len;
    if (want >= VAKA_REPORT_PATH_MAX) return 1;
    size_t n = vaka_safe_read_string(r, path_buf, l_name, want + 1);
    if (n != want) return 0;
    const char *cached = cache->pool + img->path_off;
    for (size_t i = 0; i < n; i++)
        if (path_buf[i] != cached[i]) return 0;
    return 1;
}

/* ------------------------------------------------------------------ one read for every cached entry */

/* The link map walk reads one entry (five words) at a time, and for each entry that matches a cached image its
 * path: two process_vm_readv calls per image. The cache knows, from install, where each image's entry was
 * (lm_node) and where its path string was (l_name), and has the pieces of one process_vm_readv planned (images.c:
 * the r_map word, then per cached image its entry and, when it has a path to compare, path_len + 1 bytes at
 * l_name), so all of them are read at once first. The walk then takes an entry from this read when the node it
 * reaches is the one cached (the words are those at that node, read a moment earlier in the same capture), and a
 * path compare when the entry's l_name is the cached one; anything else — a node or l_name not cached, a piece
 * the read did not cover — is read on its own, as without the batch. A piece that faults ends the call at that
 * piece (the kernel copies the pieces in order and stops at the first it cannot read): that piece is left out and
 * the rest are asked for again from the next one, so a freed entry or path costs one call more, not the batch. */

/* Most pieces left out of one batch before the rest are read on their own. */
#define VAKA_BATCH_FAILS 8

/* What the batched read covered (on the handler's stack). */
typedef struct batch_result {
    const vaka_image_cache *cache;
    size_t upto;                          /* pieces [0, upto) were read, but for those in `failed` */
    size_t failed_count;
    uint16_t failed[VAKA_BATCH_FAILS];
} batch_result;

/* 1 when piece `piece` (index + 1; 0: none) was read whole. */
static int piece_ok(const batch_result *b, size_t piece)
{
    if (piece == 0 || piece - 1 >= b->upto) return 0;
    for (size_t f = 0; f < b->failed_count; f++)
        if (b->failed[f] == piece - 1) return 0;
    return 1;
}

/* The batched read of the r_map word, every cached entry and path, as the cache planned it. @return 1 when `*map`
 * holds r_map's value. */
static int batch_read_cached(vaka_safe_reader *r, batch_result *b, uintptr_t *map)
{
    const vaka_image_cache *cache = b->cache;
    b->upto = b->failed_count = 0;
    if (cache == NULL || cache->batch_count == 0 || r->method != VAKA_SAFE_READ_PVR) return 0;
    char *bytes = (char *)cache->pool + cache->batch_at;
    size_t from = 0, at = 0; /* `at`: where piece `from` lands */
    while (from < cache->batch_count) {
        struct iovec local = { bytes + at, cache->batch_bytes - at };
        ssize_t got = process_vm_readv(r->pid, &local, 1, cache->batch_iov + from, cache->batch_count - from, 0);
        if (got < 0 && errno != EFAULT) break; /* refused: every piece is read on its own (vaka_safe_read decides) */
        size_t done = got > 0 ? (size_t)got : 0;
        size_t k = from;
        while (k < cache->batch_count && cache->batch_iov[k].iov_len <= done) {
            done -= cache->batch_iov[k].iov_len;
            at += cache->batch_iov[k].iov_len;
            k++;
        }
        b->upto = k;
        if (k == cache->batch_count) break;
        /* Piece k faulted (or was cut): left out, the rest from the next one. */
        if (b->failed_count == VAKA_BATCH_FAILS) break;
        b->failed[b->failed_count++] = (uint16_t)k;
        at += cache->batch_iov[k].iov_len;
        from = k + 1;
        b->upto = from;
    }
    if (!piece_ok(b, 1)) return 0;
    vaka_sig_copy(map, bytes, sizeof *map);
    return 1;
}

/* Cached image `i`'s entry from the batch when the walk is at its node. @return 1 when `lm` was filled. */
static int batched_entry(const batch_result *b, size_t i, uintptr_t node, uintptr_t lm[5])
{
    const vaka_image *img = &b->cache->images[i];
    if (img->lm_node != node || !piece_ok(b, img->batch_entry)) return 0;
    vaka_sig_copy(lm, b->cache->pool + b->cache->batch_at + img->batch_entry_at, 5 * sizeof(uintptr_t));
    return 1;
}

/* same_path, from the batch when the entry's l_name is the one whose path it read. */
static int same_path_batched(vaka_safe_reader *r, const batch_result *b, size_t i, uintptr_t l_name)
{
    const vaka_image_cache *cache = b->cache;
    const vaka_image *img = &cache->images[i];
    if (img->path_len == 0 || l_name == 0 || img->l_name != l_name || !piece_ok(b, img->batch_path))
        return same_path(r, img, cache, l_name);
    const uint8_t *read = (const uint8_t *)cache->pool + cache->batch_at + img->batch_path_at;
    const char *cached = cache->pool + img->path_off;
    for (size_t k = 0; k < img->path_len; k++)
        if (read[k] == '\0' || (char)read[k] != cached[k]) return 0;
    return read[img->path_len] == '\0';
}

void vaka_sig_write_images(vaka_writer *w, vaka_safe_reader *r)
{
    vaka_image_cache *cache = atomic_load(&vaka_state.images);
    size_t count = cache ? cache->count : 0;
    size_t extra_count = 0, written = 0;
    int walk_ok = 0;

    for (size_t i = 0; i < count; i++) cache->images[i].seen = 0;
    vaka_written_image_count = 0;

    if (vaka_state.r_debug != NULL) {
        uintptr_t node = 0;
        uintptr_t map_field = (uintptr_t)vaka_state.r_debug + offsetof(struct r_debug, r_map);
        batch_result batch;
        batch.cache = cache;
        int have_map = batch_read_cached(r, &batch, &node) || vaka_safe_read_word(r, map_field, &node);
        /* Every namespace's list: the base one (r_map, above), then those dlmopen made, each from the r_debug
         * before it (`r_next`, glibc's struct r_debug_extended, when its r_version is 2 or more). */
        uintptr_t debug = (uintptr_t)vaka_state.r_debug;
        size_t k = 0; /* entries walked, over every namespace */
        for (size_t ns = 0; have_map && ns < VAKA_LINK_NAMESPACES_MAX && k < VAKA_LINK_MAP_MAX; ns++) {
            size_t hint = 0; /* the cached image whose node is likely next: the list's order is the cache's */
            for (; node != 0 && k < VAKA_LINK_MAP_MAX; k++) {
                uintptr_t lm[5]; /* l_addr, l_name, l_ld, l_next, l_prev */
                int batched = 0;
                for (size_t j = 0; j < count && !batched; j++) {
                    size_t i = (hint + j) % count;
                    if (batched_entry(&batch, i, node, lm)) {
                        batched = 1;
                        hint = i + 1;
                    }
                }
                if (!batched && vaka_safe_read(r, lm, node, sizeof lm) != sizeof lm) break;
                walk_ok = 1;
                int found = 0;
                for (size_t i = 0; i < count; i++) {
                    vaka_image *img = &cache->images[i];
                    if (img->not_in_link_map && img->l_addr == lm[0] && img->l_ld == lm[2]) {
                        /* The vDSO's entry (`linux-vdso.so.1`): written from the cache whatever the list says;
                         * read from memory it would be the same image, left out as written already. */
                        found = 1;
                        break;
                    }
                    if (img->l_addr == lm[0] && img->l_ld == lm[2] &&
                        (k == 0 || same_path_batched(r, &batch, i, lm[1]))) {
                        img->seen = 1;
                        found = 1;
                        break;
                    }
                }
                if (!found && extra_count < VAKA_MAX_IMAGES) {
                    extras[extra_count].l_addr = lm[0];
                    extras[extra_count].l_name = lm[1];
                    extras[extra_count].l_ld = lm[2];
                    extras[extra_count].first = (k == 0);
                    extra_count++;
                }
                node = lm[3];
            }
            /* `debug`'s r_debug and the word after it (one read): its r_version, and r_next when that is 2 or more;
             * then the next namespace's r_map. */
            struct {
                struct r_debug base;
                uintptr_t r_next;
            } extended;
            if (vaka_safe_read(r, &extended, debug, sizeof extended) != sizeof extended ||
                extended.base.r_version < 2 || extended.r_next == 0 || extended.r_next == debug ||
                !vaka_safe_read_word(r, extended.r_next + offsetof(struct r_debug, r_map), &node))
                break;
            debug = extended.r_next;
        }
    }

    for (size_t i = 0; i < count && written < VAKA_MAX_IMAGES; i++) {
        vaka_image *img = &cache->images[i];
        if (walk_ok && !img->seen && !img->not_in_link_map) continue;
        write_image_line(w, img, cache->pool + img->path_off, img->path_len);
        written++;
    }

    for (size_t e = 0; e < extra_count && written < VAKA_MAX_IMAGES; e++) {
        vaka_image *img = &scratch_image;
        if (!image_from_memory(r, extras[e].l_addr, extras[e].l_ld, img)) continue;
        if (written_already(img)) continue;
        size_t n = 0;
        if (extras[e].l_name != 0) n = vaka_safe_read_string(r, path_buf, extras[e].l_name, VAKA_REPORT_PATH_MAX);
        if (n >= VAKA_REPORT_PATH_MAX) n = 0; /* maybe cut: unknown (`-`) rather than the wrong file */
        if (n == 0 && extras[e].first) {
            write_image_line(w, img, vaka_state.executable, vaka_state.executable_len);
        } else {
            write_image_line(w, img, path_buf, n);
        }
        written++;
    }
}
