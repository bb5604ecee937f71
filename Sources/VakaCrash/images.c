/*
 * Normal context: the loaded ELF images, collected with dl_iterate_phdr from the in-memory program headers.
 * Two lists come from here, made by the same per-image code (image_of, and vaka_sig_image_from_phdrs in
 * sig_images.c, which the handler's link-map walk shares): the install list the handler writes
 * (vaka_images_collect, into a vaka_image_cache), and the public vaka_crash_copy_images() the SDK uses for the
 * images of handled errors' stacks. For each image: base, size, GNU build ID, executable range and link-map
 * identity (vaka_sig_image_from_phdrs), and the path: dlpi_name; the main program's (the first entry, with an
 * empty name) comes from /proc/self/exe; the vDSO is named "[vdso]".
 */
#include "vaka_internal.h"

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

/* What every entry of one dl_iterate_phdr walk needs. */
typedef struct image_walk {
    uintptr_t vdso;          /* AT_SYSINFO_EHDR: the vDSO's base address, 0 if none */
    uintptr_t page;          /* page size in bytes */
    const char *executable;  /* the main program's path and its length (0: unknown) */
    size_t executable_len;
    size_t index;            /* number of the next dl_iterate_phdr entry (0: the main program) */
} image_walk;

static void image_walk_init(image_walk *walk, const char *executable, size_t executable_len)
{
    walk->vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    walk->page = vaka_state.page_size ? vaka_state.page_size : (uintptr_t)sysconf(_SC_PAGESIZE);
    if (walk->page == 0 || (walk->page & (walk->page - 1)) != 0) walk->page = 4096;
    walk->executable = executable;
    walk->executable_len = executable_len;
    walk->index = 0;
}

/* One dl_iterate_phdr entry: fills `img` and points `*path`/`*path_len` at its path (not copied; length 0 when
 * unknown). @return 0 when the entry maps nothing (no PT_LOAD segment). */
static int image_of(image_walk *walk, const struct dl_phdr_info *info, vaka_image *img, const char **path,
                    size_t *path_len)
{
    size_t index = walk->index++;
    if (!vaka_sig_image_from_phdrs(info->dlpi_phdr, info->dlpi_phnum, info->dlpi_addr, walk->page, NULL, img))
        return 0;
    const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
    if (walk->vdso != 0 && img->base == walk->vdso) {
        *path = "[vdso]";
        *path_len = 6;
        img->not_in_link_map = 1;
    } else if (name[0] == '\0' && index == 0) {
        *path = walk->executable;
        *path_len = walk->executable_len;
    } else {
        *path = name;
        *path_len = strlen(name);
    }
    return 1;
}

size_t vaka_rt_executable_path(char *buf, size_t size)
{
    if (buf == NULL || size == 0) return 0;
    /* readlink cuts silently: a result filling the whole buffer may be cut, and is left unknown. */
    ssize_t n = readlink("/proc/self/exe", buf, size);
    size_t len = n > 0 && (size_t)n < size ? (size_t)n : 0;
    buf[len] = '\0';
    return len;
}

/* ------------------------------------------------------------------ the install list */

typedef struct collect_ctx {
    vaka_image_cache *cache;
    image_walk walk;
    struct link_map *node; /* the entry of r_debug's list expected next (dl_iterate_phdr walks it in order) */
    int node_started;
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
    if (cache->count >= VAKA_MAX_IMAGES) return 1;
    /* The entry's node in r_debug's list, for the handler's one batched read of every cached entry
     * (sig_images.c). Read here, where dl_iterate_phdr holds the lock under which the dynamic linker links and
     * unlinks entries; it lists the base namespace first, in the list's order. */
    if (!ctx->node_started) {
        ctx->node_started = 1;
        ctx->node = vaka_state.r_debug != NULL ? ((struct r_debug *)vaka_state.r_debug)->r_map : NULL;
    }
    uintptr_t node = 0;
    if (ctx->node != NULL && ctx->node->l_addr == info->dlpi_addr && ctx->node->l_name == info->dlpi_name) {
        node = (uintptr_t)ctx->node;
        ctx->node = ctx->node->l_next;
    }
    vaka_image *img = &cache->images[cache->count];
    const char *path = NULL;
    size_t path_len = 0;
    if (!image_of(&ctx->walk, info, img, &path, &path_len)) return 0;
    set_path(cache, img, path, path_len);
    img->lm_node = node;
    img->l_name = path != NULL && path == info->dlpi_name ? (uintptr_t)info->dlpi_name : 0;
    cache->count++;
    return 0;
}

/* Most bytes of one piece that holds both an image's link-map entry and its path. */
#define VAKA_BATCH_JOIN 512

/* Adds a piece of `len` bytes at `at` to the cache's batch plan. @return its index + 1, 0 when it does not fit. */
static uint16_t plan_piece(vaka_image_cache *cache, uintptr_t at, size_t len, uint32_t *landing)
{
    if (cache->batch_count >= VAKA_BATCH_IOV || at == 0 ||
        len > sizeof cache->pool - cache->batch_at - cache->batch_bytes)
        return 0;
    cache->batch_iov[cache->batch_count].iov_base = (void *)at;
    cache->batch_iov[cache->batch_count].iov_len = len;
    *landing = (uint32_t)cache->batch_bytes;
    cache->batch_bytes += len;
    return (uint16_t)++cache->batch_count;
}

/* The handler's one read of the r_map word and every cached image's link-map entry and path (sig_images.c): its
 * pieces, and its bytes' place in the pool after the paths, written now so that the handler finds those pages
 * mapped. */
static void plan_batch(vaka_image_cache *cache)
{
    uint32_t landing = 0;
    cache->batch_count = 0;
    cache->batch_bytes = 0;
    cache->batch_at = (cache->pool_used + 15) & ~(size_t)15;
    for (size_t i = 0; i < cache->count; i++) cache->images[i].batch_entry = cache->images[i].batch_path = 0;
    if (cache->batch_at >= sizeof cache->pool || vaka_state.r_debug == NULL ||
        plan_piece(cache, (uintptr_t)vaka_state.r_debug + offsetof(struct r_debug, r_map), sizeof(uintptr_t),
                   &landing) == 0) {
        cache->batch_count = 0;
        return;
    }
    for (size_t i = 0; i < cache->count; i++) {
        vaka_image *img = &cache->images[i];
        if (img->lm_node == 0) continue;
        uintptr_t entry_end = img->lm_node + 5 * sizeof(uintptr_t);
        int path = img->l_name != 0 && img->path_len > 0 && img->path_len < VAKA_REPORT_PATH_MAX;
        uintptr_t path_end = img->l_name + img->path_len + 1;
        uintptr_t lo = img->l_name < img->lm_node ? img->l_name : img->lm_node;
        uintptr_t hi = path_end > entry_end ? path_end : entry_end;
        if (path && hi - lo <= VAKA_BATCH_JOIN) {
            /* The dynamic linker allocates the path just before the entry: one piece for both (each piece costs
             * the kernel a page lookup, more than copying the bytes between). */
            uint32_t at = 0;
            img->batch_entry = img->batch_path = plan_piece(cache, lo, hi - lo, &at);
            img->batch_entry_at = at + (uint32_t)(img->lm_node - lo);
            img->batch_path_at = at + (uint32_t)(img->l_name - lo);
            continue;
        }
        img->batch_entry = plan_piece(cache, img->lm_node, 5 * sizeof(uintptr_t), &img->batch_entry_at);
        if (img->batch_entry != 0 && path)
            img->batch_path = plan_piece(cache, img->l_name, img->path_len + 1, &img->batch_path_at);
    }
    memset(cache->pool + cache->batch_at, 0, cache->batch_bytes);
}

size_t vaka_images_collect(vaka_image_cache *cache)
{
    collect_ctx ctx;
    ctx.cache = cache;
    ctx.node = NULL;
    ctx.node_started = 0;
    image_walk_init(&ctx.walk, vaka_state.executable, vaka_state.executable_len);
    cache->count = 0;
    cache->pool_used = 0;
    dl_iterate_phdr(collect_one, &ctx);
    plan_batch(cache);
    return cache->count;
}

/* ------------------------------------------------------------------ the public copy */

typedef struct copy_ctx {
    vaka_crash_image *out;
    size_t max;
    size_t count; /* images met so far, stored or not */
    image_walk walk;
} copy_ctx;

static int copy_one(struct dl_phdr_info *info, size_t size, void *data)
{
    copy_ctx *ctx = data;
    (void)size;
    vaka_image img;
    const char *path = NULL;
    size_t path_len = 0;
    if (!image_of(&ctx->walk, info, &img, &path, &path_len)) return 0;
    if (ctx->count < ctx->max) {
        vaka_crash_image *o = &ctx->out[ctx->count];
        memset(o, 0, sizeof *o);
        o->base = img.base;
        o->size = img.size;
        o->build_id_len = img.build_id_len;
        memcpy(o->build_id, img.build_id, img.build_id_len);
        /* The install list's rule (set_path): a path longer than VAKA_REPORT_PATH_MAX is unknown, never cut. */
        if (path_len > 0 && path_len <= VAKA_REPORT_PATH_MAX) {
            memcpy(o->path, path, path_len);
            o->path_len = path_len;
        }
    }
    ctx->count++;
    return 0;
}

size_t vaka_crash_executable_path(char *buf, size_t size)
{
    if (buf == NULL || size == 0) return 0;
    size_t len = 0;
    int known = 0;
    /* The install's copy (vaka_state.executable, written under the install lock): no second /proc lookup. */
    vaka_rt_install_lock();
    if (atomic_load(&vaka_state.installed) && vaka_state.executable_len > 0) {
        known = 1;
        if (vaka_state.executable_len < size) {
            len = vaka_state.executable_len;
            memcpy(buf, vaka_state.executable, len);
        }
    }
    vaka_rt_install_unlock();
    if (!known) return vaka_rt_executable_path(buf, size);
    buf[len] = '\0';
    return len;
}

size_t vaka_crash_copy_images(vaka_crash_image *out, size_t max)
{
    char executable[VAKA_REPORT_PATH_MAX + 1];
    copy_ctx ctx;
    ctx.out = out;
    ctx.max = out != NULL ? max : 0;
    ctx.count = 0;
    image_walk_init(&ctx.walk, executable, vaka_crash_executable_path(executable, sizeof executable));
    dl_iterate_phdr(copy_one, &ctx);
    return ctx.count;
}

/* copy_one for the first entry with a PT_LOAD segment (the main program), then stops the walk. */
static int copy_first(struct dl_phdr_info *info, size_t size, void *data)
{
    copy_ctx *ctx = data;
    copy_one(info, size, data);
    return ctx->count > 0;
}

size_t vaka_crash_copy_main_image(vaka_crash_image *out)
{
    if (out == NULL) return 0;
    char executable[VAKA_REPORT_PATH_MAX + 1];
    copy_ctx ctx;
    ctx.out = out;
    ctx.max = 1;
    ctx.count = 0;
    image_walk_init(&ctx.walk, executable, vaka_crash_executable_path(executable, sizeof executable));
    dl_iterate_phdr(copy_first, &ctx);
    return ctx.count > 0 ? 1 : 0;
}
