// TlsLibraries over a fake /proc: a mapped OpenSSL library the agent cannot
// open (no map_files entry, the process's root gone: a container torn down
// mid-scan) is counted and named, and the scan goes on to the other mappings.
// Per-process targeting (a pid no real process has) keeps the unit test away
// from the kernel: files are inspected, nothing is attached.
#include "capture/tls_libraries.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "capture/loader.h"

namespace infertap::capture {
namespace {

namespace fs = std::filesystem;

// Above PID_MAX_LIMIT (4194304): no process on the host has it.
constexpr std::uint32_t kPid = 4194400;

// This machine's libssl.so.3 (the one the agent probes on it); "" when none.
std::string host_libssl() {
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                          "/usr/lib64", "/usr/lib"}) {
    const std::string path = std::string(dir) + "/libssl.so.3";
    if (fs::is_regular_file(path)) return fs::canonical(path).string();
  }
  return "";
}

// A process directory under a scratch proc root: its maps, map_files and
// (optionally) root entries.
class FakeProc {
 public:
  FakeProc() : root_(fs::temp_directory_path() / ("itap-fake-proc-" + std::to_string(getpid()))) {
    fs::remove_all(root_);
    fs::create_directories(dir() / "map_files");
  }
  ~FakeProc() { fs::remove_all(root_); }
  FakeProc(const FakeProc&) = delete;
  FakeProc& operator=(const FakeProc&) = delete;

  std::string root() const { return root_.string(); }
  // One executable mapping of `path` (the file's device and inode as given).
  // `target`: where its map_files entry points ("": no entry).
  void map(std::uint64_t start, const std::string& path, dev_t dev, ino_t ino, const std::string& target,
           bool deleted = false) {
    char range[64];
    std::snprintf(range, sizeof(range), "%llx-%llx", static_cast<unsigned long long>(start),
                  static_cast<unsigned long long>(start + 0x1000));
    char line[512];
    std::snprintf(line, sizeof(line), "%s r-xp 00000000 %02x:%02x %llu    %s%s\n", range, major(dev), minor(dev),
                  static_cast<unsigned long long>(ino), path.c_str(), deleted ? " (deleted)" : "");
    std::ofstream(dir() / "maps", std::ios::app) << line;
    if (!target.empty()) fs::create_symlink(target, dir() / "map_files" / range);
  }
  // The process's root: the host's "/" (a process in no container).
  void root_is_host() { fs::create_directory_symlink("/", dir() / "root"); }
  fs::path dir() const { return root_ / std::to_string(kPid); }

 private:
  fs::path root_;
};

struct Scan {
  std::vector<LoadNote> notes;
  TlsLibraries libraries;
  explicit Scan(const FakeProc& proc) : libraries(TlsPrograms{}, &notes, TlsTargets({kPid}, {}, 0), proc.root()) {
    libraries.scan_everything(1);
  }
  // The note whose `what` names `library` as not probed; nullptr when none.
  const LoadNote* not_probed(const std::string& library) const {
    for (const LoadNote& n : notes)
      if (n.what == "TLS library " + library + " not probed") return &n;
    return nullptr;
  }
};

struct stat host_stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(TlsLibraries, AMappingReachableNeitherWayIsCountedAndTheScanGoesOn) {
  const std::string libssl = host_libssl();
  ASSERT_FALSE(libssl.empty()) << "no libssl.so.3 on this machine: run scripts/setup.sh (libssl3)";
  const struct stat st = host_stat(libssl);
  FakeProc proc;  // no root entry: the container's root is gone
  proc.map(0x7f0000000000, "/usr/lib/x86_64-linux-gnu/libssl.so.3", makedev(0, 42), 4242, "");
  proc.map(0x7f0000100000, libssl, st.st_dev, st.st_ino, libssl);
  const Scan scan(proc);

  const TlsLibraryStats& stats = scan.libraries.stats();
  EXPECT_EQ(stats.tls_process_scans, 1u);
  EXPECT_EQ(stats.tls_attach_failures, 1u) << "the unreachable mapping only";
  const LoadNote* note = scan.not_probed("libssl.so.3");
  ASSERT_NE(note, nullptr) << "a note names the library";
  EXPECT_NE(note->why.find("process " + std::to_string(kPid)), std::string::npos) << note->why;
  EXPECT_NE(note->why.find("/map_files/7f0000000000-7f0000001000"), std::string::npos) << note->why;
  EXPECT_NE(note->why.find("/root/usr/lib/x86_64-linux-gnu/libssl.so.3"), std::string::npos) << note->why;
  EXPECT_EQ(scan.libraries.library_name(1), "openssl-3") << "the reachable mapping was inspected: a TLS library";
  EXPECT_EQ(scan.libraries.library_name(2), "") << "and only it";
}

TEST(TlsLibraries, WithoutMapFilesAMappingIsReadThroughTheProcessRoot) {
  const std::string libssl = host_libssl();
  ASSERT_FALSE(libssl.empty()) << "no libssl.so.3 on this machine: run scripts/setup.sh (libssl3)";
  const struct stat st = host_stat(libssl);
  FakeProc proc;
  proc.root_is_host();
  proc.map(0x7f0000000000, libssl, st.st_dev, st.st_ino, "");
  const Scan scan(proc);

  EXPECT_EQ(scan.libraries.stats().tls_attach_failures, 0u);
  EXPECT_EQ(scan.not_probed("libssl.so.3"), nullptr);
  EXPECT_EQ(scan.libraries.library_name(1), "openssl-3");
}

// The mapping names one file and its map_files entry opens another (a tenant
// replaced the mapping after the agent read the maps line): refused, counted,
// not read.
TEST(TlsLibraries, AMappingThatOpensAnotherFileIsRefusedNotRead) {
  const std::string libssl = host_libssl();
  ASSERT_FALSE(libssl.empty()) << "no libssl.so.3 on this machine: run scripts/setup.sh (libssl3)";
  FakeProc proc;
  proc.map(0x7f0000000000, "/tenant/libssl.so.3", makedev(0, 42), 4444, libssl);  // opens the host's libssl
  const Scan scan(proc);
  EXPECT_EQ(scan.libraries.stats().tls_files_changed, 1u);
  EXPECT_EQ(scan.libraries.library_name(1), "") << "nothing read";
  bool named = false;
  for (const LoadNote& n : scan.notes)
    named = named || (n.what.find("mapped file /tenant/libssl.so.3 of process") == 0 &&
                      n.why.find("opened another file than the mapping names") != std::string::npos);
  EXPECT_TRUE(named) << "a note names the mapping and why";
}

// A deleted file's path names its replacement, or nothing: only map_files
// holds the very file mapped.
TEST(TlsLibraries, ADeletedMappingWithoutMapFilesIsNotReadThroughTheRoot) {
  const std::string libssl = host_libssl();
  ASSERT_FALSE(libssl.empty()) << "no libssl.so.3 on this machine: run scripts/setup.sh (libssl3)";
  FakeProc proc;
  proc.root_is_host();  // the path opens there: the file now on disk, not the one mapped
  proc.map(0x7f0000000000, libssl, makedev(0, 42), 4343, "", true);
  const Scan scan(proc);

  EXPECT_EQ(scan.libraries.stats().tls_attach_failures, 1u);
  const LoadNote* note = scan.not_probed("libssl.so.3");
  ASSERT_NE(note, nullptr);
  EXPECT_NE(note->why.find("deleted"), std::string::npos) << note->why;
  EXPECT_NE(note->why.find("/map_files/7f0000000000-7f0000001000"), std::string::npos) << note->why;
  EXPECT_EQ(scan.libraries.library_name(1), "") << "the file now at that path is not the one mapped";
}

// The process exits while its maps are read: its maps then read empty (a
// zombie) or do not open. Its mappings stop opening for that reason, which
// says nothing about the files: no failure is counted, and the file is
// inspected when another process maps it.
TEST(TlsLibraries, AProcessThatExitsMidScanIsGoneAndItsFilesAreNotMarked) {
  const std::string libssl = host_libssl();
  ASSERT_FALSE(libssl.empty()) << "no libssl.so.3 on this machine: run scripts/setup.sh (libssl3)";
  const struct stat st = host_stat(libssl);
  FakeProc proc;  // no map_files entry and no root: the mapping opens neither way
  proc.map(0x7f0000000000, libssl, st.st_dev, st.st_ino, "");
  const fs::path maps = proc.dir() / "maps";
  const std::string lines = [&] {
    std::ifstream in(maps);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  fs::remove(maps);
  ASSERT_EQ(mkfifo(maps.c_str(), 0600), 0);
  // The maps as the scan first reads them; any later open finds them empty.
  std::thread exiting([&] {
    const int fd = open(maps.c_str(), O_WRONLY);
    if (fd < 0) return;
    EXPECT_EQ(write(fd, lines.data(), lines.size()), ssize_t(lines.size()));
    close(fd);
  });
  std::vector<LoadNote> notes;
  TlsLibraries libraries(TlsPrograms{}, &notes, TlsTargets({kPid}, {}, 0), proc.root());
  libraries.scan_everything(1);
  exiting.join();
  EXPECT_EQ(libraries.stats().tls_processes_gone, 1u);
  EXPECT_EQ(libraries.stats().tls_attach_failures, 0u) << "the file is not at fault";
  for (const LoadNote& n : notes) EXPECT_EQ(n.what.find("not probed"), std::string::npos) << n.what << ": " << n.why;

  // Another process (the same pid here) maps the file and is reachable.
  fs::remove(maps);
  std::ofstream(maps) << lines;
  proc.root_is_host();
  libraries.scan_everything(2);
  EXPECT_EQ(libraries.library_name(1), "openssl-3") << "the file was inspected now";
}

}  // namespace
}  // namespace infertap::capture
