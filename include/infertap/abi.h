/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel/user ABI of infertap: every struct that crosses the ring buffer or
 * a BPF map is defined here once and included by both the BPF programs and the
 * C++ userspace. The layout is pinned by the assertions at the end of this
 * file, which both compilers check (clang -target bpf for the programs, g++
 * for userspace), so a change here that shifts a field fails the build instead
 * of corrupting decoding.
 *
 * Only fixed-width types; no pointers; explicit padding.
 */
#ifndef INFERTAP_ABI_H
#define INFERTAP_ABI_H

#ifdef __BPF__
/* vmlinux.h provides __u8.. __u64 */
#else
#include <linux/types.h>
#endif

#define ITAP_COMM_LEN 16

/*
 * Payload capture. Each send/recv event carries the first `head` bytes and the
 * last `tail` bytes of what the syscall actually transferred (not of what was
 * asked for). SSE events of inference servers are a few hundred bytes, so one
 * event usually fits in the head; for longer writes the tail still shows where
 * the last event ends ("\n\n", chunk trailer). Bytes in between are not copied
 * and the event is flagged ITAP_F_TRUNCATED; userspace sees the exact size of
 * the gap.
 *
 * Both maxima are powers of two: the BPF side masks offsets and lengths with
 * (MAX - 1) so the verifier can bound every copy.
 */
#define ITAP_HEAD_MAX 4096
#define ITAP_TAIL_MAX 256
#define ITAP_HEAD_DEFAULT 4096
#define ITAP_TAIL_DEFAULT 256

/*
 * Scatter/gather sends and receives: iovecs walked per syscall. 32: grpcio
 * writes one iovec per frame header, header name and value; its client's
 * first sendmsg (connection preface, SETTINGS, the request's HEADERS and
 * first DATA frame) has 31, a server's response HEADERS and first DATA 10.
 * The walk is unrolled; each step is one read of the iovec and one call of
 * the global copy function (copy.bpf.h): a call pays for the iovecs it has.
 */
#define ITAP_IOV_MAX 32

/*
 * AF_UNIX: the socket's path (sun_path, at most 108 bytes; an abstract name
 * starts with a NUL) rides on a connection's first event, after the tail
 * (itap_event.path_len bytes). ITAP_PATH_ROOM is what the scratch record keeps
 * for it, a power of two for the BPF masks.
 */
#define ITAP_PATH_MAX 108
#define ITAP_PATH_ROOM 128

/* What carries a socket's bytes (itap_conn.transport). */
enum itap_transport {
	ITAP_TRANSPORT_TCP = 0,  /* AF_INET/AF_INET6 SOCK_STREAM, IPPROTO_TCP */
	ITAP_TRANSPORT_UNIX = 1, /* AF_UNIX SOCK_STREAM or SOCK_SEQPACKET */
};

/*
 * A TLS socket whose first this many ciphertext calls had no call of a probed
 * TLS library on them (SSL_do_handshake included: a TLS 1.3 handshake read
 * record by record is 16 socket calls) is muted: its library is one infertap
 * does not probe (rustls, GnuTLS, a stripped BoringSSL, Go before 1.17).
 */
#define ITAP_TLS_BLIND_CALLS 16

enum itap_event_kind {
	ITAP_EV_DATA = 1,  /* one send or receive on a followed TCP or unix socket (plaintext syscall or TLS library call) */
	ITAP_EV_STATE = 2, /* TCP state change of a followed socket (unix sockets have none) */
	ITAP_EV_PATH = 3,  /* delivery signal of a followed socket (struct itap_path_event) */
	/*
	 * A TLS connection whose library writes its ciphertext later, from an
	 * event loop (a memory BIO, as Node.js does): the socket it went out on,
	 * found at that send (sock_id, tls_ssl, ts_ns of the send, tls_seq after
	 * it). Data events of that TLS connection sent before carry sock_id 0.
	 */
	ITAP_EV_TLS_BIND = 4,
	ITAP_EV_EXEC = 5,   /* an eligible process called exec: its TLS libraries may be new (pid only) */
	ITAP_EV_DLOPEN = 6, /* a dlopen returned in an eligible process: a TLS library may be mapped now (pid only) */
};

/* What an ITAP_EV_PATH event reports. */
enum itap_path_kind {
	ITAP_PATH_ACK = 1,        /* an ACK moved snd_una over sent data, or the peer's window closed/opened */
	ITAP_PATH_ARRIVED = 2,    /* bytes were queued on a receiving socket (sk_data_ready) */
	ITAP_PATH_RETRANSMIT = 3, /* a segment was retransmitted */
	ITAP_PATH_BUF_LIMIT = 4,  /* the socket hit the protocol's memory limit (sock_exceed_buf_limit) */
};

enum itap_direction {
	ITAP_DIR_SEND = 1,
	ITAP_DIR_RECV = 2,
};

enum itap_syscall {
	ITAP_SC_WRITE = 1,
	ITAP_SC_WRITEV = 2,
	ITAP_SC_SENDTO = 3, /* send(2) is sendto(2) on x86_64 and arm64 */
	ITAP_SC_SENDMSG = 4,
	ITAP_SC_READ = 5,
	ITAP_SC_READV = 6,
	ITAP_SC_RECVFROM = 7, /* recv(2) is recvfrom(2) on x86_64 and arm64 */
	ITAP_SC_RECVMSG = 8,
};

enum itap_event_flags {
	ITAP_F_TRUNCATED = 1 << 0, /* head + tail < bytes transferred: a gap in between */
	ITAP_F_EAGAIN = 1 << 1,    /* returned -EAGAIN / -EWOULDBLOCK */
	ITAP_F_PARTIAL = 1 << 2,   /* send moved fewer bytes than requested */
	ITAP_F_EOF = 1 << 3,       /* receive returned 0: peer closed its side */
	ITAP_F_READ_FAILED = 1 << 4, /* bpf_probe_read_user failed: captured bytes are zero */
	ITAP_F_NEW_SOCKET = 1 << 5, /* first event the kernel side saw on this socket */
	ITAP_F_MORE = 1 << 6,       /* send with MSG_MORE: the kernel may hold the bytes for more */
	ITAP_F_UNREAD = 1 << 7,     /* state TCP_CLOSE, received bytes still unread: the socket is read on */
	/*
	 * A TLS library call (SSL_write/SSL_read and their _ex forms): the bytes
	 * are plaintext; seq_end counts the connection's plaintext bytes in that
	 * direction, tls_seq is the TCP sequence of the ciphertext call (0 when
	 * not seen), ts_ns the ciphertext send for writes (the emit vantage) and
	 * the library's return for reads.
	 */
	ITAP_F_TLS = 1 << 8,
	ITAP_F_PEER_PATH = 1 << 9,  /* AF_UNIX: the path after the tail is the peer's (this socket has no name) */
	/*
	 * AF_UNIX send: after the call the bytes its reader has not consumed
	 * fill the send buffer (sk_wmem_alloc >= sk_sndbuf), so the next send
	 * waits for the reader, or fails with EAGAIN: backpressure. A unix send
	 * has no tracepoint at its start to time the wait by (TCP's
	 * tcp_sendmsg_locked), nor a window to watch; this is its evidence.
	 */
	ITAP_F_SNDBUF_FULL = 1 << 10,
};

/*
 * Slots of itap_follow_hint: followed sockets counted by a hash of their
 * address, so the programs that run for every TCP segment on the host turn
 * away an unfollowed socket with an array lookup (see bpf/maps/maps.bpf.h).
 */
#define ITAP_HINT_SLOTS 65536

/*
 * new_state of an ITAP_EV_STATE event for a socket the kernel destroyed
 * (tcp_destroy_sock): not a TCP state. It ends a socket that closed with
 * bytes still unread (ITAP_F_UNREAD), once the application is done with it.
 */
#define ITAP_STATE_DESTROYED 0xff

/* Verdict the kernel keeps per socket (map itap_conns). */
enum itap_verdict {
	ITAP_VERDICT_FOLLOW = 1, /* looked like HTTP or SSE: send events to userspace */
	ITAP_VERDICT_MUTED = 2,  /* not HTTP, or userspace asked to stop: drop in kernel */
	/*
	 * TLS records (a handshake, or application data joined mid-way) while the
	 * TLS library probes are attached: the ciphertext is never copied; the
	 * socket's calls time the TLS library's plaintext events, and its
	 * delivery signals flow as for a followed socket.
	 */
	ITAP_VERDICT_TLS = 3,
};

/*
 * The kernel side's counters, each listed once: X(NAME, name, help) makes the
 * index ITAP_DROP_<NAME> / ITAP_STAT_<NAME> here (in list order, from 0) and,
 * in userspace, the field, the `infertap status` key and the Prometheus series
 * of the counter (userspace/capture/loader.h CaptureStats; docs/prometheus.md).
 * A new counter is one line here; *_MAX is the map size and must stay above
 * the list's length.
 */

/* Why the kernel side could not deliver an event; indexes map itap_drops. */
#define ITAP_DROP_LIST(X) \
	X(RINGBUF_FULL, ringbuf_full, "the ring buffer had no room for the event") \
	X(ARGS_MAP_FULL, args_map_full, "the map of syscalls in progress (itap_args) was full") \
	X(CONN_MAP_FULL, conn_map_full, "the map of socket verdicts (itap_conns) refused a new socket") \
	X(NO_SCRATCH, no_scratch, "the per-CPU scratch record was missing")

enum itap_drop_reason {
#define ITAP_DROP_ENUM(NAME, name, help) ITAP_DROP_##NAME,
	ITAP_DROP_LIST(ITAP_DROP_ENUM)
#undef ITAP_DROP_ENUM
	ITAP_DROP_MAX = 8,
};

/* Counters the kernel side keeps (per-CPU array itap_stats). */
#define ITAP_STAT_LIST(X) \
	X(SYSCALLS_SEEN, syscalls_seen, "eligible send/recv calls entered") \
	X(NOT_TCP, not_tcp, "calls whose socket was neither TCP nor a unix stream socket") \
	X(MUTED, muted, "calls on a muted socket, stopped after one map lookup") \
	X(EVENTS, events, "events the BPF programs submitted to the ring buffer") \
	X(NEW_MUTED, sockets_muted, "sockets the classifier muted on their first data") \
	X(NEW_FOLLOWED, sockets_followed, "sockets the classifier followed on their first data") \
	X(CLOSED_SOCKET, closed_sockets, "calls on a socket already closed (a send racing the peer's reset): not classified") \
	X(TLS_CALLS, tls_calls, "TLS library calls (SSL_write/SSL_read) of eligible processes that moved bytes") \
	X(TLS_UNBOUND, tls_unbound, "TLS library calls whose socket was not known (written later from an event loop)") \
	X(TLS_LIBS_MUTED, tls_muted, "TLS library calls on connections whose plaintext is not HTTP, stopped after one lookup") \
	X(TLS_UNPROBED, tls_unprobed, "TLS sockets muted because no probed library call touched their first calls") \
	X(UNIX_CLASSIFIED, unix_sockets_classified, "unix stream sockets classified on their first data (followed or muted)") \
	X(UNIX_REUSED, unix_sockets_reused, "unix sockets found at the address of a closed one: the old entry dropped, judged afresh")

enum itap_stat {
#define ITAP_STAT_ENUM(NAME, name, help) ITAP_STAT_##NAME,
	ITAP_STAT_LIST(ITAP_STAT_ENUM)
#undef ITAP_STAT_ENUM
	ITAP_STAT_MAX = 16,
};

/*
 * One event in the ring buffer: this header, then head_len bytes of payload
 * head, then tail_len bytes of payload tail, then (AF_UNIX first events only)
 * path_len bytes of the socket's path. Records are 8-byte aligned by the
 * ring buffer; the header size is a multiple of 8.
 *
 * Per-connection constants (cgroup_id, comm, srtt_us) are filled on a
 * socket's first data event (ITAP_F_NEW_SOCKET) and on state events only, and
 * are zero otherwise: they cost a helper call each on every traced send.
 */
struct itap_event {
	__u64 ts_ns;     /* CLOCK_MONOTONIC at syscall exit (bpf_ktime_get_ns) */
	__u64 enter_ns;  /* at syscall entry; ts_ns - enter_ns = time in the call */
	__u64 sock_id;   /* kernel address of struct sock: identity while it lives */
	__u64 cgroup_id; /* cgroup v2 id of the calling task */
	__s64 ret;       /* bytes transferred, or -errno */
	__u64 requested; /* bytes the caller asked to move (count, or sum of iov_len) */
	__u32 pid;       /* thread group id */
	__u32 tid;
	__s32 fd;
	/*
	 * TCP: write_seq after a send / copied_seq after a receive. AF_UNIX has
	 * no sequence: the agent's own count of the bytes this socket sent /
	 * received since it was classified, kept in its itap_conn entry and
	 * advanced by every traced call (see itap_conn.unix_sent).
	 */
	__u32 seq_end;
	__u16 kind;      /* enum itap_event_kind */
	__u8 direction;  /* enum itap_direction */
	__u8 syscall;    /* enum itap_syscall */
	__u16 family;    /* AF_INET / AF_INET6 / AF_UNIX */
	__u16 flags;     /* enum itap_event_flags */
	__u16 local_port;  /* host order (AF_UNIX: 0) */
	__u16 remote_port; /* host order (AF_UNIX: 0) */
	__u16 head_len;
	__u16 tail_len;
	/* IPv4 in the first 4 bytes; AF_UNIX: struct itap_unix_ends across both */
	__u8 local_addr[16];
	__u8 remote_addr[16];
	__u32 srtt_us;   /* smoothed RTT (tcp_sock srtt_us >> 3); see below */
	__u8 old_state;  /* ITAP_EV_STATE only: TCP states as in the kernel */
	__u8 new_state;
	__u16 path_len;  /* AF_UNIX first event: bytes of the path after the tail (0: none, or not the first) */
	char comm[ITAP_COMM_LEN];
	/*
	 * Receive events only: an arrival (sk_data_ready) not reported before,
	 * carried on the read that follows it instead of its own ITAP_PATH_ARRIVED
	 * event. A reader that keeps up gets every arrival this way, at no ring
	 * record of its own; only an arrival that finds an earlier one still
	 * unread is sent alone (see bpf/programs/delivery_signals.bpf.c). 0 = none.
	 */
	__u64 arrived_ns;
	/*
	 * rcv_nxt at that arrival. AF_UNIX sends (no arrival to carry): the
	 * bytes of this socket its reader has not consumed yet, as the kernel
	 * charges them to the send buffer (skb overhead included), after the call.
	 */
	__u32 arrived_seq;
	__u32 peer_pid;    /* AF_UNIX first event: the peer's process (SO_PEERCRED), 0 when unknown */
	/* ITAP_F_TLS data events and ITAP_EV_TLS_BIND only (0 otherwise) */
	__u64 tls_ssl;      /* the library's connection object (SSL*): identity until the socket is known */
	__u64 tls_start_ns; /* the socket's first TLS handshake record, on a socket's first event (0: joined later) */
	__u32 tls_seq;      /* TCP sequence after the ciphertext call that carried these bytes; 0: not seen */
	__u16 tls_lib;      /* which attached TLS library or binary made the call (capture's table) */
	__u16 reserved3;
};

/*
 * AF_UNIX: what an event's local_addr and remote_addr hold (32 bytes, one
 * after the other). The kernel knows both ends of a unix connection, so the
 * two ends are joined by socket, not by address: this socket's sock_id is
 * its peer's peer_sock. The inode is the one ss -x and /proc/PID/fd show.
 */
struct itap_unix_ends {
	__u64 sock;      /* this socket's struct sock address (= sock_id) */
	__u32 ino;       /* this socket's inode */
	__u32 reserved;
	__u64 peer_sock; /* the peer's struct sock address (0: not connected) */
	__u64 reserved2;
};

/*
 * Delivery signals: where the bytes of a followed socket are after the send
 * (acknowledged by the peer's kernel, queued at a local receiver) and what the
 * path did to them (retransmissions, memory limits). 72 bytes: one per ACK that
 * advances over sent data, so they must stay small. ts_ns, sock_id and kind sit
 * at the offsets they have in struct itap_event: the consumer dispatches on
 * kind before knowing which struct it holds.
 */
struct itap_path_event {
	__u64 ts_ns;     /* CLOCK_MONOTONIC when the kernel processed the signal */
	__u64 value;     /* BUF_LIMIT: bytes the protocol had allocated; else 0 */
	__u64 sock_id;   /* kernel address of struct sock */
	__u32 seq;       /* ACK: ack_seq; ARRIVED: rcv_nxt; RETRANSMIT: first sequence of the segment */
	__u32 window;    /* ACK: the window the peer advertised, in bytes (scaled) */
	__u32 srtt_us;   /* smoothed RTT at the time of the signal */
	__u32 reserved0;
	__u8 reserved1[24];
	__u16 kind;      /* ITAP_EV_PATH */
	__u8 path_kind;  /* enum itap_path_kind */
	__u8 reserved2;
	__u32 reserved3;
};

/*
 * Per-socket state kept in the kernel (LRU hash keyed by sock address). The
 * socket's addresses are read from struct sock once and kept here: every later
 * event copies them from the map instead of repeating the probe reads.
 */
struct itap_conn {
	__u8 verdict; /* enum itap_verdict */
	__u8 hinted;  /* counted in itap_follow_hint: uncount when the socket closes */
	__u16 family; /* 0 until the addresses below are cached */
	__u16 local_port;
	__u16 remote_port;
	__u64 first_seen_ns;
	__u8 local_addr[16];
	__u8 remote_addr[16];
	/* socket tracepoint set: when the send in progress started copying (0 = none) */
	__u64 send_start_ns;
	/* delivery signals (see itap_path_event) */
	__u32 snd_end;    /* write_seq after this socket's last traced send */
	__u32 ack_seen;   /* last ack_seq reported */
	__u32 rcv_seen;   /* last rcv_nxt reported */
	__u8 sent;        /* snd_end/ack_seen are valid */
	__u8 zero_window; /* the peer's window was 0 at the last ACK */
	__u8 transport;   /* enum itap_transport, set when the entry is created */
	__u8 tls_reported; /* TLS socket: its first plaintext event went out (the next ones are not new) */
	/* the newest arrival, for the next read to carry (itap_event.arrived_ns) */
	__u32 arr_seq;       /* rcv_nxt at that arrival */
	__u32 arr_taken_seq; /* arr_seq of the last arrival a read carried */
	__u64 arr_ns;        /* 0 = none yet */
	/*
	 * AF_UNIX only. The socket's inode when the entry was made: a unix socket
	 * has no close the kernel side sees, so a later call whose socket has
	 * another inode (0 once closed) finds the entry of a closed socket whose
	 * address was reused, and drops it. And the bytes sent / received since
	 * the entry was made: what a TCP sequence gives, for positions and holes.
	 */
	__u32 ino;
	__u32 unix_sent;
	__u32 unix_rcvd;
	/* TLS sockets only */
	__u8 tls_handshake; /* seen from its handshake: first_seen_ns is the handshake's start */
	__u8 tls_probed;    /* a probed library call (handshake included) moved its ciphertext: it is not blind */
	__u8 tls_blind;     /* ciphertext calls before any probed one (ITAP_TLS_BLIND_CALLS mutes) */
	__u8 pad3[1];
};

/*
 * The layout, pinned: checked by clang -target bpf (C11 _Static_assert) and by
 * g++ (static_assert), so both sides fail to build when a field moves.
 */
#ifdef __cplusplus
#define ITAP_ABI_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define ITAP_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#define ITAP_ABI_OFFSET(type, field, off) \
	ITAP_ABI_ASSERT(__builtin_offsetof(struct type, field) == (off), #type "." #field " moved: update BPF and userspace together")

ITAP_ABI_ASSERT(sizeof(struct itap_event) == 176, "itap_event layout changed: update BPF and userspace together");
ITAP_ABI_ASSERT(sizeof(struct itap_event) % 8 == 0, "ring buffer records must keep 8-byte alignment of payload");
ITAP_ABI_OFFSET(itap_event, ts_ns, 0);
ITAP_ABI_OFFSET(itap_event, sock_id, 16);
ITAP_ABI_OFFSET(itap_event, ret, 32);
ITAP_ABI_OFFSET(itap_event, pid, 48);
ITAP_ABI_OFFSET(itap_event, seq_end, 60);
ITAP_ABI_OFFSET(itap_event, kind, 64);
ITAP_ABI_OFFSET(itap_event, family, 68);
ITAP_ABI_OFFSET(itap_event, head_len, 76);
ITAP_ABI_OFFSET(itap_event, local_addr, 80);
ITAP_ABI_OFFSET(itap_event, remote_addr, 96);
ITAP_ABI_OFFSET(itap_event, srtt_us, 112);
ITAP_ABI_OFFSET(itap_event, comm, 120);
ITAP_ABI_OFFSET(itap_event, arrived_ns, 136);
ITAP_ABI_OFFSET(itap_event, arrived_seq, 144);
ITAP_ABI_OFFSET(itap_event, tls_ssl, 152);
ITAP_ABI_OFFSET(itap_event, tls_start_ns, 160);
ITAP_ABI_OFFSET(itap_event, tls_seq, 168);
ITAP_ABI_OFFSET(itap_event, tls_lib, 172);
ITAP_ABI_OFFSET(itap_event, path_len, 118);
ITAP_ABI_OFFSET(itap_event, peer_pid, 148);
ITAP_ABI_ASSERT(sizeof(struct itap_unix_ends) == 32, "itap_unix_ends must cover local_addr and remote_addr exactly");
ITAP_ABI_ASSERT(__builtin_offsetof(struct itap_event, remote_addr) ==
			__builtin_offsetof(struct itap_event, local_addr) + 16,
		"itap_unix_ends overlays local_addr and remote_addr: they must be contiguous");
ITAP_ABI_ASSERT(__builtin_offsetof(struct itap_conn, remote_addr) ==
			__builtin_offsetof(struct itap_conn, local_addr) + 16,
		"itap_unix_ends overlays local_addr and remote_addr: they must be contiguous");
ITAP_ABI_ASSERT(sizeof(struct itap_conn) == 104, "itap_conn layout changed: update BPF and userspace together");
ITAP_ABI_OFFSET(itap_conn, arr_ns, 80);
ITAP_ABI_OFFSET(itap_conn, transport, 70);
ITAP_ABI_OFFSET(itap_conn, ino, 88);
ITAP_ABI_OFFSET(itap_conn, unix_sent, 92);
ITAP_ABI_ASSERT(sizeof(struct itap_path_event) == 72, "itap_path_event layout changed: update BPF and userspace together");
/* consumers dispatch on these before the struct is known */
#define ITAP_ABI_SAME_OFFSET(field)                                                                 \
	ITAP_ABI_ASSERT(__builtin_offsetof(struct itap_path_event, field) ==                         \
				__builtin_offsetof(struct itap_event, field),                                 \
			"itap_path_event." #field " must sit where itap_event has it")
ITAP_ABI_SAME_OFFSET(ts_ns);
ITAP_ABI_SAME_OFFSET(sock_id);
ITAP_ABI_SAME_OFFSET(kind);
ITAP_ABI_OFFSET(itap_path_event, seq, 24);
ITAP_ABI_OFFSET(itap_path_event, path_kind, 66);
ITAP_ABI_ASSERT((ITAP_HEAD_MAX & (ITAP_HEAD_MAX - 1)) == 0, "head cap must be a power of two (BPF masks)");
ITAP_ABI_ASSERT((ITAP_TAIL_MAX & (ITAP_TAIL_MAX - 1)) == 0, "tail cap must be a power of two (BPF masks)");
ITAP_ABI_ASSERT((ITAP_HINT_SLOTS & (ITAP_HINT_SLOTS - 1)) == 0, "follow-hint slots must be a power of two (BPF masks)");
ITAP_ABI_ASSERT(ITAP_PATH_ROOM == 128 && ITAP_PATH_MAX < ITAP_PATH_ROOM,
		"path room: 128 (the mask in bpf/helpers/sock.bpf.h), above sun_path's size");
ITAP_ABI_ASSERT(ITAP_HEAD_DEFAULT <= ITAP_HEAD_MAX && ITAP_TAIL_DEFAULT <= ITAP_TAIL_MAX, "defaults within the caps");

#endif /* INFERTAP_ABI_H */
