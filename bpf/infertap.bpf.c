// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * infertap syscall capture: timestamps every send/recv syscall on followed TCP
 * sockets and copies a bounded head and tail of the bytes moved.
 *
 * Two interchangeable attach sets (the loader autoloads exactly one):
 *   - tracepoints syscalls:sys_{enter,exit}_{write,writev,sendto,sendmsg,
 *     read,readv,recvfrom,recvmsg} + sock:inet_sock_set_state (needs tracefs);
 *   - raw tracepoints sys_enter/sys_exit (dispatch by x86_64 syscall number)
 *     + inet_sock_set_state (no tracefs needed).
 *
 * Enter: cheap filters (self, pid, cgroup), fd -> sock, TCP check, per-socket
 * verdict (muted sockets stop after one map lookup), optional port filter,
 * then the call's arguments are parked in itap_args keyed by pid_tgid.
 * Exit: the bytes are in user memory now; copy head/tail into a per-CPU
 * scratch record, classify the socket on its first data, emit.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "infertap/abi.h"
#include "itap_sock.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---- configuration (rodata, set by the loader before load) ---- */
const volatile __u32 self_tgid = 0;      /* 0: trace self too */
const volatile bool filter_pids = false;
const volatile bool filter_cgroups = false;
const volatile bool filter_ports = false;
const volatile __u32 head_bytes = ITAP_HEAD_DEFAULT;
const volatile __u32 tail_bytes = ITAP_TAIL_DEFAULT;
const volatile __u64 wakeup_bytes = 256 * 1024;

/* ---- maps ---- */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* the loader overrides */
} itap_rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* struct sock address */
	__type(value, struct itap_conn);
} itap_conns SEC(".maps");

/*
 * Which sockets may be followed: per slot (a hash of the socket's address),
 * how many followed sockets hash there. The delivery-signal and send-start
 * programs run for every TCP segment and send on the host; the verifier
 * inlines an array lookup, where an itap_conns lookup costs ~100 ns here, so
 * a socket in an empty slot (nearly every one not followed) is turned away
 * first. Counted up when a socket is followed, down when it closes; a socket
 * dropped any other way (LRU eviction, userspace forget) leaves its count,
 * which only costs its slot's sockets the itap_conns lookup again.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ITAP_HINT_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} itap_follow_hint SEC(".maps");

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

/* Arguments of a send/recv in flight, keyed by pid_tgid. */
struct itap_args {
	__u64 sk;
	__u64 buf;       /* buffer, or struct iovec array */
	__u64 requested; /* count, or sum of iov_len over up to ITAP_IOV_MAX iovecs */
	__u64 enter_ns;
	__s32 fd;
	__u32 iovcnt;    /* 0: plain buffer */
	__u8 syscall;    /* enum itap_syscall */
	__u8 verdict;    /* verdict seen at entry, 0 = not classified yet */
	__u8 direction;  /* enum itap_direction */
	__u8 more;       /* socket set: the send carried MSG_MORE */
	__u8 pad[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct itap_args);
} itap_args SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} itap_pid_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* cgroup v2 id */
	__type(value, __u8);
} itap_cgroup_filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16); /* port, host order */
	__type(value, __u8);
} itap_port_filter SEC(".maps");

/*
 * Scratch record. Twice the caps so that every masked offset + bounded length
 * stays inside the value whatever the verifier assumes about the operands.
 */
#define ITAP_HDR_SIZE sizeof(struct itap_event)
#define ITAP_SCRATCH_SIZE (ITAP_HDR_SIZE + 2 * ITAP_HEAD_MAX + 2 * ITAP_TAIL_MAX)
struct itap_scratch {
	__u8 data[ITAP_SCRATCH_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct itap_scratch);
} itap_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ITAP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} itap_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ITAP_DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} itap_drops SEC(".maps");

/* ---- counters ---- */
static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&itap_stats, &idx);

	if (v)
		*v += 1;
}

static __always_inline void drop_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&itap_drops, &idx);

	if (v)
		*v += 1;
}

/*
 * Wake the consumer only when more than wakeup_bytes are pending; otherwise it
 * drains on its own short timer. How full the ring is gets asked once every 64
 * events per CPU: the query is a helper call (~200 ns of a traced send here),
 * and 64 events cannot fill the ring between two looks.
 */
static __always_inline __u64 rb_flags(void)
{
	__u32 idx = ITAP_STAT_EVENTS;
	__u64 *events = bpf_map_lookup_elem(&itap_stats, &idx);

	if (events && (*events & 63) == 0 && bpf_ringbuf_query(&itap_rb, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline bool is_send(__u8 sc)
{
	return sc <= ITAP_SC_SENDMSG;
}

static __always_inline bool is_vec(__u8 sc)
{
	return sc == ITAP_SC_WRITEV || sc == ITAP_SC_READV || sc == ITAP_SC_SENDMSG ||
	       sc == ITAP_SC_RECVMSG;
}

/* x86_64 syscall numbers */
#define NR_read 0
#define NR_write 1
#define NR_readv 19
#define NR_writev 20
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47

static __always_inline __u8 sc_of_nr(long nr)
{
	switch (nr) {
	case NR_read: return ITAP_SC_READ;
	case NR_write: return ITAP_SC_WRITE;
	case NR_readv: return ITAP_SC_READV;
	case NR_writev: return ITAP_SC_WRITEV;
	case NR_sendto: return ITAP_SC_SENDTO;
	case NR_recvfrom: return ITAP_SC_RECVFROM;
	case NR_sendmsg: return ITAP_SC_SENDMSG;
	case NR_recvmsg: return ITAP_SC_RECVMSG;
	}
	return 0;
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
	}
	if (filter_ports && !itap_sock_port_in(sk, &itap_port_filter))
		return false;
	*connp = conn;
	return true;
}

/* ================= entry ================= */

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

/* The user buffer of a send/recv syscall, from its arguments. */
static __always_inline void describe_buffer(struct itap_args *a, __u8 sc, int fd, __u64 buf, __u64 count)
{
	a->fd = fd;
	a->syscall = sc;
	a->direction = is_send(sc) ? ITAP_DIR_SEND : ITAP_DIR_RECV;
	if (sc == ITAP_SC_SENDMSG || sc == ITAP_SC_RECVMSG) {
		struct user_msghdr *msg = (struct user_msghdr *)buf;
		struct iovec *iov = NULL;
		__u64 iovlen = 0;

		bpf_probe_read_user(&iov, sizeof(iov), &msg->msg_iov);
		bpf_probe_read_user(&iovlen, sizeof(iovlen), &msg->msg_iovlen);
		buf = (__u64)iov;
		count = iovlen;
	}
	if (is_vec(sc)) {
		const struct iovec *iov = (const struct iovec *)buf;
		__u64 total = 0;

		a->iovcnt = count > 0xffffffffULL ? 0xffffffffU : (__u32)count;
#pragma unroll
		for (int i = 0; i < ITAP_IOV_MAX; i++) {
			__u64 len = 0;

			if (i >= count)
				break;
			if (bpf_probe_read_user(&len, sizeof(len), &iov[i].iov_len))
				break;
			total += len;
		}
		a->requested = total;
	} else {
		a->requested = count;
	}
	a->buf = buf;
}

static __always_inline int handle_enter(__u8 sc, int fd, __u64 buf, __u64 count)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_conn *conn;
	struct itap_args a = {};
	struct sock *sk;
	__u64 skey;

	if (!task_eligible(id >> 32))
		return 0;
	stat_inc(ITAP_STAT_SYSCALLS_SEEN);
	/* before the fd walk: enter_ns should not include our own work */
	a.enter_ns = bpf_ktime_get_ns();

	/* 2. is the fd a socket */
	sk = itap_fd_to_sock(fd);
	if (!sk) {
		stat_inc(ITAP_STAT_NOT_TCP);
		return 0;
	}

	/* 3. verdict: a muted socket costs one lookup */
	skey = (__u64)sk;
	if (!socket_gate(sk, &conn, &a.verdict))
		return 0;

	/* 4. park the arguments */
	a.sk = skey;
	describe_buffer(&a, sc, fd, buf, count);
	if (bpf_map_update_elem(&itap_args, &id, &a, BPF_ANY))
		drop_inc(ITAP_DROP_ARGS_MAP_FULL);
	return 0;
}

/* ================= payload copy ================= */

struct copy_params {
	__u64 tail_start; /* bytes transferred - tail_len */
	__u32 head_len;
	__u32 tail_len;
};

/*
 * Copy the intersection of transferred bytes [pos, pos+seg) (found at user
 * address src) with [0, head_len) into the head and with [tail_start, ret)
 * into the tail of the scratch record. Returns 1 when a user read failed.
 *
 * A global (noinline, non-static) function: the verifier checks it once,
 * on its own, instead of once per iovec per program, which keeps the
 * unrolled iovec walk far from the complexity limit. It therefore assumes
 * nothing about its arguments: every offset is masked and every length is
 * bounded, and the scratch is sized so that masked values cannot overflow.
 */
__noinline int itap_copy_segment(struct itap_scratch *rec, const struct copy_params *p, __u64 src,
				 __u64 pos, __u64 seg)
{
	int failed = 0;

	if (!rec || !p)
		return 1;
	/*
	 * Lengths are 1..MAX by construction; written as ((n - 1) & (MAX - 1)) + 1
	 * so the verifier sees the same bound (a clamp gets reordered by clang).
	 */
	if (pos < p->head_len && seg) {
		__u64 n = p->head_len - pos;
		__u32 off = pos & (ITAP_HEAD_MAX - 1);
		__u32 len;

		if (n > seg)
			n = seg;
		len = ((n - 1) & (ITAP_HEAD_MAX - 1)) + 1;
		if (bpf_probe_read_user(rec->data + ITAP_HDR_SIZE + off, len, (const void *)src))
			failed = 1;
	}
	if (p->tail_len) {
		__u64 start = pos > p->tail_start ? pos : p->tail_start;
		__u64 end = pos + seg;

		if (start < end) {
			__u32 hl = p->head_len & (2 * ITAP_HEAD_MAX - 1);
			__u32 toff = (start - p->tail_start) & (ITAP_TAIL_MAX - 1);
			__u32 len = ((end - start - 1) & (ITAP_TAIL_MAX - 1)) + 1;

			if (bpf_probe_read_user(rec->data + ITAP_HDR_SIZE + hl + toff, len,
						(const void *)(src + (start - pos))))
				failed = 1;
		}
	}
	return failed;
}

/* ================= classification ================= */

/* little-endian u64 of a string literal's first (up to 8) bytes, folded at compile time */
#define LIT_C(s, i) ((i) < sizeof(s) - 1 ? (__u64)(__u8)(s)[(i) < sizeof(s) - 1 ? (i) : 0] << (8 * (i)) : 0)
#define LIT(s)                                                                                     \
	(LIT_C(s, 0) | LIT_C(s, 1) | LIT_C(s, 2) | LIT_C(s, 3) | LIT_C(s, 4) | LIT_C(s, 5) |       \
	 LIT_C(s, 6) | LIT_C(s, 7))
#define LIT_MASK(s) (sizeof(s) - 1 >= 8 ? ~0ULL : ((1ULL << (8 * (sizeof(s) - 1))) - 1))
/* does the (n-byte) text whose first 8 bytes are v start with literal s */
#define PFX(v, n, s) ((n) >= sizeof(s) - 1 && ((v) & LIT_MASK(s)) == LIT(s))

/* byte k (< 16) of the 16 bytes held little-endian in v, v2 (no indexed memory access) */
static __always_inline __u8 byte_at(__u64 v, __u64 v2, __u32 k)
{
	return k < 8 ? (__u8)(v >> (8 * k)) : (__u8)(v2 >> (8 * ((k - 8) & 7)));
}

static __always_inline bool is_hex(__u8 c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

#define ITAP_CLASSIFY_BYTES 16

/*
 * FOLLOW when the first bytes of the first data seen on a socket look like
 * HTTP/1.x (request line, status line) or like an SSE/chunked stream joined
 * mid-way; MUTED otherwise. v, v2 hold the first n (<= 16) bytes, little-endian.
 */
static __always_inline __u8 classify(__u64 v, __u64 v2, __u32 n)
{
	__u32 i, k, start = 0;

	if (n == 0)
		return 0;
	switch ((__u8)v) {
	case 'G':
		if (PFX(v, n, "GET "))
			return ITAP_VERDICT_FOLLOW;
		break;
	case 'P':
		if (PFX(v, n, "POST ") || PFX(v, n, "PUT ") || PFX(v, n, "PATCH "))
			return ITAP_VERDICT_FOLLOW;
		break;
	case 'D':
		if (PFX(v, n, "DELETE "))
			return ITAP_VERDICT_FOLLOW;
		break;
	case 'H':
		if (PFX(v, n, "HEAD ") || PFX(v, n, "HTTP/1."))
			return ITAP_VERDICT_FOLLOW;
		break;
	case 'O':
		if (PFX(v, n, "OPTIONS "))
			return ITAP_VERDICT_FOLLOW;
		break;
	case ':':
		return ITAP_VERDICT_FOLLOW; /* SSE comment line */
	case 'd':
		if (PFX(v, n, "data:"))
			return ITAP_VERDICT_FOLLOW;
		break;
	case 'e':
		if (PFX(v, n, "event:"))
			return ITAP_VERDICT_FOLLOW;
		break;
	case 'i':
		if (PFX(v, n, "id:"))
			return ITAP_VERDICT_FOLLOW;
		break;
	case 'r':
		if (PFX(v, n, "retry:"))
			return ITAP_VERDICT_FOLLOW;
		break;
	case '\r':
		/* CRLF ending the previous chunk, then the next chunk-size line */
		if (n >= 2 && byte_at(v, v2, 1) == '\n')
			start = 2;
		break;
	}
	/* chunk-size line: 1..8 hex digits then CRLF (b is 16 bytes: no overflow) */
	k = start;
#pragma unroll
	for (i = 0; i < 8; i++) {
		if (k == start + i && k < n && is_hex(byte_at(v, v2, k)))
			k++;
	}
	if (k == start || k + 1 >= n)
		return ITAP_VERDICT_MUTED;
	if (byte_at(v, v2, k) == '\r' && byte_at(v, v2, k + 1) == '\n')
		return ITAP_VERDICT_FOLLOW;
	return ITAP_VERDICT_MUTED;
}

/* ================= exit ================= */

static __always_inline int emit_io(struct itap_args a, long ret, __u64 ts, __u64 id, struct itap_conn *conn);

static __always_inline int handle_exit(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_args *ap, a;
	__u64 ts;

	/* untargeted calls stop here, before even reading the clock */
	ap = bpf_map_lookup_elem(&itap_args, &id);
	if (!ap)
		return 0;
	ts = bpf_ktime_get_ns();
	a = *ap;
	bpf_map_delete_elem(&itap_args, &id);
	return emit_io(a, ret, ts, id, NULL);
}

/*
 * One send/recv that moved `ret` bytes (or failed with -EAGAIN, or hit EOF)
 * on socket a.sk: classify the socket on its first bytes, copy head and tail,
 * emit. a.syscall == 0: the bytes moved outside the known syscalls (sendfile,
 * io_uring, kernel senders): timed but not copied.
 */
static __always_inline int emit_io(struct itap_args a, long ret, __u64 ts, __u64 id, struct itap_conn *conn)
{
	struct copy_params cp = {};
	struct itap_scratch *rec;
	bool failed = false;
	struct itap_event *e;
	struct sock *sk;
	__u32 zero = 0;
	__u16 flags = 0;
	bool send;
	__u8 verdict;

	send = a.direction == ITAP_DIR_SEND;
	verdict = a.verdict;
	if (ret > 0) {
		/* data */
	} else if (ret == -EAGAIN && send) {
		flags |= ITAP_F_EAGAIN;
	} else if (ret == 0 && !send) {
		flags |= ITAP_F_EOF;
	} else {
		return 0;
	}
	/* classification needs bytes: unclassified sockets emit data only */
	if (!verdict && ret <= 0)
		return 0;

	rec = bpf_map_lookup_elem(&itap_scratch, &zero);
	if (!rec) {
		drop_inc(ITAP_DROP_NO_SCRATCH);
		return 0;
	}
	e = (struct itap_event *)rec->data;
	sk = (struct sock *)a.sk;

	if (ret > 0) {
		__u32 hb = head_bytes > ITAP_HEAD_MAX ? ITAP_HEAD_MAX : head_bytes;
		__u32 tb = tail_bytes > ITAP_TAIL_MAX ? ITAP_TAIL_MAX : tail_bytes;
		__u64 rest;

		cp.head_len = (__u64)ret < hb ? (__u32)ret : hb;
		rest = ret - cp.head_len;
		cp.tail_len = rest < tb ? (__u32)rest : tb;
		cp.tail_start = ret - cp.tail_len;

		if (!a.syscall) {
			cp.head_len = 0;
			cp.tail_len = 0;
		} else if (!is_vec(a.syscall)) {
			failed = itap_copy_segment(rec, &cp, a.buf, 0, ret);
		} else {
			const struct iovec *iovp = (const struct iovec *)a.buf;
			__u64 pos = 0;

			if (!iovp) /* the msghdr could not be read at entry */
				failed = true;

#pragma unroll
			for (int i = 0; i < ITAP_IOV_MAX; i++) {
				struct iovec iov;
				__u64 seg;

				if (i >= a.iovcnt || pos >= (__u64)ret)
					break;
				if (bpf_probe_read_user(&iov, sizeof(iov), &iovp[i])) {
					failed = true;
					break;
				}
				seg = iov.iov_len;
				if (seg > (__u64)ret - pos)
					seg = (__u64)ret - pos;
				if (itap_copy_segment(rec, &cp, (__u64)iov.iov_base, pos, seg))
					failed = true;
				pos += seg;
			}
			if (pos < (__u64)ret) {
				/* bytes in iovecs past ITAP_IOV_MAX: keep what was walked */
				if (cp.head_len > pos)
					cp.head_len = pos;
				cp.tail_len = 0;
			}
		}
		if (failed)
			flags |= ITAP_F_READ_FAILED;
		if ((__u64)cp.head_len + cp.tail_len < (__u64)ret)
			flags |= ITAP_F_TRUNCATED;
		if (send && (__u64)ret < a.requested)
			flags |= ITAP_F_PARTIAL;
		if (a.more)
			flags |= ITAP_F_MORE;

		if (!verdict) {
			struct itap_conn c = {};
			__u32 n = cp.head_len < ITAP_CLASSIFY_BYTES ? cp.head_len : ITAP_CLASSIFY_BYTES;
			__u64 v, v2;

			if (failed || !n)
				return 0; /* cannot tell yet: try again on the next data */
			__builtin_memcpy(&v, rec->data + ITAP_HDR_SIZE, sizeof(v));
			__builtin_memcpy(&v2, rec->data + ITAP_HDR_SIZE + 8, sizeof(v2));
			verdict = classify(v, v2, n);
			c.verdict = verdict;
			c.first_seen_ns = ts;
			if (verdict == ITAP_VERDICT_FOLLOW) {
				__u32 *n = follow_hint(a.sk);

				if (n) {
					__sync_fetch_and_add(n, 1);
					c.hinted = 1;
				}
			}
			if (bpf_map_update_elem(&itap_conns, &a.sk, &c, BPF_ANY))
				drop_inc(ITAP_DROP_CONN_MAP_FULL);
			if (verdict != ITAP_VERDICT_FOLLOW) {
				stat_inc(ITAP_STAT_NEW_MUTED);
				return 0;
			}
			stat_inc(ITAP_STAT_NEW_FOLLOWED);
			flags |= ITAP_F_NEW_SOCKET;
		}
	}
	if (verdict != ITAP_VERDICT_FOLLOW)
		return 0;

	/* header: every field written (the scratch is reused) */
	__builtin_memset(e, 0, ITAP_HDR_SIZE);
	e->ts_ns = ts;
	e->enter_ns = a.enter_ns;
	e->sock_id = a.sk;
	e->ret = ret;
	e->requested = a.requested;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->fd = a.fd;
	e->kind = ITAP_EV_DATA;
	e->direction = a.direction;
	e->syscall = a.syscall;
	e->flags = flags;
	e->head_len = cp.head_len;
	e->tail_len = cp.tail_len;
	if (!conn) /* the caller had none, or the socket was classified just now */
		conn = bpf_map_lookup_elem(&itap_conns, &a.sk);
	itap_fill_sock_cached(e, sk, conn);
	if (send)
		e->seq_end = BPF_CORE_READ((struct tcp_sock *)sk, write_seq);
	else
		e->seq_end = BPF_CORE_READ((struct tcp_sock *)sk, copied_seq);
	if (!send && conn && conn->arr_ns && conn->arr_taken_seq != conn->arr_seq) {
		/*
		 * The newest arrival rides on this read (itap_path.bpf.h). Not atomic
		 * against an arrival on another CPU: at worst one arrival is reported
		 * twice, or with the time of the one after it; none is lost.
		 */
		e->arrived_seq = conn->arr_seq;
		e->arrived_ns = conn->arr_ns;
		conn->arr_taken_seq = e->arrived_seq;
	}
	if (send && ret > 0 && conn) {
		/* the ACK program reports acks up to here (itap_path.bpf.h) */
		if (!conn->sent) {
			conn->ack_seen = e->seq_end - (__u32)ret;
			conn->sent = 1;
		}
		conn->snd_end = e->seq_end;
	}
	/*
	 * What stays the same for a connection is sent with its first event only:
	 * each helper call here costs 100-200 ns, a quarter of a traced send.
	 */
	if (flags & ITAP_F_NEW_SOCKET) {
		e->cgroup_id = bpf_get_current_cgroup_id();
		e->srtt_us = BPF_CORE_READ((struct tcp_sock *)sk, srtt_us) >> 3;
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}

	{
		__u64 size = ITAP_HDR_SIZE + (cp.head_len & (2 * ITAP_HEAD_MAX - 1)) +
			     (cp.tail_len & (2 * ITAP_TAIL_MAX - 1));

		if (size > ITAP_SCRATCH_SIZE)
			return 0;
		if (bpf_ringbuf_output(&itap_rb, rec, size, rb_flags()))
			drop_inc(ITAP_DROP_RINGBUF_FULL);
		else
			stat_inc(ITAP_STAT_EVENTS);
	}
	return 0;
}

/* ================= TCP state ================= */

static __always_inline void handle_state(struct sock *sk, int oldstate, int newstate)
{
	__u64 key = (__u64)sk;
	struct itap_conn *conn = bpf_map_lookup_elem(&itap_conns, &key);
	struct itap_event *e;

	if (!conn)
		return;
	if (conn->verdict == ITAP_VERDICT_FOLLOW) {
		__u64 id = bpf_get_current_pid_tgid();

		e = bpf_ringbuf_reserve(&itap_rb, sizeof(*e), 0);
		if (!e) {
			drop_inc(ITAP_DROP_RINGBUF_FULL);
		} else {
			__builtin_memset(e, 0, sizeof(*e));
			e->ts_ns = bpf_ktime_get_ns();
			e->sock_id = key;
			e->cgroup_id = bpf_get_current_cgroup_id();
			e->pid = id >> 32; /* whoever runs the transition (may be softirq) */
			e->tid = (__u32)id;
			e->fd = -1;
			e->kind = ITAP_EV_STATE;
			e->old_state = oldstate;
			e->new_state = newstate;
			itap_fill_sock_cached(e, sk, conn);
			e->srtt_us = BPF_CORE_READ((struct tcp_sock *)sk, srtt_us) >> 3;
			bpf_get_current_comm(e->comm, sizeof(e->comm));
			bpf_ringbuf_submit(e, rb_flags());
			stat_inc(ITAP_STAT_EVENTS);
		}
	}
	if (newstate == TCP_CLOSE) {
		if (conn->hinted) {
			__u32 *n = follow_hint(key);

			if (n && *n)
				__sync_fetch_and_add(n, -1);
		}
		bpf_map_delete_elem(&itap_conns, &key);
	}
}

/* ================= tracepoint set ================= */

#define ENTER_TP(name, sc)                                                                         \
	SEC("tracepoint/syscalls/sys_enter_" #name)                                                \
	int itap_enter_##name(struct trace_event_raw_sys_enter *ctx)                               \
	{                                                                                          \
		return handle_enter(sc, (int)ctx->args[0], ctx->args[1], ctx->args[2]);            \
	}
#define EXIT_TP(name)                                                                              \
	SEC("tracepoint/syscalls/sys_exit_" #name)                                                 \
	int itap_exit_##name(struct trace_event_raw_sys_exit *ctx)                                 \
	{                                                                                          \
		return handle_exit(ctx->ret);                                                      \
	}

ENTER_TP(write, ITAP_SC_WRITE)
ENTER_TP(writev, ITAP_SC_WRITEV)
ENTER_TP(sendto, ITAP_SC_SENDTO)
ENTER_TP(sendmsg, ITAP_SC_SENDMSG)
ENTER_TP(read, ITAP_SC_READ)
ENTER_TP(readv, ITAP_SC_READV)
ENTER_TP(recvfrom, ITAP_SC_RECVFROM)
ENTER_TP(recvmsg, ITAP_SC_RECVMSG)
EXIT_TP(write)
EXIT_TP(writev)
EXIT_TP(sendto)
EXIT_TP(sendmsg)
EXIT_TP(read)
EXIT_TP(readv)
EXIT_TP(recvfrom)
EXIT_TP(recvmsg)

SEC("tracepoint/sock/inet_sock_set_state")
int itap_tp_sock_state(struct trace_event_raw_inet_sock_set_state *ctx)
{
	if (ctx->protocol != IPPROTO_TCP)
		return 0;
	handle_state((struct sock *)ctx->skaddr, ctx->oldstate, ctx->newstate);
	return 0;
}

/* ================= raw tracepoint set (no tracefs) ================= */


SEC("raw_tp/sys_enter")
int itap_raw_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	__u8 sc = sc_of_nr((long)ctx->args[1]);

	if (!sc)
		return 0;
	return handle_enter(sc, (int)BPF_CORE_READ(regs, di), BPF_CORE_READ(regs, si),
			    BPF_CORE_READ(regs, dx));
}

SEC("raw_tp/sys_exit")
int itap_raw_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];

	if (!sc_of_nr((long)BPF_CORE_READ(regs, orig_ax)))
		return 0;
	return handle_exit((long)ctx->args[1]);
}

SEC("raw_tp/inet_sock_set_state")
int itap_raw_sock_state(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];

	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	handle_state(sk, (int)ctx->args[1], (int)ctx->args[2]);
	return 0;
}

/* ================= socket tracepoint set (default) ================= */

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
 * sock_send_length / sock_recv_length fire at the end of every socket send and
 * receive, with the socket in hand: a syscall on any other fd never runs a
 * program, and a muted TCP socket costs one map lookup. The user buffer comes
 * from the syscall's own registers (bpf_task_pt_regs): a send's bytes are still
 * in user memory, a receive's bytes are already there. The time is taken here,
 * as the kernel finishes the transfer and returns to the caller.
 *
 * Attached as raw tracepoints: the program gets (sk, ret, flags) directly,
 * without the perf-buffer marshalling of a classic tracepoint, and needs no
 * tracefs. family/protocol are read from the socket only for sockets the map
 * does not know yet (followed and muted ones are TCP by construction).
 */
static __always_inline int handle_sock_io(struct sock *sk, int ret, int msg_flags, bool send)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_args a = {};
	struct itap_conn *conn;
	struct pt_regs regs;
	__u64 skey = (__u64)sk;
	__u64 ts;
	__u8 sc;

	if (!send && (msg_flags & (MSG_PEEK | MSG_ERRQUEUE)))
		return 0; /* nothing consumed */
	if (ret < 0 && !(send && ret == -EAGAIN))
		return 0;
	if (!task_eligible(id >> 32))
		return 0;
	stat_inc(ITAP_STAT_SYSCALLS_SEEN);
	if (!socket_gate(sk, &conn, &a.verdict))
		return 0;
	ts = bpf_ktime_get_ns();

	/* one read of the saved user registers: syscall number and arguments */
	if (bpf_probe_read_kernel(&regs, sizeof(regs), (void *)bpf_task_pt_regs(bpf_get_current_task_btf())))
		regs.orig_ax = -1;
	sc = sc_of_nr((long)regs.orig_ax);
	if (sc && is_send(sc) == send) {
		describe_buffer(&a, sc, (int)regs.di, regs.si, regs.dx);
	} else {
		a.fd = -1;
		a.direction = send ? ITAP_DIR_SEND : ITAP_DIR_RECV;
		a.requested = ret > 0 ? ret : 0;
	}
	a.sk = skey;
	a.enter_ns = ts;
	/* the tracepoint carries no send flags: MSG_MORE is in the syscall's own */
	if (sc == ITAP_SC_SENDTO)
		a.more = (regs.r10 & MSG_MORE) != 0;
	else if (sc == ITAP_SC_SENDMSG)
		a.more = (regs.dx & MSG_MORE) != 0;
	if (send && conn && conn->send_start_ns) {
		/* stamped by itap_tcp_send_start: the call's duration, blocking included */
		a.enter_ns = conn->send_start_ns;
		conn->send_start_ns = 0;
	}
	return emit_io(a, ret, ts, id, conn);
}

/*
 * tcp_sendmsg_locked fires at each pass of the TCP send loop, the first one
 * before any wait for send-buffer space: the first pass after the previous
 * send finished marks when this send started. Followed sockets only.
 */
SEC("raw_tp/tcp_sendmsg_locked")
int itap_tcp_send_start(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 skey = ctx->args[0];
	struct itap_conn *conn;

	if (!maybe_followed(skey))
		return 0;
	conn = bpf_map_lookup_elem(&itap_conns, &skey);
	if (conn && conn->verdict == ITAP_VERDICT_FOLLOW && !conn->send_start_ns)
		conn->send_start_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("raw_tp/sock_send_length")
int itap_sock_send(struct bpf_raw_tracepoint_args *ctx)
{
	return handle_sock_io((struct sock *)ctx->args[0], (int)ctx->args[1], (int)ctx->args[2], true);
}

SEC("raw_tp/sock_recv_length")
int itap_sock_recv(struct bpf_raw_tracepoint_args *ctx)
{
	return handle_sock_io((struct sock *)ctx->args[0], (int)ctx->args[1], (int)ctx->args[2], false);
}

#include "itap_path.bpf.h"
