/* conn.h - profctl's connection to profd: one JSON request line out, one response line in. */
#pragma once

#include <jansson.h>

#include "util.h"

/* A response line longer than this (bytes, newline included) is refused. */
#define PROFCTL_MAX_RESPONSE_BYTES (64 * 1024 * 1024)

struct conn;

int conn__open(const char *path, struct conn **ret_conn);
void conn__free(struct conn *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct conn *, conn__free);

int conn__call(struct conn *c, const json_t *request, json_t **ret_reply, char **ret_detail);
