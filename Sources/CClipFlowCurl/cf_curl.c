#include "cf_curl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

// libcurl and libcrypto are opened the first time one of their functions is called, not linked:
// linking them added ~3 ms to every start of clipflow (their ~25 dependencies are symbol-resolved
// by the dynamic loader), paid by commands that never upload, `clipflow merge` included. The
// functions Swift calls are defined here under their own names and forward to the library's; the
// headers above still give every type and constant, so a prototype that drifted from the library's
// would not compile.

static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    void (*easy_reset)(CURL *);
    CURLcode (*easy_perform)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    const EVP_MD *(*sha1)(void);
    const EVP_MD *(*sha256)(void);
    const EVP_MD *(*md5)(void);
    EVP_MD_CTX *(*ctx_new)(void);
    void (*ctx_free)(EVP_MD_CTX *);
    int (*digest_init)(EVP_MD_CTX *, const EVP_MD *, ENGINE *);
    int (*digest_update)(EVP_MD_CTX *, const void *, size_t);
    int (*digest_final)(EVP_MD_CTX *, unsigned char *, unsigned int *);
    unsigned char *(*hmac)(const EVP_MD *, const void *, int, const unsigned char *, size_t,
                           unsigned char *, unsigned int *);
} F;

static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static char loadError[512];

static void *resolve(void *lib, const char *libName, const char *name) {
    void *p = lib ? dlsym(lib, name) : NULL;
    if (!p && !loadError[0]) {
        snprintf(loadError, sizeof loadError, "%s has no %s", libName, name);
    }
    return p;
}

static void load(void) {
    void *curl = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!curl) {
        snprintf(loadError, sizeof loadError, "cannot load libcurl (libcurl.so.4): %s", dlerror());
        return;
    }
    void *crypto = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!crypto) {
        snprintf(loadError, sizeof loadError, "cannot load OpenSSL's libcrypto (libcrypto.so.3): %s", dlerror());
        return;
    }
#define CURLSYM(field, name) *(void **)&F.field = resolve(curl, "libcurl", name)
#define CRYPTOSYM(field, name) *(void **)&F.field = resolve(crypto, "libcrypto", name)
    CURLSYM(global_init, "curl_global_init");
    CURLSYM(easy_init, "curl_easy_init");
    CURLSYM(easy_cleanup, "curl_easy_cleanup");
    CURLSYM(easy_reset, "curl_easy_reset");
    CURLSYM(easy_perform, "curl_easy_perform");
    CURLSYM(easy_strerror, "curl_easy_strerror");
    CURLSYM(easy_setopt, "curl_easy_setopt");
    CURLSYM(easy_getinfo, "curl_easy_getinfo");
    CURLSYM(slist_append, "curl_slist_append");
    CURLSYM(slist_free_all, "curl_slist_free_all");
    CRYPTOSYM(sha1, "EVP_sha1");
    CRYPTOSYM(sha256, "EVP_sha256");
    CRYPTOSYM(md5, "EVP_md5");
    CRYPTOSYM(ctx_new, "EVP_MD_CTX_new");
    CRYPTOSYM(ctx_free, "EVP_MD_CTX_free");
    CRYPTOSYM(digest_init, "EVP_DigestInit_ex");
    CRYPTOSYM(digest_update, "EVP_DigestUpdate");
    CRYPTOSYM(digest_final, "EVP_DigestFinal_ex");
    CRYPTOSYM(hmac, "HMAC");
#undef CURLSYM
#undef CRYPTOSYM
}

const char *cf_curl_load_error(void) {
    pthread_once(&loadOnce, load);
    return loadError[0] ? loadError : NULL;
}

// True when both libraries are loaded. When they are not, every forwarding function below
// returns its library's own failure value (CURLE_FAILED_INIT, NULL, 0) instead of calling
// through a null pointer; the caller reports `cf_curl_load_error()`.
static int ready(void) {
    return cf_curl_load_error() == NULL;
}

CURLcode curl_global_init(long flags) { if (!ready()) return CURLE_FAILED_INIT; return F.global_init(flags); }
CURL *curl_easy_init(void) { if (!ready()) return NULL; return F.easy_init(); }
void curl_easy_cleanup(CURL *h) { if (ready()) F.easy_cleanup(h); }
void curl_easy_reset(CURL *h) { if (ready()) F.easy_reset(h); }
CURLcode curl_easy_perform(CURL *h) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_perform(h); }
const char *curl_easy_strerror(CURLcode code) { if (!ready()) return NULL; return F.easy_strerror(code); }
struct curl_slist *curl_slist_append(struct curl_slist *list, const char *s) { if (!ready()) return NULL; return F.slist_append(list, s); }
void curl_slist_free_all(struct curl_slist *list) { if (ready()) F.slist_free_all(list); }

const EVP_MD *EVP_sha1(void) { if (!ready()) return NULL; return F.sha1(); }
const EVP_MD *EVP_sha256(void) { if (!ready()) return NULL; return F.sha256(); }
const EVP_MD *EVP_md5(void) { if (!ready()) return NULL; return F.md5(); }
EVP_MD_CTX *EVP_MD_CTX_new(void) { if (!ready()) return NULL; return F.ctx_new(); }
void EVP_MD_CTX_free(EVP_MD_CTX *ctx) { if (ready()) F.ctx_free(ctx); }
int EVP_DigestInit_ex(EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl) { if (!ready()) return 0; return F.digest_init(ctx, type, impl); }
int EVP_DigestUpdate(EVP_MD_CTX *ctx, const void *d, size_t cnt) { if (!ready()) return 0; return F.digest_update(ctx, d, cnt); }
int EVP_DigestFinal_ex(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s) { if (!ready()) return 0; return F.digest_final(ctx, md, s); }
unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len, const unsigned char *data,
                    size_t data_len, unsigned char *md, unsigned int *md_len) {
    if (!ready()) return NULL;
    return F.hmac(evp_md, key, key_len, data, data_len, md, md_len);
}

CURLcode cf_curl_setopt_long(CURL *h, CURLoption opt, long value) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_off(CURL *h, CURLoption opt, curl_off_t value) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_string(CURL *h, CURLoption opt, const char *value) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_pointer(CURL *h, CURLoption opt, void *value) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_slist(CURL *h, CURLoption opt, struct curl_slist *value) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_data_cb(CURL *h, CURLoption opt, cf_curl_data_cb cb) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, opt, cb); }
CURLcode cf_curl_setopt_xferinfo_cb(CURL *h, cf_curl_xferinfo_cb cb) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cb); }
CURLcode cf_curl_setopt_seek_cb(CURL *h, cf_curl_seek_cb cb) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_setopt(h, CURLOPT_SEEKFUNCTION, cb); }

CURLcode cf_curl_getinfo_long(CURL *h, CURLINFO info, long *out) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_getinfo(h, info, out); }
CURLcode cf_curl_getinfo_off(CURL *h, CURLINFO info, curl_off_t *out) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_getinfo(h, info, out); }
CURLcode cf_curl_getinfo_string(CURL *h, CURLINFO info, const char **out) { if (!ready()) return CURLE_FAILED_INIT; return F.easy_getinfo(h, info, out); }

const size_t cf_CURL_READFUNC_ABORT = CURL_READFUNC_ABORT;
const int cf_CURL_SEEKFUNC_OK = CURL_SEEKFUNC_OK;
const int cf_CURL_SEEKFUNC_FAIL = CURL_SEEKFUNC_FAIL;
