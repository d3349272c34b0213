// The kernel/user ABI as seen from C++, with its layout pinned. A field moved in
// include/infertap/abi.h without updating these fails the build.
#pragma once

#include <cstddef>

extern "C" {
#include "infertap/abi.h"
}

static_assert(sizeof(itap_event) == 152, "itap_event layout changed: update BPF and userspace together");
static_assert(sizeof(itap_event) % 8 == 0, "ring buffer records must keep 8-byte alignment of payload");
static_assert(offsetof(itap_event, ts_ns) == 0);
static_assert(offsetof(itap_event, sock_id) == 16);
static_assert(offsetof(itap_event, ret) == 32);
static_assert(offsetof(itap_event, pid) == 48);
static_assert(offsetof(itap_event, seq_end) == 60);
static_assert(offsetof(itap_event, kind) == 64);
static_assert(offsetof(itap_event, family) == 68);
static_assert(offsetof(itap_event, head_len) == 76);
static_assert(offsetof(itap_event, local_addr) == 80);
static_assert(offsetof(itap_event, remote_addr) == 96);
static_assert(offsetof(itap_event, srtt_us) == 112);
static_assert(offsetof(itap_event, comm) == 120);
static_assert(offsetof(itap_event, arrived_ns) == 136);
static_assert(offsetof(itap_event, arrived_seq) == 144);
static_assert(sizeof(itap_conn) == 88);
static_assert(offsetof(itap_conn, arr_ns) == 80);
static_assert(sizeof(itap_path_event) == 72);
static_assert(offsetof(itap_path_event, ts_ns) == offsetof(itap_event, ts_ns), "consumers dispatch on these before the struct is known");
static_assert(offsetof(itap_path_event, sock_id) == offsetof(itap_event, sock_id));
static_assert(offsetof(itap_path_event, kind) == offsetof(itap_event, kind));
static_assert(offsetof(itap_path_event, seq) == 24);
static_assert(offsetof(itap_path_event, path_kind) == 66);
static_assert((ITAP_HEAD_MAX & (ITAP_HEAD_MAX - 1)) == 0, "head cap must be a power of two (BPF masks)");
static_assert((ITAP_TAIL_MAX & (ITAP_TAIL_MAX - 1)) == 0, "tail cap must be a power of two (BPF masks)");
