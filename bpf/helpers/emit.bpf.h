/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every ring-buffer record is built here: the data event of a send or receive
 * (with the per-socket sequence and ACK state it updates), the TCP state
 * event, and the delivery-signal event.
 */
#ifndef INFERTAP_EMIT_BPF_H
#define INFERTAP_EMIT_BPF_H

#include "maps/maps.bpf.h"
#include "helpers/counters.bpf.h"
#include "helpers/ring.bpf.h"
#include "helpers/gate.bpf.h"
#include "helpers/sock.bpf.h"
#include "helpers/copy.bpf.h"
#include "helpers/classify.bpf.h"
#include "helpers/tls.bpf.h"

#ifndef EAGAIN
#define EAGAIN 11
#endif
#ifndef EEXIST
#define EEXIST 17
#endif

/* ================= data events ================= */

/*
 * Which outcomes of a call are reported: bytes moved, a send's -EAGAIN, a
 * receive's EOF (flagged). Returns false for every other outcome.
 */
static __always_inline bool reported_outcome(long ret, bool send, __u16 *flags)
{
	if (ret > 0)
		return true;
	if (ret == -EAGAIN && send) {
		*flags |= ITAP_F_EAGAIN;
		return true;
	}
	if (ret == 0 && !send) {
		*flags |= ITAP_F_EOF;
		return true;
	}
	return false;
}

static __always_inline struct itap_scratch *scratch_record(void)
{
	__u32 zero = 0;
	struct itap_scratch *rec = bpf_map_lookup_elem(&itap_scratch, &zero);

	if (!rec)
		drop_inc(ITAP_DROP_NO_SCRATCH);
	return rec;
}

/* What the copy of a call that moved ret bytes says about it. */
static __always_inline __u16 payload_flags(const struct copy_params *cp, const struct itap_args *a, long ret,
					   bool failed)
{
	__u16 flags = 0;

	if (failed)
		flags |= ITAP_F_READ_FAILED;
	if ((__u64)cp->head_len + cp->tail_len < (__u64)ret)
		flags |= ITAP_F_TRUNCATED;
	if (a->direction == ITAP_DIR_SEND && (__u64)ret < a->requested)
		flags |= ITAP_F_PARTIAL;
	if (a->more)
		flags |= ITAP_F_MORE;
	return flags;
}

/*
 * A socket's first data: classify its first bytes (copied into the scratch
 * head) and create its map entry, counted in the follow hint when followed.
 * BPF_NOEXIST: when another CPU classified the socket first (or userspace
 * muted it) that entry's verdict stands, and this call neither counts nor
 * flags a new socket. Returns the verdict to act on (0: none);
 * *created when this call created the entry.
 */
static __always_inline __u8 classify_new_socket(struct itap_scratch *rec, const struct copy_params *cp, __u64 skey,
						__u64 ts, __u8 transport, bool *created)
{
	__u32 n = cp->head_len < ITAP_CLASSIFY_BYTES ? cp->head_len : ITAP_CLASSIFY_BYTES;
	struct itap_conn c = {};
	struct itap_conn *first;
	__u32 *hint = NULL;
	__u64 v, v2;
	long err;

	__builtin_memcpy(&v, rec->data + ITAP_HDR_SIZE, sizeof(v));
	__builtin_memcpy(&v2, rec->data + ITAP_HDR_SIZE + 8, sizeof(v2));
	/* TLS is followed on TCP only: its ACKs and sequences are TCP's */
	c.verdict = classify_first_bytes(v, v2, n, tls_enabled && transport == ITAP_TRANSPORT_TCP);
	/* TLS from its handshake (content type 22): first_seen_ns is when it began */
	c.tls_handshake = c.verdict == ITAP_VERDICT_TLS && (__u8)v == 22;
	c.first_seen_ns = ts;
	c.transport = transport;
	if (transport == ITAP_TRANSPORT_UNIX)
		c.ino = itap_sock_ino((struct sock *)skey);
	/* unix sockets get no delivery signal: the per-segment programs need not see them */
	if ((c.verdict == ITAP_VERDICT_FOLLOW || c.verdict == ITAP_VERDICT_TLS) && transport == ITAP_TRANSPORT_TCP) {
		hint = follow_hint(skey);
		if (hint) {
			__sync_fetch_and_add(hint, 1);
			c.hinted = 1;
		}
	}
	err = bpf_map_update_elem(&itap_conns, &skey, &c, BPF_NOEXIST);
	if (err && hint) /* no entry of ours to uncount at close */
		__sync_fetch_and_add(hint, -1);
	if (err == -EEXIST) {
		first = bpf_map_lookup_elem(&itap_conns, &skey);
		return first ? first->verdict : 0;
	}
	if (err)
		drop_inc(ITAP_DROP_CONN_MAP_FULL);
	*created = true;
	stat_inc(c.verdict == ITAP_VERDICT_MUTED ? ITAP_STAT_NEW_MUTED : ITAP_STAT_NEW_FOLLOWED);
	if (transport == ITAP_TRANSPORT_UNIX)
		stat_inc(ITAP_STAT_UNIX_CLASSIFIED);
	return c.verdict;
}

/* The header of a data event: every field written (the scratch is reused). */
static __always_inline void fill_data_header(struct itap_event *e, const struct itap_args *a,
					     const struct copy_params *cp, long ret, __u64 ts, __u64 id, __u16 flags)
{
	__builtin_memset(e, 0, ITAP_HDR_SIZE);
	e->ts_ns = ts;
	e->enter_ns = a->enter_ns;
	e->sock_id = a->sk;
	e->ret = ret;
	e->requested = a->requested;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->fd = a->fd;
	e->kind = ITAP_EV_DATA;
	e->direction = a->direction;
	e->syscall = a->syscall;
	e->flags = flags;
	e->head_len = cp->head_len;
	e->tail_len = cp->tail_len;
}

/*
 * A unix socket has no sequence: its entry counts the bytes each traced call
 * moved, from the first one (what TCP's sequence gives: positions, and holes
 * where events were lost). Not atomic against a second thread writing the
 * same socket at the same instant (bytes that interleave make no HTTP
 * anyway): at worst a hole or an overlap, never a crash. A send also tells
 * whether it left the send buffer full (ITAP_F_SNDBUF_FULL).
 */
static __always_inline void count_unix_bytes(struct itap_event *e, struct sock *sk, struct itap_conn *conn, bool send,
					     long ret)
{
	__u32 moved = ret > 0 ? (__u32)ret : 0;
	bool full = false;

	if (send) {
		conn->unix_sent += moved;
		e->seq_end = conn->unix_sent;
		/* the send buffer left full: the next send waits for the reader (backpressure) */
		e->arrived_seq = itap_unix_unread(sk, &full);
		if (full)
			e->flags |= ITAP_F_SNDBUF_FULL;
	} else {
		conn->unix_rcvd += moved;
		e->seq_end = conn->unix_rcvd;
	}
}

/*
 * The TCP sequence after the call, and what the delivery signals keep per
 * socket: a read carries the newest arrival not reported yet; a send moves the
 * end of the data the ACK program watches.
 */
static __always_inline void note_sequence_state(struct itap_event *e, struct sock *sk, struct itap_conn *conn,
						bool send, long ret)
{
	if (send)
		e->seq_end = BPF_CORE_READ((struct tcp_sock *)sk, write_seq);
	else
		e->seq_end = itap_read_end_seq(sk, ret);
	if (!send && conn && conn->arr_ns && conn->arr_taken_seq != conn->arr_seq) {
		/*
		 * The newest arrival rides on this read (sk_data_ready in
		 * programs/delivery_signals.bpf.c). Not atomic against an arrival
		 * on another CPU: at worst one arrival is reported twice, or with
		 * the time of the one after it; none is lost.
		 */
		e->arrived_seq = conn->arr_seq;
		e->arrived_ns = conn->arr_ns;
		conn->arr_taken_seq = e->arrived_seq;
	}
	if (send && ret > 0 && conn) {
		/* the ACK program reports acks up to here */
		if (!conn->sent) {
			conn->ack_seen = e->seq_end - (__u32)ret;
			conn->sent = 1;
		}
		conn->snd_end = e->seq_end;
	}
}

/*
 * What stays the same for a connection is sent with its first event (and
 * state events) only: each helper call here costs 100-200 ns, a quarter of a
 * traced send.
 */
static __always_inline void fill_connection_constants(struct itap_event *e, struct sock *sk, bool tcp)
{
	e->cgroup_id = bpf_get_current_cgroup_id();
	if (tcp)
		e->srtt_us = itap_srtt_us(sk);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

/* Where the payload ends in the scratch record (the verifier sees it bounded). */
static __always_inline __u32 payload_end(const struct copy_params *cp)
{
	return ITAP_HDR_SIZE + (cp->head_len & (2 * ITAP_HEAD_MAX - 1)) + (cp->tail_len & (2 * ITAP_TAIL_MAX - 1));
}

/*
 * A unix connection's first event carries what stays the same and is dear to
 * read: its path after the tail, and the peer's process. Never per call.
 */
static __always_inline __u32 fill_unix_first_event(struct itap_scratch *rec, struct itap_event *e, struct sock *sk,
						   const struct copy_params *cp)
{
	__u16 flags = 0;
	__u32 len = itap_unix_path(rec->data + payload_end(cp), sk, &flags);

	e->path_len = len;
	e->flags |= flags;
	e->peer_pid = itap_unix_peer_pid(sk);
	return len;
}

/* Sends the scratch record: header, head, tail, and a unix path (path_len). */
static __always_inline void output_data_record(struct itap_scratch *rec, const struct copy_params *cp, __u32 path_len)
{
	__u64 size = payload_end(cp) + (path_len & (ITAP_PATH_ROOM - 1));

	if (size > ITAP_SCRATCH_SIZE)
		return;
	if (bpf_ringbuf_output(&itap_rb, rec, size, ring_wakeup_flags()))
		drop_inc(ITAP_DROP_RINGBUF_FULL);
	else
		stat_inc(ITAP_STAT_EVENTS);
}

/* The data event of a followed socket, head and tail already in the scratch. */
static __always_inline void emit_data_event(struct itap_scratch *rec, const struct itap_args *a,
					    const struct copy_params *cp, long ret, __u64 ts, __u64 id, __u16 flags,
					    struct itap_conn *conn)
{
	struct itap_event *e = (struct itap_event *)rec->data;
	struct sock *sk = (struct sock *)a->sk;
	bool send = a->direction == ITAP_DIR_SEND;
	/* a copy of the key: a pointer into *a would keep all of it on the stack */
	__u64 skey = a->sk;

	__u32 path_len = 0;

	fill_data_header(e, a, cp, ret, ts, id, flags);
	if (!conn) /* the caller had none, or the socket was classified just now */
		conn = bpf_map_lookup_elem(&itap_conns, &skey);
	itap_fill_sock_cached(e, sk, conn);
	if (e->family == AF_UNIX) {
		if (!conn) /* no entry (map full, counted): no count to place the bytes by */
			return;
		count_unix_bytes(e, sk, conn, send, ret);
	} else {
		note_sequence_state(e, sk, conn, send, ret);
	}
	if (flags & ITAP_F_NEW_SOCKET) {
		fill_connection_constants(e, sk, e->family != AF_UNIX);
		if (e->family == AF_UNIX)
			path_len = fill_unix_first_event(rec, e, sk, cp);
	}
	output_data_record(rec, cp, path_len);
}

/*
 * One send/recv that moved `ret` bytes (or failed with -EAGAIN, or hit EOF)
 * on socket a->sk: copy head and tail, classify the socket on its first
 * bytes, emit when followed. conn: the socket's map entry when the caller
 * has it.
 */
static __always_inline int emit_io(const struct itap_args *a, long ret, __u64 ts, __u64 id, struct itap_conn *conn)
{
	struct copy_params cp = {};
	struct itap_scratch *rec;
	__u8 verdict = a->verdict;
	__u16 flags = 0;

	if (!reported_outcome(ret, a->direction == ITAP_DIR_SEND, &flags))
		return 0;
	/* classification needs bytes: unclassified sockets emit data only */
	if (!verdict && ret <= 0)
		return 0;
	if (verdict == ITAP_VERDICT_TLS && ret > 0) {
		/* ciphertext is never copied: the library's plaintext events are the data */
		tls_socket_io(a, ret, ts, id, conn);
		return 0;
	}
	rec = scratch_record();
	if (!rec)
		return 0;
	if (ret > 0) {
		bool failed = copy_payload(rec, &cp, a, ret);

		flags |= payload_flags(&cp, a, ret, failed);
		if (!verdict) {
			bool created = false;

			if (failed || !cp.head_len)
				return 0; /* cannot tell yet: try again on the next data */
			verdict = classify_new_socket(rec, &cp, a->sk, ts, a->transport, &created);
			if (created && verdict == ITAP_VERDICT_FOLLOW)
				flags |= ITAP_F_NEW_SOCKET;
		}
	}
	if (verdict == ITAP_VERDICT_TLS && ret > 0) {
		tls_socket_io(a, ret, ts, id, conn);  /* the first record of a TLS socket, just classified */
		return 0;
	}
	if (verdict == ITAP_VERDICT_TLS)
		flags |= ITAP_F_TLS; /* its EOF or a refused send: told as on a plaintext socket */
	else if (verdict != ITAP_VERDICT_FOLLOW)
		return 0;
	emit_data_event(rec, a, &cp, ret, ts, id, flags, conn);
	return 0;
}

/* ================= TCP state ================= */

static __always_inline void emit_state_event(struct sock *sk, struct itap_conn *conn, int oldstate, int newstate,
					     __u16 flags)
{
	/* whoever runs the transition (may be softirq) */
	struct itap_event *e = reserve_task_event(ITAP_EV_STATE, bpf_ktime_get_ns(), bpf_get_current_pid_tgid());

	if (!e)
		return;
	e->sock_id = (__u64)sk;
	e->old_state = oldstate;
	e->new_state = newstate;
	e->flags = flags;
	itap_fill_sock_cached(e, sk, conn);
	fill_connection_constants(e, sk, conn->transport != ITAP_TRANSPORT_UNIX);
	bpf_ringbuf_submit(e, ring_wakeup_flags());
	stat_inc(ITAP_STAT_EVENTS);
}

/*
 * A socket can reach TCP_CLOSE with received bytes its application has not
 * read yet: this side shut down its sending first, then the peer's FIN came
 * (FIN_WAIT2 -> TIME_WAIT closes the socket it still reads from). Forgetting it
 * then would lose the rest of the response; with tcp_destroy_sock attached it
 * is kept until the application closes it.
 */
static __always_inline bool closes_unread(struct sock *sk, int newstate)
{
	return newstate == TCP_CLOSE && destroy_signal && BPF_CORE_READ(sk, sk_receive_queue.qlen) > 0;
}

/*
 * Whether userspace hears of a socket's state changes: a followed socket, or a
 * TLS socket whose plaintext it follows (a process that dies mid-stream makes
 * no call: only the state change ends its stream).
 */
static __always_inline bool reports_state(const struct itap_conn *conn)
{
	return conn->verdict == ITAP_VERDICT_FOLLOW || (conn->verdict == ITAP_VERDICT_TLS && conn->tls_reported);
}

/* inet_sock_set_state of a TCP socket: reported when followed, forgotten at close. */
static __always_inline void on_tcp_state_change(struct sock *sk, int oldstate, int newstate)
{
	__u64 skey = (__u64)sk;
	struct itap_conn *conn = bpf_map_lookup_elem(&itap_conns, &skey);
	bool unread;

	if (!conn)
		return;
	unread = closes_unread(sk, newstate);
	if (reports_state(conn))
		emit_state_event(sk, conn, oldstate, newstate, unread ? ITAP_F_UNREAD : 0);
	if (newstate == TCP_CLOSE && !unread)
		forget_closed_socket(skey, conn);
}

/* tcp_destroy_sock: the last moment of a socket the map may still hold. */
static __always_inline void on_tcp_destroy(struct sock *sk)
{
	__u64 skey = (__u64)sk;
	struct itap_conn *conn = bpf_map_lookup_elem(&itap_conns, &skey);

	if (!conn)
		return;
	if (reports_state(conn))
		emit_state_event(sk, conn, TCP_CLOSE, ITAP_STATE_DESTROYED, 0);
	forget_closed_socket(skey, conn);
}

/*
 * A unix socket is freed (unix_sock_destructor: both ends have released it):
 * a followed one's close is reported (ITAP_STATE_DESTROYED), its entry goes.
 */
static __always_inline void on_unix_destroy(struct sock *sk)
{
	__u64 skey = (__u64)sk;
	struct itap_conn *conn = bpf_map_lookup_elem(&itap_conns, &skey);

	if (!conn)
		return;
	if (conn->verdict == ITAP_VERDICT_FOLLOW)
		emit_state_event(sk, conn, TCP_CLOSE, ITAP_STATE_DESTROYED, 0);
	forget_closed_socket(skey, conn);
}

/* ================= delivery signals ================= */

static __always_inline void emit_path_event_at(__u64 skey, struct sock *sk, __u8 path_kind, __u32 seq, __u32 window,
					       __u64 value, __u64 ts)
{
	struct itap_path_event *e = reserve_record(sizeof(*e));

	if (!e)
		return;
	e->ts_ns = ts;
	e->sock_id = skey;
	e->kind = ITAP_EV_PATH;
	e->path_kind = path_kind;
	e->seq = seq;
	e->window = window;
	e->value = value;
	e->srtt_us = itap_srtt_us(sk);
	bpf_ringbuf_submit(e, ring_wakeup_flags());
	stat_inc(ITAP_STAT_EVENTS);
}

static __always_inline void emit_path_event(__u64 skey, struct sock *sk, __u8 path_kind, __u32 seq, __u32 window,
					    __u64 value)
{
	emit_path_event_at(skey, sk, path_kind, seq, window, value, bpf_ktime_get_ns());
}

#endif /* INFERTAP_EMIT_BPF_H */
