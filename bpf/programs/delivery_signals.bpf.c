// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Delivery signals of followed sockets: what happened to the bytes after the
 * send returned.
 *
 *   tcp_probe             an incoming segment on an established socket: its ACK
 *                         tells when the peer's kernel had our bytes (`acked`)
 *                         and its window whether the peer stopped draining
 *   sk_data_ready         bytes queued on a receiving socket (`arrived`), carried
 *                         on the next read unless the reader is behind
 *   tcp_retransmit_skb    the path lost a segment
 *   sock_exceed_buf_limit the socket hit the protocol's memory limit
 *
 * These fire for every TCP socket on the host, in softirq context. A socket the
 * agent does not follow costs an array lookup (itap_follow_hint), or a map
 * lookup when its hint slot is shared with a followed one; a followed one emits
 * only when something changed (the ACK moved over data we sent, the window
 * closed or opened, new bytes arrived while earlier ones were unread), so the
 * event rate is bounded by the send rate.
 * All are raw tracepoints: no tracefs, no perf-buffer marshalling. The loader
 * attaches each one the kernel has.
 */
#include "helpers/emit.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The window a segment advertises, in bytes (scaled by the peer's wscale). */
static __always_inline __u32 advertised_window(struct sock *sk, const struct tcphdr *th)
{
	struct tcp_options_received *rx = &((struct tcp_sock *)sk)->rx_opt;
	__u32 wscale = BPF_CORE_READ_BITFIELD_PROBED(rx, snd_wscale);

	return (__u32)bpf_ntohs(th->window) << (wscale & 15);
}

/*
 * tcp_probe(struct sock *sk, struct sk_buff *skb) runs at the top of
 * tcp_rcv_established, before the segment is processed: the socket still
 * holds the old snd_una, so the ACK number and window are read from the
 * segment's own TCP header (skb->data points at it).
 */
SEC("raw_tp/tcp_probe")
int itap_tcp_ack(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];
	struct sk_buff *skb = (struct sk_buff *)ctx->args[1];
	__u64 skey = (__u64)sk;
	struct itap_conn *conn = followed_conn(skey);
	struct tcphdr th;
	__u32 ack, window;
	bool moved, zero;

	if (!conn || !conn->sent)
		return 0;
	/*
	 * Everything we sent is acknowledged and the window is open: this
	 * segment can neither move the ACK over our data nor open the window,
	 * and a receiver never shrinks a window it offered to zero without
	 * data of ours to acknowledge. The usual case on the receiving end of
	 * a stream, skipped before any read of the segment.
	 */
	if (conn->ack_seen == conn->snd_end && !conn->zero_window)
		return 0;
	if (bpf_probe_read_kernel(&th, sizeof(th), BPF_CORE_READ(skb, data)) || !th.ack)
		return 0;
	ack = bpf_ntohl(th.ack_seq);
	window = advertised_window(sk, &th);
	/* over data we sent and had not seen acked yet */
	moved = (__s32)(ack - conn->ack_seen) > 0 && (__s32)(conn->snd_end - conn->ack_seen) > 0;
	zero = window == 0;
	if (!moved && zero == (bool)conn->zero_window)
		return 0;
	if (moved)
		conn->ack_seen = ack;
	conn->zero_window = zero;
	emit_path_event(skey, sk, ITAP_PATH_ACK, ack, window, 0);
	return 0;
}

/* sk_data_ready(const struct sock *sk) */
SEC("raw_tp/sk_data_ready")
int itap_data_ready(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];
	__u64 skey = (__u64)sk;
	struct itap_conn *conn = followed_conn(skey);
	__u32 rcv_nxt;

	/*
	 * Unix sockets are not in the follow hint (no arrival is taken here: a
	 * unix send queues straight into its peer inside the send call, so the
	 * arrival is the sender's emit, which userspace takes from the joined
	 * sender; and a unix socket has no rcv_nxt to place it by). The check
	 * covers a hint slot shared with a followed TCP socket.
	 */
	if (!conn || conn->transport == ITAP_TRANSPORT_UNIX)
		return 0;
	rcv_nxt = BPF_CORE_READ((struct tcp_sock *)sk, rcv_nxt);
	if (rcv_nxt == conn->rcv_seen)
		return 0;
	conn->rcv_seen = rcv_nxt;
	/*
	 * The next read carries this arrival (itap_event.arrived_ns): a reader
	 * that keeps up costs no ring record here. Only when the previous
	 * arrival is still unread (the reader is behind) does it go out alone,
	 * so every arrival is reported, in order.
	 */
	if (conn->arr_ns && conn->arr_taken_seq != conn->arr_seq)
		emit_path_event_at(skey, sk, ITAP_PATH_ARRIVED, conn->arr_seq, 0, 0, conn->arr_ns);
	conn->arr_seq = rcv_nxt;
	conn->arr_ns = bpf_ktime_get_ns();
	return 0;
}

/* tcp_retransmit_skb(const struct sock *sk, const struct sk_buff *skb) */
SEC("raw_tp/tcp_retransmit_skb")
int itap_retransmit(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];
	struct sk_buff *skb = (struct sk_buff *)ctx->args[1];
	__u64 skey = (__u64)sk;
	__u32 seq = 0;

	if (!followed_conn(skey))
		return 0;
	/* TCP_SKB_CB(skb)->seq: struct tcp_skb_cb lives in skb->cb, seq first */
	bpf_probe_read_kernel(&seq, sizeof(seq), &skb->cb[0]);
	emit_path_event(skey, sk, ITAP_PATH_RETRANSMIT, seq, 0, 0);
	return 0;
}

/* sock_exceed_buf_limit(struct sock *sk, struct proto *prot, long allocated, int kind) */
SEC("raw_tp/sock_exceed_buf_limit")
int itap_buf_limit(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];
	__u64 skey = (__u64)sk;

	if (!followed_conn(skey))
		return 0;
	emit_path_event(skey, sk, ITAP_PATH_BUF_LIMIT, 0, 0, (__u64)ctx->args[2]);
	return 0;
}
