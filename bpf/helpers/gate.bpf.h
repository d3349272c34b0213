/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Who is traced, cheapest check first: the task (the agent itself, the pid and
 * cgroup filters: no memory reads), then the socket (its verdict in
 * itap_conns, the TCP test, the port filter). The per-segment programs use
 * the follow hint instead, an array lookup that turns nearly every unfollowed
 * socket away before the itap_conns lookup.
 */
#ifndef INFERTAP_GATE_BPF_H
#define INFERTAP_GATE_BPF_H

#include "maps/maps.bpf.h"
#include "helpers/counters.bpf.h"
#include "helpers/sock.bpf.h"

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

/*
 * The per-socket gate every attach set passes: a muted socket stops after one
 * map lookup, a socket the map does not know yet must be TCP, then the
 * optional port filter. Returns false to stop; else *connp is the socket's map
 * entry (NULL when not classified yet) and *verdict its verdict (0 then).
 */
static __always_inline bool socket_gate(struct sock *sk, struct itap_conn **connp, __u8 *verdict)
{
	__u64 skey = (__u64)sk;
	struct itap_conn *conn = bpf_map_lookup_elem(&itap_conns, &skey);

	if (conn) {
		if (conn->verdict == ITAP_VERDICT_MUTED) {
			stat_inc(ITAP_STAT_MUTED);
			return false;
		}
		*verdict = conn->verdict;
	} else if (!itap_sock_is_tcp(sk)) {
		stat_inc(ITAP_STAT_NOT_TCP);
		return false;
	} else if (itap_sock_closed(sk)) {
		/*
		 * A call that finished after its socket closed (a send racing the
		 * peer's reset): classifying it would leave an entry no close will
		 * ever delete, that a new socket at this address would inherit.
		 */
		stat_inc(ITAP_STAT_CLOSED_SOCKET);
		return false;
	}
	if (filter_ports && !itap_sock_port_in(sk, &itap_port_filter))
		return false;
	*connp = conn;
	return true;
}

/* The socket's slot in itap_follow_hint (see maps.bpf.h). */
static __always_inline __u32 *follow_hint(__u64 skey)
{
	__u32 slot = (__u32)((skey >> 8) ^ (skey >> 24)) & (ITAP_HINT_SLOTS - 1);

	return bpf_map_lookup_elem(&itap_follow_hint, &slot);
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
