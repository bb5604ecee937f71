/*
 * Install time: configuration, sigaction install/uninstall, and everything the handler needs prepared in
 * static storage before a crash (report path, executable path, image list, the Swift runtime's fatal
 * message buffer, glibc's abort message, the dynamic linker's r_debug, the safe-memory reader, libunwind
 * opened with dlopen and warmed up, the report's space reserve). With `defer_preparation` the last two, and the
 * safe-memory reader's fallback pipe when process_vm_readv works, are left to vaka_crash_finish_install(), run
 * later on another thread, which then collects the image list again (with the libraries libunwind brought): the
 * handler works without them (it opens the report by name, unwinds by frame pointers and reads images missing
 * from the list from memory until they are there). Not signal safe; serialised by a mutex.
 */
#include "vaka_internal.h"
#include "sig_threads.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <vaka_libelf.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

void vaka_rt_install_lock(void) { pthread_mutex_lock(&install_lock); }
void vaka_rt_install_unlock(void) { pthread_mutex_unlock(&install_lock); }
/* 1 when install gave the installing thread its alternate stack (uninstall removes it again). */
static int gave_alt_stack;
/* 1 once libunwind's warm-up and the first reserve are done (install without deferral, or
 * vaka_crash_finish_install): later installs make their target's reserve at once. Under install_lock. */
static int preparation_done;

static const int default_signals[] = { VAKA_CRASH_SIGNALS };
#define DEFAULT_SIGNAL_COUNT (sizeof default_signals / sizeof default_signals[0])

/* ------------------------------------------------------------------ safe memory setup */

int vaka_rt_safe_reader_make_pipe(vaka_safe_reader *r)
{
    struct stat st;
    /* Keep a pipe from an earlier install if it is still ours. */
    if (r->pipe_w >= 0) {
        if (fstat(r->pipe_r, &st) == 0 && st.st_ino == r->pipe_ino && st.st_dev == r->pipe_dev &&
            fstat(r->pipe_w, &st) == 0 && st.st_ino == r->pipe_ino && st.st_dev == r->pipe_dev)
            return 0;
        __atomic_store_n(&r->pipe_w, -1, __ATOMIC_RELEASE);
        r->pipe_r = -1;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return errno;
    if (fstat(fds[0], &st) != 0) {
        int err = errno;
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    /* The write end last: a capture on another thread that sees it sees the rest (and checks the identity). */
    r->pipe_dev = st.st_dev;
    r->pipe_ino = st.st_ino;
    r->pipe_r = fds[0];
    __atomic_store_n(&r->pipe_w, fds[1], __ATOMIC_RELEASE);
    return 0;
}

int vaka_rt_safe_reader_init(vaka_safe_reader *r, int defer_pipe)
{
    r->pid = getpid();
    /* Probe process_vm_readv on our own memory: containers and seccomp policies may refuse it. */
    volatile uint64_t probe = 0x5641b4a5u, copy = 0;
    struct iovec local = { (void *)&copy, sizeof copy };
    struct iovec remote = { (void *)&probe, sizeof probe };
    int pvr = process_vm_readv(r->pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof copy && copy == probe;
    /* With process_vm_readv working the pipe is only the fallback for a refusal later (a seccomp filter installed
     * after this): `defer_pipe` leaves it to vaka_rt_safe_reader_make_pipe, later on another thread. */
    int err = pvr && defer_pipe ? 0 : vaka_rt_safe_reader_make_pipe(r);
    if (pvr) {
        r->method = VAKA_SAFE_READ_PVR;
        return 0;
    }
    r->method = r->pipe_w >= 0 ? VAKA_SAFE_READ_PIPE : VAKA_SAFE_READ_NONE;
    if (r->method == VAKA_SAFE_READ_PIPE) {
        uint64_t back = 0;
        if (vaka_safe_read(r, &back, (uintptr_t)&probe, sizeof back) != sizeof back || back != probe)
            r->method = VAKA_SAFE_READ_NONE;
    }
    return r->method == VAKA_SAFE_READ_NONE ? (err ? err : ENOSYS) : 0;
}

/* ------------------------------------------------------------------ config */

static int valid_run_id(const char *id, size_t *len)
{
    size_t n = strnlen(id, VAKA_RUN_ID_MAX + 1);
    if (n == 0 || n > VAKA_RUN_ID_MAX || id[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    *len = n;
    return 1;
}

/* 0 when files can be created in the directory `dir` (descriptor `fd`, O_PATH): write permission for the
 * effective ids (faccessat with AT_EACCESS, which also reports EROFS, even for root) and a file system not mounted
 * read-only (fstatvfs of the descriptor: no second path lookup). @return 0 or the errno. */
static int writable_directory(const char *dir, int fd)
{
    if (faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0) return errno != 0 ? errno : EACCES;
    struct statvfs vfs;
    if (fstatvfs(fd, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) return EROFS;
    return 0;
}

/* Opens the directory `dir` for the handler (O_PATH: needs no read permission; the handler creates the report
 * with openat relative to it, so no path length limit applies at crash time) and checks that files can be
 * created in it. @return the descriptor (its identity in `st`), or -1 with the errno in `*err`: of open(2),
 * fstat, or of the writability check (EACCES, EROFS). */
static int open_report_dir(const char *dir, struct stat *st, int *err)
{
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (fstat(fd, st) != 0 || !S_ISDIR(st->st_mode)) {
        *err = errno != 0 ? errno : ENOTDIR;
        close(fd);
        return -1;
    }
    int rc = writable_directory(dir, fd);
    if (rc != 0) {
        *err = rc;
        close(fd);
        return -1;
    }
    return fd;
}

int vaka_rt_open_named_reserve(vaka_report_target *t, int create)
{
    if (t->dir_fd < 0) return 0;
    for (int slot = 0; slot < VAKA_RESERVE_SLOTS; slot++) {
        char name[VAKA_RESERVE_NAME_MAX];
        vaka_sig_reserve_name(name, slot);
        int fd = openat(t->dir_fd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (create ? O_CREAT : 0), 0600);
        if (fd < 0) {
            /* Out of descriptors: no other slot would do better. Anything else (ENOENT, ELOOP: a symlink, ENXIO: a
             * FIFO, EISDIR, EACCES: another user's file, ENOSPC: no inode for a new one...) is about that name. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) return 0;
            continue;
        }
        struct stat st;
        /* Held by another process (or by an earlier target of this one): the next slot. Not a plain empty file with
         * one name (replaced or written from outside): left as it is, the next slot. */
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e != EWOULDBLOCK && e != EINTR) return 0; /* ENOLCK, EINVAL: no flock on this file system */
            continue;
        }
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_size != 0) {
            close(fd);
            continue;
        }
        /* Kept from run to run: given its blocks again each time it is made or taken with `create`, so one made
         * on a nearly full disk (8 KiB, or none) grows to 64 KiB once there is room. */
        if (create) vaka_sig_reserve_blocks(fd);
        t->reserve_blocks_pending = !create;
        vaka_sig_publish_reserve(t, fd, &st, slot);
        return 1;
    }
    return 0;
}

/* A reserve for `t` (its directory open): a named one (made when none is free), else an unnamed one.
 * @return 0, or vaka_sig_make_reserve's errno. */
static int make_reserve(vaka_report_target *t)
{
    return vaka_rt_open_named_reserve(t, 1) ? 0 : vaka_sig_make_reserve(t);
}

/* Fills `t` from the config, opens the report directory (open_report_dir) and, when `reserve`, makes the
 * report's space reserve (vaka_sig_make_reserve). With `make_report_dir`, a directory that does not exist
 * (ENOENT) is left unopened (dir_fd -1, dir_pending 1) when the report path fits in VAKA_REPORT_PATH_MAX: the
 * handler can then make it and create the report by that path. `current` is the target in use, whose
 * descriptors must stay open. @return 0, EINVAL, or the errno of open(2), of the writability check (EACCES,
 * EROFS) or of the reserve's creation. */
static int make_target(vaka_report_target *t, const vaka_report_target *current, const vaka_crash_config *config,
                       int reserve)
{
    size_t id_len = 0;
    if (!valid_run_id(config->run_id, &id_len)) return EINVAL;
    const char *dir = config->report_dir;
    size_t dir_len = strnlen(dir, VAKA_REPORT_DIR_MAX + 1);
    if (dir_len == 0 || dir_len > VAKA_REPORT_DIR_MAX || dir[0] != '/') return EINVAL;
    struct stat st;
    memset(&st, 0, sizeof st);
    int rc = 0;
    int fd = open_report_dir(dir, &st, &rc);
    int pending = 0;
    if (fd < 0) {
        if (rc != ENOENT || !config->make_report_dir ||
            dir_len + 1 + id_len + sizeof VAKA_REPORT_FILE_SUFFIX > VAKA_REPORT_PATH_MAX)
            return rc;
        pending = 1;
    }
    while (dir_len > 1 && dir[dir_len - 1] == '/') dir_len--;

    vaka_sig_close_target(t, current);
    memset(t, 0, sizeof *t);
    t->reserve_fd = -1;
    t->reserve_slot = -1;
    t->dir_fd = fd;
    t->dir_pending = pending;
    t->dir_dev = st.st_dev;
    t->dir_ino = st.st_ino;
    memcpy(t->run_id, config->run_id, id_len);
    t->run_id_len = id_len;
    size_t p = 0;
    memcpy(t->path, dir, dir_len);
    p += dir_len;
    if (dir_len > 1 || dir[0] != '/') t->path[p++] = '/';
    t->dir_len = p;
    memcpy(t->path + p, config->run_id, id_len);
    p += id_len;
    memcpy(t->path + p, VAKA_REPORT_FILE_SUFFIX, sizeof VAKA_REPORT_FILE_SUFFIX);
    /* The space for the report, reserved now (a full file system at crash time still takes it). Deferred, a named
     * reserve already there is still taken now (three system calls): a crash right after start then renames it
     * instead of creating its report, and the deferred work has none to make. */
    if (pending) return 0;
    if (!reserve) {
        (void)vaka_rt_open_named_reserve(t, 0);
        return 0;
    }
    rc = make_reserve(t);
    if (rc != 0) vaka_sig_close_target(t, current);
    return rc;
}

static int supported_signal(int sig)
{
    for (size_t i = 0; i < DEFAULT_SIGNAL_COUNT; i++)
        if (default_signals[i] == sig) return 1;
    return 0;
}

/* Collects the configured signals (deduplicated) into out[]. @return the count, or -1 for EINVAL. */
static int collect_signals(const vaka_crash_config *config, int *out)
{
    const int *list = config->signals ? config->signals : default_signals;
    size_t count = config->signals ? config->signal_count : DEFAULT_SIGNAL_COUNT;
    if (count == 0 || count > VAKA_NSIG) return -1;
    int n = 0;
    for (size_t i = 0; i < count; i++) {
        if (!supported_signal(list[i])) return -1;
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= out[j] == list[i];
        if (!dup) out[n++] = list[i];
    }
    return n;
}

/* ------------------------------------------------------------------ install / uninstall */

/* The C library's pthread_sigmask and sigprocmask, for the interposers in sig_mask.c: resolved when the
 * executable is loaded (before main, outside any signal handler: dlsym is not async-signal-safe), and again at
 * install in case a constructor ran first. */
__attribute__((constructor)) static void resolve_sigmask_functions(void)
{
    if (atomic_load(&vaka_real_pthread_sigmask) == NULL) {
        vaka_sigmask_fn fn = (vaka_sigmask_fn)dlsym(RTLD_NEXT, "pthread_sigmask");
        if (fn != NULL && fn != pthread_sigmask) atomic_store(&vaka_real_pthread_sigmask, fn);
    }
    if (atomic_load(&vaka_real_sigprocmask) == NULL) {
        vaka_sigmask_fn fn = (vaka_sigmask_fn)dlsym(RTLD_NEXT, "sigprocmask");
        if (fn != NULL && fn != sigprocmask) atomic_store(&vaka_real_sigprocmask, fn);
    }
}

/* Page size and executable path (used by the image collection too). */
static void prepare_process_facts(void)
{
    long page = sysconf(_SC_PAGESIZE);
    vaka_state.page_size = page > 0 ? (uintptr_t)page : 4096;

    vaka_state.executable_len = vaka_rt_executable_path(vaka_state.executable, sizeof vaka_state.executable);
}

/* Calls once, harmlessly, every C library function the signal path calls (the list is what `nm -u` shows for
 * the sig_*.o files; scripts/check-signal-path keeps it to the allowlist; libunwind is called through pointers
 * dlsym gave, in a library opened with RTLD_NOW, and warmed up in warm_up_libunwind), so lazy PLT
 * binding is done now: the dynamic linker's resolver would otherwise run inside the handler on its first
 * call, where it needs more stack than a small application alternate stack has (a nested fault there used to
 * loop forever). */
static void preresolve_signal_path_calls(void)
{
    int saved = errno;
    struct timespec ts = { 0, 0 };
    /* An invalid time (EINVAL at once): even a zero sleep gives the processor away, and on a busy machine the
     * scheduler may take a few hundred microseconds to give it back. */
    struct timespec invalid = { 0, -1 };
    (void)nanosleep(&invalid, NULL); /* before clock_gettime fills ts */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    struct stat st;
    (void)fstat(-1, &st);
    (void)close(-1);
    (void)read(-1, NULL, 0);
    (void)write(-1, NULL, 0);
    (void)open("", O_RDONLY | O_CLOEXEC);
    (void)openat(-1, "", O_RDONLY | O_CLOEXEC);
    (void)unlink("");
    (void)unlinkat(-1, "", 0);
    char name[17] = { 0 };
    (void)prctl(PR_GET_NAME, name, 0, 0, 0);
    (void)syscall(SYS_getpid);
    struct iovec local = { name, 1 }, remote = { name + 1, 1 };
    (void)process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    sigset_t set;
    sigemptyset(&set);
    sigfillset(&set);
    sigaddset(&set, SIGSEGV);
    sigdelset(&set, SIGSEGV);
    (void)sigismember(&set, SIGSEGV);
    sigprocmask(SIG_BLOCK, NULL, &set);
    pthread_sigmask(SIG_BLOCK, NULL, &set);
    struct sigaction old;
    sigaction(SIGSEGV, NULL, &old);
    stack_t alt;
    (void)sigaltstack(NULL, &alt);
    errno = saved;
}

/* libunwind opened with dlopen (RTLD_NOW: its own relocations are bound there, none is left to the dynamic
 * linker's lazy resolver in the handler) and its entry points looked up into vaka_unw (unwind_load.c), then its
 * one-time initialisation (it allocates, blocks signals, probes memory with mincore and a pipe) through every
 * call the handler makes (vaka_crash_capture_frames covers unw_init_local), then vaka_state.unwind_ready
 * (release: the table is filled before): from then on the handler unwinds with libunwind. When libunwind cannot
 * be opened, unwind_ready stays 0 (the handler walks frame pointers; vaka_crash_libunwind_error says why). */
static void warm_up_libunwind(void)
{
    if (atomic_load(&vaka_state.unwind_ready)) return;
    int saved = errno;
    const vaka_libunwind *unw = vaka_rt_libunwind();
    if (unw == NULL) {
        errno = saved;
        return;
    }
    unw_context_t uc;
    unw_cursor_t cursor;
    unw->set_caching_policy(*unw->local_addr_space, UNW_CACHE_NONE);
    unw->set_caching_policy(*unw->local_addr_space, UNW_CACHE_GLOBAL);
    if (unw->getcontext(&uc) == 0 && unw->init_local2(&cursor, &uc, 0) == 0) {
        unw_word_t ip = 0;
        unw->get_reg(&cursor, UNW_REG_IP, &ip);
        unw->step(&cursor);
    }
    uintptr_t frames[4];
    vaka_crash_capture_frames(frames, 4, 0);
    errno = saved;
    atomic_store_explicit(&vaka_state.unwind_ready, 1, memory_order_release);
}

/* ------------------------------------------------------------------ symbols not in the dynamic symbol table */

static int first_object_bias(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(uintptr_t *)data = (uintptr_t)info->dlpi_addr;
    return 1; /* the first entry is the executable */
}

/* 1 once find_executable_symbols needed libelf (vaka_crash_libelf_error answers only then: asking before would
 * open it). Under install_lock. */
static int libelf_needed;

const char *vaka_crash_libelf_error(void)
{
    pthread_mutex_lock(&install_lock);
    int needed = libelf_needed;
    pthread_mutex_unlock(&install_lock);
    return needed ? vaka_libelf_error() : NULL;
}

/* Looks up `names[0..count)` in the executable's own symbol table (.symtab, local symbols included) with
 * libelf, for symbols dlsym cannot see: a program linked with -static-stdlib has the Swift runtime inside the
 * executable, whose functions are not exported (e.g. swift_getFatalErrorMessageBuffer); a statically linked C
 * library keeps __abort_msg private the same way. Fills out[i] with the run-time address (symbol value + the
 * executable's load bias) of each defined function or object found; leaves the others alone. Install time
 * only (opens and maps the file). libelf is not linked: its calls here go to Sources/CVakaElf's forwarders,
 * which open libelf.so.1 with dlopen at the first one. Nothing is found in a stripped executable, nor when libelf
 * cannot be opened (vaka_crash_libelf_error says why). */
static void find_executable_symbols(const char *const *names, void **out, size_t count)
{
    libelf_needed = 1;
    if (elf_version(EV_CURRENT) == EV_NONE) return;
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    uintptr_t bias = 0;
    dl_iterate_phdr(first_object_bias, &bias);
    Elf_Scn *scn = NULL;
    while (elf != NULL && (scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr shdr;
        if (gelf_getshdr(scn, &shdr) == NULL || shdr.sh_type != SHT_SYMTAB || shdr.sh_entsize == 0) continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (data == NULL) continue;
        size_t n = shdr.sh_size / shdr.sh_entsize;
        for (size_t k = 0; k < n; k++) {
            GElf_Sym sym;
            if (gelf_getsym(data, (int)k, &sym) == NULL || sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
                continue;
            int type = GELF_ST_TYPE(sym.st_info);
            if (type != STT_FUNC && type != STT_OBJECT) continue;
            const char *name = elf_strptr(elf, shdr.sh_link, sym.st_name);
            if (name == NULL) continue;
            for (size_t i = 0; i < count; i++)
                if (out[i] == NULL && strcmp(name, names[i]) == 0) out[i] = (void *)(bias + (uintptr_t)sym.st_value);
        }
    }
    if (elf != NULL) elf_end(elf);
    close(fd);
}

/* The Swift runtime's fatal-message buffer and glibc's abort message: dlsym first (exported by the shared
 * libswiftCore and libc), else the executable's own symbol table (-static-stdlib, static libc). */
static void resolve_message_symbols(void)
{
    static const char *const names[] = { "swift_getFatalErrorMessageBuffer", "__abort_msg" };
    void *found[2] = { dlsym(RTLD_DEFAULT, names[0]), dlsym(RTLD_DEFAULT, names[1]) };
    if (found[0] == NULL || found[1] == NULL) find_executable_symbols(names, found, 2);
    /* swift_getFatalErrorMessageBuffer returns the address of a `char *` that holds the message after a fatal
     * error. Absent in programs without the Swift runtime. */
    char **(*get_buffer)(void) = (char **(*)(void))found[0];
    vaka_state.swift_fatal_message = get_buffer != NULL ? get_buffer() : NULL;
    /* glibc's `struct abort_msg_s *__abort_msg` (GLIBC_PRIVATE; may be missing in other libcs). */
    vaka_state.abort_msg = (void **)found[1];
}

/* The dynamic linker's r_debug for the handler's link-map walk. `_r_debug` as this object sees it may be the
 * executable's copy of it (a copy relocation: the first fields only, r_version 1), which ends before `r_next`, the
 * link to the namespaces dlmopen makes (glibc's struct r_debug_extended, r_version 2). The executable's DT_DEBUG
 * entry holds the dynamic linker's own one: taken when it lists the same base namespace. */
static void *link_map_debug(void)
{
    struct r_debug *copy = &_r_debug;
    const struct link_map *main_map = copy->r_map;
    if (main_map == NULL || main_map->l_ld == NULL) return copy;
    for (const ElfW(Dyn) *d = main_map->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag != DT_DEBUG || d->d_un.d_ptr == 0) continue;
        const struct r_debug *own = (const struct r_debug *)d->d_un.d_ptr;
        if (own->r_version >= 2 && own->r_map == copy->r_map) return (void *)own;
        break;
    }
    return copy;
}

/* Everything the handler reads, but what `defer` leaves to vaka_crash_finish_install (libunwind's warm-up). */
static void prepare_handler_state(int defer)
{
    prepare_process_facts();

    vaka_rt_safe_reader_init(&vaka_state.reader, defer);

    resolve_message_symbols();
    vaka_state.r_debug = link_map_debug();
    vaka_state.watchdog_signal = SIGRTMAX; /* a function call in glibc: resolved here, not in the handler */

    vaka_image_cache *cache = &vaka_image_caches[0];
    vaka_images_collect(cache);
    atomic_store(&vaka_state.images, cache);

    preresolve_signal_path_calls();
    if (!defer) warm_up_libunwind();
}

/* fork()'s prepare hook. A child forked before vaka_crash_finish_install has run (a program that daemonizes right
 * after start) never gets that call: the thread that makes it is not in the child. So libunwind's load and warm-up, when
 * still to do, is done here, in the forking thread before the fork, and the child inherits it (the child makes no
 * reserve in any case: sig_lifecycle.c). Not in the child itself: another thread of the parent may have been inside
 * libunwind's one-time initialisation, holding its lock, at the moment of the fork. Skipped when a capture has begun
 * (a previous handler the crash chained to may fork) or install_lock is held (install or vaka_crash_finish_install
 * under way, maybe on this very thread, interrupted by a signal handler that forks): that child unwinds by frame
 * pointers. Likewise when libunwind is not opened yet and the process has other threads: dlopen here would wait
 * for the dynamic linker's lock, which another thread may hold inside its own dlopen (a library's constructor)
 * while it waits for a lock an earlier prepare handler took (or, with glibc before 2.36, for the lock fork holds
 * around the prepare handlers): neither would ever go on. A single-threaded process has no such other thread. */
static void finish_unwind_before_fork(void)
{
    if (atomic_load(&vaka_state.unwind_ready) || vaka_rt_crash_started()) return;
    if (!VAKA_SINGLE_THREADED() && vaka_rt_libunwind_if_loaded() == NULL) return;
    if (pthread_mutex_trylock(&install_lock) != 0) return;
    if (atomic_load(&vaka_state.installed) && !vaka_rt_crash_started()) warm_up_libunwind();
    pthread_mutex_unlock(&install_lock);
}

int vaka_crash_install(const vaka_crash_config *config)
{
    if (config == NULL || config->report_dir == NULL || config->run_id == NULL) return EINVAL;
    int signals[VAKA_NSIG];
    int signal_count = collect_signals(config, signals);
    if (signal_count < 0) return EINVAL;

    pthread_mutex_lock(&install_lock);
    vaka_report_target *current = atomic_load(&vaka_state.target);
    vaka_report_target *next = current == &vaka_state.targets[0] ? &vaka_state.targets[1] : &vaka_state.targets[0];
    int defer = config->defer_preparation != 0 && !preparation_done;
    int rc = make_target(next, current, config, !defer);
    if (rc != 0) goto out;

    if (atomic_load(&vaka_state.installed)) {
        atomic_store(&vaka_state.target, next); /* idempotent: only the report destination changes */
        if (!defer && !preparation_done) {
            /* a first install that deferred them, and no vaka_crash_finish_install yet */
            (void)vaka_rt_safe_reader_make_pipe(&vaka_state.reader);
            warm_up_libunwind();
            preparation_done = 1;
        }
        goto out;
    }

    vaka_thread_stack_set_size(config->alt_stack_size);
    vaka_thread_stack_prepare();
    resolve_sigmask_functions();
    int had_ours = vaka_thread_stack_is_ours();
    rc = vaka_crash_thread_attach();
    if (rc != 0) goto out;
    gave_alt_stack = !had_ours && vaka_thread_stack_is_ours();

    vaka_rt_rearm();
    vaka_state.owner_pid = getpid();
    static int atfork_registered;
    if (!atfork_registered && pthread_atfork(finish_unwind_before_fork, NULL, vaka_sig_after_fork_child) == 0)
        atfork_registered = 1;
    static int atexit_registered;
    if (!atexit_registered && atexit(vaka_sig_at_exit) == 0) atexit_registered = 1;
    prepare_handler_state(defer);
    if (!defer) preparation_done = 1;
    atomic_store(&vaka_state.target, next);
    for (int i = 0; i < signal_count; i++) vaka_state.signals[i] = signals[i];
    vaka_state.signal_count = (size_t)signal_count;
    unsigned protect = 0;
    for (int i = 0; i < signal_count; i++)
        if (signals[i] != SIGABRT) protect |= 1u << signals[i];

    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = vaka_sig_handler;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    /* While the handler runs every asynchronous signal is blocked (SIGXFSZ from a report write over
     * RLIMIT_FSIZE, SIGALRM, SIGTERM, SIGINT, SIGPROF, SIGCHLD...: none may end or interrupt the capture), but
     * not the crash signals: a fault inside the capture must still enter the handler (nested-fault path). The
     * watchdog signal is unblocked by the handler itself when it arms the watchdog. */
    sigfillset(&action.sa_mask);
    for (size_t i = 0; i < DEFAULT_SIGNAL_COUNT; i++) sigdelset(&action.sa_mask, default_signals[i]);
    vaka_state.action = action; /* re-arming after a survived signal puts these back (sig_handler.c) */
    vaka_state.protect_mask = protect;
    atomic_store(&vaka_state.installed, 1); /* before the first sigaction: a crash right now is captured */
    for (int i = 0; i < signal_count; i++) {
        if (sigaction(signals[i], &action, &vaka_state.previous[signals[i]]) != 0) {
            rc = errno;
            for (int j = i - 1; j >= 0; j--) sigaction(signals[j], &vaka_state.previous[signals[j]], NULL);
            atomic_store(&vaka_state.installed, 0);
            vaka_state.signal_count = 0;
            if (gave_alt_stack) vaka_thread_stack_detach();
            gave_alt_stack = 0;
            goto out;
        }
    }
    /* A synchronous crash signal blocked in a thread's mask would kill the process without any handler
     * (sig_mask.c): from now on no SIG_BLOCK/SIG_SETMASK blocks them, and this thread (whose mask may have been
     * inherited blocked over exec) unblocks them now. */
    atomic_store(&vaka_sig_protected_mask, protect);
    vaka_rt_unblock_crash_signals();
    /* The thread signal: every thread in the report, and an alternate stack (and the crash signals unblocked)
     * for the threads that existed before now (threads.c). */
    vaka_rt_threads_install(config->alt_stack_size);
out:
    pthread_mutex_unlock(&install_lock);
    return rc;
}

/* Collects the image list into the cache not in use and publishes it (install_lock held, no capture under way:
 * the handler reads the published one). @return the number of images. */
static size_t refresh_image_cache(void)
{
    vaka_image_cache *current = atomic_load(&vaka_state.images);
    vaka_image_cache *next = current == &vaka_image_caches[0] ? &vaka_image_caches[1] : &vaka_image_caches[0];
    size_t count = vaka_images_collect(next);
    atomic_store(&vaka_state.images, next);
    return count;
}

/* The current target's reserve when a deferring install left it out (install_lock held); a named reserve install
 * took is given its blocks once (the deferring install left that to here; vaka_crash_finish_install calls this
 * twice). @return 0 or the errno of its creation. */
static int make_deferred_reserve(void)
{
    vaka_report_target *target = atomic_load(&vaka_state.target);
    if (target == NULL || target->dir_fd < 0 || preparation_done) return 0;
    int fd = __atomic_load_n(&target->reserve_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        struct stat st;
        if (target->reserve_blocks_pending && target->reserve_slot >= 0 && target->reserve_pid == getpid() &&
            fstat(fd, &st) == 0 && st.st_dev == target->reserve_dev && st.st_ino == target->reserve_ino) {
            vaka_sig_reserve_blocks(fd);
            target->reserve_blocks_pending = 0;
        }
        return 0;
    }
    return make_reserve(target);
}

int vaka_crash_finish_install(void)
{
    int rc = 0;
    /* First what is quick (~0.05 ms): the safe reader's fallback pipe and the report's reserve, so that a crash
     * while libunwind is being opened below (~0.2 ms) finds them. Not while a capture runs: the handler may be
     * taking the target's reserve or making one itself. */
    pthread_mutex_lock(&install_lock);
    if (atomic_load(&vaka_state.installed) && !vaka_rt_crash_started() && !preparation_done) {
        (void)vaka_rt_safe_reader_make_pipe(&vaka_state.reader);
        rc = make_deferred_reserve();
    }
    pthread_mutex_unlock(&install_lock);
    /* libunwind opened before install_lock is taken, not under it: dlopen waits for the dynamic linker's lock,
     * which a thread inside a library's constructor holds while that constructor may call into Vaka (e.g.
     * vaka_crash_refresh_images), waiting for install_lock. The warm-up below then finds it opened. */
    if (atomic_load(&vaka_state.installed) && !atomic_load(&vaka_state.unwind_ready) && !vaka_rt_crash_started())
        (void)vaka_rt_libunwind();
    pthread_mutex_lock(&install_lock);
    if (atomic_load(&vaka_state.installed) && !vaka_rt_crash_started()) {
        int first = !preparation_done;
        /* A reinstall meanwhile may have put in a target without one. */
        int again = make_deferred_reserve();
        if (rc == 0) rc = again;
        warm_up_libunwind();
        preparation_done = 1;
        /* The libraries opened just now (libunwind, liblzma) into the image cache: the handler reads an image
         * the cache lacks from memory, one entry at a time (~10 µs each), in every later capture. */
        if (first) (void)refresh_image_cache();
    }
    pthread_mutex_unlock(&install_lock);
    return rc;
}

int vaka_crash_open_report_dir(void)
{
    int rc = 0;
    pthread_mutex_lock(&install_lock);
    /* Not while a capture runs: the handler may be making the directories or creating the report by path. */
    vaka_report_target *t = atomic_load(&vaka_state.target);
    if (atomic_load(&vaka_state.installed) && !vaka_rt_crash_started() && t != NULL && t->dir_pending &&
        __atomic_load_n(&t->dir_fd, __ATOMIC_ACQUIRE) < 0) {
        char dir[VAKA_REPORT_DIR_MAX + 1];
        size_t n = t->dir_len > 1 ? t->dir_len - 1 : t->dir_len; /* without the '/' before the name */
        memcpy(dir, t->path, n);
        dir[n] = '\0';
        struct stat st;
        int fd = open_report_dir(dir, &st, &rc);
        if (fd >= 0) {
            t->dir_dev = st.st_dev;
            t->dir_ino = st.st_ino;
            /* Last: a crash on another thread that sees the descriptor sees its identity too. */
            __atomic_store_n(&t->dir_fd, fd, __ATOMIC_RELEASE);
            /* vaka_crash_finish_install ran before (with no directory, it made no reserve): the reserve now. */
            if (preparation_done && __atomic_load_n(&t->reserve_fd, __ATOMIC_ACQUIRE) < 0) (void)make_reserve(t);
        }
    }
    pthread_mutex_unlock(&install_lock);
    return rc;
}

int vaka_crash_uninstall(void)
{
    int rc = 0;
    pthread_mutex_lock(&install_lock);
    if (atomic_load(&vaka_state.installed)) {
        for (size_t i = 0; i < vaka_state.signal_count; i++) {
            int sig = vaka_state.signals[i];
            /* Only where our handler is still the current one: a handler installed after ours (by the app or
             * a library) stays; putting back what was there before us would silently remove it. */
            struct sigaction current;
            if (sigaction(sig, NULL, &current) != 0) {
                if (rc == 0) rc = errno;
                continue;
            }
            if (!((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == vaka_sig_handler)) continue;
            if (sigaction(sig, &vaka_state.previous[sig], NULL) != 0 && rc == 0) rc = errno;
        }
        atomic_store(&vaka_state.installed, 0);
        atomic_store(&vaka_sig_protected_mask, 0u);
        vaka_state.signal_count = 0;
        vaka_thread_stack_detach();
        vaka_rt_threads_uninstall();
        vaka_rt_at_uninstall(); /* before the directory descriptors close */
        vaka_sig_close_target(&vaka_state.targets[0], NULL);
        vaka_sig_close_target(&vaka_state.targets[1], NULL);
        gave_alt_stack = 0;
    }
    pthread_mutex_unlock(&install_lock);
    return rc;
}

int vaka_crash_is_installed(void)
{
    return atomic_load(&vaka_state.installed) ? 1 : 0;
}

int vaka_crash_in_progress(void)
{
    return vaka_rt_crash_started() ? 1 : 0;
}

const char *vaka_crash_report_path(void)
{
    if (!atomic_load(&vaka_state.installed)) return NULL;
    vaka_report_target *t = atomic_load(&vaka_state.target);
    return t != NULL ? t->path : NULL;
}

int vaka_crash_refresh_images(void)
{
    pthread_mutex_lock(&install_lock);
    int count;
    if (vaka_rt_crash_started()) {
        /* The handler may be reading the caches right now. */
        errno = EBUSY;
        count = -1;
    } else {
        if (!atomic_load(&vaka_state.installed)) prepare_process_facts();
        count = (int)refresh_image_cache();
    }
    pthread_mutex_unlock(&install_lock);
    return count;
}

void vaka_crash_test_fault_in_handler(int stage)
{
    atomic_store(&vaka_state.test_fault_stage, stage);
}
