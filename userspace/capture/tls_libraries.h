// Where TLS lives on this host: every executable file mapped by a process
// (read from /proc/PID/maps) that defines SSL_write and SSL_read — libssl.so.3,
// libssl.so.1.1, a binary with OpenSSL built in (Node.js) — gets the OpenSSL
// probes once per file (device + inode), for every process that maps it, or,
// when targeting names processes (capture/tls_targets.h), once per eligible
// process that maps it; a C library gets a dlopen return probe, so a library
// loaded later is found when it is loaded. Exec and dlopen signals from the kernel say which process
// to look at; a slow full rescan catches what a lost signal missed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/counter.h"
#include "capture/elf_symbols.h"
#include "capture/library_names.h"
#include "capture/proc_maps.h"
#include "capture/tls_targets.h"
#include "capture/uprobes.h"

struct bpf_program;

namespace infertap::capture {

struct LoadNote;

// The programs of bpf/programs/tls/ this attaches (loaded, not attached).
struct TlsPrograms {
  bpf_program* write_enter = nullptr;
  bpf_program* write_ex_enter = nullptr;
  bpf_program* read_enter = nullptr;
  bpf_program* read_ex_enter = nullptr;
  bpf_program* io_exit = nullptr;
  bpf_program* ssl_free = nullptr;
  bpf_program* dlopen_exit = nullptr;
  bpf_program* handshake_enter = nullptr;  // SSL_do_handshake: its socket calls are a probed library's
  bpf_program* handshake_exit = nullptr;
};

#define INFERTAP_TLS_LIBRARY_COUNTERS(X)                                                                            \
  X(tls_libraries_attached, "TLS library files (OpenSSL libraries, binaries with OpenSSL built in) probed")        \
  X(tls_attach_failures, "TLS library files that could not be probed (named in the log)")                          \
  X(tls_files_changed, "mapped files that were another file when opened (replaced under the agent): not read, not probed") \
  X(tls_libraries_deleted, "TLS library files probed while deleted or replaced on disk (still mapped by a process)") \
  X(tls_libraries_released, "probes released from TLS library files no process maps any more")                     \
  X(tls_files_forgotten, "inspected files without probes forgotten to bound the agent's memory (inspected again if mapped)") \
  X(tls_process_scans, "process mappings read to find TLS libraries")                                              \
  X(tls_processes_gone, "processes that exited before their mappings could be read")                               \
  X(tls_scan_overflows, "exec/dlopen signals beyond the scan queue (a full rescan followed)")                     \
  X(tls_processes_probed, "targeted processes given TLS probes of their own (targeting names processes)")           \
  X(tls_processes_released, "per-process TLS probes released after their process exited")

struct TlsLibraryStats {
#define TLS_LIBRARY_FIELD(name, help) std::uint64_t name = 0;
  INFERTAP_TLS_LIBRARY_COUNTERS(TLS_LIBRARY_FIELD)
#undef TLS_LIBRARY_FIELD
  template <class F>
  void for_each(F&& f) const {
#define TLS_LIBRARY_VISIT(name, help) f(base::Counter{#name, help, base::CounterKind::total, name});
    INFERTAP_TLS_LIBRARY_COUNTERS(TLS_LIBRARY_VISIT)
#undef TLS_LIBRARY_VISIT
  }
};

class TlsLibraries {
 public:
  // `notes` receives each attach decision (and failure) with its reason.
  // `proc_root`: where the process directories are read (a test's fake tree).
  // `budget`: the uprobes it may place (shared with the Go finder); `uprobes`:
  // how they are placed.
  TlsLibraries(const TlsPrograms& programs, std::vector<LoadNote>* notes, TlsTargets targets = {},
               std::string proc_root = "/proc", ProbeBudget* budget = nullptr, Uprobes uprobes = Uprobes());
  ~TlsLibraries();
  TlsLibraries(const TlsLibraries&) = delete;
  TlsLibraries& operator=(const TlsLibraries&) = delete;

  // Every process now, and the host's own OpenSSL libraries even if unused yet.
  void scan_everything(std::uint64_t now_ns);
  // An exec (its mappings are read now and twice soon after, as the dynamic
  // loader maps libraries) or a dlopen return (read now) in `pid`.
  void on_exec(std::uint32_t pid, std::uint64_t now_ns);
  void on_dlopen(std::uint32_t pid, std::uint64_t now_ns);
  // Runs the scans that are due.
  void tick(std::uint64_t now_ns);
  // Signals were lost (a full queue): everything is scanned at the next tick.
  void rescan_soon() {
    ++stats_.tls_scan_overflows;
    next_full_scan_ns_ = 0;
  }

  // The name of a probed library for records (`openssl-3`, `openssl-1.1`,
  // `static:node`); "" for an unknown id. Safe from any thread.
  std::string_view library_name(std::uint16_t id) const { return names_.name(id); }
  const TlsLibraryStats& stats() const { return stats_; }

 private:
  struct File {
    std::uint16_t id = 0;  // TLS library id (the probes' cookie); 0: not a TLS library
    std::string name;      // its file name, for the notes
    std::vector<std::uint64_t> offsets;  // probe sites of kFunctions (0: not probed); empty: neither TLS nor dlopen
    std::string sites;  // where the I/O probes went, when not at the public entries (for the notes)
    bool probed = false;   // probed once at least (counted, noted)
    ProbeSet links;        // per-file probes
    Tenant tenant;  // who pays for them: the cgroup of the process it was found in ("": the host)
    bool host_library = false;    // in the host's library directories: kept while the agent runs
    bool deleted = false;   // probed through a mapping of a file gone from disk
    std::uint64_t seen_scan = 0;  // the last full scan that found it mapped
    std::uint64_t refused_scan = 0;  // a budget refused it in this full scan: tried again in a later one
    std::vector<std::uint32_t> pids;  // probed: processes seen mapping it (bounded)
  };

  void scan_process(std::uint32_t pid);
  void probe_process(const FileKey& key, File& file, std::uint32_t pid, int fd);
  void widen_to_files();
  void inspect(const FileKey& key, int fd, const std::string& shown, std::string_view name, bool deleted,
               std::uint32_t pid, const Tenant& tenant);
  void probe_file(File& file, int fd, const std::string& shown);
  void unreachable(const FileKey& key, const MappedFile& m, std::uint32_t pid, const std::string& why);
  void mapped_by(File& file, std::uint32_t pid, bool deleted);
  void check_mappers(std::uint64_t now_ns);
  std::vector<UprobeSite> tls_sites(const File& file) const;
  bool place(const File& file, int fd, int pid, const Tenant& tenant, ProbeSet& links, std::string* why);
  void release_unmapped();
  void forget_unprobed();
  void schedule(std::uint32_t pid, std::uint64_t due_ns);
  void note(std::string what, std::string why);

  TlsPrograms programs_;
  std::vector<LoadNote>* notes_;
  TlsTargets targets_;
  std::string proc_root_;
  ProbeBudget own_budget_;  // when the caller gives none
  ProbeBudget* budget_;
  Uprobes uprobes_;
  bool widen_pending_ = false;  // too many processes: per-file probes at the next tick
  std::map<FileKey, File> files_;           // every file inspected, TLS or not
  LibraryNames names_{1, 1024, "openssl"};
  SymbolCache symbols_;  // by build id: a library seen again in another container is not scanned again
  std::multimap<std::uint64_t, std::uint32_t> due_;  // scan time -> pid
  std::uint64_t full_scans_ = 0;
  std::uint64_t next_full_scan_ns_ = 0;
  std::uint64_t next_mapper_check_ns_ = 0;
  std::uint64_t last_full_scan_ns_ = 0;
  bool in_full_scan_ = false;
  TlsLibraryStats stats_;
  ProcessProbes processes_{&stats_.tls_processes_probed, &stats_.tls_processes_released, budget_};
};

}  // namespace infertap::capture
