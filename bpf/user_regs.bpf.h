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

	regs[0] = BPF_CORE_READ(r, ax);
	regs[1] = BPF_CORE_READ(r, dx);
	regs[2] = BPF_CORE_READ(r, cx);
	regs[3] = BPF_CORE_READ(r, bx);
	regs[4] = BPF_CORE_READ(r, si);
	regs[5] = BPF_CORE_READ(r, di);
	regs[6] = BPF_CORE_READ(r, bp);
	regs[7] = BPF_CORE_READ(r, sp);
	regs[8] = BPF_CORE_READ(r, r8);
	regs[9] = BPF_CORE_READ(r, r9);
	regs[10] = BPF_CORE_READ(r, r10);
	regs[11] = BPF_CORE_READ(r, r11);
	regs[12] = BPF_CORE_READ(r, r12);
	regs[13] = BPF_CORE_READ(r, r13);
	regs[14] = BPF_CORE_READ(r, r14);
	regs[15] = BPF_CORE_READ(r, r15);
	regs[16] = BPF_CORE_READ(r, ip);

	if (!bpf_core_field_exists(t->utask))
		return;
	ut = BPF_CORE_READ(t, utask);
	if (!ut)
		return;
	xol = BPF_CORE_READ(ut, xol_vaddr);
	if (xol && regs[16] >= xol && regs[16] - xol < UPROBE_XOL_INSN_BYTES)
		regs[16] = BPF_CORE_READ(ut, vaddr) + (regs[16] - xol);
}
