#include "capture/go_tls.h"

#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "capture/go_binary.h"
#include "capture/loader.h"
#include "capture/proc_maps.h"

namespace infertap::capture {

namespace {

// A lost exec signal (a full ring buffer) is made up for by this rescan.
constexpr std::uint64_t kFullRescanNs = 60'000'000'000ull;
// How often the processes of probed executables are checked for exits.
constexpr std::uint64_t kProcessCheckNs = 1'000'000'000ull;
constexpr std::size_t kMaxPidsPerBinary = 256;  // beyond: the full rescan finds the others

std::string exe_path(std::uint32_t pid) { return "/proc/" + std::to_string(pid) + "/exe"; }

// The executable a process runs, opened once: what is read and probed is
// this descriptor's file, whatever the process execs meanwhile.
struct OpenedExe {
  int fd = -1;
  FileKey key;
  explicit OpenedExe(std::uint32_t pid) : fd(::open(exe_path(pid).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)) {
    struct stat st {};
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
      ::close(fd);
      fd = -1;
    }
    if (fd >= 0) key = {st.st_dev, st.st_ino};
  }
  ~OpenedExe() {
    if (fd >= 0) ::close(fd);
  }
  OpenedExe(const OpenedExe&) = delete;
  OpenedExe& operator=(const OpenedExe&) = delete;
};

// The executable file a process runs (stat follows /proc/PID/exe to it).
bool exe_key(std::uint32_t pid, std::uint64_t* dev, std::uint64_t* ino) {
  struct stat st;
  if (::stat(exe_path(pid).c_str(), &st) != 0) return false;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return true;
}

// The path of the executable opened as `fd`, for the notes: the file read,
// whatever the process runs by now.
std::string exe_target(int fd, std::uint32_t pid) {
  char target[4096];
  const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : exe_path(pid);
}

std::string version_text(const GoBinary& go) { return go.version.empty() ? "Go version unknown" : go.version; }


}  // namespace

GoTls::GoTls(const GoTlsPrograms& programs, std::vector<LoadNote>* notes, TlsTargets targets, ProbeBudget* budget,
             Uprobes uprobes)
    : programs_(programs),
      notes_(notes),
      targets_(std::move(targets)),
      budget_(budget ? budget : &own_budget_),
      uprobes_(uprobes) {
  if (targets_.per_process())
    note("Go TLS probes per targeted process, not per executable",
         "targeting names processes (" + targets_.narrowed_by() + "): Go programs that are not targets never trap");
}

GoTls::~GoTls() {
  std::vector<ProbeSet> sets;
  for (auto& [key, binary] : binaries_) sets.push_back(std::move(binary.links));
  release_all(sets);
}

void GoTls::note(std::string what, std::string why) {
  if (notes_) notes_->push_back(LoadNote{std::move(what), std::move(why)});
}

void GoTls::scan_everything(std::uint64_t now_ns) {
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      char* end = nullptr;
      const unsigned long pid = std::strtoul(entry->d_name, &end, 10);
      if (end != entry->d_name && *end == '\0') scan_process(static_cast<std::uint32_t>(pid));
    }
    closedir(proc);
  }
  next_full_scan_ns_ = now_ns + kFullRescanNs;
}

void GoTls::tick(std::uint64_t now_ns) {
  if (widen_pending_) widen_to_files();
  processes_.release_exited(now_ns);
  if (now_ns >= next_process_check_ns_) {
    next_process_check_ns_ = now_ns + kProcessCheckNs;
    check_processes();
  }
  if (now_ns >= next_full_scan_ns_) scan_everything(now_ns);
}

// Kernel threads and processes gone have no readable executable: nothing to do.
void GoTls::scan_process(std::uint32_t pid) {
  if (targets_.per_process() && !targets_.eligible(pid)) return;
  const OpenedExe exe(pid);
  if (exe.fd < 0) return;
  ++stats_.go_tls_process_scans;
  const bool inspected = binaries_.contains(exe.key);
  Binary& binary = binaries_[exe.key];
  if (inspected && !binary.id) return;  // not Go, or not probed
  const std::string shown = exe_target(exe.fd, pid);
  if (binary.tenant.empty()) binary.tenant = process_tenant(pid);
  std::optional<GoBinary> first_read;
  if (!inspected && !admit(binary, first_read.emplace(inspect_go_binary(exe.fd)), shown)) return;
  probe(binary, exe.key, pid, exe.fd, shown, first_read ? &*first_read : nullptr);
  if (binary.links.empty() || binary.pids.size() >= kMaxPidsPerBinary) return;
  if (std::find(binary.pids.begin(), binary.pids.end(), pid) == binary.pids.end()) binary.pids.push_back(pid);
}

// A Go executable seen for the first time gets its library id, or is named
// and counted when it cannot be probed; false when it is not probed.
bool GoTls::admit(Binary& binary, const GoBinary& go, const std::string& shown) {
  if (!go.is_go) return false;
  const std::string version = version_text(go);
  if (!go.problem.empty()) {
    ++stats_.go_tls_binaries_skipped;
    note("Go TLS of " + shown + " (" + version + ") not probed: its TLS streams are not seen", go.problem);
    return false;
  }
  binary.id = names_.id_for("go:" + std::string(base_name(shown)));
  return true;
}

// The probes `pid` needs: its own when targeting names processes, else the
// executable's for every process (once, again after a release). `fd` is the
// executable (opened once: unless just read, it is read again, as its inode
// may hold another file by now).
void GoTls::probe(Binary& binary, const FileKey& key, std::uint32_t pid, int fd, const std::string& shown,
                  const GoBinary* just_read) {
  const bool own = targets_.per_process();
  ProbeSet* links = own ? processes_.links_for(pid, key) : binary.links.empty() ? &binary.links : nullptr;
  if (!links) {
    if (processes_.full()) widen_pending_ = true;
    return;
  }
  std::optional<GoBinary> read_now;
  const GoBinary& go = just_read ? *just_read : read_now.emplace(inspect_go_binary(fd));
  if (!go.problem.empty() || !go.is_go) return;
  const std::string name(library_name(binary.id));
  const std::string who = own ? " for process " + std::to_string(pid) : "";
  const Tenant tenant = own ? process_tenant(pid) : binary.tenant;
  std::string why;
  if (!attach_all(binary, fd, go, own ? static_cast<int>(pid) : -1, tenant, *links, &why)) {
    ++stats_.go_tls_attach_failures;
    note("Go TLS of " + shown + " (" + version_text(go) + ") not probed" + who + ": its TLS streams are not seen", why);
    return;
  }
  if (own) processes_.placed(pid, key, tenant);
  const bool first = !binary.probed;
  binary.probed = true;
  if (first) ++stats_.go_tls_binaries_attached;
  if (!first && !own) return;  // attached again after a release: noted once
  note("probing Go TLS in " + std::string(base_name(shown)) + " as " + name + who,
       (own ? "targeted by " + targets_.narrowed_by() + ", " : "") + version_text(go) + ", crypto/tls.(*Conn).Write/Read from " +
           go.symbols_from + ", " + std::to_string(go.write.returns.size() + go.read.returns.size()) + " RET probes (" +
           shown + ")");
}

// Entry of Write and Read and each of their returns, within the budget; all
// or none. pid -1: for every process.
bool GoTls::attach_all(const Binary& binary, int fd, const GoBinary& go, int pid, const Tenant& tenant,
                       ProbeSet& links, std::string* why) {
  std::vector<UprobeSite> sites = {{programs_.write_enter, go.write.probe_at, binary.id, false},
                                   {programs_.read_enter, go.read.probe_at, binary.id, false}};
  for (const GoFunction* f : {&go.write, &go.read})
    for (std::uint64_t ret : f->returns) sites.push_back({programs_.ret, ret, binary.id, false});
  if (std::string refused = budget_->admit(tenant, sites.size(), uprobes_.handles_for(sites)); !refused.empty()) {
    *why = "budget: " + refused;
    return false;
  }
  ProbeSet placed;
  if (!uprobes_.attach(fd, pid, sites, &placed, why)) return false;
  budget_->charge(tenant, placed);
  links.absorb(std::move(placed));
  stats_.go_tls_return_probes += go.write.returns.size() + go.read.returns.size();
  return true;
}

// Processes that exited (or exec'd another program) leave; an executable no
// process runs any more has its probes released (attached again if it runs).
void GoTls::check_processes() {
  for (auto& [key, binary] : binaries_) {
    if (binary.links.empty()) continue;
    const FileKey file = key;
    const std::size_t before = binary.pids.size();
    std::erase_if(binary.pids, [&](std::uint32_t pid) {
      FileKey now;
      return !exe_key(pid, &now.dev, &now.ino) || now != file;
    });
    stats_.go_tls_processes_exited += before - binary.pids.size();
    if (before && binary.pids.empty()) {
      release(binary);
      ++stats_.go_tls_binaries_released;
    }
  }
}

void GoTls::release(Binary& binary) {
  budget_->refund(binary.tenant, binary.links);
  binary.links.release();
}

// Too many targeted Go processes: every Go executable is probed once for all
// processes from the next rescan on (the kernel's filters still decide what
// is traced).
void GoTls::widen_to_files() {
  widen_pending_ = false;
  targets_.widen();
  processes_.clear();
  next_full_scan_ns_ = 0;
  note("Go TLS probes per executable from now on: Go programs that are not targets trap too",
       "more than " + std::to_string(ProcessProbes::kMaxProcesses) + " targeted Go processes to probe one by one");
}

}  // namespace infertap::capture
