/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * TLS: what a TLS socket's own calls tell the TLS library's events, and the
 * plaintext events of SSL_write / SSL_read (programs/tls/openssl.bpf.c).
 *
 * A TLS connection's plaintext is only visible in its library, its timing and
 * its TCP sequence only on its socket. The two meet in three ways:
 *   - nested: the library's send/recv runs inside SSL_write/SSL_read on the
 *     same thread (OpenSSL on a socket BIO: nginx, HAProxy, curl, Python); the
 *     socket program finds the call in progress and leaves the socket, the
 *     time and the TCP sequence in it (Go: the call of the goroutine the
 *     thread runs now, helpers/go_tls.bpf.h);
 *   - remembered: a read served from the library's own buffer makes no
 *     syscall; the SSL*'s socket is known from earlier calls;
 *   - later: a memory-BIO library (Node.js) writes the ciphertext after
 *     SSL_write returns, from its event loop, on the same thread; the next
 *     send on a TLS socket by that thread binds the SSL* to its socket
 *     (ITAP_EV_TLS_BIND), and its reads follow the thread's last TLS receive.
 */
#ifndef INFERTAP_TLS_BPF_H
#define INFERTAP_TLS_BPF_H

#include "maps/maps.bpf.h"
#include "helpers/counters.bpf.h"
#include "helpers/ring.bpf.h"
#include "helpers/sock.bpf.h"
#include "helpers/go_tls.bpf.h"

/* A thread's last TLS receive is the socket of its next SSL_read within this. */
#define ITAP_TLS_RECV_RECENT_NS 1000000000ULL

/* ITAP_EV_TLS_BIND: the SSL* a memory-BIO library wrote has its socket now. */
static __always_inline void emit_tls_bind(__u64 ssl, __u64 skey, struct sock *sk, struct itap_conn *conn, __u64 ts,
					  __u32 seq, __u64 id)
{
	struct itap_event *e = reserve_task_event(ITAP_EV_TLS_BIND, ts, id);

	if (!e)
		return;
	e->sock_id = skey;
	e->tls_ssl = ssl;
	e->tls_seq = seq;
	itap_fill_sock_cached(e, sk, conn);
	if (conn && !conn->tls_reported) {
		conn->tls_reported = 1;
		e->flags = ITAP_F_NEW_SOCKET;
		e->tls_start_ns = conn->tls_handshake ? conn->first_seen_ns : 0;
		e->cgroup_id = bpf_get_current_cgroup_id();
		e->srtt_us = itap_srtt_us(sk);
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}
	bpf_ringbuf_submit(e, ring_wakeup_flags());
	stat_inc(ITAP_STAT_EVENTS);
}

static __always_inline void bind_tls_conn(__u64 ssl, __u64 skey)
{
	struct itap_tls_conn *tc = bpf_map_lookup_elem(&itap_tls_conns, &ssl);

	if (tc) {
		tc->sk = skey;
	} else {
		struct itap_tls_conn fresh = {.sk = skey};

		bpf_map_update_elem(&itap_tls_conns, &ssl, &fresh, BPF_ANY);
	}
}

/*
 * A ciphertext call no probed library call was part of. A TLS socket that
 * has only had such calls after ITAP_TLS_BLIND_CALLS of them belongs to a
 * library infertap does not probe: it is muted like a socket that is not
 * HTTP, and the ACK programs stop reporting it.
 */
static __always_inline void tls_blind_call(struct itap_conn *conn)
{
	if (!conn || conn->tls_probed || conn->tls_reported)
		return;
	if (++conn->tls_blind < ITAP_TLS_BLIND_CALLS)
		return;
	conn->verdict = ITAP_VERDICT_MUTED;
	conn->sent = 0;
	stat_inc(ITAP_STAT_TLS_UNPROBED);
}

/*
 * A send or receive that moved ciphertext on a TLS socket: no data event of
 * its own. It keeps the socket's ACK state, and tells the TLS library's
 * call in progress (or, for a memory BIO, the thread's pending write) where
 * and when its bytes went.
 */
static __always_inline void tls_socket_io(const struct itap_args *a, long ret, __u64 ts, __u64 id,
					  struct itap_conn *conn)
{
	__u64 skey = a->sk;
	struct sock *sk = (struct sock *)skey;
	bool send = a->direction == ITAP_DIR_SEND;
	struct itap_tls_call *call;
	struct itap_tls_thread *thread;
	__u32 seq;

	if (ret <= 0)
		return;
	if (!conn)
		conn = bpf_map_lookup_elem(&itap_conns, &skey);
	seq = send ? BPF_CORE_READ((struct tcp_sock *)sk, write_seq) : itap_read_end_seq(sk, ret);
	if (send && conn) {
		/* the ACK program reports acks up to here */
		if (!conn->sent) {
			conn->ack_seen = seq - (__u32)ret;
			conn->sent = 1;
		}
		conn->snd_end = seq;
	}
	call = bpf_map_lookup_elem(&itap_tls_calls, &id);
	if (!call)
		call = go_tls_call_on_thread(id);  /* a Go program's, found by goroutine */
	if (call) {
		if (conn)
			conn->tls_probed = 1;
		call->sk = skey;
		call->cipher_ts = ts;
		call->cipher_seq = seq;
		return;
	}
	thread = bpf_map_lookup_elem(&itap_tls_threads, &id);
	if (send) {
		if (thread && thread->unbound_ssl) {
			if (conn)
				conn->tls_probed = 1;
			bind_tls_conn(thread->unbound_ssl, skey);
			emit_tls_bind(thread->unbound_ssl, skey, sk, conn, ts, seq, id);
			thread->unbound_ssl = 0;
			return;
		}
		tls_blind_call(conn);
		return;
	}
	/* a receive outside any library call: a memory-BIO reader's (its SSL_read follows), or an unprobed library's */
	tls_blind_call(conn);
	if (thread) {
		thread->recv_sk = skey;
		thread->recv_ns = ts;
	} else {
		struct itap_tls_thread fresh = {.recv_sk = skey, .recv_ns = ts};

		bpf_map_update_elem(&itap_tls_threads, &id, &fresh, BPF_ANY);
	}
}

#endif /* INFERTAP_TLS_BPF_H */
