/*
 * curl_load.h - libcurl for the fleet sinks, loaded with dlopen() when a
 * fleet URL is set: a profd without one does not map libcurl nor the TLS
 * libraries it pulls in (about 5 MiB of RSS here: libcrypto, gnutls,
 * p11-kit). Include this instead of <curl/curl.h>; the curl_* calls of the
 * fleet code then go through the table curl_load() fills.
 */
#pragma once

/* curl's type-checking macros wrap the functions this header redefines. */
#define CURL_DISABLE_TYPECHECK
#include <curl/curl.h>

struct curl_api {
	CURLcode (*global_init)(long flags);
	void (*global_cleanup)(void);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
	CURLcode (*easy_perform)(CURL *curl);
	CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
	void (*easy_cleanup)(CURL *curl);
	void (*easy_reset)(CURL *curl);
	const char *(*easy_strerror)(CURLcode code);
	char *(*easy_escape)(CURL *curl, const char *s, int length);
	void (*free)(void *p);
	struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
	void (*slist_free_all)(struct curl_slist *list);
};

extern struct curl_api curl_api;

/*
 * curl_load() - dlopen() libcurl.so.4 (once; thread-safe) and fill
 * curl_api. Returns 0, or -ENOENT when it or one of its functions cannot
 * be found (curl_load_error() then says what dlerror(3) said).
 */
int curl_load(void);
const char *curl_load_error(void);

#define curl_global_init curl_api.global_init
#define curl_global_cleanup curl_api.global_cleanup
#define curl_easy_init curl_api.easy_init
#undef curl_easy_setopt /* curl.h's own pass-through macro */
#define curl_easy_setopt curl_api.easy_setopt
#define curl_easy_perform curl_api.easy_perform
#undef curl_easy_getinfo
#define curl_easy_getinfo curl_api.easy_getinfo
#define curl_easy_cleanup curl_api.easy_cleanup
#define curl_easy_reset curl_api.easy_reset
#define curl_easy_strerror curl_api.easy_strerror
#define curl_easy_escape curl_api.easy_escape
#define curl_free curl_api.free
#define curl_slist_append curl_api.slist_append
#define curl_slist_free_all curl_api.slist_free_all
