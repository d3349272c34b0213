/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * One way to start a fixed-size ring record: reserve it, count the drop when
 * the ring is full, zero it. Every record kind begins with ts_ns, sock_id and
 * kind at the same offsets (include/infertap/abi.h), so the caller fills the
 * rest and submits.
 */
#ifndef INFERTAP_RING_BPF_H
#define INFERTAP_RING_BPF_H

#include "maps/maps.bpf.h"
#include "helpers/counters.bpf.h"

/* `size` is a constant at every (inlined) call: the verifier sees a fixed record. */
static __always_inline void *reserve_record(__u64 size)
{
	void *e = bpf_ringbuf_reserve(&itap_rb, size, 0);

	if (!e) {
		drop_inc(ITAP_DROP_RINGBUF_FULL);
		return NULL;
	}
	__builtin_memset(e, 0, size);
	return e;
}

/* An itap_event of `kind` made by the current task, with no descriptor. */
static __always_inline struct itap_event *reserve_task_event(__u16 kind, __u64 ts, __u64 pid_tgid)
{
	struct itap_event *e = reserve_record(sizeof(*e));

	if (!e)
		return NULL;
	e->ts_ns = ts;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->fd = -1;
	e->kind = kind;
	return e;
}

#endif /* INFERTAP_RING_BPF_H */
