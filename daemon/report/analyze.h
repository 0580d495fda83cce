/* analyze.h - bottleneck findings for one session (profctl analyze). */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>

int analyze__session(sqlite3 *db, int64_t session_id, unsigned flags, json_t **ret);
