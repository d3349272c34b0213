/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Who is traced, cheapest check first: the task (the agent itself, the pid and
 * cgroup filters: no memory reads), then the socket (its verdict in
 * itap_conns, the transport test, the socket filters). The per-segment programs use
 * the follow hint instead, an array lookup that turns nearly every unfollowed
 * socket away before the itap_conns lookup.
 */
#ifndef INFERTAP_GATE_BPF_H
#define INFERTAP_GATE_BPF_H

#include "maps/maps.bpf.h"
#include "helpers/counters.bpf.h"
#include "helpers/sock.bpf.h"
#include "helpers/go_tls.bpf.h"

/*
 * A listed cgroup targets everything below it (a pod slice covers its
 * containers, created later or not): the task's own cgroup, then each
 * ancestor from the root down. Costs one lookup per level, at most
 * ITAP_CGROUP_MAX_DEPTH, and only when the cgroup filter is on.
 */
#define ITAP_CGROUP_MAX_DEPTH 16
static __always_inline bool in_target_cgroup(void)
{
	__u64 cg = bpf_get_current_cgroup_id();

	if (bpf_map_lookup_elem(&itap_cgroup_filter, &cg))
		return true;
	for (int level = 0; level < ITAP_CGROUP_MAX_DEPTH; level++) {
		cg = bpf_get_current_ancestor_cgroup_id(level);
		if (!cg) /* below the task's own level: none */
			return false;
		if (bpf_map_lookup_elem(&itap_cgroup_filter, &cg))
			return true;
	}
	return false;
}

/* Cheap filters first: no memory reads at all. */
static __always_inline bool task_eligible(__u32 tgid)
{
	if (self_tgid && tgid == self_tgid)
		return false;
	if (filter_pids && !bpf_map_lookup_elem(&itap_pid_filter, &tgid))
		return false;
	if (filter_cgroups && !in_target_cgroup())
		return false;
	return true;
}

/* The socket's slot in itap_follow_hint (see maps.bpf.h). */
static __always_inline __u32 *follow_hint(__u64 skey)
{
	__u32 slot = (__u32)((skey >> 8) ^ (skey >> 24)) & (ITAP_HINT_SLOTS - 1);

	return bpf_map_lookup_elem(&itap_follow_hint, &slot);
}

/* A closed socket's entry goes, and its follow-hint count with it. */
static __always_inline void forget_closed_socket(__u64 skey, struct itap_conn *conn)
{
	if (conn->hinted) {
		__u32 *n = follow_hint(skey);

		if (n && *n)
			__sync_fetch_and_add(n, -1);
	}
	bpf_map_delete_elem(&itap_conns, &skey);
}

/*
 * A unix socket's close has no tracepoint: its entry goes when the socket is
 * freed (fentry/unix_sock_destructor, programs/unix_close.bpf.c). Where that
 * program cannot attach, the entry would stay until the LRU evicts it, and a
 * new socket at the same address would inherit it; then the inode tells them
 * apart (0 once the socket closed): one read per call on a unix socket, none
 * on TCP, and a stale entry goes. With the destructor seen, no read at all.
 */
static __always_inline bool entry_is_this_socket(struct sock *sk, __u64 skey, struct itap_conn *conn)
{
	if (conn->transport != ITAP_TRANSPORT_UNIX || unix_close_signal || itap_sock_ino(sk) == conn->ino)
		return true;
	stat_inc(ITAP_STAT_UNIX_REUSED);
	forget_closed_socket(skey, conn);
	return false;
}

/*
 * The socket filters: TCP by port; a unix socket has no port, so it passes
 * only when unix paths are targeted too (userspace matches the path on the
 * connection's first event and mutes the rest). With neither list, all pass.
 */
static __always_inline bool socket_filter_passes(struct sock *sk, __u8 transport)
{
	if (transport == ITAP_TRANSPORT_UNIX)
		return !filter_ports || filter_unix_paths;
	if (filter_ports)
		return itap_sock_port_in(sk, &itap_port_filter);
	return !filter_unix_paths;
}

/*
 * A TLS socket muted as an unprobed library's (helpers/tls.bpf.h) whose call
 * now runs inside a probed library call (OpenSSL's, or Go's found by
 * goroutine): its library was probed after its handshake (loaded late by
 * dlopen, or a process probed once it had started).
 * It takes the TLS socket path again. Costs muted unprobed sockets one lookup.
 */
static __always_inline bool tls_probe_revives(struct itap_conn *conn)
{
	__u64 id;

	if (conn->tls_blind < ITAP_TLS_BLIND_CALLS)
		return false;
	id = bpf_get_current_pid_tgid();
	if (!bpf_map_lookup_elem(&itap_tls_calls, &id) && !go_tls_call_on_thread(id))
		return false;
	conn->verdict = ITAP_VERDICT_TLS;
	conn->tls_probed = 1;
	return true;
}

/*
 * The per-socket gate every attach set passes: a muted socket stops after one
 * map lookup (a unix one after its inode read too), a socket the map does not
 * know yet must be TCP or a unix stream, then the optional socket filters.
 * Returns false to stop; else *connp is the socket's map entry (NULL when not
 * classified yet), *verdict its verdict (0 then) and *transport its transport.
 */
static __always_inline bool socket_gate(struct sock *sk, struct itap_conn **connp, __u8 *verdict, __u8 *transport)
{
	__u64 skey = (__u64)sk;
	struct itap_conn *conn = bpf_map_lookup_elem(&itap_conns, &skey);
	int kind;

	if (conn && !entry_is_this_socket(sk, skey, conn))
		conn = NULL;
	if (conn) {
		if (conn->verdict == ITAP_VERDICT_MUTED && !tls_probe_revives(conn)) {
			stat_inc(ITAP_STAT_MUTED);
			return false;
		}
		*verdict = conn->verdict;
		*transport = conn->transport;
	} else {
		kind = itap_sock_transport(sk);
		if (kind < 0) {
			stat_inc(ITAP_STAT_NOT_TCP);
			return false;
		}
		if (itap_sock_closed(sk)) {
			/*
			 * A call that finished after its socket closed (a send racing
			 * the peer's reset): classifying it would leave an entry no
			 * close will ever delete, that a new socket at this address
			 * would inherit.
			 */
			stat_inc(ITAP_STAT_CLOSED_SOCKET);
			return false;
		}
		*transport = (__u8)kind;
	}
	if (!socket_filter_passes(sk, *transport))
		return false;
	*connp = conn;
	return true;
}

static __always_inline bool maybe_followed(__u64 skey)
{
	__u32 *n = follow_hint(skey);

	return n && *n;
}

/* The map entry of a followed socket, or NULL; the hint first. */
static __always_inline struct itap_conn *followed_conn(__u64 skey)
{
	struct itap_conn *conn;

	if (!maybe_followed(skey))
		return NULL;
	conn = bpf_map_lookup_elem(&itap_conns, &skey);
	if (!conn || (conn->verdict != ITAP_VERDICT_FOLLOW && conn->verdict != ITAP_VERDICT_TLS))
		return NULL;
	return conn;
}

#endif /* INFERTAP_GATE_BPF_H */
