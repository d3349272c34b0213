/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The eight send/recv syscalls: their numbers on each architecture, where
 * their number and arguments sit in the saved user registers (struct pt_regs),
 * and the user buffer they describe (a plain buffer, an iovec array, or a
 * msghdr's iovec array).
 *
 * Register access goes through libbpf's arch macros (bpf_tracing.h, chosen by
 * -D__TARGET_ARCH_<arch>); only the syscall number has no libbpf macro and is
 * named here per arch.
 */
#ifndef INFERTAP_ARGS_BPF_H
#define INFERTAP_ARGS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "maps/maps.bpf.h"

#if defined(__TARGET_ARCH_x86)
/* arch/x86/entry/syscalls/syscall_64.tbl */
#define NR_read 0
#define NR_write 1
#define NR_readv 19
#define NR_writev 20
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
/* the syscall number in saved user registers, a local copy or a kernel pointer */
#define ITAP_SYSCALL_NR(regs) ((regs)->orig_ax)
#define ITAP_SYSCALL_NR_CORE(regs) BPF_CORE_READ(regs, orig_ax)
/* first argument, from a local copy of the registers */
#define ITAP_SYSCALL_ARG1(regs) PT_REGS_PARM1_SYSCALL(regs)
#elif defined(__TARGET_ARCH_arm64)
/* include/uapi/asm-generic/unistd.h (arm64 has no read/write aliases of its own) */
#define NR_read 63
#define NR_write 64
#define NR_readv 65
#define NR_writev 66
#define NR_sendto 206
#define NR_recvfrom 207
#define NR_sendmsg 211
#define NR_recvmsg 212
#define ITAP_SYSCALL_NR(regs) ((regs)->syscallno)
#define ITAP_SYSCALL_NR_CORE(regs) BPF_CORE_READ(regs, syscallno)
/*
 * libbpf's PT_REGS_PARM1_SYSCALL is a CO-RE read of orig_x0 on arm64 (x0
 * becomes the return value); on a local copy the field is read directly.
 */
#define ITAP_SYSCALL_ARG1(regs) ((regs)->orig_x0)
#else
#error "infertap: syscall numbers for this architecture are missing (build with -D__TARGET_ARCH_x86 or _arm64)"
#endif
#define ITAP_SYSCALL_ARG2(regs) PT_REGS_PARM2_SYSCALL(regs)
#define ITAP_SYSCALL_ARG3(regs) PT_REGS_PARM3_SYSCALL(regs)
#define ITAP_SYSCALL_ARG4(regs) PT_REGS_PARM4_SYSCALL(regs) /* x86: r10, not rcx */

/* enum itap_syscall of a syscall number, 0 for any other syscall */
static __always_inline __u8 syscall_of_nr(long nr)
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

static __always_inline bool syscall_sends(__u8 sc)
{
	return sc <= ITAP_SC_SENDMSG;
}

/* the buffer is an iovec array (readv/writev, or a msghdr's) */
static __always_inline bool syscall_is_vectored(__u8 sc)
{
	return sc == ITAP_SC_WRITEV || sc == ITAP_SC_READV || sc == ITAP_SC_SENDMSG ||
	       sc == ITAP_SC_RECVMSG;
}

/* Sum of iov_len over the first ITAP_IOV_MAX of count iovecs at iov. */
static __always_inline __u64 iov_total_length(const struct iovec *iov, __u64 count)
{
	__u64 total = 0;

#pragma unroll
	for (int i = 0; i < ITAP_IOV_MAX; i++) {
		__u64 len = 0;

		if (i >= count)
			break;
		if (bpf_probe_read_user(&len, sizeof(len), &iov[i].iov_len))
			break;
		total += len;
	}
	return total;
}

/* The user buffer of a send/recv syscall, from its arguments. */
static __always_inline void describe_buffer(struct itap_args *a, __u8 sc, int fd, __u64 buf, __u64 count)
{
	a->fd = fd;
	a->syscall = sc;
	a->direction = syscall_sends(sc) ? ITAP_DIR_SEND : ITAP_DIR_RECV;
	if (sc == ITAP_SC_SENDMSG || sc == ITAP_SC_RECVMSG) {
		struct user_msghdr *msg = (struct user_msghdr *)buf;
		struct iovec *iov = NULL;
		__u64 iovlen = 0;

		bpf_probe_read_user(&iov, sizeof(iov), &msg->msg_iov);
		bpf_probe_read_user(&iovlen, sizeof(iovlen), &msg->msg_iovlen);
		buf = (__u64)iov;
		count = iovlen;
	}
	if (syscall_is_vectored(sc)) {
		a->iovcnt = count > 0xffffffffULL ? 0xffffffffU : (__u32)count;
		a->requested = iov_total_length((const struct iovec *)buf, count);
	} else {
		a->requested = count;
	}
	a->buf = buf;
}

#endif /* INFERTAP_ARGS_BPF_H */
