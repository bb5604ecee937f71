#ifndef VAKA_CZLIB_SHIM_H
#define VAKA_CZLIB_SHIM_H
/* zlib for the gzip of request bodies (Vaka's Gzip), the CRC-32 of debug files and symbol caches
 * (VakaSymbolication) and compressed debug sections when libdeflate is missing (Sources/CVakaDw).
 *
 * zlib is not linked: libz.so.1 is opened with dlopen() the first time one of them needs it (vaka_zlib(), defined
 * in Sources/CVakaDw/vaka_zlib.c), on that thread, so that a program linking Vaka does not load it at process
 * start. Its functions are called through the table vaka_zlib() returns; the declarations of zlib.h below are
 * there for the types, constants and __typeof__, calling them directly does not link. */
#include <stddef.h>
#include <zlib.h>

/* Every zlib function Vaka calls. deflateInit2 and inflateInit2 are macros over deflateInit2_ and inflateInit2_,
 * which take ZLIB_VERSION and sizeof(z_stream): the table holds the underscore functions, and the inline functions
 * below pass those two arguments as the macros do. */
#define VAKA_ZLIB_FUNCTIONS(X) \
    X(deflateInit2_) X(deflate) X(deflateEnd) X(inflateInit2_) X(inflate) X(inflateEnd) X(crc32) X(zlibVersion)

/* zlib's functions, each member named and typed as the function it points to. */
struct vaka_zlib_functions {
#define VAKA_ZLIB_MEMBER(name) __typeof__(name) *name;
    VAKA_ZLIB_FUNCTIONS(VAKA_ZLIB_MEMBER)
#undef VAKA_ZLIB_MEMBER
};

/* The library vaka_zlib() opens: Debian's zlib1g, soname libz.so.1. */
#define VAKA_ZLIB_LIBRARY "libz.so.1"

/* zlib's functions: the first call opens libz.so.1 with dlopen (RTLD_NOW | RTLD_LOCAL) and looks every function
 * up with dlsym; later calls return the same table. Thread-safe (pthread_once). Returns NULL when libz.so.1 cannot
 * be opened or lacks a function; vaka_zlib_error() then says why. The table lives as long as the process (libz is
 * never closed). */
const struct vaka_zlib_functions *vaka_zlib(void);

/* Why vaka_zlib() returned NULL (dlerror's text, or "libz.so.1: no <function>"), or NULL when it did not.
 * A static string, valid for the process's lifetime. */
const char *vaka_zlib_error(void);

/* Opens `library` (a soname looked up the usual way, or a path) with dlopen (RTLD_NOW | RTLD_LOCAL) and fills
 * `functions` from it, every time it is called (vaka_zlib() is the once-only call for libz.so.1; this one is for
 * another name, e.g. a missing one in a test). Returns 1 on success (the library then stays open for the
 * process's lifetime), 0 when it cannot be opened or lacks a function (then it is closed, `functions` is left
 * untouched and `error`, `error_size` bytes, holds why, NUL-terminated). */
int vaka_zlib_open(const char *library, struct vaka_zlib_functions *functions, char *error, size_t error_size);

/* Starts a deflate stream that writes a gzip wrapper (windowBits 15 + 16), memLevel 8, default strategy:
 * deflateInit2 through `zlib`. Returns a zlib status code (Z_OK on success). */
static inline int vaka_deflate_init_gzip(const struct vaka_zlib_functions *zlib, z_stream *stream, int level) {
    return zlib->deflateInit2_(stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION,
                               (int)sizeof(z_stream));
}

/* Starts an inflate stream that accepts a gzip or zlib wrapper (windowBits 15 + 32, automatic detection):
 * inflateInit2 through `zlib`. Returns a zlib status code (Z_OK on success). */
static inline int vaka_inflate_init_auto(const struct vaka_zlib_functions *zlib, z_stream *stream) {
    return zlib->inflateInit2_(stream, 15 + 32, ZLIB_VERSION, (int)sizeof(z_stream));
}

/* Starts an inflate stream that accepts a zlib wrapper only (windowBits 15, as inflateInit): inflateInit2 through
 * `zlib`. Returns a zlib status code (Z_OK on success). */
static inline int vaka_inflate_init_zlib(const struct vaka_zlib_functions *zlib, z_stream *stream) {
    return zlib->inflateInit2_(stream, 15, ZLIB_VERSION, (int)sizeof(z_stream));
}
#endif
