// Loads and attaches the kernel side, owns every BPF object (RAII), and drains
// the ring buffer. The only part of infertap that touches libbpf.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/counter.h"
#include "capture/abi_check.h"
#include "capture/go_tls.h"
#include "capture/tls_libraries.h"
#include "capture/tls_worker.h"

namespace infertap::capture {

// How the syscall programs attach. Both sets run the same capture code.
enum class AttachMethod {
  automatic,           // the cheapest set this kernel supports, in the order below
  socket_tracepoints,  // sock:sock_{send,recv}_length: runs only on socket I/O (kernel >= 6.3, tracefs)
  tracepoints,         // syscalls:sys_{enter,exit}_<name>: runs on the 8 syscalls for every fd (tracefs)
  raw_tracepoints,     // raw sys_enter/sys_exit: runs on every syscall, filters by number (no tracefs)
};

// Every method, in the order automatic tries them (after automatic itself).
inline constexpr AttachMethod kAttachMethods[] = {AttachMethod::automatic, AttachMethod::socket_tracepoints,
                                                  AttachMethod::tracepoints, AttachMethod::raw_tracepoints};

// The one spelling of each method in flags and configuration files: "auto",
// "sock", "tracepoint", "raw_tp". Parsing ignores ASCII case; nullopt for any
// other name.
std::optional<AttachMethod> parse_attach_method(std::string_view name);
std::string_view to_string(AttachMethod method);

struct CaptureConfig {
  AttachMethod attach = AttachMethod::automatic;
  // A send or receive copies min(bytes moved, head) + tail bytes: one token
  // event (~250 B) costs the same whatever the caps; the caps matter for
  // bursts (a gateway flushing what it held), whose events are the evidence.
  std::uint32_t head_bytes = ITAP_HEAD_DEFAULT;  // <= ITAP_HEAD_MAX
  std::uint32_t tail_bytes = ITAP_TAIL_DEFAULT;  // <= ITAP_TAIL_MAX
  std::uint32_t ringbuf_bytes = 16u << 20;  // power of two
  // Optional in-kernel filters; empty = every process/port/cgroup eligible.
  std::vector<std::uint32_t> pids;
  std::vector<std::uint16_t> ports;       // local or remote port
  std::vector<std::uint64_t> cgroup_ids;  // cgroup v2 ids
  // Unix socket paths are targeted (the daemon matches them on a connection's
  // first event): unix sockets pass the kernel's socket filter. With ports
  // listed and this off, unix sockets are not followed (they have no port);
  // with this on and no ports, TCP sockets are not.
  bool unix_paths = false;
  bool ignore_self = true;  // never trace the agent's own process
  // Wake the consumer only when this many bytes are pending in the ring (the
  // consumer drains on its own timer otherwise): batching keeps the cost of a
  // traced send low.
  std::uint32_t wakeup_bytes = 256 * 1024;
  // Delivery signals (ACKs, arrivals at local receivers, retransmissions,
  // memory limits) of followed sockets: the acked/arrived vantages, the TCP
  // context of a stream. Off: only the send/receive syscalls are timed.
  bool path_signals = true;
  // TLS streams: the OpenSSL probes on every library file that defines
  // SSL_write/SSL_read (capture/tls_libraries.h). Off: TLS sockets are muted
  // like any other non-HTTP traffic.
  bool tls = true;
  // What the TLS probes may take, per file, per cgroup and in all.
  ProbeBudget::Limits probe_budget;
};

// Counters from both sides, cumulative since load: one field per entry of the
// kernel's lists (include/infertap/abi.h: ITAP_STAT_LIST as <name>,
// ITAP_DROP_LIST as drops_<name>), and the records userspace read.
struct CaptureStats {
#define CAPTURE_STAT_FIELD(NAME, name, help) std::uint64_t name = 0;
#define CAPTURE_DROP_FIELD(NAME, name, help) std::uint64_t drops_##name = 0;
  ITAP_STAT_LIST(CAPTURE_STAT_FIELD)
  ITAP_DROP_LIST(CAPTURE_DROP_FIELD)
#undef CAPTURE_STAT_FIELD
#undef CAPTURE_DROP_FIELD
  std::uint64_t records_consumed = 0;  // ring buffer records userspace read
  TlsLibraryStats tls;                 // where TLS lives: files probed, failures, scans
  GoTlsStats go_tls;                   // Go executables' crypto/tls probed, skipped, released
  UprobeBudgetStats uprobes;           // the TLS probes' budgets: what is placed now, what was refused

  // f(base::Counter) for each kernel counter, then records_consumed.
  template <class F>
  void for_each_stat(F&& f) const {
#define CAPTURE_STAT_VISIT(NAME, name, help) f(base::Counter{#name, help, base::CounterKind::total, name});
    ITAP_STAT_LIST(CAPTURE_STAT_VISIT)
#undef CAPTURE_STAT_VISIT
    f(base::Counter{"records_consumed", "ring buffer records userspace read", base::CounterKind::total,
                    records_consumed});
    tls.for_each(f);
    go_tls.for_each(f);
    uprobes.for_each(f);
  }
  // f(base::Counter) for each drop reason (name = the reason, value = drops_<name>).
  template <class F>
  void for_each_drop(F&& f) const {
#define CAPTURE_DROP_VISIT(NAME, name, help) f(base::Counter{#name, help, base::CounterKind::total, drops_##name});
    ITAP_DROP_LIST(CAPTURE_DROP_VISIT)
#undef CAPTURE_DROP_VISIT
  }

#define CAPTURE_COUNT(NAME, name, help) +1
  static_assert(0 ITAP_STAT_LIST(CAPTURE_COUNT) <= ITAP_STAT_MAX, "itap_stats has no room for ITAP_STAT_LIST");
  static_assert(0 ITAP_DROP_LIST(CAPTURE_COUNT) <= ITAP_DROP_MAX, "itap_drops has no room for ITAP_DROP_LIST");
#undef CAPTURE_COUNT
};

// One decision taken while loading (which attach method, why), for the log.
struct LoadNote {
  std::string what;
  std::string why;
};

class Capture {
 public:
  // Loads, configures and attaches. On failure returns nullptr and sets *error to
  // a message that names the missing privilege or kernel feature and what to do
  // (e.g. "CAP_BPF and CAP_PERFMON are required: run as root").
  static std::unique_ptr<Capture> open(const CaptureConfig& config, std::string* error);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  using RecordHandler = std::function<void(std::span<const std::uint8_t> record)>;
  // Waits up to timeout_ms for data, then drains every pending record into the
  // handler (records are valid only during the call). Returns records handled,
  // or a negative errno (EINTR is returned as 0).
  int poll(int timeout_ms, const RecordHandler& handler);
  // Drains without waiting.
  int drain(const RecordHandler& handler);

  // Stop sending events for a socket (userspace decided it is not a stream).
  // Only a socket the kernel still holds is muted: one closed meanwhile stays
  // gone (its address may be the next socket's). inode: a unix socket's (0 for
  // TCP); an entry the kernel made since for a newer unix socket at the same
  // address (another inode) is left as it is.
  void mute(std::uint64_t sock_id, std::uint32_t inode = 0);
  // Forget a socket: its next data is classified afresh. (Its follow-hint
  // count stays: see itap_follow_hint.) inode: as for mute.
  void forget(std::uint64_t sock_id, std::uint32_t inode = 0);
  // Does the kernel still hold an entry for the socket? Its close deletes it,
  // even when the ring buffer was too full to report the close.
  bool knows(std::uint64_t sock_id) const;
  // Followed sockets as the kernel's follow hint counts them: sockets followed
  // and not closed yet, plus any dropped without a close.
  std::uint64_t followed_hint_total() const;

  CaptureStats stats() const;
  // Decisions taken at load, then the TLS libraries probed (or not) as
  // processes start: a caller logs the ones after those it logged already.
  const std::vector<LoadNote>& notes() const;
  // The TLS library a data event's tls_lib names (`openssl-3`, `static:node`);
  // "" for an unknown one.
  std::string_view tls_library(std::uint16_t id) const;

  struct Impl;

 private:
  explicit Capture(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Mounts tracefs at /sys/kernel/tracing when it is not mounted. Returns "" on
// success or a message.
std::string ensure_tracefs();

}  // namespace infertap::capture
