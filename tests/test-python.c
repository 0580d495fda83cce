/*
 * test-python.c - python_linetable_line() against the interpreter itself:
 * for every instruction of thousands of real code objects (the file that
 * python-linetables.py wrote), the line the location table gives must be
 * the line code.co_lines() reports.
 */
#include <stdlib.h>

#include "check.h"
#include "python.h"

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int main(int argc, char **argv)
{
	size_t codes = 0, units = 0, cap = 0;
	char *line = NULL;
	uint8_t *table;
	FILE *f;

	if (argc != 2 || !(f = fopen(argv[1], "re"))) {
		fprintf(stderr, "usage: test-python LINETABLES (written by python-linetables.py)\n");
		return 99;
	}
	table = malloc(1 << 20);
	if (!table)
		return 99;
	while (getline(&line, &cap, f) > 0) {
		char *p = line, *hex;
		int first;
		size_t n = 0;

		if (strncmp(line, "skip ", 5) == 0) {
			printf("SKIP: %s", line + 5);
			return 77;
		}
		first = (int)strtol(p, &p, 10);
		hex = strtok(p, " \n");
		if (!hex)
			return 99;
		for (; strcmp(hex, "-") != 0 && hex[0] && hex[1] && n < (1 << 20); hex += 2)
			table[n++] = (uint8_t)(hexval(hex[0]) << 4 | hexval(hex[1]));
		for (char *r = strtok(NULL, " \n"); r; r = strtok(NULL, " \n")) {
			long start, end, want;

			if (sscanf(r, "%ld:%ld:%ld", &start, &end, &want) != 3)
				return 99;
			for (long b = start; b < end; b += 2) {
				int got = python_linetable_line(table, n, first, b / 2);

				units++;
				if (got != want) {
					fprintf(stderr, "code at line %d, unit %ld: line %d, co_lines says %ld\n",
						first, b / 2, got, want);
					check_failures++;
					if (check_failures > 20)
						return 1;
				}
			}
		}
		codes++;
	}
	/* Before the first instruction (a frame just pushed): the def line. */
	CHECK_INT_EQ(python_linetable_line(table, 0, 42, -1), 42);
	/* A truncated or corrupt table gives 0, never a read past its end. */
	table[0] = 0x7f;
	CHECK_INT_EQ(python_linetable_line(table, 1, 42, 0), 0);
	table[0] = 0xf7; /* long form (14) whose varints are missing */
	CHECK_INT_EQ(python_linetable_line(table, 1, 42, 3), 42);
	printf("%zu code objects, %zu instructions checked\n", codes, units);
	CHECK(codes > 500);
	free(table);
	free(line);
	fclose(f);
	return check_exit("test-python");
}
