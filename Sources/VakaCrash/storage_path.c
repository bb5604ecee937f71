/*
 * Start time (not the signal path): paths normalised by name, and the default storage directory's path and the
 * program's directory name in it, `<name>-<hash>`, that Vaka.start computes on the caller's thread when the program names no storage
 * directory (Vaka.programDirectoryName(argv0:) documents the rules). In C because it runs on every start before
 * the crash handlers go in: the same steps in Swift took ~75 µs at their first call in a process (the standard
 * library's string and array code run for the first time), here ~1 µs once its page is in (docs/cost.md).
 */
#include <vaka/vaka_crash.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The most UTF-8 bytes of `<name>` (Options.bounded's cut). */
#define NAME_MAX_BYTES 64

static int usable(const char *s, size_t n)
{
    return n > 0 && !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.');
}

/* The first `n` bytes of `s`, malloc'd and terminated (NULL when out of memory). */
static char *copy(const char *s, size_t n)
{
    char *out = malloc(n + 1);
    if (out == NULL) return NULL;
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

/* `a` + `b` + `c`, malloc'd (NULL when out of memory). */
static char *concat3(const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *out = malloc(la + lb + lc + 1);
    if (out == NULL) return NULL;
    memcpy(out, a, la);
    memcpy(out + la, b, lb);
    memcpy(out + la + lb, c, lc + 1);
    return out;
}

/* The last non-empty `/`-separated component of `path` (its start and length); `path` whole when it has none
 * (`/`, empty); then nothing (length 0) when that holds a `/`. */
static void last_component(const char *path, const char **start, size_t *length)
{
    size_t end = strlen(path);
    while (end > 0 && path[end - 1] == '/') end--;
    size_t begin = end;
    while (begin > 0 && path[begin - 1] != '/') begin--;
    if (begin < end) {
        *start = path + begin;
        *length = end - begin;
    } else {
        *start = path;
        *length = strchr(path, '/') != NULL ? 0 : strlen(path);
    }
}

/* `path` made absolute against the working directory: `$PWD` when it is absolute and names the same directory
 * as `.` (the shell's logical working directory, symbolic links kept), else getcwd(3) (empty when that fails).
 * malloc'd; starts with `/`. */
static char *absolute(const char *path)
{
    if (path[0] == '/') return copy(path, strlen(path));
    char *cwd = getcwd(NULL, 0);
    const char *base = cwd != NULL ? cwd : "";
    const char *pwd = getenv("PWD");
    struct stat a, b;
    if (pwd != NULL && pwd[0] == '/' && stat(pwd, &a) == 0 && stat(".", &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        base = pwd;
    char *out = concat3(base, "/", path);
    free(cwd);
    return out;
}

char *vaka_crash_normalised_path(const char *path)
{
    size_t n = strlen(path), out = 1;
    char *result = malloc(n + 2); /* `/` + at most every byte of `path` + NUL */
    if (result == NULL) return NULL;
    result[0] = '/';
    for (size_t i = 0; i < n;) {
        while (i < n && path[i] == '/') i++;
        size_t end = i;
        while (end < n && path[end] != '/') end++;
        size_t length = end - i;
        if (length == 2 && path[i] == '.' && path[i + 1] == '.') {
            while (out > 1 && result[out - 1] != '/') out--; /* the last component goes (none at the root) */
            if (out > 1) out--;
        } else if (length > 0 && !(length == 1 && path[i] == '.')) {
            if (out > 1) result[out++] = '/';
            memcpy(result + out, path + i, length);
            out += length;
        }
        i = end;
    }
    result[out] = '\0';
    return result;
}

/* `path` made absolute (absolute()) and normalised (vaka_crash_normalised_path), malloc'd; NULL when out of
 * memory. */
static char *absolute_normalised(const char *path)
{
    char *made = absolute(path);
    if (made == NULL) return NULL;
    char *normalised = vaka_crash_normalised_path(made);
    free(made);
    return normalised;
}

/* The length of the well-formed UTF-8 sequence at `s` (at most `left` bytes), or 0: no overlong form, no
 * surrogate, nothing over U+10FFFF (the Unicode standard's table 3-7). */
static size_t sequence_length(const unsigned char *s, size_t left)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t size = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (size == 0 || size > left) return 0;
    unsigned char low = 0x80, high = 0xBF; /* the second byte's range */
    if (c == 0xE0) low = 0xA0;
    else if (c == 0xED) high = 0x9F;
    else if (c == 0xF0) low = 0x90;
    else if (c == 0xF4) high = 0x8F;
    if (s[1] < low || s[1] > high) return 0;
    for (size_t k = 2; k < size; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return size;
}

/* `name` as Options.bounded(_:maxBytes: 64) makes it, written to `out` (room for 64 bytes): ASCII control
 * characters, `/` and `\` replaced by `_`, cut at a character's start so that at most 64 bytes are kept. A byte
 * that starts no well-formed UTF-8 sequence becomes U+FFFD, so the name is valid UTF-8 (a Swift String made of it
 * keeps its bytes). @return bytes. */
static size_t bounded_name(const char *name, size_t length, char *out)
{
    size_t kept = 0;
    for (size_t i = 0; i < length;) {
        unsigned char c = (unsigned char)name[i];
        size_t size = sequence_length((const unsigned char *)name + i, length - i);
        if (size == 0) {
            if (kept + 3 > NAME_MAX_BYTES) break;
            memcpy(out + kept, "\xEF\xBF\xBD", 3);
            kept += 3;
            i += 1;
            continue;
        }
        if (kept + size > NAME_MAX_BYTES) break;
        if (size == 1 && (c < 0x20 || c == 0x7F || c == '/' || c == '\\')) out[kept] = '_';
        else memcpy(out + kept, name + i, size);
        kept += size;
        i += size;
    }
    return kept;
}

char *vaka_crash_program_directory_name(const char *argv0)
{
    const char *part;
    size_t part_length;
    char *path = NULL;
    if (argv0 != NULL && strchr(argv0, '/') != NULL) {
        size_t n = strlen(argv0);
        last_component(argv0, &part, &part_length);
        if (n > 0 && argv0[n - 1] != '/' && usable(part, part_length)) {
            path = absolute_normalised(argv0);
        }
    } else if (argv0 != NULL && usable(argv0, strlen(argv0))) {
        /* A bare name: the shell found it through PATH (an empty entry, or no PATH, is the working directory). */
        const char *list = getenv("PATH");
        if (list == NULL) list = "";
        for (const char *entry = list;;) {
            const char *colon = strchr(entry, ':');
            size_t length = colon != NULL ? (size_t)(colon - entry) : strlen(entry);
            char *dir = length == 0 ? copy(".", 1) : copy(entry, length);
            char *candidate = dir != NULL ? concat3(dir, "/", argv0) : NULL;
            free(dir);
            struct stat st;
            if (candidate != NULL && stat(candidate, &st) == 0 && S_ISREG(st.st_mode) && access(candidate, X_OK) == 0) {
                path = absolute_normalised(candidate);
                free(candidate);
                break;
            }
            free(candidate);
            if (colon == NULL) break;
            entry = colon + 1;
        }
    }
    if (path == NULL) path = realpath("/proc/self/exe", NULL);
    const char *identity = path != NULL ? path : argv0 != NULL ? argv0 : "";
    uint32_t hash = 0x811C9DC5u;
    for (const unsigned char *p = (const unsigned char *)identity; *p != '\0'; p++) hash = (hash ^ *p) * 0x01000193u;

    if (argv0 != NULL) last_component(argv0, &part, &part_length);
    else part = "", part_length = 0;
    if (!usable(part, part_length)) last_component(identity, &part, &part_length);
    if (!usable(part, part_length)) part = "program", part_length = 7;
    char name[NAME_MAX_BYTES + 1 + 8 + 1];
    size_t n = bounded_name(part, part_length, name);
    if (!usable(name, n)) {
        memcpy(name, "program", 7);
        n = 7;
    }
    name[n++] = '-';
    for (int shift = 28; shift >= 0; shift -= 4) name[n++] = "0123456789abcdef"[(hash >> shift) & 0xF];
    name[n] = '\0';
    free(path);
    return copy(name, n);
}

/* `base` without its trailing `/`s (`/` stays), joined with `component` by one `/`. */
static char *join(const char *base, const char *component)
{
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/') n--;
    char *trimmed = copy(base, n);
    if (trimmed == NULL) return NULL;
    char *out = concat3(trimmed, n > 0 && trimmed[n - 1] == '/' ? "" : "/", component);
    free(trimmed);
    return out;
}

char *vaka_crash_default_storage_path(const char *argv0, const char *home)
{
    const char *xdg = getenv("XDG_STATE_HOME");
    const char *base = NULL, *below = NULL;
    if (xdg != NULL && xdg[0] == '/') {
        base = xdg;
        below = "vaka/";
    } else {
        const char *env_home = getenv("HOME");
        base = env_home != NULL && env_home[0] == '/' ? env_home : home;
        below = ".local/state/vaka/";
    }
    if (base == NULL) return NULL;
    char *app = vaka_crash_program_directory_name(argv0);
    if (app == NULL) return NULL;
    char *component = concat3(below, app, "");
    free(app);
    if (component == NULL) return NULL;
    char *out = join(base, component);
    free(component);
    return out;
}
