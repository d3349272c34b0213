// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * TCP state changes (sock:inet_sock_set_state): closes end a socket's map
 * entry; transitions of followed sockets are reported. Two variants, the
 * loader picks one: the tracepoint (tracefs) and the raw tracepoint (the
 * socket attach set, or no tracefs). tcp_destroy_sock ends what a close left
 * for the application to read (see closes_unread).
 */
#include "helpers/emit.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tracepoint/sock/inet_sock_set_state")
int itap_tp_sock_state(struct trace_event_raw_inet_sock_set_state *ctx)
{
	if (ctx->protocol != IPPROTO_TCP)
		return 0;
	on_tcp_state_change((struct sock *)ctx->skaddr, ctx->oldstate, ctx->newstate);
	return 0;
}

/* inet_sock_set_state(const struct sock *sk, int oldstate, int newstate) */
SEC("raw_tp/inet_sock_set_state")
int itap_raw_sock_state(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];

	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	on_tcp_state_change(sk, (int)ctx->args[1], (int)ctx->args[2]);
	return 0;
}

/* tcp_destroy_sock(struct sock *sk) */
SEC("raw_tp/tcp_destroy_sock")
int itap_tcp_destroy(struct bpf_raw_tracepoint_args *ctx)
{
	on_tcp_destroy((struct sock *)ctx->args[0]);
	return 0;
}
