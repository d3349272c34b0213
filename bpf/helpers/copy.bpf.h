/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Bounded payload copy: the first head_bytes and the last tail_bytes of what a
 * call moved, gathered across up to ITAP_IOV_MAX iovecs into the per-CPU
 * scratch record, right after its itap_event header.
 */
#ifndef INFERTAP_COPY_BPF_H
#define INFERTAP_COPY_BPF_H

#include "maps/maps.bpf.h"
#include "helpers/args.bpf.h"

/* Which bytes of the call's transfer [0, ret) are copied. */
struct copy_params {
	__u64 tail_start; /* bytes transferred - tail_len */
	__u32 head_len;
	__u32 tail_len;
};

/*
 * Copy the intersection of transferred bytes [pos, pos+seg) (found at user
 * address src) with the head and the tail. Returns 1 when a user read failed.
 *
 * A global (noinline, non-static) function, defined once in copy.bpf.c: the
 * verifier checks it on its own, instead of once per iovec per program, which
 * keeps the unrolled iovec walk far from the complexity limit.
 */
int itap_copy_segment(struct itap_scratch *rec, const struct copy_params *p, __u64 src, __u64 pos, __u64 seg);

/* Head and tail lengths of a transfer of ret (> 0) bytes, within the caps. */
static __always_inline void plan_copy(struct copy_params *cp, long ret)
{
	__u32 head_cap = head_bytes > ITAP_HEAD_MAX ? ITAP_HEAD_MAX : head_bytes;
	__u32 tail_cap = tail_bytes > ITAP_TAIL_MAX ? ITAP_TAIL_MAX : tail_bytes;
	__u64 rest;

	cp->head_len = (__u64)ret < head_cap ? (__u32)ret : head_cap;
	rest = ret - cp->head_len;
	cp->tail_len = rest < tail_cap ? (__u32)rest : tail_cap;
	cp->tail_start = ret - cp->tail_len;
}

/*
 * Walks the iovecs of a vectored call and copies each one's share. Bytes in
 * iovecs past ITAP_IOV_MAX are not copied: the head keeps what was walked and
 * the tail is dropped. Returns true when a user read failed.
 */
static __always_inline bool copy_iovecs(struct itap_scratch *rec, struct copy_params *cp, const struct itap_args *a,
					long ret)
{
	const struct iovec *iovp = (const struct iovec *)a->buf;
	bool failed = !iovp; /* the msghdr could not be read at entry */
	__u64 pos = 0;

#pragma unroll
	for (int i = 0; i < ITAP_IOV_MAX; i++) {
		struct iovec iov;
		__u64 seg;

		if (i >= a->iovcnt || pos >= (__u64)ret)
			break;
		if (bpf_probe_read_user(&iov, sizeof(iov), &iovp[i])) {
			failed = true;
			break;
		}
		seg = iov.iov_len;
		if (seg > (__u64)ret - pos)
			seg = (__u64)ret - pos;
		if (itap_copy_segment(rec, cp, (__u64)iov.iov_base, pos, seg))
			failed = true;
		pos += seg;
	}
	if (pos < (__u64)ret) {
		if (cp->head_len > pos)
			cp->head_len = pos;
		cp->tail_len = 0;
	}
	return failed;
}

/*
 * Copies head and tail of a call that moved ret (> 0) bytes. a->syscall == 0:
 * the bytes moved outside the known syscalls (sendfile, io_uring, kernel
 * senders): nothing is copied. Returns true when a user read failed.
 */
static __always_inline bool copy_payload(struct itap_scratch *rec, struct copy_params *cp, const struct itap_args *a,
					 long ret)
{
	plan_copy(cp, ret);
	if (!a->syscall) {
		cp->head_len = 0;
		cp->tail_len = 0;
		return false;
	}
	if (!syscall_is_vectored(a->syscall))
		return itap_copy_segment(rec, cp, a->buf, 0, ret);
	return copy_iovecs(rec, cp, a, ret);
}

#endif /* INFERTAP_COPY_BPF_H */
