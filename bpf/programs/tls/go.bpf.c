// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Go crypto/tls (Go >= 1.17, register ABI): a uprobe on the entry of
 * crypto/tls.(*Conn).Write and Read, and one on every RET instruction of
 * each (userspace decodes the functions' code) in place of a uretprobe: a
 * uretprobe rewrites the return address on the stack, which Go moves when it
 * grows a goroutine's stack, and the program crashes. The loader attaches
 * them once per Go executable, with a cookie naming it.
 *
 * func (c *Conn) Write(b []byte) (int, error) / Read(b []byte) (int, error):
 * amd64: c in RAX, b's pointer/length in RBX/RCX, n returned in RAX, g in R14;
 * arm64: X0, X1/X2, n in X0, g in X28.
 * Calls are parked by goroutine (helpers/go_tls.bpf.h); the plaintext event
 * is the OpenSSL path's (helpers/tls_events.bpf.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "helpers/tls_events.bpf.h"
#include "helpers/go_tls.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#if defined(__TARGET_ARCH_x86)
#define GO_REGS(ctx) ((const struct pt_regs *)(ctx))
#define GO_ARG0(r) ((r)->ax)
#define GO_ARG1(r) ((r)->bx)
#define GO_ARG2(r) ((r)->cx)
#define GO_G(r) ((r)->r14)
#elif defined(__TARGET_ARCH_arm64)
#define GO_REGS(ctx) ((const struct user_pt_regs *)(ctx))
#define GO_ARG0(r) ((r)->regs[0])
#define GO_ARG1(r) ((r)->regs[1])
#define GO_ARG2(r) ((r)->regs[2])
#define GO_G(r) ((r)->regs[28])
#else
#error "Go crypto/tls probes: x86 or arm64 only"
#endif
#define GO_RET0(r) GO_ARG0(r)

static __always_inline int go_tls_enter(struct pt_regs *ctx, __u8 direction)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_go_call_key key = {.tgid = id >> 32, .goroutine = GO_G(GO_REGS(ctx))};
	__s64 len = (__s64)GO_ARG2(GO_REGS(ctx));
	struct itap_tls_call c = {};

	if (!tls_call_prepare(&c, go_conn_key(GO_ARG0(GO_REGS(ctx)), key.tgid), GO_ARG1(GO_REGS(ctx)),
			      len > 0 ? (__u64)len : 0, 0, direction, (__u16)bpf_get_attach_cookie(ctx)))
		return 0;
	if (bpf_map_update_elem(&itap_go_calls, &key, &c, BPF_ANY))
		drop_inc(ITAP_DROP_ARGS_MAP_FULL);
	return 0;
}

SEC("uprobe")
int itap_go_tls_write_enter(struct pt_regs *ctx)
{
	return go_tls_enter(ctx, ITAP_DIR_SEND);
}

SEC("uprobe")
int itap_go_tls_read_enter(struct pt_regs *ctx)
{
	return go_tls_enter(ctx, ITAP_DIR_RECV);
}

/* On every RET of both functions: the goroutine's parked call says which it was. */
SEC("uprobe")
int itap_go_tls_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct itap_go_call_key key = {.tgid = id >> 32, .goroutine = GO_G(GO_REGS(ctx))};
	struct itap_tls_call *parked = bpf_map_lookup_elem(&itap_go_calls, &key);
	struct itap_tls_call c;
	__s64 n;

	if (!parked)
		return 0;
	c = *parked;
	bpf_map_delete_elem(&itap_go_calls, &key);
	n = (__s64)GO_RET0(GO_REGS(ctx));
	if (n <= 0)
		return 0;  /* an error or a retry moved nothing */
	stat_inc(ITAP_STAT_TLS_CALLS);
	return emit_tls_data(&c, (__u64)n, id);
}
