/*
 * output_internal.h - what the files of profctl's human output share
 * (output.c): typed reads of response fields that fail with -EBADMSG and
 * name the field, and the formatting of names, times and source lines.
 * Each is documented where it is defined.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

const char *output__error(void);
int bad_field(const char *key, const char *expected);
int get_int(const json_t *o, const char *key, long long *ret);
int get_opt_int(const json_t *o, const char *key, long long *ret, bool *ret_set);
int get_num(const json_t *o, const char *key, double *ret);
int get_opt_num(const json_t *o, const char *key, double *ret, bool *ret_set);
int get_str(const json_t *o, const char *key, const char **ret);
int get_opt_str(const json_t *o, const char *key, const char **ret);
int get_array(const json_t *o, const char *key, const json_t **ret);
int check_object(const json_t *v, const char *what);
struct table;
struct table_column;
int table_of_rows(const json_t *rows, const struct table_column *columns, size_t n_columns,
		  int (*add_row)(struct table *t, const json_t *row), struct table **ret_t);
const char *module_name(const char *module);
const char *file_name(const char *file);
void format_local_time(char *buf, size_t size, long long ns, bool zone);
void format_elapsed(char *buf, size_t size, double s);
void print_python(FILE *f, const json_t *o, const char *label, bool say_not_found);
int print_counters(FILE *f, const json_t *o);
int print_subject(FILE *f, const json_t *reply);
void format_location(char *buf, size_t size, const char *file, long long line, bool has_line);
int bad_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* In output-sql.c: a JSON scalar as text, as the sql table prints it. */
void scalar_text(FILE *f, const json_t *v);
/* In output-threads.c: a stack's frames, one per line after @indent. */
void print_frames(FILE *f, const json_t *frames, const char *indent);
