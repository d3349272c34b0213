/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Counters (itap_stats, itap_drops: read by the loader's stats()) and the
 * ring buffer's wake-up policy.
 */
#ifndef INFERTAP_COUNTERS_BPF_H
#define INFERTAP_COUNTERS_BPF_H

#include "maps/maps.bpf.h"

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
static __always_inline __u64 ring_wakeup_flags(void)
{
	__u32 idx = ITAP_STAT_EVENTS;
	__u64 *events = bpf_map_lookup_elem(&itap_stats, &idx);

	if (events && (*events & 63) == 0 && bpf_ringbuf_query(&itap_rb, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

#endif /* INFERTAP_COUNTERS_BPF_H */
