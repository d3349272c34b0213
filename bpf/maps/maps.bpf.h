/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every map of the capture and its read-only configuration, in one place.
 *
 * Each program file includes this header and is compiled on its own; the
 * objects are then linked into one (bpftool gen object). The definitions are
 * __weak, as in Falco's modern probe: every object carries the same
 * definition and the linker keeps one, so all programs share each map and
 * each configuration value, and the loader sees them once in the skeleton.
 */
#ifndef INFERTAP_MAPS_BPF_H
#define INFERTAP_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "infertap/abi.h"

/* ---- configuration (rodata, set by the loader before load) ---- */
__weak const volatile __u32 self_tgid = 0; /* 0: trace self too */
__weak const volatile bool filter_pids = false;
__weak const volatile bool filter_cgroups = false;
__weak const volatile bool filter_ports = false;
/* targeting.unix_paths is set: unix sockets pass to userspace, which matches their path (docs/configuration.md) */
__weak const volatile bool filter_unix_paths = false;
__weak const volatile __u32 head_bytes = ITAP_HEAD_DEFAULT;
__weak const volatile __u32 tail_bytes = ITAP_TAIL_DEFAULT;
__weak const volatile __u64 wakeup_bytes = 256 * 1024;
/* tcp_destroy_sock is attached: a socket closed with unread bytes keeps its entry until then */
__weak const volatile bool destroy_signal = false;
/* TLS library probes are attached: sockets carrying TLS records get ITAP_VERDICT_TLS, not muted */
__weak const volatile bool tls_enabled = false;
/*
 * fentry/unix_sock_destructor is attached: a unix socket's entry goes when the
 * socket is freed, so no call needs to tell it from an older socket at the
 * same address (the per-call inode check in helpers/gate.bpf.h is off).
 */
__weak const volatile bool unix_close_signal = false;

/* Arguments of a send/recv in flight, keyed by pid_tgid (syscall sets). */
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
	__u8 transport;  /* enum itap_transport, when the gate read it (unclassified sockets) */
	__u8 pad[3];
};

/*
 * A TLS library call in progress (uprobe entry to return), by thread. A
 * send/recv the library makes on its socket inside the call fills sk and the
 * cipher_* fields (the ciphertext's time and TCP sequence).
 */
struct itap_tls_call {
	__u64 ssl;       /* SSL* */
	__u64 buf;       /* plaintext buffer */
	__u64 num;       /* bytes asked */
	__u64 out_len;   /* _ex forms: the size_t* the library writes the count to; 0 otherwise */
	__u64 enter_ns;
	__u64 sk;        /* socket of a nested send/recv (0: none yet) */
	__u64 cipher_ts; /* when the last nested send/recv returned */
	__u32 cipher_seq; /* TCP sequence after it */
	__u16 lib;       /* the attachment's cookie: which library or binary */
	__u8 direction;  /* enum itap_direction */
	__u8 handshake;  /* SSL_do_handshake: ciphertext only, no plaintext event */
};

/* A TLS connection object (SSL*): its socket once known, its plaintext counts, its verdict. */
struct itap_tls_conn {
	__u64 sk;
	__u32 plain_out; /* plaintext bytes written: the stream position after the last SSL_write */
	__u32 plain_in;  /* plaintext bytes read */
	__u8 verdict;    /* of its plaintext: 0 until classified, then FOLLOW or MUTED */
	__u8 pad[7];
};

/*
 * Per thread, what finds the socket of a library that does its own socket
 * I/O later (memory BIO): the TLS connection it last wrote without a socket,
 * and the TLS socket it last received on.
 */
struct itap_tls_thread {
	__u64 unbound_ssl; /* 0: none */
	__u64 recv_sk;
	__u64 recv_ns;
};

/*
 * Scratch record. Twice the caps so that every masked offset + bounded length
 * stays inside the value whatever the verifier assumes about the operands;
 * then room for a unix socket's path after the tail.
 */
#define ITAP_HDR_SIZE sizeof(struct itap_event)
#define ITAP_SCRATCH_SIZE (ITAP_HDR_SIZE + 2 * ITAP_HEAD_MAX + 2 * ITAP_TAIL_MAX + ITAP_PATH_ROOM)
struct itap_scratch {
	__u8 data[ITAP_SCRATCH_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* the loader overrides */
} itap_rb __weak SEC(".maps");

/* Per-socket verdict and state (struct itap_conn), keyed by struct sock address. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct itap_conn);
} itap_conns __weak SEC(".maps");

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
} itap_follow_hint __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct itap_args);
} itap_args __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct itap_tls_call);
} itap_tls_calls __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* SSL* */
	__type(value, struct itap_tls_conn);
} itap_tls_conns __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct itap_tls_thread);
} itap_tls_threads __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} itap_pid_filter __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* cgroup v2 id */
	__type(value, __u8);
} itap_cgroup_filter __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16); /* port, host order */
	__type(value, __u8);
} itap_port_filter __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct itap_scratch);
} itap_scratch __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ITAP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} itap_stats __weak SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ITAP_DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} itap_drops __weak SEC(".maps");

#endif /* INFERTAP_MAPS_BPF_H */
