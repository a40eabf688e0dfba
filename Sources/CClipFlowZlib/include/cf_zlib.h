// C shim for zlib, imported only by ClipFlowServe (internal import): one call that gzips a buffer
// whole, for the text answers the server compresses. No function here prints or exits.
#ifndef CF_ZLIB_H
#define CF_ZLIB_H
#include <stddef.h>
#include <stdint.h>

/// Gzips (RFC 1952, deflate level 6) the `length` bytes at `input` into `output`, which holds
/// `capacity` bytes. Returns 0 with the gzip's size in `*written`; 1 when it does not fit in
/// `capacity` (a caller that gives less room than the input learns that gzip does not shrink it);
/// -1 when zlib fails or `length` or `capacity` is above 1 GiB.
int cf_gzip(const uint8_t *input, size_t length, uint8_t *output, size_t capacity, size_t *written);

#endif
