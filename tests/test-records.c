/* test-records.c - the checks of the kernel's ring-buffer records, on well-formed, truncated and inconsistent records. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "collect/uprobes.h"
#include "collect/offcpu.h"
#include "collect/sampler.h"

int main(void)
{
	size_t big = sizeof(struct sample_event) + 64;
	struct sample_event *e = calloc(1, big);
	struct offcpu_event *o = calloc(1, sizeof(*o) + 64);
	/* A sample record without SAMPLE_HAS_REGS is compact: header, addresses, Python frames. */
	size_t head = SAMPLE_HEAD_BYTES, ohead = offsetof(struct offcpu_event, ips);

	if (!e || !o)
		return 99;

	/* Sample records: frame-pointer stacks. */
	e->kstack_len = 3;
	e->ustack_len = 5;
	CHECK(sample_event__valid(e, head + 8 * 8));
	CHECK(!sample_event__valid(e, head + 8 * 8 - 1));	/* truncated by a byte */
	CHECK(!sample_event__valid(e, head - 1));		/* not even a header */
	CHECK(!sample_event__valid(e, 0));
	e->ustack_len = PROFILE_MAX_FRAMES + 1;			/* length over its bound */
	CHECK(!sample_event__valid(e, big));
	e->ustack_len = 5;
	e->slot = PROFILE_MAX_SLOTS;				/* slot out of range */
	CHECK(!sample_event__valid(e, big));
	e->slot = 0;
	e->py_len = PROFILE_MAX_PY_FRAMES + 1;			/* more Python frames than the array */
	CHECK(!sample_event__valid(e, big));
	e->py_len = PROFILE_MAX_PY_FRAMES; /* Python frames follow the addresses */
	CHECK(sample_event__valid(e, head + 8 * 8 + PROFILE_MAX_PY_FRAMES * 16));
	CHECK(!sample_event__valid(e, head + 8 * 8 + PROFILE_MAX_PY_FRAMES * 16 - 1));
	CHECK(!sample_event__valid(e, head + 8 * 8));
	e->py_len = 0;

	/* With registers and a stack copy. */
	e->flags = SAMPLE_HAS_REGS;
	e->stack_size = 8192;
	e->stack_offset = 100;
	CHECK(sample_event__valid(e, offsetof(struct sample_event, stack) + 8192));
	CHECK(!sample_event__valid(e, offsetof(struct sample_event, stack) + 8191));
	e->stack_offset = 8192;					/* rsp past the copy */
	CHECK(!sample_event__valid(e, big));
	e->stack_offset = 0;
	e->stack_size = PROFILE_MAX_STACK_BYTES + 4096;		/* oversized copy */
	CHECK(!sample_event__valid(e, big));
	e->stack_size = 0;
	CHECK(sample_event__valid(e, offsetof(struct sample_event, stack)));
	e->flags = 0;

	/* The BPF table walk's fields (unwind "tables"). */
	e->flags = SAMPLE_CFI_TRIED | SAMPLE_CFI_WALKED;
	e->cfi_stop = CFI_STOP_END;
	e->cfi_frames = e->ustack_len;
	CHECK(sample_event__valid(e, head + 8 * 8));		/* walked: PCs only */
	e->cfi_frames = e->ustack_len + 1;			/* walked, lengths disagree */
	CHECK(!sample_event__valid(e, big));
	e->flags = SAMPLE_CFI_WALKED;				/* walked, never tried */
	e->cfi_frames = e->ustack_len;
	CHECK(!sample_event__valid(e, big));
	e->flags = SAMPLE_CFI_TRIED;				/* a fallback */
	e->cfi_stop = CFI_STOP_NR;				/* unknown stop */
	CHECK(!sample_event__valid(e, big));
	e->cfi_stop = CFI_STOP_NO_TABLE;
	e->cfi_frames = 0xffffffffu;				/* past ips[] */
	CHECK(!sample_event__valid(e, big));
	e->cfi_frames = 2;
	CHECK(sample_event__valid(e, head + 8 * 8));
	e->flags = 0;
	e->cfi_stop = e->cfi_frames = 0;

	/* A compact record read back whole: addresses and Python frames in place. */
	{
		const uint64_t ips[3] = {0xffffffff81000010, 0x401000, 0x402000};
		const struct py_frame py[2] = {{.code = 0x7f0010, .tag = 7},
					       {.code = 0x7f0020, .tag = 9}};
		struct sample_event *out = calloc(1, sizeof(*out));
		unsigned char *rec = calloc(1, big);
		size_t size = 0;
		const struct sample_event *r;

		if (!out || !rec)
			return 99;
		e->kstack_len = 1;
		e->ustack_len = 2;
		e->py_len = 2;
		e->tid = 4242;
		memcpy(rec, e, SAMPLE_HEAD_BYTES);
		memcpy(rec + SAMPLE_HEAD_BYTES, ips, sizeof(ips));
		memcpy(rec + SAMPLE_HEAD_BYTES + sizeof(ips), py, sizeof(py));
		r = sample_event__read(rec, SAMPLE_COMPACT_BYTES(3, 2), out, &size);
		CHECK(r == out);
		CHECK(r && r->tid == 4242 && r->ips[0] == 0xffffffff81000010 &&
		      r->ips[2] == 0x402000);
		CHECK(r && r->py[0].code == 0x7f0010 && r->py[1].code == 0x7f0020 &&
		      r->py[1].tag == 9);
		CHECK(size == offsetof(struct sample_event, ips) + 3 * 8);
		CHECK(!sample_event__read(rec, SAMPLE_COMPACT_BYTES(3, 2) - 1, out, &size));
		/* With registers and a stack copy: the record itself, as it came. */
		e->flags = SAMPLE_HAS_REGS;
		CHECK(sample_event__read(e, offsetof(struct sample_event, stack), out, &size) == e);
		CHECK(size == offsetof(struct sample_event, stack));
		e->flags = 0;
		e->kstack_len = 3;
		e->ustack_len = 5;
		e->py_len = 0;
		free(rec);
		free(out);
	}

	/* Off-CPU records. */
	o->kstack_len = 2;
	o->ustack_len = 2;
	o->state = OFFCPU_STATE_SLEEPING;
	o->duration_ns = 1000;
	o->runq_ns = 100;
	CHECK(offcpu_event__valid(o, ohead + 4 * 8));
	CHECK(!offcpu_event__valid(o, ohead + 4 * 8 - 1));
	CHECK(!offcpu_event__valid(o, ohead - 1));
	o->state = OFFCPU_NR_STATES;				/* unknown state */
	CHECK(!offcpu_event__valid(o, sizeof(*o)));
	o->state = OFFCPU_STATE_IO;
	o->runq_ns = 2000;					/* more waiting than off-CPU time */
	CHECK(!offcpu_event__valid(o, sizeof(*o)));
	o->runq_ns = 0;
	o->stack_size = 16;					/* a stack copy without registers */
	CHECK(!offcpu_event__valid(o, sizeof(*o)));
	o->flags = OFFCPU_HAS_REGS;
	CHECK(offcpu_event__valid(o, ohead + 4 * 8 + 16));
	CHECK(!offcpu_event__valid(o, ohead + 4 * 8 + 15));
	o->stack_size = 12;					/* not whole words */
	CHECK(!offcpu_event__valid(o, sizeof(*o)));
	o->stack_size = 0;
	o->period_ns = 10000000; /* sampled: 1 in 10,000 of its kind */
	CHECK(offcpu_event__valid(o, sizeof(*o)));
	o->period_ns = OFFCPU_PERIOD_LIMIT_NS; /* beyond what BPF can sample with */
	CHECK(!offcpu_event__valid(o, sizeof(*o)));
	o->period_ns = 10000000;
	o->duration_ns = o->runq_ns = 0; /* sampled with probability 0 */
	CHECK(!offcpu_event__valid(o, sizeof(*o)));
	o->period_ns = 0;
	CHECK(offcpu_event__valid(o, sizeof(*o)));
	o->kstack_len = OFFCPU_MAX_FRAMES + 1;
	CHECK(!offcpu_event__valid(o, sizeof(*o)));

	/* Uprobe call records: a user stack, entry and exit times. */
	{
		struct uprobe_event *u = calloc(1, sizeof(*u));
		size_t uhead = offsetof(struct uprobe_event, ips);

		if (!u)
			return 99;
		u->ustack_len = 6;
		u->entry_ns = 100;
		u->exit_ns = 250;
		CHECK(uprobe_event__valid(u, uhead + 6 * 8));
		CHECK(!uprobe_event__valid(u, uhead + 6 * 8 - 1));	/* truncated by a byte */
		CHECK(!uprobe_event__valid(u, uhead - 1));		/* not even a header */
		u->ustack_len = UPROBE_MAX_FRAMES + 1;
		CHECK(!uprobe_event__valid(u, sizeof(*u)));
		u->ustack_len = 0;
		CHECK(uprobe_event__valid(u, uhead));
		u->slot = UPROBE_MAX_SLOTS;				/* slot out of range */
		CHECK(!uprobe_event__valid(u, sizeof(*u)));
		u->slot = 0;
		u->exit_ns = 99;					/* returned before it was entered */
		CHECK(!uprobe_event__valid(u, sizeof(*u)));
		free(u);
	}

	free(e);
	free(o);
	return check_exit("test-records");
}
