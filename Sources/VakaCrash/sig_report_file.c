/*
 * Signal path: the report's file — the target (directory descriptor and name, sig_lifecycle.c gives a fork
 * child its own), the space reserve made at install, the spare (a survived signal's report kept as the next
 * reserve), opening the file without ever blocking, RLIMIT_FSIZE for the capture, and what happens to the
 * file when the process dies (closed) or survives the signal (kept, spare, or removed).
 */
#include "sig_state.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h> /* renameat only (no stdio streams in the handler) */
#include <sys/resource.h>

/* Gives the report file `fd` (whose status `st` holds) the mode 0600 when it has another: open(2)'s 0600 is cut
 * by the umask, and under umask 0377 or 0777 a report of mode 0 could not be read by the next launch. */
static void make_report_private(int fd, const struct stat *st)
{
    if ((st->st_mode & 07777) != 0600) syscall(SYS_fchmod, fd, 0600);
}

/* Opens the report file `name` in directory `dir` (a descriptor, or AT_FDCWD with an absolute name) for
 * writing without ever blocking: O_NONBLOCK (a FIFO at the path would block open(2) until a reader came),
 * O_NOFOLLOW (no symlinks), and only a regular file is kept. Anything else at the path (a FIFO, a device, a
 * socket) is unlinked and the file created afresh with O_EXCL. The file is 0600 whatever the umask.
 * @return the descriptor, or -1. */
static int open_report_at(int dir, const char *name)
{
    const int flags = O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int fd = openat(dir, name, flags | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            make_report_private(fd, &st);
            return fd;
        }
        close(fd);
    } else if (errno != ENXIO && errno != ELOOP && errno != EISDIR && errno != ETXTBSY && errno != EWOULDBLOCK) {
        return -1; /* e.g. ENOENT (directory gone), EACCES, EMFILE: unlinking would not help */
    }
    /* ENXIO: a FIFO without a reader; ELOOP: a symlink; EISDIR: a directory (unlink fails: give up). */
    if (unlinkat(dir, name, 0) != 0) return -1;
    fd = openat(dir, name, flags | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    make_report_private(fd, &st);
    return fd;
}

/* The report directory's path being made, component by component (make_report_dirs); only the capturing
 * thread uses it. */
static char make_dir_path[VAKA_REPORT_PATH_MAX];

/* Makes the report directory of `target` that install did not find (dir_pending) and every directory above it
 * that is missing: mkdir(2) of each component from the root down (EEXIST and any other failure are passed over:
 * the report's creation says whether the directory is there), and each directory made here set to 0700 (mkdir's
 * mode is cut by the umask). A directory made meanwhile by the thread that makes them outside the handler is
 * simply found. */
static void make_report_dirs(const vaka_report_target *target)
{
    size_t n = target->dir_len;
    while (n > 1 && target->path[n - 1] == '/') n--;
    if (n == 0 || n >= sizeof make_dir_path) return;
    vaka_sig_copy(make_dir_path, target->path, n);
    make_dir_path[n] = '\0';
    for (size_t i = 1; i <= n; i++) {
        if (i < n && (make_dir_path[i] != '/' || make_dir_path[i - 1] == '/')) continue;
        char kept = make_dir_path[i];
        make_dir_path[i] = '\0';
        if (syscall(SYS_mkdirat, AT_FDCWD, make_dir_path, 0700) == 0)
            syscall(SYS_fchmodat, AT_FDCWD, make_dir_path, 0700);
        make_dir_path[i] = kept;
    }
}

void vaka_sig_reserve_blocks(int fd)
{
    static const long sizes[] = VAKA_RESERVE_SIZES;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (syscall(SYS_fallocate, fd, FALLOC_FL_KEEP_SIZE, 0L, sizes[i]) == 0) break;
}

void vaka_sig_publish_reserve(vaka_report_target *t, int fd, const struct stat *st, int slot)
{
    make_report_private(fd, st); /* named as the report by the handler */
    t->reserve_slot = slot;
    t->reserve_dev = st->st_dev;
    t->reserve_ino = st->st_ino;
    t->reserve_pid = (pid_t)syscall(SYS_getpid);
    /* Last: a crash on another thread that sees the descriptor sees its identity too. */
    __atomic_store_n(&t->reserve_fd, fd, __ATOMIC_RELEASE);
}

void vaka_sig_close_target(vaka_report_target *t, const vaka_report_target *keep)
{
    struct stat st;
    if (t->dir_fd >= 0 && (keep == NULL || keep->dir_fd != t->dir_fd) && fstat(t->dir_fd, &st) == 0 &&
        st.st_dev == t->dir_dev && st.st_ino == t->dir_ino)
        close(t->dir_fd);
    t->dir_fd = -1;
    if (t->reserve_fd >= 0 && (keep == NULL || keep->reserve_fd != t->reserve_fd) && fstat(t->reserve_fd, &st) == 0 &&
        st.st_dev == t->reserve_dev && st.st_ino == t->reserve_ino)
        close(t->reserve_fd);
    t->reserve_fd = -1;
}

int vaka_sig_make_reserve(vaka_report_target *t)
{
    struct stat st;
    int old = t->reserve_fd;
    t->reserve_fd = -1;
    if (old >= 0 && fstat(old, &st) == 0 && st.st_dev == t->reserve_dev && st.st_ino == t->reserve_ino) close(old);
    if (t->dir_fd < 0) return 0;
    int fd = openat(t->dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        return e == EROFS || e == EACCES || e == EPERM ? e : 0; /* EOPNOTSUPP, EISDIR, ENOSPC...: no reserve */
    }
    /* No room at all leaves the unnamed file without blocks: still a descriptor held for the crash (EMFILE). */
    vaka_sig_reserve_blocks(fd);
    if (fstat(fd, &st) != 0) {
        close(fd);
        return 0;
    }
    vaka_sig_publish_reserve(t, fd, &st, -1);
    return 0;
}

void vaka_sig_reserve_name(char out[VAKA_RESERVE_NAME_MAX], int slot)
{
    vaka_sig_copy(out, VAKA_RESERVE_FILE_PREFIX, sizeof VAKA_RESERVE_FILE_PREFIX - 1);
    out[sizeof VAKA_RESERVE_FILE_PREFIX - 1] = (char)('0' + slot % 10);
    out[sizeof VAKA_RESERVE_FILE_PREFIX] = '\0';
}

/* The named reserve's absolute path (the report directory's path and `.reserve-<slot>`), when the directory
 * descriptor cannot be used; only the capturing thread uses it. */
static char reserve_path[VAKA_REPORT_FILE_PATH_MAX];

/* Renames the named reserve of `target` (`.reserve-<slot>` in its directory) to the report's name, when that
 * name is still the reserve's file (same device and inode): relative to the directory descriptor when it is
 * still the directory's (`dir_ok`), else (or when that fails) by the absolute paths. Sets report_dir_used and
 * report_name_used. @return 1 on success. */
static int rename_named_reserve(const vaka_report_target *target, int slot, int dir_ok, int path_ok)
{
    char name[VAKA_RESERVE_NAME_MAX];
    struct stat by_name;
    vaka_sig_reserve_name(name, slot);
    if (dir_ok && fstatat(target->dir_fd, name, &by_name, AT_SYMLINK_NOFOLLOW) == 0 &&
        by_name.st_dev == target->reserve_dev && by_name.st_ino == target->reserve_ino &&
        renameat(target->dir_fd, name, target->dir_fd, target->path + target->dir_len) == 0) {
        vaka_run.report_dir_used = target->dir_fd;
        vaka_run.report_name_used = target->path + target->dir_len;
        return 1;
    }
    if (!path_ok || target->dir_len + sizeof name > sizeof reserve_path) return 0;
    vaka_sig_copy(reserve_path, target->path, target->dir_len);
    vaka_sig_copy(reserve_path + target->dir_len, name, sizeof name);
    if (fstatat(AT_FDCWD, reserve_path, &by_name, AT_SYMLINK_NOFOLLOW) != 0 || by_name.st_dev != target->reserve_dev ||
        by_name.st_ino != target->reserve_ino || renameat(AT_FDCWD, reserve_path, AT_FDCWD, target->path) != 0)
        return 0;
    vaka_run.report_dir_used = AT_FDCWD;
    vaka_run.report_name_used = target->path;
    return 1;
}

/* Links the unnamed reserve `fd` as `name` in `dir` (replacing whatever is there). @return 1 on success. */
static int link_reserve(int fd, int dir, const char *name)
{
    char proc[32] = "/proc/self/fd/";
    size_t p = 14;
    p += vaka_sig_format_udec(proc + p, sizeof proc - p - 1, (unsigned)fd);
    proc[p] = '\0';
    for (int attempt = 0; attempt < 2; attempt++) {
        /* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link works for everyone where /proc is mounted. */
        if (syscall(SYS_linkat, fd, "", dir, name, AT_EMPTY_PATH) == 0) return 1;
        if (syscall(SYS_linkat, AT_FDCWD, proc, dir, name, AT_SYMLINK_FOLLOW) == 0) return 1;
        if (errno != EEXIST || unlinkat(dir, name, 0) != 0) return 0;
    }
    return 0;
}

/* The reserve of `target`, when it is this process's, under the report's name: a named reserve (still empty,
 * its one name still its own) renamed, an unnamed one (still unnamed) linked; each by the directory descriptor,
 * else by the absolute path. It is used up: the target no longer has a reserve.
 * @return the descriptor, or -1. */
static int take_reserve(vaka_report_target *target, int dir_ok, int path_ok)
{
    int fd = __atomic_load_n(&target->reserve_fd, __ATOMIC_ACQUIRE);
    struct stat st;
    if (fd < 0 || target->reserve_pid != (pid_t)syscall(SYS_getpid) || fstat(fd, &st) != 0 ||
        st.st_dev != target->reserve_dev || st.st_ino != target->reserve_ino)
        return -1;
    int slot = target->reserve_slot;
    if (slot >= 0) {
        /* Named: renamed (a name removed from outside, with the directory or alone, cannot be given back). */
        if (st.st_nlink != 1 || st.st_size != 0 || !rename_named_reserve(target, slot, dir_ok, path_ok)) return -1;
    } else if (st.st_nlink != 0) {
        return -1;
    } else if (dir_ok && link_reserve(fd, target->dir_fd, target->path + target->dir_len)) {
        vaka_run.report_dir_used = target->dir_fd;
        vaka_run.report_name_used = target->path + target->dir_len;
    } else if (path_ok && link_reserve(fd, AT_FDCWD, target->path)) {
        vaka_run.report_dir_used = AT_FDCWD;
        vaka_run.report_name_used = target->path;
    } else {
        return -1;
    }
    target->reserve_fd = -1;
    return fd;
}

/* The spare (a survived signal's report kept as reserve), renamed to the report's name (by the directory
 * descriptor, else by the absolute path) and positioned at offset 0, when it is this process's. The caller
 * cuts it to the written length. It is used up. @return the descriptor, or -1. */
static int take_spare(vaka_report_target *target, int dir_ok, int path_ok)
{
    int fd = vaka_run.spare_fd;
    struct stat st;
    if (fd < 0 || vaka_run.spare_pid != (pid_t)syscall(SYS_getpid) || fstat(fd, &st) != 0 || st.st_dev != vaka_run.spare_dev ||
        st.st_ino != vaka_run.spare_ino)
        return -1;
    vaka_run.spare_fd = -1;
    /* Only the file this process created is renamed: the name must still be its (dev, inode). */
    struct stat by_dir, by_path;
    int dir_same = dir_ok && vaka_run.spare_dir == target->dir_fd &&
                   fstatat(target->dir_fd, vaka_run.spare_path + vaka_run.spare_rel, &by_dir, AT_SYMLINK_NOFOLLOW) == 0 &&
                   by_dir.st_dev == vaka_run.spare_dev && by_dir.st_ino == vaka_run.spare_ino;
    int path_same = path_ok && fstatat(AT_FDCWD, vaka_run.spare_path, &by_path, AT_SYMLINK_NOFOLLOW) == 0 &&
                    by_path.st_dev == vaka_run.spare_dev && by_path.st_ino == vaka_run.spare_ino;
    if (dir_same &&
        renameat(target->dir_fd, vaka_run.spare_path + vaka_run.spare_rel, target->dir_fd, target->path + target->dir_len) == 0) {
        vaka_run.report_dir_used = target->dir_fd;
        vaka_run.report_name_used = target->path + target->dir_len;
    } else if (path_same && vaka_run.spare_dir == AT_FDCWD &&
               renameat(AT_FDCWD, vaka_run.spare_path, AT_FDCWD, target->path) == 0) {
        vaka_run.report_dir_used = AT_FDCWD;
        vaka_run.report_name_used = target->path;
    } else if (path_same && vaka_run.spare_path[0] == '/' &&
               renameat(AT_FDCWD, vaka_run.spare_path, AT_FDCWD, target->path) == 0) {
        vaka_run.report_dir_used = AT_FDCWD; /* the directory descriptor is stale: by the absolute path */
        vaka_run.report_name_used = target->path;
    } else {
        close(fd); /* the name is gone (deleted from outside): the reserve or a new file instead */
        return -1;
    }
    if (syscall(SYS_lseek, fd, 0L, SEEK_SET) != 0) {
        close(fd);
        vaka_run.report_name_used = NULL;
        return -1;
    }
    return fd;
}

/* Keeps the report just written (kept_fd, named report_name_used) as the spare: renames it to
 * `.<run_id>-<pid>.spare` in the same directory. @return 1 when done (kept_fd is then the spare's). */
static int keep_as_spare(vaka_report_target *target)
{
    struct stat st;
    if (target == NULL || vaka_run.kept_fd < 0 || vaka_run.report_name_used == NULL || vaka_run.spare_fd >= 0) return 0;
    /* The pid in the name: a fork child keeps the parent's run_id, and its spare must not take (or be taken
     * for) the parent's. */
    pid_t pid = (pid_t)syscall(SYS_getpid);
    char digits[20];
    size_t nd = vaka_sig_format_udec(digits, sizeof digits, (unsigned long)pid);
    size_t need = target->dir_len + 1 + target->run_id_len + 1 + nd + 6 + 1;
    if (need > sizeof vaka_run.spare_path || fstat(vaka_run.kept_fd, &st) != 0) return 0;
    size_t p = 0;
    vaka_sig_copy(vaka_run.spare_path, target->path, target->dir_len);
    p = target->dir_len;
    vaka_run.spare_path[p++] = '.';
    vaka_sig_copy(vaka_run.spare_path + p, target->run_id, target->run_id_len);
    p += target->run_id_len;
    vaka_run.spare_path[p++] = '-';
    vaka_sig_copy(vaka_run.spare_path + p, digits, nd);
    p += nd;
    vaka_sig_copy(vaka_run.spare_path + p, ".spare", 7);
    vaka_run.spare_rel = target->dir_len;
    int ok = vaka_run.report_dir_used == AT_FDCWD
                 ? renameat(AT_FDCWD, vaka_run.report_name_used, AT_FDCWD, vaka_run.spare_path) == 0
                 : renameat(vaka_run.report_dir_used, vaka_run.report_name_used, vaka_run.report_dir_used, vaka_run.spare_path + vaka_run.spare_rel) == 0;
    if (!ok) return 0;
    vaka_run.spare_dir = vaka_run.report_dir_used;
    vaka_run.spare_dev = st.st_dev;
    vaka_run.spare_ino = st.st_ino;
    vaka_run.spare_pid = pid;
    vaka_run.spare_fd = vaka_run.kept_fd;
    vaka_run.kept_fd = -1;
    vaka_run.report_name_used = NULL;
    return 1;
}

void vaka_sig_drop_spare(void)
{
    struct stat st;
    int fd = vaka_run.spare_fd;
    if (fd < 0) return;
    vaka_run.spare_fd = -1;
    if (vaka_run.spare_pid != (pid_t)syscall(SYS_getpid) || fstat(fd, &st) != 0 || st.st_dev != vaka_run.spare_dev ||
        st.st_ino != vaka_run.spare_ino)
        return; /* not ours (any more): the descriptor may be someone else's now */
    if (vaka_run.spare_dir == AT_FDCWD) unlinkat(AT_FDCWD, vaka_run.spare_path, 0);
    else if (unlinkat(vaka_run.spare_dir, vaka_run.spare_path + vaka_run.spare_rel, 0) != 0 && vaka_run.spare_path[0] == '/')
        unlinkat(AT_FDCWD, vaka_run.spare_path, 0);
    close(fd);
}

/* Cuts the report being written at `fd` to what was written so far (a reused spare holds an earlier
 * report's bytes past it). */
void vaka_sig_cut_at_offset(int fd)
{
    struct stat st;
    long pos = (long)syscall(SYS_lseek, fd, 0L, SEEK_CUR);
    /* Only when longer: a truncate to the same size may free the blocks allocated past the end (ext4). */
    if (pos >= 0 && fstat(fd, &st) == 0 && st.st_size > pos) syscall(SYS_ftruncate, fd, pos);
}

/* The report file of `target`: a survived signal's spare, else the reserve made at install, linked under the report's name; else created
 * relative to the directory opened at install when that descriptor is still ours (same device and inode);
 * else (or when that fails: the directory was deleted and created again) by its absolute path (the
 * application closed or reused our descriptor; works when the path is shorter than PATH_MAX). A directory
 * install did not find and that is not open yet (dir_pending) is made first when the report cannot be created
 * by its path for a missing directory (ENOENT).
 * @return the descriptor, or -1. */
int vaka_sig_open_report(vaka_report_target *target)
{
    struct stat st;
    /* Published once, -1 to open, by vaka_crash_open_report_dir on another thread (release store). */
    int dir_fd = __atomic_load_n(&target->dir_fd, __ATOMIC_ACQUIRE);
    int dir_ok = dir_fd >= 0 && fstat(dir_fd, &st) == 0 && st.st_dev == target->dir_dev &&
                 st.st_ino == target->dir_ino;
    int path_ok = vaka_sig_strnlen(target->path, VAKA_REPORT_PATH_MAX) < VAKA_REPORT_PATH_MAX;
    vaka_run.report_name_used = NULL;
    int fd = take_spare(target, dir_ok, path_ok);
    if (fd >= 0) return fd;
    fd = take_reserve(target, dir_ok, path_ok);
    if (fd >= 0) return fd;
    if (dir_ok) {
        fd = open_report_at(target->dir_fd, target->path + target->dir_len);
        if (fd >= 0) {
            vaka_run.report_dir_used = target->dir_fd;
            vaka_run.report_name_used = target->path + target->dir_len;
            return fd;
        }
    }
    if (!path_ok) return -1;
    fd = open_report_at(AT_FDCWD, target->path);
    if (fd < 0 && errno == ENOENT && target->dir_pending && !dir_ok) {
        make_report_dirs(target);
        fd = open_report_at(AT_FDCWD, target->path);
    }
    if (fd >= 0) {
        vaka_run.report_dir_used = AT_FDCWD;
        vaka_run.report_name_used = target->path;
    }
    return fd;
}

/* RLIMIT_FSIZE as found at crash time, when the capture raised its soft limit to the hard one. */
static struct { uint64_t cur, max; } fsize_saved;
static int fsize_raised;

/* A soft RLIMIT_FSIZE below the hard one would cut the report (even to 0 bytes): raise it for the capture. */
void vaka_sig_raise_fsize_limit(void)
{
    fsize_raised = 0;
    if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, NULL, &fsize_saved) != 0 || fsize_saved.cur >= fsize_saved.max)
        return;
    struct { uint64_t cur, max; } raised = { fsize_saved.max, fsize_saved.max };
    if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, &raised, NULL) == 0) fsize_raised = 1;
}

void vaka_sig_restore_fsize_limit(void)
{
    if (fsize_raised) syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, &fsize_saved, NULL);
    fsize_raised = 0;
}


/* Death follows the report just written: closes it. The reserve's blocks past its end (fallocate with
 * FALLOC_FL_KEEP_SIZE: at most the first of VAKA_RESERVE_SIZES, 64 KiB) stay allocated until the next launch's
 * crash join removes the report or, when it waits for the server, gives them back: freeing them here takes an
 * ftruncate, which on ext4 cost 0.1 ms on a quiet
 * file system and 2-3 ms while another thread's writes were being committed to its journal, on the path of
 * every crash. */
void vaka_sig_close_kept_report(void)
{
    if (vaka_run.kept_fd < 0) return;
    close(vaka_run.kept_fd);
    vaka_run.kept_fd = -1;
}

/* A normal exit: the report of a signal the process survived is not a crash. */
void vaka_sig_remove_kept_report(void)
{
    if (vaka_run.report_name_used != NULL) unlinkat(vaka_run.report_dir_used, vaka_run.report_name_used, 0);
    vaka_run.report_name_used = NULL;
    vaka_run.kept_survived = 0;
}


/* The process survived the signal just captured (sig_rearm.c): the report is not a crash, unless `keep` (death
 * may still follow: SIGABRT, or SIG_DFL now in place). Then a reserve for the next capture. */
void vaka_sig_settle_survived_report(int keep)
{
    if (keep) {
        vaka_sig_close_kept_report();
        vaka_run.kept_survived = vaka_run.report_name_used != NULL;
    } else if (keep_as_spare(atomic_load(&vaka_state.target))) {
        /* The report, blocks and all, is the next capture's file: no gap where another thread could take the
         * blocks (a full disk). */
    } else {
        /* The new reserve first, while the report still holds its blocks (a full disk); then the report goes. */
        vaka_report_target *target = atomic_load(&vaka_state.target);
        if (target != NULL && target->reserve_fd < 0) vaka_sig_make_reserve(target);
        if (vaka_run.report_name_used != NULL) unlinkat(vaka_run.report_dir_used, vaka_run.report_name_used, 0);
        if (vaka_run.kept_fd >= 0) close(vaka_run.kept_fd);
        vaka_run.kept_fd = -1;
        vaka_run.report_name_used = NULL;
        /* The report's blocks are free now: take what the new reserve could not get before, at once. */
        if (target != NULL && target->reserve_fd >= 0) vaka_sig_reserve_blocks(target->reserve_fd);
    }
    vaka_report_target *target = atomic_load(&vaka_state.target);
    if (target != NULL && target->reserve_fd < 0 && vaka_run.spare_fd < 0) vaka_sig_make_reserve(target);
}
