#ifndef JOTTER_CZLIB_SHIM_H
#define JOTTER_CZLIB_SHIM_H

#include <string.h>
#include <zlib.h>

/// gzip-compresses `input` into `output` (capacity from compressBound plus the gzip framing) at the best
/// level; returns the compressed size, or 0 on failure. deflateInit2 is a macro, so it lives here.
static inline size_t jotter_gzip(const unsigned char *input, size_t length, unsigned char *output, size_t capacity) {
    z_stream stream;
    memset(&stream, 0, sizeof stream);
    if (deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) return 0;
    stream.next_in = (unsigned char *)input;
    stream.avail_in = (uInt)length;
    stream.next_out = output;
    stream.avail_out = (uInt)capacity;
    int result = deflate(&stream, Z_FINISH);
    size_t produced = stream.total_out;
    deflateEnd(&stream);
    return result == Z_STREAM_END ? produced : 0;
}

#endif
