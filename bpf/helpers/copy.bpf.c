// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The one definition of the global payload-copy function (declared in
 * copy.bpf.h, called by every attach set's emit step). Linked into the object
 * with the program files; the verifier checks it once per program, on its own.
 */
#include "helpers/copy.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * It assumes nothing about its arguments: every offset is masked and every
 * length is bounded, and the scratch is sized so that masked values cannot
 * overflow. Lengths are 1..MAX by construction; written as
 * ((n - 1) & (MAX - 1)) + 1 so the verifier sees the same bound (a clamp gets
 * reordered by clang).
 */
__noinline int itap_copy_segment(struct itap_scratch *rec, const struct copy_params *p, __u64 src, __u64 pos,
				 __u64 seg)
{
	int failed = 0;

	if (!rec || !p)
		return 1;
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
			__u32 head_end = p->head_len & (2 * ITAP_HEAD_MAX - 1);
			__u32 toff = (start - p->tail_start) & (ITAP_TAIL_MAX - 1);
			__u32 len = ((end - start - 1) & (ITAP_TAIL_MAX - 1)) + 1;

			if (bpf_probe_read_user(rec->data + ITAP_HDR_SIZE + head_end + toff, len,
						(const void *)(src + (start - pos))))
				failed = 1;
		}
	}
	return failed;
}
