/*
 * Install time: the list of loaded ELF images, collected with dl_iterate_phdr from the in-memory program
 * headers. For each image: base (l_addr + lowest PT_LOAD p_vaddr, page aligned down), size (span of the
 * PT_LOAD segments, page-rounded), GNU build ID (from the PT_NOTE segments), path (dlpi_name; the main
 * executable's comes from /proc/self/exe, the vDSO is named "[vdso]"), and the link-map identity
 * (l_addr, l_ld) the handler uses to match entries of `_r_debug.r_map`.
 */
#include "vaka_internal.h"

#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

typedef struct collect_ctx {
    vaka_image_cache *cache;
    uintptr_t vdso;
    uintptr_t page;
    size_t index;
} collect_ctx;

static void set_path(vaka_image_cache *cache, vaka_image *img, const char *path, size_t len)
{
    /* A path longer than VAKA_REPORT_PATH_MAX (PATH_MAX) is left unknown rather than cut: a cut path names another
     * file. */
    if (len == 0 || len > VAKA_REPORT_PATH_MAX || cache->pool_used + len > sizeof cache->pool) {
        img->path_off = 0;
        img->path_len = 0;
        return;
    }
    memcpy(cache->pool + cache->pool_used, path, len);
    img->path_off = (uint32_t)cache->pool_used;
    img->path_len = (uint32_t)len;
    cache->pool_used += len;
}

static int collect_one(struct dl_phdr_info *info, size_t size, void *data)
{
    collect_ctx *ctx = data;
    vaka_image_cache *cache = ctx->cache;
    (void)size;
    size_t index = ctx->index++;
    if (cache->count >= VAKA_MAX_IMAGES) return 1;

    uintptr_t lo = UINTPTR_MAX, hi = 0, ld = 0, text_lo = 0, text_hi = 0;
    int have_text = 0;
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            if (ph->p_vaddr < lo) lo = ph->p_vaddr;
            if (ph->p_vaddr + ph->p_memsz > hi) hi = ph->p_vaddr + ph->p_memsz;
            if (ph->p_flags & PF_X) {
                if (!have_text || ph->p_vaddr < text_lo) text_lo = ph->p_vaddr;
                have_text = 1;
                if (ph->p_vaddr + ph->p_memsz > text_hi) text_hi = ph->p_vaddr + ph->p_memsz;
            }
        } else if (ph->p_type == PT_DYNAMIC) {
            ld = info->dlpi_addr + ph->p_vaddr;
        }
    }
    if (lo == UINTPTR_MAX) return 0; /* nothing mapped */

    vaka_image *img = &cache->images[cache->count];
    memset(img, 0, sizeof *img);
    lo &= ~(ctx->page - 1);
    hi = (hi + ctx->page - 1) & ~(ctx->page - 1);
    img->base = info->dlpi_addr + lo;
    img->size = hi - lo;
    img->l_addr = info->dlpi_addr;
    img->l_ld = ld;
    if (have_text && text_hi > text_lo) {
        img->text_lo = info->dlpi_addr + text_lo;
        img->text_hi = info->dlpi_addr + text_hi;
    }

    /* Build ID: PT_NOTE segments that lie inside a PT_LOAD segment are mapped and readable. */
    for (size_t i = 0; i < info->dlpi_phnum && img->build_id_len == 0; i++) {
        const ElfW(Phdr) *note = &info->dlpi_phdr[i];
        if (note->p_type != PT_NOTE) continue;
        int mapped = 0;
        for (size_t j = 0; j < info->dlpi_phnum; j++) {
            const ElfW(Phdr) *load = &info->dlpi_phdr[j];
            if (load->p_type == PT_LOAD && note->p_vaddr >= load->p_vaddr &&
                note->p_vaddr + note->p_memsz <= load->p_vaddr + load->p_filesz)
                mapped = 1;
        }
        if (!mapped) continue;
        img->build_id_len = (uint8_t)vaka_find_build_id((const uint8_t *)(info->dlpi_addr + note->p_vaddr),
                                                        note->p_memsz, note->p_align, img->build_id);
    }

    const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
    if (ctx->vdso != 0 && img->base == ctx->vdso) {
        set_path(cache, img, "[vdso]", 6);
        img->not_in_link_map = 1;
    } else if (name[0] == '\0' && index == 0) {
        set_path(cache, img, vaka_state.executable, vaka_state.executable_len);
    } else {
        set_path(cache, img, name, strlen(name));
    }
    cache->count++;
    return 0;
}

size_t vaka_images_collect(vaka_image_cache *cache)
{
    collect_ctx ctx;
    ctx.cache = cache;
    ctx.vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    ctx.page = vaka_state.page_size ? vaka_state.page_size : 4096;
    ctx.index = 0;
    cache->count = 0;
    cache->pool_used = 0;
    dl_iterate_phdr(collect_one, &ctx);
    return cache->count;
}
