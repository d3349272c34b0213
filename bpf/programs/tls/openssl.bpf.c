// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * OpenSSL-family TLS (libssl.so.3, libssl.so.1.1, binaries that carry their
 * own SSL_* symbols, BoringSSL builds that keep them): uprobes on the entry
 * and return of SSL_write, SSL_write_ex, SSL_read, SSL_read_ex and
 * SSL_do_handshake (its socket calls are a probed library's, not blind ones),
 * and SSL_free to forget a connection object. The loader attaches them once per library
 * file (every process mapping it) with a cookie naming the file; nothing here
 * depends on struct layouts of the library, so every version works alike.
 * helpers/tls.bpf.h says how a call finds its socket.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "helpers/tls_events.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline __u16 library_of(void *ctx) { return (__u16)bpf_get_attach_cookie(ctx); }

/* int SSL_write(SSL *ssl, const void *buf, int num) */
SEC("uprobe")
int BPF_KPROBE(itap_ssl_write_enter, void *ssl, const void *buf, int num)
{
	return tls_call_enter((__u64)ssl, (__u64)buf, num > 0 ? (__u64)num : 0, 0, ITAP_DIR_SEND, library_of(ctx));
}

/* int SSL_write_ex(SSL *ssl, const void *buf, size_t num, size_t *written) */
SEC("uprobe")
int BPF_KPROBE(itap_ssl_write_ex_enter, void *ssl, const void *buf, size_t num, size_t *written)
{
	return tls_call_enter((__u64)ssl, (__u64)buf, num, (__u64)written, ITAP_DIR_SEND, library_of(ctx));
}

/* int SSL_read(SSL *ssl, void *buf, int num) */
SEC("uprobe")
int BPF_KPROBE(itap_ssl_read_enter, void *ssl, void *buf, int num)
{
	return tls_call_enter((__u64)ssl, (__u64)buf, num > 0 ? (__u64)num : 0, 0, ITAP_DIR_RECV, library_of(ctx));
}

/* int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes) */
SEC("uprobe")
int BPF_KPROBE(itap_ssl_read_ex_enter, void *ssl, void *buf, size_t num, size_t *readbytes)
{
	return tls_call_enter((__u64)ssl, (__u64)buf, num, (__u64)readbytes, ITAP_DIR_RECV, library_of(ctx));
}

/* One return program serves all four: the parked call says which form it was. */
SEC("uretprobe")
int BPF_KRETPROBE(itap_ssl_io_exit, int ret)
{
	return tls_call_exit(ret);
}

/* int SSL_do_handshake(SSL *ssl): its ciphertext is a probed library's. */
SEC("uprobe")
int BPF_KPROBE(itap_ssl_handshake_enter, void *ssl)
{
	return tls_handshake_enter((__u64)ssl, library_of(ctx));
}

SEC("uretprobe")
int BPF_KRETPROBE(itap_ssl_handshake_exit, int ret)
{
	return tls_handshake_exit();
}

/* void SSL_free(SSL *ssl): its address may be a new connection's next. */
SEC("uprobe")
int BPF_KPROBE(itap_ssl_free, void *ssl)
{
	__u64 key = (__u64)ssl;

	bpf_map_delete_elem(&itap_tls_conns, &key);
	return 0;
}
