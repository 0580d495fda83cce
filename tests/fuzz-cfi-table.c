/*
 * fuzz-cfi-table.c - libFuzzer target for daemon/symbols/cfi_table.c: the
 * compiler of unwind tables on arbitrary .eh_frame and .debug_frame bytes.
 * Input: one byte (bit 0: .eh_frame, else .debug_frame), then the section.
 * Every table that comes back must be sorted, of known kinds, and answer
 * lookups; anything else, or a crash, is a finding. Built with -Dfuzz=true.
 */
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symbols/cfi_table.h"

/* Where the .eh_frame seems loaded: pc-relative FDE starts are decoded against it. */
#define EH_FRAME_ADDR 0x100000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfi_table *t = NULL;
	const struct cfi_row *rows;
	size_t n;
	int r;

	if (size < 1)
		return 0;
	if (data[0] & 1)
		r = cfi_table__from_sections(data + 1, size - 1, EH_FRAME_ADDR, NULL, 0, &t);
	else
		r = cfi_table__from_sections(NULL, 0, 0, data + 1, size - 1, &t);
	if (r < 0)
		return 0;
	rows = cfi_table__rows(t, &n);
	for (size_t i = 0; i < n; i++) {
		assert(rows[i].kind <= CFI_ROW_OUTERMOST);
		assert(i == 0 || rows[i].pc > rows[i - 1].pc);
		assert(cfi_table__find(t, rows[i].pc) == &rows[i]);
	}
	cfi_table__free(t);
	return 0;
}
