/* table.c - aligned text tables for profctl's human output. */
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#include "table.h"

struct table {
	const struct table_column *columns; /* borrowed, n_columns entries */
	size_t n_columns;
	char **cells; /* row-major, n_cells entries */
	size_t n_cells;
	size_t cap_cells;
};

/*
 * table__new() - an empty table with @n_columns columns described by
 * @columns (borrowed: must outlive the table). Returns NULL only when out of
 * memory.
 */
struct table *table__new(const struct table_column *columns, size_t n_columns)
{
	struct table *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->columns = columns;
	t->n_columns = n_columns;
	return t;
}

/* table__free() - free @t and its cells; accepts NULL. */
void table__free(struct table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_cells; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

/*
 * table__cellf() - append the next cell, printf-style; cells fill a row left
 * to right, then start the next row. Returns 0 or -ENOMEM (the table is then
 * unchanged).
 */
int table__cellf(struct table *t, const char *fmt, ...)
{
	va_list ap;
	char *cell;
	int r;

	if (grow_array((void **)&t->cells, &t->cap_cells, t->n_cells, sizeof(*t->cells)) < 0)
		return -ENOMEM;
	va_start(ap, fmt);
	r = vasprintf(&cell, fmt, ap);
	va_end(ap);
	if (r < 0)
		return -ENOMEM;
	t->cells[t->n_cells++] = cell;
	return 0;
}

/* table__rows() - the number of rows begun so far, the heading not counted. */
size_t table__rows(const struct table *t)
{
	return (t->n_cells + t->n_columns - 1) / t->n_columns;
}

static void print_cell(FILE *f, const char *s, size_t width, enum table_align align, bool last)
{
	size_t len = strlen(s);
	size_t pad = len < width ? width - len : 0;

	if (align == TABLE_RIGHT)
		fprintf(f, "%*s%s", (int)pad, "", s);
	else if (last)
		fputs(s, f);
	else
		fprintf(f, "%s%*s", s, (int)pad, "");
}

/*
 * table__print() - print the heading and the rows to @f, columns two spaces
 * apart, each as wide as its widest cell that fits the column's max_width.
 * A longer cell is printed whole and shifts the rest of its row only. No
 * trailing blanks. Does not fail (errors show in ferror(@f)).
 */
void table__print(const struct table *t, FILE *f)
{
	size_t n_rows = table__rows(t);
	size_t width[t->n_columns];

	for (size_t c = 0; c < t->n_columns; c++)
		width[c] = strlen(t->columns[c].header);
	for (size_t i = 0; i < t->n_cells; i++) {
		const struct table_column *col = &t->columns[i % t->n_columns];
		size_t len = strlen(t->cells[i]);

		/* An overlong cell does not widen its column for all the other rows. */
		if (col->max_width && len > col->max_width)
			continue;
		width[i % t->n_columns] = MAX(width[i % t->n_columns], len);
	}

	for (size_t row = 0; row <= n_rows; row++) {
		for (size_t c = 0; c < t->n_columns; c++) {
			const char *s = t->columns[c].header;

			if (row > 0) {
				size_t i = (row - 1) * t->n_columns + c;

				s = i < t->n_cells ? t->cells[i] : "";
			}

			if (c > 0)
				fputs("  ", f);
			print_cell(f, s, width[c], t->columns[c].align, c + 1 == t->n_columns);
		}
		fputc('\n', f);
	}
}
