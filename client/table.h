/* table.h - aligned text tables for profctl's human output. */
#pragma once

#include <stddef.h>
#include <stdio.h>

#include "util.h"

enum table_align { TABLE_LEFT, TABLE_RIGHT };

/* One column: its heading, its alignment, and the widest it grows (0: no cap). */
struct table_column {
	const char *header;
	enum table_align align;
	size_t max_width;
};

struct table;

struct table *table__new(const struct table_column *columns, size_t n_columns);
void table__free(struct table *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct table *, table__free);

int table__cellf(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t table__rows(const struct table *t);
void table__print(const struct table *t, FILE *f);
