// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Attach set "sock" (the default): raw tracepoints sock_send_length and
 * sock_recv_length, which fire at the end of every socket send and receive,
 * with the socket in hand: a syscall on any other fd never runs a program,
 * and a muted socket costs one map lookup (a unix one its inode read too). The user buffer comes from the
 * syscall's own registers (bpf_task_pt_regs): a send's bytes are still in user
 * memory, a receive's bytes are already there. The time is taken here, as the
 * kernel finishes the transfer and returns to the caller; tcp_sendmsg_locked
 * marks when a send started.
 *
 * Raw tracepoints: the program gets (sk, ret, flags) directly, without the
 * perf-buffer marshalling of a classic tracepoint, and needs no tracefs.
 * family/protocol are read from the socket only for sockets the map does not
 * know yet (followed and muted ones are TCP or unix streams by construction).
 * Unix sends have no tracepoint at their start (tcp_sendmsg_locked is TCP's):
 * with this set their duration is not measured, their EAGAIN is.
 */
#include "helpers/emit.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#ifndef MSG_PEEK
#define MSG_PEEK 2
#endif
#ifndef MSG_MORE
#define MSG_MORE 0x8000
#endif
#ifndef MSG_ERRQUEUE
#define MSG_ERRQUEUE 0x2000
#endif

/*
 * The call's buffer from the saved user registers (helpers/args.bpf.h: one
 * read on x86): the syscall number and its arguments. Bytes moved by anything but the eight
 * syscalls (sendfile, io_uring, kernel senders) are described by size only.
 */
static __always_inline void describe_from_user_registers(struct itap_args *a, bool send, int ret)
{
	struct itap_syscall_regs regs;
	__u8 sc = 0;

	if (read_syscall_regs(&regs, (const struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf())))
		sc = syscall_of_nr(ITAP_REGS_NR(&regs));
	if (sc && syscall_sends(sc) == send) {
		describe_buffer(a, sc, (int)ITAP_REGS_ARG1(&regs), ITAP_REGS_ARG2(&regs), ITAP_REGS_ARG3(&regs));
	} else {
		a->fd = -1;
		a->direction = send ? ITAP_DIR_SEND : ITAP_DIR_RECV;
		a->requested = ret > 0 ? ret : 0;
	}
	/* the tracepoint carries no send flags: MSG_MORE is in the syscall's own */
	if (sc == ITAP_SC_SENDTO)
		a->more = (ITAP_REGS_ARG4(&regs) & MSG_MORE) != 0;
	else if (sc == ITAP_SC_SENDMSG)
		a->more = (ITAP_REGS_ARG3(&regs) & MSG_MORE) != 0;
}

static __always_inline int on_socket_io(struct sock *sk, int ret, int msg_flags, bool send)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_args a = {};
	struct itap_conn *conn;
	__u64 ts;

	if (!send && (msg_flags & (MSG_PEEK | MSG_ERRQUEUE)))
		return 0; /* nothing consumed */
	if (ret < 0 && !(send && ret == -EAGAIN))
		return 0;
	if (!task_eligible(id >> 32))
		return 0;
	stat_inc(ITAP_STAT_SYSCALLS_SEEN);
	if (!socket_gate(sk, &conn, &a.verdict, &a.transport))
		return 0;
	ts = bpf_ktime_get_ns();

	describe_from_user_registers(&a, send, ret);
	a.sk = (__u64)sk;
	a.enter_ns = ts;
	if (send && conn && conn->send_start_ns) {
		/* stamped by itap_tcp_send_start: the call's duration, blocking included */
		a.enter_ns = conn->send_start_ns;
		conn->send_start_ns = 0;
	}
	return emit_io(&a, ret, ts, id, conn);
}

/*
 * tcp_sendmsg_locked fires at each pass of the TCP send loop, the first one
 * before any wait for send-buffer space: the first pass after the previous
 * send finished marks when this send started. Followed sockets only.
 */
SEC("raw_tp/tcp_sendmsg_locked")
int itap_tcp_send_start(struct bpf_raw_tracepoint_args *ctx)
{
	struct itap_conn *conn = followed_conn(ctx->args[0]);

	if (conn && !conn->send_start_ns)
		conn->send_start_ns = bpf_ktime_get_ns();
	return 0;
}

/* sock_send_length(struct sock *sk, int ret, int flags) */
SEC("raw_tp/sock_send_length")
int itap_sock_send(struct bpf_raw_tracepoint_args *ctx)
{
	return on_socket_io((struct sock *)ctx->args[0], (int)ctx->args[1], (int)ctx->args[2], true);
}

/* sock_recv_length(struct sock *sk, int ret, int flags) */
SEC("raw_tp/sock_recv_length")
int itap_sock_recv(struct bpf_raw_tracepoint_args *ctx)
{
	return on_socket_io((struct sock *)ctx->args[0], (int)ctx->args[1], (int)ctx->args[2], false);
}
