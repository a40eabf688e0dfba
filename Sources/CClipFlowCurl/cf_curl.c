#include "cf_curl.h"

CURLcode cf_curl_setopt_long(CURL *h, CURLoption opt, long value) { return curl_easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_off(CURL *h, CURLoption opt, curl_off_t value) { return curl_easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_string(CURL *h, CURLoption opt, const char *value) { return curl_easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_pointer(CURL *h, CURLoption opt, void *value) { return curl_easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_slist(CURL *h, CURLoption opt, struct curl_slist *value) { return curl_easy_setopt(h, opt, value); }
CURLcode cf_curl_setopt_data_cb(CURL *h, CURLoption opt, cf_curl_data_cb cb) { return curl_easy_setopt(h, opt, cb); }
CURLcode cf_curl_setopt_xferinfo_cb(CURL *h, cf_curl_xferinfo_cb cb) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cb); }
CURLcode cf_curl_setopt_seek_cb(CURL *h, cf_curl_seek_cb cb) { return curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, cb); }

CURLcode cf_curl_getinfo_long(CURL *h, CURLINFO info, long *out) { return curl_easy_getinfo(h, info, out); }
CURLcode cf_curl_getinfo_off(CURL *h, CURLINFO info, curl_off_t *out) { return curl_easy_getinfo(h, info, out); }
CURLcode cf_curl_getinfo_string(CURL *h, CURLINFO info, const char **out) { return curl_easy_getinfo(h, info, out); }

const size_t cf_CURL_READFUNC_ABORT = CURL_READFUNC_ABORT;
const int cf_CURL_SEEKFUNC_OK = CURL_SEEKFUNC_OK;
const int cf_CURL_SEEKFUNC_FAIL = CURL_SEEKFUNC_FAIL;
