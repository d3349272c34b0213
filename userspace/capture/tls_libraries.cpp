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
// How often the processes that map a deleted library file are checked: once
// none is left, a full rescan confirms it and releases the file's probes.
constexpr std::uint64_t kDeletedMapperCheckNs = 1'000'000'000ull;
constexpr std::size_t kMaxDeletedMappers = 64;
constexpr std::size_t kMaxTlsLibraries = 1024;

bool is_openssl_name(std::string_view name) { return name.rfind("libssl.so", 0) == 0; }

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
std::string place_io_probes(const std::string& path, std::vector<std::uint64_t>& offsets) {
  const ElfCode elf(path);
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

// The path that opens a mapped file: its map_files entry (the very file
// mapped, even deleted or in another mount namespace), else the path in the
// process's root; a deleted file only through map_files (its path names a
// replacement or nothing). "" and *why when neither opens (the process's
// container torn down, a mount the agent cannot see).
std::string mapped_path(const std::string& proc, const MappedFile& m, std::string* why) {
  const std::string mapped = proc + "/map_files/" + hex(m.start) + "-" + hex(m.end);
  if (access(mapped.c_str(), R_OK) == 0) return mapped;
  const std::string mapped_error = errno_text(errno);
  if (m.deleted) {
    *why = "mapped while deleted or replaced on disk, and " + mapped + " does not open: " + mapped_error;
    return "";
  }
  const std::string rooted = proc + "/root" + m.path;
  if (access(rooted.c_str(), R_OK) == 0) return rooted;
  const std::string rooted_error = errno_text(errno);
  *why = "opens neither through " + mapped + " (" + mapped_error + ") nor through its root, " + rooted + " (" +
         rooted_error + "): the process's root is gone or hidden from the agent";
  return "";
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
                           std::string proc_root)
    : programs_(programs), notes_(notes), targets_(std::move(targets)), proc_root_(std::move(proc_root)) {
  if (targets_.per_process())
    note("TLS probes per targeted process, not per library file",
         "targeting names processes (" + targets_.narrowed_by() + "): libssl users that are not targets never trap");
  else
    note("TLS probes per library file, for every process", "targeting names no processes: every process but the "
                                                           "agent is a target");
}

TlsLibraries::~TlsLibraries() {
  for (auto& [key, file] : files_) destroy_links(file.links);
}

std::string_view TlsLibraries::library_name(std::uint16_t id) const {
  if (id == 0 || id > library_names_.size()) return "";
  return library_names_[id - 1];
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
      if (!is_openssl_name(entry->d_name)) continue;
      const std::string path = host_dir + "/" + entry->d_name;
      struct stat st;  // the file itself, not a development link to it (libssl.so -> libssl.so.3)
      if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const FileKey key{st.st_dev, st.st_ino};
      if (files_.contains(key)) continue;  // the same file in another directory (/lib -> /usr/lib)
      inspect(key, path, path, entry->d_name, false, 0);
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
  next_full_scan_ns_ = now_ns + kFullRescanNs;
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
  check_deleted_mappers(now_ns);
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

// Each executable file mapping not inspected yet, through mapped_path.
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
  char* line = nullptr;
  std::size_t cap = 0;
  while (getline(&line, &cap, maps) > 0) {
    const std::optional<MappedFile> m = parse_maps_line(line);
    if (!m || !m->executable) continue;
    const FileKey key{makedev(m->dev_major, m->dev_minor), m->inode};
    auto it = files_.find(key);
    const bool known = it != files_.end();
    if (known) {
      if (in_full_scan_) it->second.seen_scan = full_scans_;
      if (m->deleted) mapped_deleted(it->second, pid);
      if (!per_process || it->second.offsets.empty()) continue;
    }
    std::string why;
    const std::string path = mapped_path(proc, *m, &why);
    if (path.empty()) {
      if (process_gone(proc)) {
        ++stats_.tls_processes_gone;
        break;
      }
      if (!known) unreachable(key, *m, pid, why);
      continue;
    }
    if (!known) inspect(key, path, m->path, base_name(m->path), m->deleted, pid);
    if (per_process && !widen_pending_) probe_process(key, files_[key], pid, path);
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

// `path` opens the file; `shown` is how the process names it (for the notes).
void TlsLibraries::inspect(const FileKey& key, const std::string& path, const std::string& shown, std::string_view name,
                           bool deleted, std::uint32_t pid) {
  File& file = files_[key];  // inspected once, whatever the outcome
  file.seen_scan = full_scans_;
  file.deleted = deleted;
  if (deleted) file.pids.push_back(pid);
  const FunctionOffsets found = find_functions(path, kFunctions);
  if (!found.error.empty()) {
    if (is_openssl_name(name)) {
      ++stats_.tls_attach_failures;
      note("TLS library " + std::string(name) + " not probed", path + ": " + found.error);
    }
    return;
  }
  const bool tls = found.offsets[kWrite] && found.offsets[kRead];
  if (!tls && !found.offsets[kDlopen]) return;
  if (tls && library_names_.size() >= kMaxTlsLibraries) {
    ++stats_.tls_attach_failures;
    note("TLS library " + std::string(name) + " not probed", "already " + std::to_string(kMaxTlsLibraries) +
                                                                 " TLS library files probed");
    return;
  }
  file.name = name;
  file.offsets = found.offsets;
  if (tls) {
    file.sites = place_io_probes(path, file.offsets);
    library_names_.push_back(library_label(name));
    file.id = static_cast<std::uint16_t>(library_names_.size());
  }
  if (targets_.per_process()) return;  // probed for each targeted process that maps it
  std::string why;
  if (found.offsets[kDlopen] && programs_.dlopen_exit &&
      !attach(programs_.dlopen_exit, path, found.offsets[kDlopen], true, 0, -1, file.links, &why))
    note("libraries loaded later by processes of " + std::string(name) + " found only by the periodic rescan",
         "probing dlopen in " + path + " failed: " + why);
  if (!tls) return;
  if (!attach_tls(file, path, -1, file.links, &why)) {
    ++stats_.tls_attach_failures;
    note("TLS library " + std::string(name) + " not probed: its TLS streams are not seen", path + ": " + why);
    return;
  }
  ++stats_.tls_libraries_attached;
  if (deleted) ++stats_.tls_libraries_deleted;
  note("probing TLS in " + std::string(name) + " as " + library_names_.back(),
       std::string(deleted ? "mapped while deleted or replaced on disk, " : "") + "defines SSL_write and SSL_read (" +
           shown + (shown == path ? "" : ", read through " + path) + ")" +
           (file.sites.empty() ? "" : "; " + file.sites));
}

// A probed file seen mapped "(deleted)": deleted or replaced on disk after it
// was probed (a package upgrade), or probed that way. Its probes hold the old
// file until no process maps it; the processes seen mapping it are watched.
void TlsLibraries::mapped_deleted(File& file, std::uint32_t pid) {
  if (file.links.empty()) return;
  if (!file.deleted) {
    file.deleted = true;
    ++stats_.tls_libraries_deleted;
    note("TLS library " + std::string(library_name(file.id)) + " deleted or replaced on disk",
         "its probes are released once no process maps it");
  }
  if (file.pids.size() < kMaxDeletedMappers &&
      std::find(file.pids.begin(), file.pids.end(), pid) == file.pids.end())
    file.pids.push_back(pid);
}

// Once every process seen mapping a deleted file is gone (exited, or a zombie
// with no mappings), a full rescan soon: it finds the file unmapped (children
// that inherited the mapping keep it) and releases the probes.
void TlsLibraries::check_deleted_mappers(std::uint64_t now_ns) {
  if (now_ns < next_mapper_check_ns_) return;
  next_mapper_check_ns_ = now_ns + kDeletedMapperCheckNs;
  for (auto& [key, file] : files_) {
    if (!file.deleted || file.links.empty() || file.pids.empty()) continue;
    std::erase_if(file.pids, [this](std::uint32_t pid) { return process_gone(proc_root_ + "/" + std::to_string(pid)); });
    if (file.pids.empty()) next_full_scan_ns_ = now_ns;
  }
}

// Entry and return of each call the file defines; SSL_write and SSL_read must
// attach, the others (the _ex forms, SSL_free) may be missing. pid -1: for
// every process.
bool TlsLibraries::attach_tls(const File& file, const std::string& path, int pid, std::vector<bpf_link*>& links,
                              std::string* why) {
  const std::vector<std::uint64_t>& offsets = file.offsets;
  const struct {
    Function function;
    bpf_program* entry;
  } calls[] = {{kWrite, programs_.write_enter},
               {kWriteEx, programs_.write_ex_enter},
               {kRead, programs_.read_enter},
               {kReadEx, programs_.read_ex_enter}};
  const std::size_t before = links.size();
  for (const auto& call : calls) {
    if (!offsets[call.function]) continue;
    if (!attach(call.entry, path, offsets[call.function], false, file.id, pid, links, why) ||
        !attach(programs_.io_exit, path, offsets[call.function], true, file.id, pid, links, why)) {
      for (std::size_t i = before; i < links.size(); ++i) bpf_link__destroy(links[i]);
      links.resize(before);
      return false;
    }
  }
  if (offsets[kFree]) (void)attach(programs_.ssl_free, path, offsets[kFree], false, file.id, pid, links, why);
  // Without it a handshake's socket calls count as an unprobed library's;
  // the connection is then muted only if the handshake alone reaches
  // ITAP_TLS_BLIND_CALLS.
  if (offsets[kHandshake] && programs_.handshake_enter &&
      attach(programs_.handshake_enter, path, offsets[kHandshake], false, file.id, pid, links, why))
    (void)attach(programs_.handshake_exit, path, offsets[kHandshake], true, file.id, pid, links, why);
  return true;
}

bool TlsLibraries::attach(bpf_program* prog, const std::string& path, std::uint64_t offset, bool ret,
                          std::uint64_t cookie, int pid, std::vector<bpf_link*>& links, std::string* why) {
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie, .retprobe = ret);
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid, path.c_str(), static_cast<std::size_t>(offset), &opts);
  if (!link) {
    const int err = errno;
    *why = std::string(bpf_program__name(prog)) + " at offset 0x" + hex(offset) + ": " + errno_text(err);
    return false;
  }
  links.push_back(link);
  return true;
}

// The probes of one targeted process on one file it maps (its dlopen, its
// TLS calls), once per process and file.
void TlsLibraries::probe_process(const FileKey& key, File& file, std::uint32_t pid, const std::string& path) {
  if (file.offsets.empty()) return;  // neither TLS nor dlopen
  std::vector<bpf_link*>* own = processes_.links_for(pid, key);
  if (!own) {
    if (processes_.full()) widen_pending_ = true;
    return;
  }
  std::vector<bpf_link*>& links = *own;
  const std::string who = "process " + std::to_string(pid);
  std::string why;
  if (file.offsets[kDlopen] && programs_.dlopen_exit &&
      !attach(programs_.dlopen_exit, path, file.offsets[kDlopen], true, 0, static_cast<int>(pid), links, &why))
    note("libraries loaded later by " + who + " found only by the periodic rescan", "probing dlopen in " + file.name +
                                                                                         " failed: " + why);
  if (!file.id) return;
  if (!attach_tls(file, path, static_cast<int>(pid), links, &why)) {
    ++stats_.tls_attach_failures;
    note("TLS library " + file.name + " not probed for " + who + ": its TLS streams are not seen", path + ": " + why);
    return;
  }
  if (!file.probed) {
    file.probed = true;
    ++stats_.tls_libraries_attached;
    if (file.deleted) ++stats_.tls_libraries_deleted;
  }
  note("probing TLS in " + file.name + " as " + std::string(library_name(file.id)) + " for " + who,
       "targeted by " + targets_.narrowed_by() + ", defines SSL_write and SSL_read (" + path + ")");
}

// Too many targeted processes: every file is inspected and probed again, once
// for all processes (the kernel's filters still decide what is traced).
void TlsLibraries::widen_to_files() {
  widen_pending_ = false;
  targets_.widen();
  processes_.clear();
  files_.clear();
  next_full_scan_ns_ = 0;
  note("TLS probes per library file from now on: libssl users that are not targets trap too",
       "more than " + std::to_string(ProcessProbes::kMaxProcesses) + " targeted processes to probe one by one");
}

// Probes on a file deleted from disk that no process maps any more keep the
// file's blocks allocated: release them.
void TlsLibraries::release_unmapped() {
  for (auto& [key, file] : files_) {
    if (!file.deleted || file.links.empty() || file.seen_scan == full_scans_) continue;
    destroy_links(file.links);
    ++stats_.tls_libraries_released;
  }
}

}  // namespace infertap::capture
