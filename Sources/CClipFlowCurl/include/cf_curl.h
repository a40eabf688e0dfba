// C shim for libcurl and libcrypto's digests, imported only by ClipFlowUpload (internal import).
// It holds three things and nothing else:
//  - typed non-variadic wrappers (prefixed cf_) for what Swift cannot import: the variadic
//    curl_easy_setopt/curl_easy_getinfo and the callback return values built from casts;
//  - the loader: both libraries are opened with dlopen on first use, not linked, and the curl and
//    EVP/HMAC functions ClipFlowUpload calls are defined in cf_curl.c under their own names,
//    forwarding to the loaded library;
//  - cf_curl_load_error(), the one way to learn whether loading worked.
// No function here exits or prints: when loading failed, every forwarding function returns its
// library's failure value (CURLE_FAILED_INIT, NULL, 0) and the Swift side reports the load error.
#ifndef CF_CURL_H
#define CF_CURL_H
#include <curl/curl.h>
// Digests (TUS checksums, SigV4, resume fingerprints) come from OpenSSL's libcrypto, which libcurl
// already links; its EVP/HMAC functions import into Swift as they are.
#include <openssl/evp.h>
#include <openssl/hmac.h>

typedef size_t (*cf_curl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*cf_curl_xferinfo_cb)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                   curl_off_t ultotal, curl_off_t ulnow);
typedef int (*cf_curl_seek_cb)(void *userdata, curl_off_t offset, int origin);

/// NULL once libcurl and libcrypto are loaded, else why they could not be (loads them on the first
/// call; thread-safe). While this is not NULL, every other function returns a failure value.
const char *cf_curl_load_error(void);

CURLcode cf_curl_setopt_long(CURL *h, CURLoption opt, long value);
CURLcode cf_curl_setopt_off(CURL *h, CURLoption opt, curl_off_t value);
CURLcode cf_curl_setopt_string(CURL *h, CURLoption opt, const char *value);
CURLcode cf_curl_setopt_pointer(CURL *h, CURLoption opt, void *value);
CURLcode cf_curl_setopt_slist(CURL *h, CURLoption opt, struct curl_slist *value);
CURLcode cf_curl_setopt_data_cb(CURL *h, CURLoption opt, cf_curl_data_cb cb);
CURLcode cf_curl_setopt_xferinfo_cb(CURL *h, cf_curl_xferinfo_cb cb);
CURLcode cf_curl_setopt_seek_cb(CURL *h, cf_curl_seek_cb cb);

CURLcode cf_curl_getinfo_long(CURL *h, CURLINFO info, long *out);
CURLcode cf_curl_getinfo_off(CURL *h, CURLINFO info, curl_off_t *out);
CURLcode cf_curl_getinfo_string(CURL *h, CURLINFO info, const char **out);

// Return values of callbacks that are #defines built from casts.
extern const size_t cf_CURL_READFUNC_ABORT;
extern const int cf_CURL_SEEKFUNC_OK;
extern const int cf_CURL_SEEKFUNC_FAIL;
#endif
