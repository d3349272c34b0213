// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Where TLS libraries may have appeared: an eligible process called exec (its
 * binary may carry its own SSL_* symbols, its libraries are mapped next), or
 * a dlopen returned in it (Python maps libssl when `ssl` is first imported).
 * Userspace looks at that process's mappings and attaches the probes of
 * openssl.bpf.c to any library file it has not attached yet. Both signals
 * carry the pid only.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "helpers/gate.bpf.h"
#include "helpers/ring.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline int report_code_change(__u8 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_event *e;

	if (!task_eligible(id >> 32))
		return 0;
	e = reserve_task_event(kind, bpf_ktime_get_ns(), id);
	if (!e)
		return 0;
	/* rare, and the attach it leads to races the process's first TLS call: wake now */
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* Raw tracepoint: no tracefs needed. */
SEC("raw_tp/sched_process_exec")
int itap_process_exec(struct bpf_raw_tracepoint_args *ctx)
{
	return report_code_change(ITAP_EV_EXEC);
}

/* void *dlopen(const char *file, int mode): attached to each C library file found. */
SEC("uretprobe")
int BPF_KRETPROBE(itap_dlopen_exit, void *handle)
{
	if (!handle)
		return 0;
	return report_code_change(ITAP_EV_DLOPEN);
}
