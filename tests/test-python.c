/*
 * test-python.c - python_linetable_line() against the interpreter itself:
 * for every instruction of thousands of real code objects (the file that
 * python-linetables.py wrote), the line the location table gives must be
 * the line code.co_lines() reports; and python_reader__merge() on crafted
 * samples: each interpreter call replaced by its own frames, in order,
 * native frames kept, and a mismatch refused rather than guessed.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "check.h"
#include "symbols/python.h"

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define EVAL 0x500000 /* _PyEval_EvalFrameDefault: [EVAL, EVAL + 0x1000) */

static void check_merge(void)
{
	static const struct python_offsets offsets = {.version_hex = 0x030b0000,
						      .code_adaptive = 64};
	struct python_interp interp = {
	    .offsets = &offsets, .eval_start = EVAL, .eval_end = EVAL + 0x1000};
	struct python_reader *r = python_reader__new(&interp);
	struct sample_event *e = calloc(1, sizeof(*e));
	struct frame_info fi;
	uint64_t out[16];
	size_t n;
	bool cut;

	if (!r || !e)
		exit(99);
	/* A process that does not exist: code objects unreadable, frames "[python]". */
	e->pid = INT_MAX;
	/* Leaf first: a C function, the inner interpreter call, a C call, the outer one, main. */
	e->ustack_len = 5;
	e->ips[0] = 0x1000;
	e->ips[1] = EVAL + 0x10;
	e->ips[2] = 0x2000;
	e->ips[3] = EVAL + 0x20;
	e->ips[4] = 0x3000;
	/* Inner call: 2 frames (the second its entry); outer call: 3 frames. */
	e->py_len = 5;
	e->py[0].code = 0x10000;
	e->py[1].code = 0x20000 | PY_FRAME_ENTRY;
	e->py[2].code = 0x30000;
	e->py[3].code = 0x40000;
	e->py[4].code = 0x50000 | PY_FRAME_ENTRY;
	CHECK_INT_EQ(python_reader__merge(r, e, out, ARRAY_LEN(out), &n, &cut), 1);
	CHECK_INT_EQ(n, 8);
	CHECK(!cut);
	CHECK_INT_EQ(out[0], 0x1000);
	CHECK(python_token(out[1]) && python_token(out[2]));
	CHECK_INT_EQ(out[3], 0x2000);
	CHECK(python_token(out[4]) && python_token(out[5]) && python_token(out[6]));
	CHECK_INT_EQ(out[7], 0x3000);
	CHECK_INT_EQ(python_reader__frame(r, out[1], &fi), 0);
	CHECK_STR_EQ(fi.module, "[python]");
	CHECK(fi.function == NULL); /* unreadable: counted as unsymbolized, not named wrong */
	CHECK_INT_EQ(python_reader__frame(r, out[0], &fi), -ENOENT);

	/* Too little room: the outermost frames are cut, and said to be. */
	CHECK_INT_EQ(python_reader__merge(r, e, out, 4, &n, &cut), 1);
	CHECK_INT_EQ(n, 4);
	CHECK(cut);

	/* Three interpreter calls on the native stack, two entry frames: refused. */
	e->ips[4] = EVAL + 0x30;
	CHECK_INT_EQ(python_reader__merge(r, e, out, ARRAY_LEN(out), &n, &cut), -EPROTO);
	CHECK_INT_EQ(n, 5);
	CHECK_INT_EQ(out[4], EVAL + 0x30); /* the native stack, unchanged */
	/* The walk cut before the outermost entry frame: refused too. */
	e->ips[4] = 0x3000;
	e->py[4].code = 0x50000;
	CHECK_INT_EQ(python_reader__merge(r, e, out, ARRAY_LEN(out), &n, &cut), -EPROTO);
	/* No Python frames: the native stack as it is. */
	e->py_len = 0;
	CHECK_INT_EQ(python_reader__merge(r, e, out, ARRAY_LEN(out), &n, &cut), 0);
	CHECK_INT_EQ(n, 5);
	python_reader__free(r);
	free(e);
}

int main(int argc, char **argv)
{
	size_t codes = 0, units = 0, cap = 0;
	char *line = NULL;
	uint8_t *table;
	FILE *f;

	check_merge();
	if (argc != 2 || !(f = fopen(argv[1], "re"))) {
		fprintf(stderr,
			"usage: test-python LINETABLES (written by python-linetables.py)\n");
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
			/* The merge checks ran; the tables need a 3.11-3.13 build python. */
			printf("location tables not checked: %s", line + 5);
			return check_failures ? 1 : 77;
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
					fprintf(stderr,
						"code at line %d, unit %ld: line %d, co_lines says "
						"%ld\n",
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
