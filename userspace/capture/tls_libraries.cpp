#include "capture/tls_libraries.h"

#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "capture/elf_symbols.h"
#include "capture/loader.h"
#include "capture/probe_sites.h"

namespace infertap::capture {

namespace {

// Indexes into kFunctions.
enum Function { kWrite, kWriteEx, kRead, kReadEx, kFree, kDlopen, kHandshake, kFunctionCount };
constexpr std::array<std::string_view, kFunctionCount> kFunctions = {
    "SSL_write", "SSL_write_ex", "SSL_read", "SSL_read_ex", "SSL_free", "dlopen", "SSL_do_handshake"};

// Where a host keeps its shared libraries, seen from the host's root (the
// agent may run in a container of its own: /proc/1/root is the host's).
constexpr const char* kLibraryDirs[] = {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                        "/lib/aarch64-linux-gnu",    "/usr/lib64",            "/lib64",
                                        "/usr/lib",                  "/usr/local/lib",        "/usr/local/lib64"};

// A full rescan of every process, in case an exec or dlopen signal was lost
// (a full ring buffer).
constexpr std::uint64_t kFullRescanNs = 60'000'000'000ull;
// After an exec the dynamic loader maps the libraries the binary links: look
// again once it has (a few ms), and once more for slow starters.
constexpr std::uint64_t kExecRescanNs[] = {0, 10'000'000ull, 300'000'000ull};
constexpr std::size_t kMaxPendingScans = 4096;
// How often the processes seen mapping a probed file are checked: once none
// is left, a full rescan confirms it and releases the file's probes — at
// most one such rescan per kMinRescanGapNs.
constexpr std::uint64_t kMapperCheckNs = 1'000'000'000ull;
constexpr std::uint64_t kMinRescanGapNs = 2'000'000'000ull;
constexpr std::size_t kMaxWatchedMappers = 64;
constexpr std::size_t kMaxRememberedFiles = 16384;

bool is_openssl_name(std::string_view name) { return name.rfind("libssl.so", 0) == 0; }
// The host's own libraries probed before any process is read: its OpenSSL,
// and its C library's dlopen (which every tenant maps too: none is charged).
bool is_host_probed_name(std::string_view name) {
  return is_openssl_name(name) || name == "libc.so.6" || name == "libdl.so.2";
}

// "openssl-3" for libssl.so.3, "openssl-1.1" for libssl.so.1.1, "static:node"
// for a binary with OpenSSL built in.
std::string library_label(std::string_view file_name) {
  if (!is_openssl_name(file_name)) return "static:" + std::string(file_name);
  std::string_view version = file_name.substr(std::string_view("libssl.so").size());
  if (version.empty()) return "openssl";
  if (version.front() == '.') version.remove_prefix(1);
  return "openssl-" + std::string(version);
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Moves each direction's probes to where each call traps once
// (probe_sites.h). Says where, for the attach note ("" when they stay at the
// public entries).
std::string place_io_probes(int fd, std::vector<std::uint64_t>& offsets) {
  const ElfCode elf(fd);
  if (!elf.x86_64()) return "";
  const CodeAt code = [&elf](std::uint64_t at) { return elf.bytes(at, 512); };
  std::string where;
  const struct {
    Function plain, ex;
    const char* name;
  } pairs[] = {{kWrite, kWriteEx, "SSL_write"}, {kRead, kReadEx, "SSL_read"}};
  for (const auto& pair : pairs) {
    const TlsIoSites sites = cheap_tls_io_sites(code, {offsets[pair.plain], offsets[pair.ex]});
    offsets[pair.plain] = sites.plain;
    offsets[pair.ex] = sites.ex;
    if (!sites.shared_body) continue;
    where += std::string(where.empty() ? "" : "; ") + pair.name + "_ex probed in the body it calls (offset 0x" +
             hex(sites.ex) + ")" + (sites.plain ? "" : std::string(", which ") + pair.name + " calls too");
  }
  for (const Function f : {kFree, kHandshake})
    if (offsets[f]) offsets[f] = emulated_entry(code(offsets[f]), offsets[f]).value_or(offsets[f]);
  return where.empty() ? where : where + ": one emulated trap per call";
}

// Opens a mapped file and checks it is the file the mapping names (device
// and inode of the maps line): through its map_files entry (the very file
// mapped, even deleted or in another mount namespace), else the path in the
// process's root; a deleted file only through map_files (its path names a
// replacement or nothing). The descriptor is what the agent then reads and
// probes (uprobes.h): a mapping or path replaced after this check changes
// nothing. Never blocks (a FIFO in its place), never follows to another file
// unnoticed (a link out of the process's root names another inode).
struct OpenedFile {
  int fd = -1;
  std::string path;  // how it was opened, for the notes
  OpenedFile() = default;
  OpenedFile(OpenedFile&& o) noexcept : fd(std::exchange(o.fd, -1)), path(std::move(o.path)) {}
  ~OpenedFile() {
    if (fd >= 0) ::close(fd);
  }
};
enum class OpenResult { opened, unreachable, changed };

OpenResult open_one(const std::string& path, const FileKey& key, OpenedFile* out, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    *why = path + " (" + errno_text(errno) + ")";
    return OpenResult::unreachable;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || FileKey{st.st_dev, st.st_ino} != key) {
    ::close(fd);
    *why = path + " opened another file than the mapping names (device " + std::to_string(key.dev) + ", inode " +
           std::to_string(key.ino) + "): replaced under the agent, or not a regular file";
    return OpenResult::changed;
  }
  out->fd = fd;
  out->path = path;
  return OpenResult::opened;
}

OpenResult open_mapped(const std::string& proc, const MappedFile& m, const FileKey& key, OpenedFile* out,
                       std::string* why) {
  const std::string mapped = proc + "/map_files/" + hex(m.start) + "-" + hex(m.end);
  std::string mapped_error;
  const OpenResult first = open_one(mapped, key, out, &mapped_error);
  if (first != OpenResult::unreachable) {
    *why = mapped_error;
    return first;
  }
  if (m.deleted) {
    *why = "mapped while deleted or replaced on disk, and " + mapped_error + " does not open";
    return OpenResult::unreachable;
  }
  std::string rooted_error;
  const OpenResult second = open_one(proc + "/root" + m.path, key, out, &rooted_error);
  if (second == OpenResult::unreachable)
    *why = "opens neither through " + mapped_error + " nor through its root, " + rooted_error +
           ": the process's root is gone or hidden from the agent";
  else
    *why = rooted_error;
  return second;
}

// A process that exited, or is a zombie (its maps read empty). During a
// scan its mappings stop opening, which says nothing about the files. Opened
// without blocking, so a maps file that is not procfs's cannot stall a scan.
bool process_gone(const std::string& proc) {
  const int fd = open((proc + "/maps").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return true;
  char byte;
  const bool empty = read(fd, &byte, 1) <= 0;
  close(fd);
  return empty;
}

bool numeric(const char* name) {
  if (!*name) return false;
  for (const char* p = name; *p; ++p)
    if (*p < '0' || *p > '9') return false;
  return true;
}

}  // namespace

TlsLibraries::TlsLibraries(const TlsPrograms& programs, std::vector<LoadNote>* notes, TlsTargets targets,
                           std::string proc_root, ProbeBudget* budget, Uprobes uprobes)
    : programs_(programs),
      notes_(notes),
      targets_(std::move(targets)),
      proc_root_(std::move(proc_root)),
      budget_(budget ? budget : &own_budget_),
      uprobes_(uprobes) {
  if (targets_.per_process())
    note("TLS probes per targeted process, not per library file",
         "targeting names processes (" + targets_.narrowed_by() + "): libssl users that are not targets never trap");
  else
    note("TLS probes per library file, for every process", "targeting names no processes: every process but the "
                                                           "agent is a target");
}

TlsLibraries::~TlsLibraries() {
  std::vector<ProbeSet> sets;
  for (auto& [key, file] : files_) sets.push_back(std::move(file.links));
  release_all(sets);
}

void TlsLibraries::note(std::string what, std::string why) {
  if (notes_) notes_->push_back(LoadNote{std::move(what), std::move(why)});
}

void TlsLibraries::scan_everything(std::uint64_t now_ns) {
  ++full_scans_;
  in_full_scan_ = true;
  for (auto& [key, file] : files_) file.pids.clear();  // found again below while still mapped
  // Through init's root when the agent may see it (its own container is not the host's).
  const std::string init_root = proc_root_ + "/1/root";
  const std::string host_root = access((init_root + "/").c_str(), X_OK) == 0 ? init_root : "";
  // Per-process probes need a process: a library no target maps waits for one.
  for (const char* dir : kLibraryDirs) {
    if (targets_.per_process()) break;
    const std::string host_dir = host_root + dir;
    DIR* d = opendir(host_dir.c_str());
    if (!d) continue;
    while (dirent* entry = readdir(d)) {
      if (!is_host_probed_name(entry->d_name)) continue;
      const std::string path = host_dir + "/" + entry->d_name;
      struct stat st;  // the file itself, not a development link to it (libssl.so -> libssl.so.3)
      if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const FileKey key{st.st_dev, st.st_ino};
      if (files_.contains(key)) continue;  // the same file in another directory (/lib -> /usr/lib)
      OpenedFile opened;
      std::string why;
      if (open_one(path, key, &opened, &why) != OpenResult::opened) continue;  // replaced since the lstat
      files_[key].host_library = true;
      inspect(key, opened.fd, path, entry->d_name, false, 0, kHostTenant);
    }
    closedir(d);
  }
  if (DIR* proc = opendir(proc_root_.c_str())) {
    while (dirent* entry = readdir(proc))
      if (numeric(entry->d_name)) scan_process(static_cast<std::uint32_t>(std::strtoul(entry->d_name, nullptr, 10)));
    closedir(proc);
  }
  in_full_scan_ = false;
  release_unmapped();
  forget_unprobed();
  next_full_scan_ns_ = now_ns + kFullRescanNs;
  last_full_scan_ns_ = now_ns;
}

void TlsLibraries::schedule(std::uint32_t pid, std::uint64_t due_ns) {
  if (due_.size() >= kMaxPendingScans) {
    ++stats_.tls_scan_overflows;
    next_full_scan_ns_ = 0;  // the next tick rescans everything
    return;
  }
  due_.emplace(due_ns, pid);
}

void TlsLibraries::on_exec(std::uint32_t pid, std::uint64_t now_ns) {
  for (std::uint64_t delay : kExecRescanNs) schedule(pid, now_ns + delay);
}

void TlsLibraries::on_dlopen(std::uint32_t pid, std::uint64_t now_ns) { schedule(pid, now_ns); }

void TlsLibraries::tick(std::uint64_t now_ns) {
  if (widen_pending_) widen_to_files();
  check_mappers(now_ns);
  processes_.release_exited(now_ns);
  if (now_ns >= next_full_scan_ns_) {
    due_.clear();
    scan_everything(now_ns);
    return;
  }
  while (!due_.empty() && due_.begin()->first <= now_ns) {
    const std::uint32_t pid = due_.begin()->second;
    due_.erase(due_.begin());
    scan_process(pid);
  }
}

// Each executable file mapping: inspected once (through a descriptor checked
// to be the mapped file), probed when it has no probes yet (new, released
// since, or refused by a budget in an earlier full scan).
void TlsLibraries::scan_process(std::uint32_t pid) {
  const bool per_process = targets_.per_process();
  if (per_process && !targets_.eligible(pid)) return;
  const std::string proc = proc_root_ + "/" + std::to_string(pid);
  FILE* maps = std::fopen((proc + "/maps").c_str(), "re");
  ++stats_.tls_process_scans;
  if (!maps) {
    ++stats_.tls_processes_gone;
    return;
  }
  const Tenant tenant = process_tenant(pid, proc_root_);
  char* line = nullptr;
  std::size_t cap = 0;
  while (getline(&line, &cap, maps) > 0) {
    const std::optional<MappedFile> m = parse_maps_line(line);
    if (!m || !m->executable) continue;
    const FileKey key{makedev(m->dev_major, m->dev_minor), m->inode};
    auto it = files_.find(key);
    const bool known = it != files_.end();
    if (known) {
      File& file = it->second;
      if (in_full_scan_) file.seen_scan = full_scans_;
      mapped_by(file, pid, m->deleted);
      const bool wants_probes = !file.offsets.empty() && (per_process || (file.links.empty() && !file.host_library &&
                                                                          file.refused_scan < full_scans_));
      if (!wants_probes) continue;
    }
    OpenedFile opened;
    std::string why;
    const OpenResult result = open_mapped(proc, *m, key, &opened, &why);
    if (result != OpenResult::opened) {
      if (process_gone(proc)) {
        ++stats_.tls_processes_gone;
        break;
      }
      if (result == OpenResult::changed) {
        ++stats_.tls_files_changed;
        note("mapped file " + m->path + " of process " + std::to_string(pid) + " not read", why);
      } else if (!known) {
        unreachable(key, *m, pid, why);
      }
      continue;
    }
    const std::string shown = m->path + ", read through " + opened.path;
    if (!known) {
      inspect(key, opened.fd, shown, base_name(m->path), m->deleted, pid, tenant);
    } else if (!per_process) {
      File& file = files_[key];
      file.tenant = tenant;
      probe_file(file, opened.fd, shown);
    }
    if (per_process && !widen_pending_) probe_process(key, files_[key], pid, opened.fd);
  }
  std::free(line);
  std::fclose(maps);
}

// A mapped file that opens neither way: kept as inspected (noted once, like
// a file that does not parse); counted and named when it is an OpenSSL library.
void TlsLibraries::unreachable(const FileKey& key, const MappedFile& m, std::uint32_t pid, const std::string& why) {
  files_[key].seen_scan = full_scans_;
  const std::string_view name = base_name(m.path);
  if (!is_openssl_name(name)) return;
  ++stats_.tls_attach_failures;
  note("TLS library " + std::string(name) + " not probed", m.path + " of process " + std::to_string(pid) + ": " + why);
}

// `fd` is the file (checked); `shown` is how the process names it (for the notes).
void TlsLibraries::inspect(const FileKey& key, int fd, const std::string& shown, std::string_view name, bool deleted,
                           std::uint32_t pid, const Tenant& tenant) {
  File& file = files_[key];  // inspected once, whatever the outcome
  file.seen_scan = full_scans_;
  file.deleted = deleted;
  file.tenant = tenant;
  if (pid) file.pids.push_back(pid);
  const FunctionOffsets found = find_functions(fd, kFunctions, &symbols_);
  if (!found.error.empty()) {
    if (is_openssl_name(name)) {
      ++stats_.tls_attach_failures;
      note("TLS library " + std::string(name) + " not probed", shown + ": " + found.error);
    }
    return;
  }
  if (!found.refusal.empty()) {  // a function whose offset is no place for a probe
    ++stats_.tls_attach_failures;
    note("functions of " + std::string(name) + " not probed", shown + ": " + found.refusal);
  }
  const bool tls = found.offsets[kWrite] && found.offsets[kRead];
  if (!tls && !found.offsets[kDlopen]) return;
  file.name = name;
  file.offsets = found.offsets;
  if (tls) {
    file.sites = place_io_probes(fd, file.offsets);
    file.id = names_.id_for(library_label(name));
  }
  if (targets_.per_process()) return;  // probed for each targeted process that maps it
  probe_file(file, fd, shown);
}

// The file's probes for every process, charged to its tenant.
void TlsLibraries::probe_file(File& file, int fd, const std::string& shown) {
  std::string why;
  if (!place(file, fd, -1, file.tenant, file.links, &why)) {
    const bool said = file.refused_scan != 0;
    file.refused_scan = full_scans_;  // tried again in the next full scan
    if (file.id) ++stats_.tls_attach_failures;
    if (said) return;
    if (file.id)
      note("TLS library " + file.name + " not probed: its TLS streams are not seen", shown + ": " + why);
    else
      note("libraries loaded later by processes of " + file.name + " found only by the periodic rescan",
           "probing dlopen in " + shown + " failed: " + why);
    return;
  }
  file.refused_scan = 0;
  if (!file.id) return;
  const bool first = !file.probed;
  file.probed = true;
  if (!first) return;  // probed again after a release: noted once
  ++stats_.tls_libraries_attached;
  if (file.deleted) ++stats_.tls_libraries_deleted;
  note("probing TLS in " + file.name + " as " + std::string(library_name(file.id)),
       std::string(file.deleted ? "mapped while deleted or replaced on disk, " : "") +
           "defines SSL_write and SSL_read (" + shown + ")" + (file.sites.empty() ? "" : "; " + file.sites) + "; " +
           std::to_string(file.links.sites()) + " " + std::string(to_string(uprobes_.mode())) + " sites");
}

// Every probe site of a file: its dlopen return, and its TLS calls' entries
// and returns (SSL_write and SSL_read must be there; the _ex forms, SSL_free
// and the handshake may be missing).
std::vector<UprobeSite> TlsLibraries::tls_sites(const File& file) const {
  const std::vector<std::uint64_t>& offsets = file.offsets;
  std::vector<UprobeSite> sites;
  if (offsets[kDlopen] && programs_.dlopen_exit) sites.push_back({programs_.dlopen_exit, offsets[kDlopen], 0, true});
  if (!file.id) return sites;
  const struct {
    Function function;
    bpf_program* entry;
  } calls[] = {{kWrite, programs_.write_enter},
               {kWriteEx, programs_.write_ex_enter},
               {kRead, programs_.read_enter},
               {kReadEx, programs_.read_ex_enter}};
  for (const auto& call : calls) {
    if (!offsets[call.function]) continue;
    sites.push_back({call.entry, offsets[call.function], file.id, false});
    sites.push_back({programs_.io_exit, offsets[call.function], file.id, true});
  }
  if (offsets[kFree]) sites.push_back({programs_.ssl_free, offsets[kFree], file.id, false});
  // Without it a handshake's socket calls count as an unprobed library's;
  // the connection is then muted only if the handshake alone reaches
  // ITAP_TLS_BLIND_CALLS.
  if (offsets[kHandshake] && programs_.handshake_enter) {
    sites.push_back({programs_.handshake_enter, offsets[kHandshake], file.id, false});
    sites.push_back({programs_.handshake_exit, offsets[kHandshake], file.id, true});
  }
  return sites;
}

// The file's probes for `pid` (-1: every process) into `links`, within the
// budget; all or none.
bool TlsLibraries::place(const File& file, int fd, int pid, const Tenant& tenant, ProbeSet& links, std::string* why) {
  const std::vector<UprobeSite> sites = tls_sites(file);
  if (sites.empty()) return true;
  if (!programs_.write_enter) {  // a test without programs: nothing to attach
    *why = "no TLS programs loaded";
    return false;
  }
  if (std::string refused = budget_->admit(tenant, sites.size(), uprobes_.handles_for(sites)); !refused.empty()) {
    *why = "budget: " + refused;
    return false;
  }
  ProbeSet placed;
  if (!uprobes_.attach(fd, pid, sites, &placed, why)) return false;
  budget_->charge(tenant, placed);
  links.absorb(std::move(placed));
  return true;
}

// A process seen mapping a file: watched while the file has probes, so they
// are released soon after the last one exits. A file seen "(deleted)" was
// deleted or replaced on disk after it was probed (a package upgrade), or
// probed that way.
void TlsLibraries::mapped_by(File& file, std::uint32_t pid, bool deleted) {
  if (file.links.empty()) return;
  if (deleted && !file.deleted) {
    file.deleted = true;
    ++stats_.tls_libraries_deleted;
    note("TLS library " + std::string(library_name(file.id)) + " deleted or replaced on disk",
         "its probes are released once no process maps it");
  }
  if (file.pids.size() < kMaxWatchedMappers && std::find(file.pids.begin(), file.pids.end(), pid) == file.pids.end())
    file.pids.push_back(pid);
}

// Once every process seen mapping a probed file is gone (exited, or a zombie
// with no mappings), a full rescan soon: it finds the file unmapped (children
// that inherited the mapping keep it) and releases the probes. Rescans this
// way are spaced, so a tenant starting and stopping processes cannot make the
// agent read every process's maps continuously.
void TlsLibraries::check_mappers(std::uint64_t now_ns) {
  if (now_ns < next_mapper_check_ns_) return;
  next_mapper_check_ns_ = now_ns + kMapperCheckNs;
  for (auto& [key, file] : files_) {
    if (file.links.empty() || file.pids.empty() || file.host_library) continue;
    std::erase_if(file.pids, [this](std::uint32_t pid) { return process_gone(proc_root_ + "/" + std::to_string(pid)); });
    if (file.pids.empty()) next_full_scan_ns_ = std::min(next_full_scan_ns_, last_full_scan_ns_ + kMinRescanGapNs);
  }
}

// The probes of one targeted process on one file it maps (its dlopen, its
// TLS calls), once per process and file.
void TlsLibraries::probe_process(const FileKey& key, File& file, std::uint32_t pid, int fd) {
  if (file.offsets.empty()) return;  // neither TLS nor dlopen
  ProbeSet* own = processes_.links_for(pid, key);
  if (!own) {
    if (processes_.full()) widen_pending_ = true;
    return;
  }
  const std::string who = "process " + std::to_string(pid);
  const Tenant tenant = process_tenant(pid, proc_root_);
  std::string why;
  if (!place(file, fd, static_cast<int>(pid), tenant, *own, &why)) {
    if (!file.id) {
      note("libraries loaded later by " + who + " found only by the periodic rescan",
           "probing dlopen in " + file.name + " failed: " + why);
      return;
    }
    ++stats_.tls_attach_failures;
    note("TLS library " + file.name + " not probed for " + who + ": its TLS streams are not seen", why);
    return;
  }
  processes_.placed(pid, key, tenant);
  if (!file.id) return;
  if (!file.probed) {
    file.probed = true;
    ++stats_.tls_libraries_attached;
    if (file.deleted) ++stats_.tls_libraries_deleted;
  }
  note("probing TLS in " + file.name + " as " + std::string(library_name(file.id)) + " for " + who,
       "targeted by " + targets_.narrowed_by() + ", defines SSL_write and SSL_read");
}

// Too many targeted processes: every file is inspected and probed again, once
// for all processes (the kernel's filters still decide what is traced).
void TlsLibraries::widen_to_files() {
  widen_pending_ = false;
  targets_.widen();
  processes_.clear();
  std::vector<ProbeSet> sets;
  for (auto& [key, file] : files_) {
    budget_->refund(file.tenant, file.links);
    sets.push_back(std::move(file.links));
  }
  release_all(sets);
  files_.clear();
  next_full_scan_ns_ = 0;
  note("TLS probes per library file from now on: libssl users that are not targets trap too",
       "more than " + std::to_string(ProcessProbes::kMaxProcesses) + " targeted processes to probe one by one");
}

// Probes on a file that no process maps any more (a library a process
// dlopened before it exited, a deleted file whose blocks they keep
// allocated): released, and placed again if a process maps it again. The
// host's own libraries keep theirs.
void TlsLibraries::release_unmapped() {
  std::vector<ProbeSet> sets;
  for (auto& [key, file] : files_) {
    if (file.links.empty() || file.host_library || file.seen_scan == full_scans_) continue;
    budget_->refund(file.tenant, file.links);
    sets.push_back(std::move(file.links));
    ++stats_.tls_libraries_released;
  }
  release_all(sets);
}

// Files inspected but without probes (not TLS, unreachable, refused) are
// remembered so they are not read again; past a bound the ones no process
// mapped in the last full scan are forgotten: a tenant mapping ever new files
// cannot grow the agent.
void TlsLibraries::forget_unprobed() {
  if (files_.size() <= kMaxRememberedFiles) return;
  const std::size_t before = files_.size();
  std::erase_if(files_, [this](const auto& entry) {
    const File& file = entry.second;
    return file.links.empty() && !file.host_library && file.seen_scan != full_scans_;
  });
  stats_.tls_files_forgotten += before - files_.size();
}

}  // namespace infertap::capture
