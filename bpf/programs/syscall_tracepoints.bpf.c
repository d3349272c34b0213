// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Attach set "tracepoint": syscalls:sys_{enter,exit}_<name> for the eight
 * send/recv syscalls (needs tracefs). Runs on those syscalls for every fd.
 */
#include "helpers/park.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define ENTER_TP(name, sc)                                                                         \
	SEC("tracepoint/syscalls/sys_enter_" #name)                                                \
	int itap_enter_##name(struct trace_event_raw_sys_enter *ctx)                               \
	{                                                                                          \
		return park_syscall_arguments(sc, (int)ctx->args[0], ctx->args[1], ctx->args[2]);  \
	}
#define EXIT_TP(name)                                                                              \
	SEC("tracepoint/syscalls/sys_exit_" #name)                                                 \
	int itap_exit_##name(struct trace_event_raw_sys_exit *ctx)                                 \
	{                                                                                          \
		return emit_parked_call(ctx->ret);                                                 \
	}

ENTER_TP(write, ITAP_SC_WRITE)
ENTER_TP(writev, ITAP_SC_WRITEV)
ENTER_TP(sendto, ITAP_SC_SENDTO)
ENTER_TP(sendmsg, ITAP_SC_SENDMSG)
ENTER_TP(read, ITAP_SC_READ)
ENTER_TP(readv, ITAP_SC_READV)
ENTER_TP(recvfrom, ITAP_SC_RECVFROM)
ENTER_TP(recvmsg, ITAP_SC_RECVMSG)
EXIT_TP(write)
EXIT_TP(writev)
EXIT_TP(sendto)
EXIT_TP(sendmsg)
EXIT_TP(read)
EXIT_TP(readv)
EXIT_TP(recvfrom)
EXIT_TP(recvmsg)
