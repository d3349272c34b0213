#include "capture/go_tls.h"

#include <bpf/libbpf.h>
#include <dirent.h>
#include <sys/stat.h>

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
constexpr std::size_t kMaxGoBinaries = 1024;
constexpr std::size_t kMaxPidsPerBinary = 256;  // beyond: the full rescan finds the others

std::string exe_path(std::uint32_t pid) { return "/proc/" + std::to_string(pid) + "/exe"; }

// The executable file a process runs (stat follows /proc/PID/exe to it).
bool exe_key(std::uint32_t pid, std::uint64_t* dev, std::uint64_t* ino) {
  struct stat st;
  if (::stat(exe_path(pid).c_str(), &st) != 0) return false;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return true;
}

// The executable's own path, for the notes.
std::string exe_target(std::uint32_t pid) {
  char target[4096];
  const ssize_t n = ::readlink(exe_path(pid).c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : exe_path(pid);
}

std::string version_text(const GoBinary& go) { return go.version.empty() ? "Go version unknown" : go.version; }

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

GoTls::GoTls(const GoTlsPrograms& programs, std::vector<LoadNote>* notes, TlsTargets targets)
    : programs_(programs), notes_(notes), targets_(std::move(targets)) {
  if (targets_.per_process())
    note("Go TLS probes per targeted process, not per executable",
         "targeting names processes (" + targets_.narrowed_by() + "): Go programs that are not targets never trap");
}

GoTls::~GoTls() {
  for (auto& [key, binary] : binaries_) release(binary);
}

std::string_view GoTls::library_name(std::uint16_t id) const {
  if (!is_go_id(id) || std::size_t(id - kFirstId) >= names_.size()) return "";
  return names_[id - kFirstId];
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
  FileKey key;
  if (!exe_key(pid, &key.dev, &key.ino)) return;
  ++stats_.go_tls_process_scans;
  const bool inspected = binaries_.contains(key);
  Binary& binary = binaries_[key];
  if (inspected && !binary.id) return;  // not Go, or not probed
  const std::string shown = exe_target(pid);
  std::optional<GoBinary> first_read;
  if (!inspected && !admit(binary, first_read.emplace(inspect_go_binary(exe_path(pid))), shown)) return;
  probe(binary, key, pid, shown, first_read ? &*first_read : nullptr);
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
  if (names_.size() >= kMaxGoBinaries) {
    ++stats_.go_tls_attach_failures;
    note("Go TLS of " + shown + " not probed", "already " + std::to_string(kMaxGoBinaries) + " Go executables probed");
    return false;
  }
  names_.push_back("go:" + std::string(base_name(shown)));
  binary.id = static_cast<std::uint16_t>(kFirstId + names_.size() - 1);
  return true;
}

// The probes `pid` needs: its own when targeting names processes, else the
// executable's for every process (once, again after a release). The file is
// read again each time (unless just read): its inode may hold another file by now.
void GoTls::probe(Binary& binary, const FileKey& key, std::uint32_t pid, const std::string& shown,
                  const GoBinary* just_read) {
  const bool own = targets_.per_process();
  std::vector<bpf_link*>* links = own ? processes_.links_for(pid, key) : binary.links.empty() ? &binary.links : nullptr;
  if (!links) {
    if (processes_.full()) widen_pending_ = true;
    return;
  }
  std::optional<GoBinary> read_now;
  const GoBinary& go = just_read ? *just_read : read_now.emplace(inspect_go_binary(exe_path(pid)));
  if (!go.problem.empty() || !go.is_go) return;
  const std::string name(library_name(binary.id));
  const std::string who = own ? " for process " + std::to_string(pid) : "";
  std::string why;
  if (!attach_all(binary, exe_path(pid), go, own ? static_cast<int>(pid) : -1, *links, &why)) {
    ++stats_.go_tls_attach_failures;
    note("Go TLS of " + shown + " (" + version_text(go) + ") not probed" + who + ": its TLS streams are not seen", why);
    return;
  }
  const bool first = !binary.probed;
  binary.probed = true;
  if (first) ++stats_.go_tls_binaries_attached;
  if (!first && !own) return;  // attached again after a release: noted once
  note("probing Go TLS in " + std::string(base_name(shown)) + " as " + name + who,
       (own ? "targeted by " + targets_.narrowed_by() + ", " : "") + version_text(go) + ", crypto/tls.(*Conn).Write/Read from " +
           go.symbols_from + ", " + std::to_string(go.write.returns.size() + go.read.returns.size()) + " RET probes (" +
           shown + ")");
}

// Entry of Write and Read and each of their returns; all or none. pid -1:
// for every process.
bool GoTls::attach_all(const Binary& binary, const std::string& path, const GoBinary& go, int pid,
                       std::vector<bpf_link*>& links, std::string* why) {
  bool ok = attach(programs_.write_enter, path, go.write.probe_at, binary.id, pid, links, why) &&
            attach(programs_.read_enter, path, go.read.probe_at, binary.id, pid, links, why);
  for (const GoFunction* f : {&go.write, &go.read})
    for (std::uint64_t ret : f->returns) ok = ok && attach(programs_.ret, path, ret, binary.id, pid, links, why);
  if (!ok) {
    destroy_links(links);
    return false;
  }
  stats_.go_tls_return_probes += go.write.returns.size() + go.read.returns.size();
  return true;
}

bool GoTls::attach(bpf_program* prog, const std::string& path, std::uint64_t offset, std::uint16_t id, int pid,
                   std::vector<bpf_link*>& links, std::string* why) {
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = id, .retprobe = false);
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid, path.c_str(), static_cast<std::size_t>(offset), &opts);
  if (!link) {
    const int err = errno;
    *why = std::string(bpf_program__name(prog)) + " at offset 0x" + hex(offset) + ": " + std::strerror(err);
    return false;
  }
  links.push_back(link);
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

void GoTls::release(Binary& binary) { destroy_links(binary.links); }

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
