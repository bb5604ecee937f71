#ifndef VAKA_CZLIB_SHIM_H
#define VAKA_CZLIB_SHIM_H
#include <zlib.h>

/* deflateInit2/inflateInit2 are function-like macros that Swift cannot import; these wrappers expand them. */

/* Starts a deflate stream that writes a gzip wrapper (windowBits 15 + 16), memLevel 8, default strategy.
   Returns a zlib status code (Z_OK on success). */
static inline int vaka_deflate_init_gzip(z_stream *stream, int level) {
    return deflateInit2(stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}

/* Starts an inflate stream that accepts a gzip or zlib wrapper (windowBits 15 + 32, automatic detection).
   Returns a zlib status code (Z_OK on success). */
static inline int vaka_inflate_init_auto(z_stream *stream) {
    return inflateInit2(stream, 15 + 32);
}
#endif
