// What the loader's files share (not an interface): the loaded object and
// its links, ring and TLS worker (Capture::Impl), the program choice made
// before load, and the steps of Capture::open each file provides. Split by
// concern as libpman is: loader.cpp the lifecycle and privileges,
// loader_programs.cpp the attach choice and attach, loader_rings.cpp the ring
// buffer, loader_maps.cpp the filter and socket maps, loader_stats.cpp the
// counters.
#pragma once

#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "capture/abi_check.h"
#include "capture/loader.h"
#include "infertap.skel.h"

namespace infertap::capture {

struct Capture::Impl {
  infertap_bpf* skel = nullptr;
  std::vector<bpf_link*> links;
  ring_buffer* rb = nullptr;
  std::vector<LoadNote> notes;
  const RecordHandler* handler = nullptr;
  std::uint64_t consumed = 0;
  int ncpus = 1;
  std::unique_ptr<TlsWorker> tls;  // OpenSSL libraries and Go executables, when TLS is captured

  ~Impl() {
    if (rb) ring_buffer__free(rb);
    tls.reset();
    destroy_links();
    if (skel) infertap_bpf__destroy(skel);
  }

  // Detaching a syscall tracepoint waits for an RCU grace period (tens of ms
  // each on 6.x, where syscall tracepoints are faultable); detaching the links
  // from parallel threads lets those waits overlap: ~1.3 s -> ~0.1 s for 17.
  void destroy_links() {
    std::vector<std::thread> threads;
    for (bpf_link* l : links) {
      try {
        threads.emplace_back([l] { bpf_link__destroy(l); });
      } catch (...) {
        bpf_link__destroy(l);  // no thread available: detach inline
      }
    }
    for (auto& t : threads) t.join();
    links.clear();
  }

  // The ring buffer's callback: the TLS finder's signals, else the handler.
  static int on_record(void* ctx, void* data, size_t size);
  // A per-CPU array slot summed over the CPUs.
  std::uint64_t sum_percpu(bpf_map* map, std::uint32_t key) const;
};

namespace loading {

using Notes = std::vector<LoadNote>;

inline constexpr const char* kTracefs = "/sys/kernel/tracing";
inline constexpr const char* kUnixInodeNote = "unix sockets: each call reads the socket's inode";

bool exists(const std::string& path);
std::string errstr(int err);

// Kernel BTF, read once per open and asked by every probe.
using KernelBtf = std::unique_ptr<btf, decltype(&btf__free)>;
KernelBtf load_kernel_btf();

// Delivery signals: each raw tracepoint this kernel has is used; a missing one
// only turns its vantage off.
struct DeliveryProbe {
  const char* tracepoint;
  const char* gives;
  bpf_program* (*program)(const infertap_bpf*);
};
inline constexpr DeliveryProbe kDeliveryProbes[] = {
    {"tcp_probe", "acked times, peer window (zero-window episodes)",
     [](const infertap_bpf* s) { return s->progs.itap_tcp_ack; }},
    {"sk_data_ready", "arrived times at local receivers", [](const infertap_bpf* s) { return s->progs.itap_data_ready; }},
    {"tcp_retransmit_skb", "retransmission counts", [](const infertap_bpf* s) { return s->progs.itap_retransmit; }},
    {"sock_exceed_buf_limit", "socket memory-limit episodes",
     [](const infertap_bpf* s) { return s->progs.itap_buf_limit; }},
};

// Each attach set runs the same capture code (bpf/programs/):
//   sock: sock:sock_{send,recv}_length run only on socket I/O;
//   syscalls: the 8 syscall tracepoints, for every fd;
//   raw: raw sys_enter/sys_exit, on every syscall (no tracefs needed).
enum class AttachSet { sock, syscalls, raw };

// Which programs load, decided before the object is opened.
struct ProgramChoice {
  AttachSet set = AttachSet::raw;
  bool send_start = false;        // socket set: tcp_sendmsg_locked stamps send starts
  bool state_tracepoint = false;  // inet_sock_set_state as a tracepoint (else raw)
  bool destroy = false;           // tcp_destroy_sock: sockets closed with unread bytes are read to the end
  bool unix_close = false;        // fentry/unix_sock_destructor: unix sockets' ends seen, no per-call inode read
  std::vector<const DeliveryProbe*> delivery;
  bool tls = false;  // OpenSSL probes (attached per library file later) and the exec signal
  UprobeMode uprobes = UprobeMode::single;  // how the TLS probes are placed
};

// Why each attach set cannot be used ("" = it can).
struct AttachSetProblems {
  std::string sock;
  std::string syscalls;
  bool tracefs_ready = false;  // tracefs was needed, and is mounted
};

// The steps of Capture::open (loader_programs.cpp unless said otherwise).
// Each returns "" or the error to report, and notes every decision it takes
// with its reason.
AttachSetProblems probe_attach_sets(const CaptureConfig& config, const btf* vmlinux, Notes& notes);
std::string choose_attach_set(const CaptureConfig& config, const AttachSetProblems& problems, ProgramChoice& choice,
                              Notes& notes);
void choose_companions(const btf* vmlinux, const AttachSetProblems& problems, ProgramChoice& choice, Notes& notes);
void choose_unix_close(const btf* vmlinux, ProgramChoice& choice, Notes& notes);
void choose_delivery_probes(const CaptureConfig& config, const btf* vmlinux, ProgramChoice& choice, Notes& notes);
void choose_tls(const CaptureConfig& config, ProgramChoice& choice, Notes& notes);
void select_programs(infertap_bpf* skel, const ProgramChoice& choice);
std::string attach_programs(Capture::Impl& impl, bool* unix_close_failed);
void start_tls(const CaptureConfig& config, const ProgramChoice& choice, Capture::Impl& impl);
std::string fill_filters(const CaptureConfig& config, infertap_bpf* skel);  // loader_maps.cpp
std::string open_ring_buffer(Capture::Impl& impl);                         // loader_rings.cpp

}  // namespace loading
}  // namespace infertap::capture
