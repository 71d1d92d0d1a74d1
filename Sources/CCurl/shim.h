#ifndef JOTTER_CCURL_SHIM_H
#define JOTTER_CCURL_SHIM_H

#include <curl/curl.h>
#include <dlfcn.h>

/* libcurl is opened at its first use, not linked (see CurlLibrary.swift): a server that delivers only to
   a Maildir never maps it or the twenty libraries it pulls in. These are the functions Jotter calls,
   found in the opened library; every call goes through one of the wrappers below. */
typedef struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *handle);
    void (*easy_reset)(CURL *handle);
    CURLcode (*easy_perform)(CURL *handle);
    CURLcode (*easy_setopt)(CURL *handle, CURLoption option, ...);
    CURLcode (*easy_getinfo)(CURL *handle, CURLINFO info, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *string);
    void (*slist_free_all)(struct curl_slist *list);
} jotter_curl_functions;

/* Fills `functions` from `library` (a dlopen handle); returns the first symbol not found, or NULL. */
static inline const char *jotter_curl_resolve(void *library, jotter_curl_functions *functions) {
#define JOTTER_CURL_RESOLVE(field, symbol) \
    if ((*(void **)&functions->field = dlsym(library, #symbol)) == NULL) return #symbol;
    JOTTER_CURL_RESOLVE(global_init, curl_global_init)
    JOTTER_CURL_RESOLVE(easy_init, curl_easy_init)
    JOTTER_CURL_RESOLVE(easy_cleanup, curl_easy_cleanup)
    JOTTER_CURL_RESOLVE(easy_reset, curl_easy_reset)
    JOTTER_CURL_RESOLVE(easy_perform, curl_easy_perform)
    JOTTER_CURL_RESOLVE(easy_setopt, curl_easy_setopt)
    JOTTER_CURL_RESOLVE(easy_getinfo, curl_easy_getinfo)
    JOTTER_CURL_RESOLVE(slist_append, curl_slist_append)
    JOTTER_CURL_RESOLVE(slist_free_all, curl_slist_free_all)
#undef JOTTER_CURL_RESOLVE
    return NULL;
}

typedef const jotter_curl_functions *jotter_curl;

static inline CURLcode jotter_curl_global_init(jotter_curl curl, long flags) { return curl->global_init(flags); }
static inline CURL *jotter_curl_easy_init(jotter_curl curl) { return curl->easy_init(); }
static inline void jotter_curl_easy_cleanup(jotter_curl curl, CURL *handle) { curl->easy_cleanup(handle); }
static inline void jotter_curl_easy_reset(jotter_curl curl, CURL *handle) { curl->easy_reset(handle); }
static inline CURLcode jotter_curl_easy_perform(jotter_curl curl, CURL *handle) { return curl->easy_perform(handle); }

static inline struct curl_slist *jotter_curl_slist_append(jotter_curl curl, struct curl_slist *list, const char *string) {
    return curl->slist_append(list, string);
}

static inline void jotter_curl_slist_free_all(jotter_curl curl, struct curl_slist *list) { curl->slist_free_all(list); }

/* curl_easy_setopt and curl_easy_getinfo are variadic: one typed wrapper per argument kind. */

static inline CURLcode jotter_curl_setopt_long(jotter_curl curl, CURL *handle, CURLoption option, long value) {
    return curl->easy_setopt(handle, option, value);
}

static inline CURLcode jotter_curl_setopt_string(jotter_curl curl, CURL *handle, CURLoption option, const char *value) {
    return curl->easy_setopt(handle, option, value);
}

static inline CURLcode jotter_curl_setopt_pointer(jotter_curl curl, CURL *handle, CURLoption option, void *value) {
    return curl->easy_setopt(handle, option, value);
}

static inline CURLcode jotter_curl_setopt_slist(jotter_curl curl, CURL *handle, CURLoption option,
    struct curl_slist *value) {
    return curl->easy_setopt(handle, option, value);
}

static inline CURLcode jotter_curl_setopt_write_function(jotter_curl curl, CURL *handle,
    size_t (*function)(char *, size_t, size_t, void *)) {
    return curl->easy_setopt(handle, CURLOPT_WRITEFUNCTION, function);
}

static inline CURLcode jotter_curl_setopt_read_function(jotter_curl curl, CURL *handle,
    size_t (*function)(char *, size_t, size_t, void *)) {
    return curl->easy_setopt(handle, CURLOPT_READFUNCTION, function);
}

static inline CURLcode jotter_curl_setopt_seek_function(jotter_curl curl, CURL *handle,
    int (*function)(void *, curl_off_t, int)) {
    return curl->easy_setopt(handle, CURLOPT_SEEKFUNCTION, function);
}

static inline CURLcode jotter_curl_setopt_xferinfo_function(jotter_curl curl, CURL *handle,
    int (*function)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t)) {
    return curl->easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, function);
}

static inline CURLcode jotter_curl_setopt_header_function(jotter_curl curl, CURL *handle,
    size_t (*function)(char *, size_t, size_t, void *)) {
    return curl->easy_setopt(handle, CURLOPT_HEADERFUNCTION, function);
}

static inline CURLcode jotter_curl_getinfo_long(jotter_curl curl, CURL *handle, CURLINFO info, long *value) {
    return curl->easy_getinfo(handle, info, value);
}

static inline CURLcode jotter_curl_getinfo_certinfo(jotter_curl curl, CURL *handle, struct curl_certinfo **value) {
    return curl->easy_getinfo(handle, CURLINFO_CERTINFO, value);
}

static inline CURLcode jotter_curl_getinfo_off_t(jotter_curl curl, CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl->easy_getinfo(handle, info, value);
}

#endif
