// Go programs carry their own TLS (crypto/tls), in their executable: every
// eligible process's executable (/proc/PID/exe, at start, at each exec signal
// and in a slow full rescan) that is a Go >= 1.17 binary for x86-64 or arm64
// gets the Go probes once per file (device + inode): the entry of
// crypto/tls.(*Conn).Write and Read, and each of their RET instructions
// (capture/go_binary.h). A Go binary that cannot be probed (too old,
// unsupported, its functions not found) is named in a note and counted. Once
// no process runs a probed executable any more its probes are released.
// When targeting names processes (capture/tls_targets.h) each eligible Go
// process gets probes of its own instead, as the OpenSSL ones: a Go program
// that is not a target never traps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/counter.h"
#include "capture/library_names.h"
#include "capture/tls_targets.h"
#include "capture/uprobes.h"

struct bpf_program;

namespace infertap::capture {

struct LoadNote;
struct GoBinary;

// The programs of bpf/programs/tls/go.bpf.c (loaded, not attached).
struct GoTlsPrograms {
  bpf_program* write_enter = nullptr;
  bpf_program* read_enter = nullptr;
  bpf_program* ret = nullptr;  // on every RET of both
};

#define INFERTAP_GO_TLS_COUNTERS(X)                                                                                 \
  X(go_tls_binaries_attached, "Go executables whose crypto/tls is probed")                                          \
  X(go_tls_binaries_skipped, "Go executables whose crypto/tls cannot be probed (named in the log with the reason)") \
  X(go_tls_attach_failures, "Go executables whose probes failed to attach or were refused by a budget (named in the log)") \
  X(go_tls_return_probes, "uprobes placed on RET instructions of crypto/tls.(*Conn).Write/Read")                    \
  X(go_tls_processes_exited, "processes running a probed Go executable seen gone")                                  \
  X(go_tls_binaries_released, "probes released from Go executables no process runs any more")                       \
  X(go_tls_process_scans, "process executables read to find Go TLS")                                                \
  X(go_tls_processes_probed, "targeted Go processes given crypto/tls probes of their own (targeting names processes)") \
  X(go_tls_processes_released, "per-process Go TLS probes released after their process exited")

struct GoTlsStats {
#define GO_TLS_FIELD(name, help) std::uint64_t name = 0;
  INFERTAP_GO_TLS_COUNTERS(GO_TLS_FIELD)
#undef GO_TLS_FIELD
  template <class F>
  void for_each(F&& f) const {
#define GO_TLS_VISIT(name, help) f(base::Counter{#name, help, base::CounterKind::total, name});
    INFERTAP_GO_TLS_COUNTERS(GO_TLS_VISIT)
#undef GO_TLS_VISIT
  }
};

class GoTls {
 public:
  // Library ids of Go executables (the probes' cookie, events' tls_lib) start
  // here, above the OpenSSL library files' (capture/tls_libraries.h).
  static constexpr std::uint16_t kFirstId = 0x8000;
  static bool is_go_id(std::uint16_t id) { return id >= kFirstId; }

  GoTls(const GoTlsPrograms& programs, std::vector<LoadNote>* notes, TlsTargets targets = {},
        ProbeBudget* budget = nullptr, Uprobes uprobes = Uprobes());
  ~GoTls();
  GoTls(const GoTls&) = delete;
  GoTls& operator=(const GoTls&) = delete;

  void scan_everything(std::uint64_t now_ns);
  void on_exec(std::uint32_t pid) { scan_process(pid); }
  // Exec signals were lost: every process is scanned at the next tick.
  void rescan_soon() { next_full_scan_ns_ = 0; }
  // Watches the processes of probed executables; a full rescan when due.
  void tick(std::uint64_t now_ns);

  // `go:caddy` for an id of a probed Go executable; "" otherwise. Safe from any thread.
  std::string_view library_name(std::uint16_t id) const { return names_.name(id); }
  const GoTlsStats& stats() const { return stats_; }

 private:
  struct Binary {
    std::uint16_t id = 0;  // 0: not probed (not Go, or skipped)
    bool probed = false;   // probed once at least (counted, noted)
    ProbeSet links;        // per-file probes
    Tenant tenant;         // who pays for them: the cgroup of the process it was found in
    std::vector<std::uint32_t> pids;  // processes seen running it (probed ones only)
  };

  void scan_process(std::uint32_t pid);
  bool admit(Binary& binary, const GoBinary& go, const std::string& shown);
  void probe(Binary& binary, const FileKey& key, std::uint32_t pid, int fd, const std::string& shown,
             const GoBinary* just_read);
  bool attach_all(const Binary& binary, int fd, const GoBinary& go, int pid, const Tenant& tenant, ProbeSet& links,
                  std::string* why);
  void check_processes();
  void widen_to_files();
  void release(Binary& binary);
  void note(std::string what, std::string why);

  GoTlsPrograms programs_;
  std::vector<LoadNote>* notes_;
  std::map<FileKey, Binary> binaries_;  // every executable inspected, Go or not
  LibraryNames names_{kFirstId, 1024, "go"};
  std::uint64_t next_full_scan_ns_ = 0;
  std::uint64_t next_process_check_ns_ = 0;
  TlsTargets targets_;
  ProbeBudget own_budget_;  // when the caller gives none
  ProbeBudget* budget_;
  Uprobes uprobes_;
  bool widen_pending_ = false;  // too many processes: per-file probes at the next tick
  GoTlsStats stats_;
  ProcessProbes processes_{&stats_.go_tls_processes_probed, &stats_.go_tls_processes_released, budget_};
};

}  // namespace infertap::capture
