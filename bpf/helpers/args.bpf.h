/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The eight send/recv syscalls: their numbers on each architecture, where
 * their number and arguments sit in the saved user registers (struct pt_regs),
 * and the user buffer they describe (a plain buffer, an iovec array, or a
 * msghdr's iovec array).
 *
 * Register access goes through libbpf's arch macros (bpf_tracing.h, chosen by
 * -D__TARGET_ARCH_<arch>: PT_REGS_PARMn_CORE_SYSCALL on a kernel pointer,
 * PT_REGS_PARMn_SYSCALL on a local copy); the syscall number has no libbpf
 * macro and is named here per arch, as is what the socket set copies.
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
/* the syscall number in the saved user registers */
#define ITAP_SYSCALL_NR_CORE(regs) BPF_CORE_READ(regs, orig_ax)

/*
 * The socket set's copy of the saved user registers: all of struct pt_regs
 * (168 bytes) in one read, its fields taken with libbpf's macros.
 */
struct itap_syscall_regs {
	struct pt_regs regs;
};

static __always_inline bool read_syscall_regs(struct itap_syscall_regs *r, const struct pt_regs *saved)
{
	return bpf_probe_read_kernel(&r->regs, sizeof(r->regs), saved) == 0;
}

#define ITAP_REGS_NR(r) ((long)(r)->regs.orig_ax)
#define ITAP_REGS_ARG1(r) PT_REGS_PARM1_SYSCALL(&(r)->regs)
#define ITAP_REGS_ARG2(r) PT_REGS_PARM2_SYSCALL(&(r)->regs)
#define ITAP_REGS_ARG3(r) PT_REGS_PARM3_SYSCALL(&(r)->regs)
#define ITAP_REGS_ARG4(r) PT_REGS_PARM4_SYSCALL(&(r)->regs) /* r10, not rcx */
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
#define ITAP_SYSCALL_NR_CORE(regs) BPF_CORE_READ(regs, syscallno)

/*
 * The socket set's copy of the saved user registers. arm64's struct pt_regs
 * is 336 bytes, more than the program's stack has left, and the syscall
 * number sits far from the arguments: x0..x3 and the number are read apart.
 * The socket set runs inside the syscall, before x0 is overwritten by the
 * return value, so x0 is still the first argument (libbpf's
 * PT_REGS_PARM1_SYSCALL reads orig_x0, which stays right after the return).
 */
struct itap_syscall_regs {
	__u64 x[4];
	__s32 nr;
};

static __always_inline bool read_syscall_regs(struct itap_syscall_regs *r, const struct pt_regs *saved)
{
	return bpf_probe_read_kernel(r->x, sizeof(r->x), &saved->regs[0]) == 0 &&
	       bpf_probe_read_kernel(&r->nr, sizeof(r->nr), &saved->syscallno) == 0;
}

#define ITAP_REGS_NR(r) ((long)(r)->nr)
#define ITAP_REGS_ARG1(r) ((r)->x[0])
#define ITAP_REGS_ARG2(r) ((r)->x[1])
#define ITAP_REGS_ARG3(r) ((r)->x[2])
#define ITAP_REGS_ARG4(r) ((r)->x[3])
#else
#error "infertap: syscall numbers for this architecture are missing (build with -D__TARGET_ARCH_x86 or _arm64)"
#endif

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
