#include "cf_zlib.h"

#include <string.h>
#include <zlib.h>

int cf_gzip(const uint8_t *input, size_t length, uint8_t *output, size_t capacity, size_t *written) {
    *written = 0;
    // zlib counts in 32-bit uInt.
    if (length > (1u << 30) || capacity > (1u << 30)) return -1;
    z_stream s;
    memset(&s, 0, sizeof s);
    // 15 + 16: the largest window, with a gzip header and trailer instead of zlib's.
    if (deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    s.next_in = (Bytef *)input;
    s.avail_in = (uInt)length;
    s.next_out = output;
    s.avail_out = (uInt)capacity;
    int e = deflate(&s, Z_FINISH);
    *written = s.total_out;
    deflateEnd(&s);
    if (e == Z_STREAM_END) return 0;
    return e == Z_OK || e == Z_BUF_ERROR ? 1 : -1;
}
