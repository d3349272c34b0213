/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The plaintext events of a TLS library: a call parked at entry, and at its
 * return the data event (ITAP_F_TLS) with the bounded head/tail copy of the
 * plaintext, classified like a socket's first bytes. Any library probe set
 * (OpenSSL, and Go crypto/tls through tls_call_prepare and its own
 * goroutine-keyed parking) enters through tls_call_enter / tls_call_exit.
 */
#ifndef INFERTAP_TLS_EVENTS_BPF_H
#define INFERTAP_TLS_EVENTS_BPF_H

#include "helpers/emit.bpf.h"

/* A library call's entry, worth parking? Task filters first, then the connection's verdict. */
static __always_inline bool tls_call_prepare(struct itap_tls_call *c, __u64 ssl, __u64 buf, __u64 num, __u64 out_len,
					     __u8 direction, __u16 lib)
{
	struct itap_tls_conn *tc;

	if (!task_eligible(bpf_get_current_pid_tgid() >> 32))
		return false;
	tc = bpf_map_lookup_elem(&itap_tls_conns, &ssl);
	if (tc && tc->verdict == ITAP_VERDICT_MUTED) {
		stat_inc(ITAP_STAT_TLS_LIBS_MUTED);
		return false;
	}
	c->ssl = ssl;
	c->buf = buf;
	c->num = num;
	c->out_len = out_len;
	c->enter_ns = bpf_ktime_get_ns();
	c->direction = direction;
	c->lib = lib;
	return true;
}

/* SSL_write/SSL_read entry: park the call by thread. */
static __always_inline int tls_call_enter(__u64 ssl, __u64 buf, __u64 num, __u64 out_len, __u8 direction, __u16 lib)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_tls_call c = {};

	if (!tls_call_prepare(&c, ssl, buf, num, out_len, direction, lib))
		return 0;
	if (bpf_map_update_elem(&itap_tls_calls, &id, &c, BPF_ANY))
		drop_inc(ITAP_DROP_ARGS_MAP_FULL);
	return 0;
}

/*
 * SSL_do_handshake entry / return: the handshake's socket calls are a probed
 * library's (not blind), and make no plaintext event. A handshake run from
 * inside SSL_write/SSL_read leaves that call parked as it is.
 */
static __always_inline int tls_handshake_enter(__u64 ssl, __u16 lib)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_tls_call c = {.ssl = ssl, .lib = lib, .handshake = 1};

	if (!task_eligible(id >> 32))
		return 0;
	c.enter_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&itap_tls_calls, &id, &c, BPF_NOEXIST);
	return 0;
}

static __always_inline int tls_handshake_exit(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_tls_call *parked = bpf_map_lookup_elem(&itap_tls_calls, &id);

	if (parked && parked->handshake)
		bpf_map_delete_elem(&itap_tls_calls, &id);
	return 0;
}

/* The SSL*'s entry, created on its first call. */
static __always_inline struct itap_tls_conn *tls_conn_of(__u64 ssl)
{
	struct itap_tls_conn *tc = bpf_map_lookup_elem(&itap_tls_conns, &ssl);

	if (tc)
		return tc;
	{
		struct itap_tls_conn fresh = {};

		bpf_map_update_elem(&itap_tls_conns, &ssl, &fresh, BPF_NOEXIST);
	}
	return bpf_map_lookup_elem(&itap_tls_conns, &ssl);
}

/*
 * The socket of a call: the one a nested send/recv touched, the SSL*'s known
 * one, or for a read of a memory-BIO library the thread's last TLS receive.
 */
static __always_inline __u64 tls_socket_of(const struct itap_tls_call *c, struct itap_tls_conn *tc, __u64 id, __u64 now)
{
	struct itap_tls_thread *thread;

	if (c->sk)
		return c->sk;
	if (tc->sk)
		return tc->sk;
	if (c->direction != ITAP_DIR_RECV)
		return 0;
	thread = bpf_map_lookup_elem(&itap_tls_threads, &id);
	if (thread && thread->recv_sk && now - thread->recv_ns < ITAP_TLS_RECV_RECENT_NS)
		return thread->recv_sk;
	return 0;
}

/* First plaintext of an SSL*: HTTP/SSE or not, as for a socket's first bytes. */
static __always_inline __u8 classify_plaintext(struct itap_scratch *rec, const struct copy_params *cp)
{
	__u32 n = cp->head_len < ITAP_CLASSIFY_BYTES ? cp->head_len : ITAP_CLASSIFY_BYTES;
	__u64 v, v2;

	__builtin_memcpy(&v, rec->data + ITAP_HDR_SIZE, sizeof(v));
	__builtin_memcpy(&v2, rec->data + ITAP_HDR_SIZE + 8, sizeof(v2));
	return classify_first_bytes(v, v2, n, false);
}

/* A memory-BIO write: the thread's next TLS send tells its socket. */
static __always_inline void await_socket(__u64 ssl, __u64 id)
{
	struct itap_tls_thread *thread = bpf_map_lookup_elem(&itap_tls_threads, &id);

	stat_inc(ITAP_STAT_TLS_UNBOUND);
	if (thread) {
		thread->unbound_ssl = ssl;
	} else {
		struct itap_tls_thread fresh = {.unbound_ssl = ssl};

		bpf_map_update_elem(&itap_tls_threads, &id, &fresh, BPF_ANY);
	}
}

/* Header fields of a plaintext event; the socket's when it is known. */
static __always_inline void fill_tls_header(struct itap_event *e, const struct itap_tls_call *c, __u64 sk,
					    struct itap_conn *conn, __u64 bytes, __u32 position, __u64 now, __u64 id)
{
	bool send = c->direction == ITAP_DIR_SEND;

	__builtin_memset(e, 0, ITAP_HDR_SIZE);
	/* a write leaves when its ciphertext does; a read is the library's return */
	e->ts_ns = send && c->cipher_ts ? c->cipher_ts : now;
	e->enter_ns = c->enter_ns;
	e->sock_id = sk;
	e->ret = (__s64)bytes;
	e->requested = c->num;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->fd = -1;
	e->kind = ITAP_EV_DATA;
	e->direction = c->direction;
	e->seq_end = position;
	e->tls_ssl = c->ssl;
	e->tls_seq = c->cipher_seq;
	e->tls_lib = c->lib;
	if (!conn) {
		/* no socket yet: the process's identity on every event */
		e->cgroup_id = bpf_get_current_cgroup_id();
		bpf_get_current_comm(e->comm, sizeof(e->comm));
		return;
	}
	itap_fill_sock_cached(e, (struct sock *)sk, conn);
	if (!conn->tls_reported) {
		conn->tls_reported = 1;
		e->flags |= ITAP_F_NEW_SOCKET;
		e->tls_start_ns = conn->tls_handshake ? conn->first_seen_ns : 0;
		fill_connection_constants(e, (struct sock *)sk, true); /* TLS: TCP sockets only */
	}
	if (!send && conn->arr_ns && conn->arr_taken_seq != conn->arr_seq) {
		/* the newest arrival rides on this read, as on a plaintext read */
		e->arrived_seq = conn->arr_seq;
		e->arrived_ns = conn->arr_ns;
		conn->arr_taken_seq = e->arrived_seq;
	}
}

/* The plaintext event of a call that moved `bytes` (> 0). */
static __always_inline int emit_tls_data(const struct itap_tls_call *c, __u64 bytes, __u64 id)
{
	__u64 now = bpf_ktime_get_ns();
	struct itap_tls_conn *tc = tls_conn_of(c->ssl);
	struct itap_conn *conn = NULL;
	struct copy_params cp = {};
	struct itap_scratch *rec;
	__u32 position;
	__u64 sk;
	__u16 flags = ITAP_F_TLS;
	bool failed;

	if (!tc)
		return 0;
	sk = tls_socket_of(c, tc, id, now);
	if (sk) {
		tc->sk = sk;
		conn = bpf_map_lookup_elem(&itap_conns, &sk);
		if (conn && conn->verdict == ITAP_VERDICT_MUTED)
			return 0;  /* userspace stopped following it */
	}
	if (c->direction == ITAP_DIR_SEND)
		position = tc->plain_out += (__u32)bytes;
	else
		position = tc->plain_in += (__u32)bytes;
	rec = scratch_record();
	if (!rec)
		return 0;
	plan_copy(&cp, (long)bytes);
	failed = itap_copy_segment(rec, &cp, c->buf, 0, bytes);
	if (!tc->verdict) {
		if (failed || !cp.head_len)
			return 0;
		tc->verdict = classify_plaintext(rec, &cp);
		if (tc->verdict != ITAP_VERDICT_FOLLOW) {
			if (conn)
				conn->verdict = ITAP_VERDICT_MUTED;  /* its signals are of no use either */
			return 0;
		}
	}
	if (failed)
		flags |= ITAP_F_READ_FAILED;
	if ((__u64)cp.head_len + cp.tail_len < bytes)
		flags |= ITAP_F_TRUNCATED;
	if (c->direction == ITAP_DIR_SEND && bytes < c->num)
		flags |= ITAP_F_PARTIAL;
	fill_tls_header((struct itap_event *)rec->data, c, sk, conn, bytes, position, now, id);
	((struct itap_event *)rec->data)->flags |= flags;
	((struct itap_event *)rec->data)->head_len = cp.head_len;
	((struct itap_event *)rec->data)->tail_len = cp.tail_len;
	if (!sk && c->direction == ITAP_DIR_SEND)
		await_socket(c->ssl, id);
	output_data_record(rec, &cp, 0);
	return 0;
}

/*
 * SSL_write/SSL_read return. `ret` is the count (plain forms) or 1 for
 * success (_ex forms, the count in *out_len). Failures and WANT_READ/WRITE
 * retries moved nothing and are not events: bytes are never counted twice.
 */
static __always_inline int tls_call_exit(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_tls_call *parked = bpf_map_lookup_elem(&itap_tls_calls, &id);
	struct itap_tls_call c;
	__u64 bytes = 0;

	if (!parked || parked->handshake) /* a handshake's own return clears it */
		return 0;
	c = *parked;
	bpf_map_delete_elem(&itap_tls_calls, &id);
	if (c.out_len) {
		if (ret == 1)
			bpf_probe_read_user(&bytes, sizeof(bytes), (const void *)c.out_len);
	} else if (ret > 0) {
		bytes = (__u64)ret;
	}
	if (!bytes)
		return 0;
	stat_inc(ITAP_STAT_TLS_CALLS);
	return emit_tls_data(&c, bytes, id);
}

#endif /* INFERTAP_TLS_EVENTS_BPF_H */
