/*
 * check_json.h - what the C tests of reports share beside check.h: typed
 * reads of a report's JSON that give an impossible value instead of
 * crashing when a key is missing, and SQL run on a test database.
 */
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>
#include <sqlite3.h>

#include "check.h"

/* The integer at @key of @o; -999999 if it is missing or not an integer. */
static inline long long gi(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (long long)json_integer_value(v) : -999999;
}

/* The number at @key of @o; NAN if it is missing or not a number. */
static inline double gr(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The string at @key of @o; NULL if it is missing or not a string. */
static inline const char *gs(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* Item @i of the array at @key of @o; NULL if there is none. */
static inline json_t *at(const json_t *o, const char *key, size_t i)
{
	return json_array_get(json_object_get(o, key), i);
}

/* Run @sql on @db; a failure is a setup error (exit 99), with SQLite's message. */
static inline void exec_sql(sqlite3 *db, const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "setup: %s\n  in: %.200s\n", err, sql);
		sqlite3_free(err);
		exit(99);
	}
}
