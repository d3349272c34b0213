// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Attach set "raw_tp": raw tracepoints sys_enter/sys_exit (no tracefs needed).
 * Runs on every syscall and keeps the eight send/recv ones by number (the
 * per-arch table in helpers/args.bpf.h).
 */
#include "helpers/park.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* sys_enter(struct pt_regs *regs, long id) */
SEC("raw_tp/sys_enter")
int itap_raw_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	__u8 sc = syscall_of_nr((long)ctx->args[1]);

	if (!sc)
		return 0;
	return park_syscall_arguments(sc, (int)PT_REGS_PARM1_CORE_SYSCALL(regs), PT_REGS_PARM2_CORE_SYSCALL(regs),
				      PT_REGS_PARM3_CORE_SYSCALL(regs));
}

/* sys_exit(struct pt_regs *regs, long ret) */
SEC("raw_tp/sys_exit")
int itap_raw_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];

	if (!syscall_of_nr((long)ITAP_SYSCALL_NR_CORE(regs)))
		return 0;
	return emit_parked_call((long)ctx->args[1]);
}
