/* user_regs.bpf.h - the current task's user registers in DWARF order, for BPF programs. */
#pragma once

/* The longest instruction a uprobe copies out of line (MAX_UINSN_BYTES, asm/uprobes.h). */
#define UPROBE_XOL_INSN_BYTES 16

/*
 * read_user_regs() - copy the user-mode registers of the current task (the
 * pt_regs saved at kernel entry: the interrupted user state in a perf_event
 * or sched_switch program) into @regs, x86-64 DWARF numbering 0..16 (System V
 * psABI, figure 3.36: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip).
 *
 * A thread interrupted while the kernel single-steps a probed instruction
 * (uprobes, kernel/events/uprobes.c) runs a copy of it in the [uprobes]
 * page, at task->utask->xol_vaddr until the step is done: no CFI covers
 * that copy, and no caller can be found from it. rip is then given back
 * as the same place in the original code, utask->vaddr plus what of the
 * copy has run; the other registers already hold the state the original
 * instruction would have made.
 */
static __always_inline void read_user_regs(__u64 regs[17])
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(t);
	struct uprobe_task *ut;
	__u64 xol;

	/* bpf_task_pt_regs() gives a BTF pointer: plain loads, which the
	 * verifier turns into faulting-safe ones, not a helper call each. */
	regs[0] = r->ax;
	regs[1] = r->dx;
	regs[2] = r->cx;
	regs[3] = r->bx;
	regs[4] = r->si;
	regs[5] = r->di;
	regs[6] = r->bp;
	regs[7] = r->sp;
	regs[8] = r->r8;
	regs[9] = r->r9;
	regs[10] = r->r10;
	regs[11] = r->r11;
	regs[12] = r->r12;
	regs[13] = r->r13;
	regs[14] = r->r14;
	regs[15] = r->r15;
	regs[16] = r->ip;

	if (!bpf_core_field_exists(t->utask))
		return;
	ut = t->utask;
	if (!ut)
		return;
	xol = ut->xol_vaddr;
	if (xol && regs[16] >= xol && regs[16] - xol < UPROBE_XOL_INSN_BYTES)
		regs[16] = ut->vaddr + (regs[16] - xol);
}

/* A slot of the [uprobes] page; the first holds the uretprobe trampoline
 * (UPROBE_XOL_SLOT_BYTES, asm/uprobes.h). */
#define UPROBE_XOL_SLOT_BYTES 128

/*
 * struct uretprobe_fix - the return addresses that pending uretprobes of the
 * current task replaced on its stack with their trampoline, the first slot
 * of its [uprobes] page (kernel/events/uprobes.c): @tramp, that address (0:
 * nothing pending); @ri, the next pending return, innermost first, in
 * task->utask->return_instances. Without this a walk meets the trampoline,
 * where no CFI leads on, in place of the caller of every probed function
 * still running.
 */
struct uretprobe_fix {
	__u64 tramp;
	__u64 ri; /* struct return_instance *: a global function's argument holds no pointer */
};

static __always_inline void uretprobe_fix_init(struct uretprobe_fix *f)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct uprobe_task *ut;

	f->tramp = 0;
	f->ri = 0;
	if (!bpf_core_field_exists(t->utask))
		return;
	/* Plain loads, as in read_user_regs(): @t is a BTF pointer. */
	ut = t->utask;
	if (!ut)
		return;
	f->ri = (__u64)ut->return_instances;
	if (f->ri && t->mm && t->mm->uprobes_state.xol_area)
		f->tramp = t->mm->uprobes_state.xol_area->vaddr;
}

/*
 * uretprobe_fix_pc() - @pc, unless it is in the trampoline (a return
 * address it replaced, or the trampoline running): then the return address
 * of the innermost pending return not yet used, which it stands for.
 */
__noinline __u64 uretprobe_fix_pc(struct uretprobe_fix *f, __u64 pc)
{
	struct return_instance *ri;

	/* A global function, checked once on its own: in the walk's step, inline,
	 * its branches multiplied the verifier's states past its limit. A kernel
	 * without uprobes (CONFIG_UPROBES) has no struct return_instance: the
	 * reads below are then dead code, which libbpf's failed relocations in
	 * them do not stop from loading. */
	if (!bpf_core_type_exists(struct return_instance))
		return pc;
	if (!f || !f->tramp || !f->ri || pc < f->tramp || pc - f->tramp >= UPROBE_XOL_SLOT_BYTES)
		return pc;
	/* From a local: inside BPF_CORE_READ(), f->ri would be relocated too. */
	ri = (struct return_instance *)f->ri;
	pc = BPF_CORE_READ(ri, orig_ret_vaddr);
	f->ri = (__u64)BPF_CORE_READ(ri, next);
	return pc;
}
