// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The end of a unix socket. Unix sockets have no state tracepoint
 * (inet_sock_set_state is TCP's): unix_sock_destructor, the socket's
 * sk_destruct, runs once when its memory is about to be freed, after both
 * ends released it. An fentry program there (a BTF trampoline: no kprobe, as
 * cheap as a raw tracepoint) deletes the socket's entry, so the entry never
 * outlives the socket and the send/receive programs need not check each
 * call's inode; a followed socket's close reaches userspace, which ends its
 * connection. It runs once per unix socket freed on the host; one lookup for
 * a socket the agent never classified. The loader attaches it when the kernel
 * has the function and fentry programs (else the inode check stays on).
 */
#include "helpers/emit.bpf.h"

#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* unix_sock_destructor(struct sock *sk) */
SEC("fentry/unix_sock_destructor")
int BPF_PROG(itap_unix_destroy, struct sock *sk)
{
	on_unix_destroy(sk);
	return 0;
}
