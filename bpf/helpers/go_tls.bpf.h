/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Go crypto/tls calls in progress (programs/tls/go.bpf.c), keyed by
 * goroutine, not thread: a goroutine parked by the net poller (EAGAIN) may
 * resume on another thread, and its thread runs other goroutines meanwhile.
 * The goroutine is the `g` register of the Go register ABI (R14 on amd64,
 * X28 on arm64), which Go's own syscall path leaves in place, so a socket
 * send/recv finds the call it runs inside from the thread's user registers.
 */
#ifndef INFERTAP_GO_TLS_BPF_H
#define INFERTAP_GO_TLS_BPF_H

#include "maps/maps.bpf.h"

struct itap_go_call_key {
	__u32 tgid;
	__u32 pad;
	__u64 goroutine; /* the g pointer */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH); /* a goroutine that dies inside a call leaves its entry to age out */
	__uint(max_entries, 16384);
	__type(key, struct itap_go_call_key);
	__type(value, struct itap_tls_call);
} itap_go_calls __weak SEC(".maps");

/* A Go *Conn names its connection: heap addresses repeat across Go processes, so the pid is mixed in. */
static __always_inline __u64 go_conn_key(__u64 conn, __u32 tgid)
{
	return conn ^ ((__u64)tgid << 42);
}

/* The g register of a user register set. */
static __always_inline __u64 go_goroutine_of(const struct pt_regs *regs)
{
	__u64 g = 0;

#if defined(__TARGET_ARCH_x86)
	bpf_probe_read_kernel(&g, sizeof(g), &regs->r14);
#elif defined(__TARGET_ARCH_arm64)
	bpf_probe_read_kernel(&g, sizeof(g), &((const struct user_pt_regs *)regs)->regs[28]);
#endif
	return g;
}

/* The Go TLS call the current thread's goroutine is inside (NULL: none). */
static __always_inline struct itap_tls_call *go_tls_call_on_thread(__u64 id)
{
	struct itap_go_call_key key = {.tgid = id >> 32};

	key.goroutine = go_goroutine_of((const struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf()));
	if (!key.goroutine)
		return NULL;
	return bpf_map_lookup_elem(&itap_go_calls, &key);
}

#endif /* INFERTAP_GO_TLS_BPF_H */
