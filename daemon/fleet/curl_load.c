/* curl_load.c - libcurl loaded at the first fleet sink's start (curl_load.h). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "fleet/curl_load.h"
#include "util.h"

struct curl_api curl_api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_result;
static char load_error[256];

/* Each function: its name in libcurl and its slot in curl_api. */
static const struct {
	const char *name;
	size_t offset;
} symbols[] = {
    {"curl_global_init", offsetof(struct curl_api, global_init)},
    {"curl_global_cleanup", offsetof(struct curl_api, global_cleanup)},
    {"curl_easy_init", offsetof(struct curl_api, easy_init)},
    {"curl_easy_setopt", offsetof(struct curl_api, easy_setopt)},
    {"curl_easy_perform", offsetof(struct curl_api, easy_perform)},
    {"curl_easy_getinfo", offsetof(struct curl_api, easy_getinfo)},
    {"curl_easy_cleanup", offsetof(struct curl_api, easy_cleanup)},
    {"curl_easy_reset", offsetof(struct curl_api, easy_reset)},
    {"curl_easy_strerror", offsetof(struct curl_api, easy_strerror)},
    {"curl_easy_escape", offsetof(struct curl_api, easy_escape)},
    {"curl_free", offsetof(struct curl_api, free)},
    {"curl_slist_append", offsetof(struct curl_api, slist_append)},
    {"curl_slist_free_all", offsetof(struct curl_api, slist_free_all)},
};

static void load(void)
{
	/* Never closed: curl keeps state (its global init) for the process's life. */
	void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		snprintf(load_error, sizeof(load_error), "%s", dlerror());
		load_result = -ENOENT;
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(symbols); i++) {
		void *f = dlsym(lib, symbols[i].name);

		if (!f) {
			snprintf(load_error, sizeof(load_error), "libcurl.so.4: no %s",
				 symbols[i].name);
			load_result = -ENOENT;
			return;
		}
		/* POSIX: a function pointer from dlsym() converts (dlsym(3)). */
		*(void **)((char *)&curl_api + symbols[i].offset) = f;
	}
}

int curl_load(void)
{
	pthread_once(&once, load);
	return load_result;
}

const char *curl_load_error(void)
{
	return load_error;
}
