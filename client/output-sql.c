/* output-sql.c - sql results as a table or CSV. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "output.h"
#include "output_internal.h"
#include "table.h"

/*
 * @v (a JSON scalar) as text for a cell: integers, reals as given, strings,
 * NULL as "NULL"; an array (a ClickHouse Array column, profctl fleet sql)
 * as compact JSON.
 */
void scalar_text(FILE *f, const json_t *v)
{
	if (json_is_integer(v))
		fprintf(f, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		fprintf(f, "%.15g", json_real_value(v));
	else if (json_is_string(v))
		fputs(json_string_value(v), f);
	else if (json_is_null(v))
		fputs("NULL", f);
	else if (json_is_array(v) && json_dumpf(v, f, JSON_COMPACT | JSON_ENCODE_ANY) == 0)
		;
	else
		fputs("?", f);
}

/* The "sql" response as an aligned table, then the row count. */
int output__sql(FILE *f, const json_t *reply)
{
	_cleanup_(table__freep) struct table *t = NULL;
	_cleanup_free_ struct table_column *columns = NULL;
	const json_t *cols, *rows, *row;
	size_t i, n;
	int r;

	if ((r = get_array(reply, "columns", &cols)) < 0 ||
	    (r = get_array(reply, "rows", &rows)) < 0)
		return r;
	n = json_array_size(cols);
	columns = calloc(n ?: 1, sizeof(*columns));
	if (!columns)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		columns[i] = (struct table_column){
		    json_string_value(json_array_get(cols, i)) ?: "?", TABLE_LEFT, 80};
	t = table__new(columns, n);
	if (!t)
		return -ENOMEM;
	json_array_foreach(rows, i, row)
	{
		for (size_t j = 0; j < n; j++) {
			_cleanup_free_ char *text = NULL;
			size_t size = 0;
			FILE *m = open_memstream(&text, &size);

			if (!m)
				return -ENOMEM;
			scalar_text(m, json_array_get(row, j));
			if (fclose(m) != 0 || table__cellf(t, "%s", text) < 0)
				return -ENOMEM;
		}
	}
	if (n)
		table__print(t, f);
	fprintf(f, "(%zu row%s%s)\n", json_array_size(rows), json_array_size(rows) == 1 ? "" : "s",
		json_is_true(json_object_get(reply, "truncated")) ? ", truncated" : "");
	return 0;
}

/* One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. */
static void csv_field(FILE *f, const json_t *v)
{
	_cleanup_free_ char *text = NULL;
	size_t size = 0;
	FILE *m = open_memstream(&text, &size);

	if (!m)
		return;
	if (!json_is_null(v))
		scalar_text(m, v); /* NULL is an empty field */
	if (fclose(m) != 0)
		return;
	if (!strpbrk(text, ",\"\r\n")) {
		fputs(text, f);
		return;
	}
	fputc('"', f);
	for (const char *c = text; *c; c++) {
		if (*c == '"')
			fputc('"', f);
		fputc(*c, f);
	}
	fputc('"', f);
}

/* The "sql" response as CSV: a header row, then the rows; CRLF line ends as RFC 4180 says. */
int output__sql_csv(FILE *f, const json_t *reply)
{
	const json_t *cols, *rows, *row;
	size_t i;
	int r;

	if ((r = get_array(reply, "columns", &cols)) < 0 ||
	    (r = get_array(reply, "rows", &rows)) < 0)
		return r;
	for (i = 0; i < json_array_size(cols); i++) {
		if (i)
			fputc(',', f);
		csv_field(f, json_array_get(cols, i));
	}
	fputs("\r\n", f);
	json_array_foreach(rows, i, row)
	{
		for (size_t j = 0; j < json_array_size(row); j++) {
			if (j)
				fputc(',', f);
			csv_field(f, json_array_get(row, j));
		}
		fputs("\r\n", f);
	}
	return 0;
}
