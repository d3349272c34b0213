/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Sockets: fd -> struct sock resolution, the transport test (TCP, unix
 * stream), the port test, and the socket part of an itap_event (addresses
 * cached in the socket's map entry; a unix socket's identity and path).
 *
 * Every read is a CO-RE probe read (tracepoint and raw tracepoint programs
 * cannot dereference kernel pointers directly).
 */
#ifndef INFERTAP_SOCK_BPF_H
#define INFERTAP_SOCK_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "infertap/abi.h"

#ifndef AF_UNIX
#define AF_UNIX 1
#endif
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#ifndef S_IFMT
#define S_IFMT 00170000
#endif
#ifndef S_IFSOCK
#define S_IFSOCK 0140000
#endif

/*
 * fd of the current task -> struct sock, or NULL when the fd is not a socket.
 * Cost for a non-socket fd: 7 probe reads (task->files->fdt->{max_fds,fd},
 * fd[i], file->f_inode->i_mode).
 */
static __always_inline struct sock *itap_fd_to_sock(int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct files_struct *files;
	struct fdtable *fdt;
	struct file **fds;
	struct file *file = NULL;
	struct socket *sock;
	unsigned int max_fds;
	umode_t mode;

	if (fd < 0)
		return NULL;
	files = BPF_CORE_READ(task, files);
	if (!files)
		return NULL;
	fdt = BPF_CORE_READ(files, fdt);
	if (!fdt)
		return NULL;
	max_fds = BPF_CORE_READ(fdt, max_fds);
	if ((unsigned int)fd >= max_fds)
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return NULL;
	mode = BPF_CORE_READ(file, f_inode, i_mode);
	if ((mode & S_IFMT) != S_IFSOCK)
		return NULL;
	sock = BPF_CORE_READ(file, private_data);
	if (!sock)
		return NULL;
	return BPF_CORE_READ(sock, sk);
}

/*
 * What carries the socket's bytes (enum itap_transport): AF_INET/AF_INET6 +
 * SOCK_STREAM + IPPROTO_TCP, or AF_UNIX + SOCK_STREAM / SOCK_SEQPACKET (the
 * byte streams HTTP runs on); -1 for anything else. Read only for sockets the
 * map does not know yet.
 */
static __always_inline int itap_sock_transport(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	__u16 type;

	if (family == AF_UNIX) {
		type = BPF_CORE_READ(sk, sk_type);
		return type == SOCK_STREAM || type == SOCK_SEQPACKET ? ITAP_TRANSPORT_UNIX : -1;
	}
	if (family != AF_INET && family != AF_INET6)
		return -1;
	if (BPF_CORE_READ(sk, sk_type) != SOCK_STREAM)
		return -1;
	return BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP ? ITAP_TRANSPORT_TCP : -1;
}

/* sk_ino (6.17+): the inode cached in the socket, 0 once it is closed (orphaned). */
struct sock___ino {
	unsigned long sk_ino;
} __attribute__((preserve_access_index));

/*
 * The socket's inode (what ss -x and /proc/PID/fd show): one read where the
 * kernel caches it in struct sock, else through the socket's file inode
 * (struct socket_alloc: the socket, then its inode). 0 without a socket.
 */
static __always_inline __u32 itap_sock_ino(struct sock *sk)
{
	struct socket_alloc *sa;

	if (bpf_core_field_exists(((struct sock___ino *)sk)->sk_ino))
		return (__u32)BPF_CORE_READ((struct sock___ino *)sk, sk_ino);
	sa = (struct socket_alloc *)BPF_CORE_READ(sk, sk_socket);
	if (!sa)
		return 0;
	return (__u32)BPF_CORE_READ(sa, vfs_inode.i_ino);
}

static __always_inline bool itap_sock_closed(struct sock *sk)
{
	return BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_CLOSE;
}

#ifndef RCV_SHUTDOWN
#define RCV_SHUTDOWN 1
#endif

/*
 * copied_seq after a read. A read that consumed the peer's FIN has copied_seq
 * one past its data (tcp_recvmsg counts the FIN as a byte): the data ended
 * one before. Costs one more read only for a socket whose peer shut down.
 */
static __always_inline __u32 itap_read_end_seq(struct sock *sk, long ret)
{
	__u32 copied = BPF_CORE_READ((struct tcp_sock *)sk, copied_seq);

	if (ret > 0 && (BPF_CORE_READ(sk, sk_shutdown) & RCV_SHUTDOWN) &&
	    copied == BPF_CORE_READ((struct tcp_sock *)sk, rcv_nxt))
		return copied - 1;
	return copied;
}

static __always_inline bool itap_sock_port_in(struct sock *sk, void *port_map)
{
	__u16 lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u16 rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));

	return bpf_map_lookup_elem(port_map, &lport) || bpf_map_lookup_elem(port_map, &rport);
}

/*
 * A unix socket's identity in place of addresses (struct itap_unix_ends over
 * local_addr and remote_addr): itself, its inode, its peer. No ports.
 */
static __always_inline void itap_fill_unix_ends(struct itap_event *e, struct sock *sk)
{
	struct itap_unix_ends ends = {};

	ends.sock = (__u64)sk;
	ends.ino = itap_sock_ino(sk);
	ends.peer_sock = (__u64)BPF_CORE_READ((struct unix_sock *)sk, peer);
	e->local_port = 0;
	e->remote_port = 0;
	__builtin_memcpy((__u8 *)e + __builtin_offsetof(struct itap_event, local_addr), &ends, sizeof(ends));
}

/* Family, ports (host order) and addresses, read from the socket. */
static __always_inline void itap_fill_sock(struct itap_event *e, struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);

	e->family = family;
	if (family == AF_UNIX) {
		itap_fill_unix_ends(e, sk);
		return;
	}
	e->local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->remote_port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (family == AF_INET6) {
		BPF_CORE_READ_INTO(&e->local_addr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&e->remote_addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		BPF_CORE_READ_INTO((__u32 *)e->local_addr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)e->remote_addr, sk, __sk_common.skc_daddr);
	}
}

/*
 * Socket fields of an event, from the per-socket cache when it has them (one
 * copy from map memory instead of seven probe reads); fills the cache
 * otherwise. A socket's addresses do not change once it carries data.
 */
static __always_inline void itap_fill_sock_cached(struct itap_event *e, struct sock *sk, struct itap_conn *c)
{
	if (c && c->family) {
		e->family = c->family;
		e->local_port = c->local_port;
		e->remote_port = c->remote_port;
		__builtin_memcpy(e->local_addr, c->local_addr, sizeof(e->local_addr));
		__builtin_memcpy(e->remote_addr, c->remote_addr, sizeof(e->remote_addr));
	} else {
		itap_fill_sock(e, sk);
		if (c) {
			c->local_port = e->local_port;
			c->remote_port = e->remote_port;
			__builtin_memcpy(c->local_addr, e->local_addr, sizeof(c->local_addr));
			__builtin_memcpy(c->remote_addr, e->remote_addr, sizeof(c->remote_addr));
			c->family = e->family;
		}
	}
}

/*
 * The path a unix connection goes through, written at dst (at most
 * ITAP_PATH_MAX bytes): the socket's own name (a listener's, which accepted
 * sockets share), else its peer's (a connecting socket has none: the server's
 * path), flagged ITAP_F_PEER_PATH. An abstract name starts with a NUL. Three
 * to five reads, once per connection (its first event). Returns the length.
 */
static __always_inline __u32 itap_unix_path(__u8 *dst, struct sock *sk, __u16 *flags)
{
	struct unix_address *addr = BPF_CORE_READ((struct unix_sock *)sk, addr);
	const __u8 *name;
	__u32 n;
	int len;

	if (!addr) {
		struct sock *peer = BPF_CORE_READ((struct unix_sock *)sk, peer);

		if (!peer)
			return 0;
		addr = BPF_CORE_READ((struct unix_sock *)peer, addr);
		if (!addr)
			return 0;
		*flags |= ITAP_F_PEER_PATH;
	}
	/* addr->len counts sun_family (2 bytes) and sun_path */
	len = BPF_CORE_READ(addr, len);
	if (len <= 2)
		return 0;
	n = (__u32)len - 2;
	if (n > ITAP_PATH_MAX)
		n = ITAP_PATH_MAX;
	/* the verifier's bound, on the register passed (clang would pass a copy taken before the clamp) */
	asm volatile("%[n] &= 127" : [n] "+r"(n));
	name = (const __u8 *)addr + bpf_core_field_offset(struct unix_address, name) + 2;
	if (bpf_probe_read_kernel(dst, n, name))
		return 0;
	return n;
}

/*
 * AF_UNIX, after a send: the bytes of this socket its reader has not consumed
 * (sk_wmem_alloc, which starts at 1: sk_wmem_alloc_get), and whether they fill
 * the send buffer. A unix send allocates while this is under sk_sndbuf and
 * waits (or fails with EAGAIN) once it is not: then the next send waits for
 * the reader. Two reads, followed unix sends only.
 */
static __always_inline __u32 itap_unix_unread(struct sock *sk, bool *full)
{
	__u32 used = (__u32)BPF_CORE_READ(sk, sk_wmem_alloc.refs.counter);
	int sndbuf = BPF_CORE_READ(sk, sk_sndbuf);

	used = used ? used - 1 : 0;
	*full = sndbuf > 0 && used >= (__u32)sndbuf;
	return used;
}

/* The process at the other end (SO_PEERCRED), as the root pid namespace numbers it. */
static __always_inline __u32 itap_unix_peer_pid(struct sock *sk)
{
	struct pid *pid = BPF_CORE_READ(sk, sk_peer_pid);

	return pid ? BPF_CORE_READ(pid, numbers[0].nr) : 0;
}

/* Smoothed RTT in microseconds (the kernel keeps it << 3). */
static __always_inline __u32 itap_srtt_us(struct sock *sk)
{
	return BPF_CORE_READ((struct tcp_sock *)sk, srtt_us) >> 3;
}

#endif /* INFERTAP_SOCK_BPF_H */
