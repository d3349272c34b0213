/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The enter/exit pair of the two syscall attach sets. Enter: cheap filters
 * (self, pid, cgroup), fd -> sock, the socket gate (a muted socket stops after
 * one map lookup), then the call's arguments are parked in itap_args keyed by
 * pid_tgid. Exit: the bytes are in user memory now; the parked call is emitted.
 */
#ifndef INFERTAP_PARK_BPF_H
#define INFERTAP_PARK_BPF_H

#include "maps/maps.bpf.h"
#include "helpers/counters.bpf.h"
#include "helpers/gate.bpf.h"
#include "helpers/sock.bpf.h"
#include "helpers/args.bpf.h"
#include "helpers/emit.bpf.h"

static __always_inline int park_syscall_arguments(__u8 sc, int fd, __u64 buf, __u64 count)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_conn *conn;
	struct itap_args a = {};
	struct sock *sk;

	if (!task_eligible(id >> 32))
		return 0;
	stat_inc(ITAP_STAT_SYSCALLS_SEEN);
	/* before the fd walk: enter_ns should not include our own work */
	a.enter_ns = bpf_ktime_get_ns();

	sk = itap_fd_to_sock(fd);
	if (!sk) {
		stat_inc(ITAP_STAT_NOT_TCP);
		return 0;
	}
	if (!socket_gate(sk, &conn, &a.verdict, &a.transport))
		return 0;
	a.sk = (__u64)sk;
	describe_buffer(&a, sc, fd, buf, count);
	if (bpf_map_update_elem(&itap_args, &id, &a, BPF_ANY))
		drop_inc(ITAP_DROP_ARGS_MAP_FULL);
	return 0;
}

static __always_inline int emit_parked_call(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_args *parked, a;
	__u64 ts;

	/* untargeted calls stop here, before even reading the clock */
	parked = bpf_map_lookup_elem(&itap_args, &id);
	if (!parked)
		return 0;
	ts = bpf_ktime_get_ns();
	a = *parked;
	bpf_map_delete_elem(&itap_args, &id);
	return emit_io(&a, ret, ts, id, NULL);
}

#endif /* INFERTAP_PARK_BPF_H */
