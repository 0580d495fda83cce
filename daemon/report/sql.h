/*
 * sql.h - read-only SQL over the store for clients (profctl sql), confined
 * to the caller's own sessions unless the caller is an admin.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

int sql__run(const char *db_path, const char *query, bool admin, uid_t uid, size_t max_rows,
	     size_t max_bytes, uint64_t timeout_ns, const atomic_bool *cancel, json_t **ret,
	     char *errbuf, size_t errlen);
