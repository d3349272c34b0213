// A tenant cannot act through the agent's TLS probes: files mapped by real
// processes running as `nobody`, in cgroups of their own, crafted and swapped
// the way a hostile tenant would. The agent never writes a breakpoint into a
// file it did not read, one tenant's fakes do not use up the probes of the
// others, probes of files no process maps any more are released, and
// stopping takes a bounded time whatever is attached.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture/tls_targets.h"
#include "support/tls_fixture.h"

namespace infertap {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::Process;
using testing::read_file;
using namespace std::chrono_literals;

constexpr const char* kNobody[] = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"};

// A library a tenant builds: it defines SSL_write and SSL_read, so the agent
// takes it for OpenSSL.
constexpr const char* kFakeLibssl = R"(
int SSL_write(void* ssl, const void* buf, int num) { return num > 0 ? num : 0; }
int SSL_read(void* ssl, void* buf, int num) { (void)buf; return ssl && num > 0 ? 1 : 0; }
int SSL_do_handshake(void* ssl) { return ssl != 0; }
)";

class TenantTest : public testing::TlsFixture {
 protected:
  TenantTest() : TlsFixture("infertap-tenant") {}

  void SetUp() override {
    TlsFixture::SetUp();
    if (HasFatalFailure()) return;
    fs::permissions(path(""), fs::perms(0755));  // tenants (nobody) reach their files below it
    tenant_dir_ = path("tenant");
    fs::create_directories(tenant_dir_);
    ASSERT_EQ(chown(tenant_dir_.c_str(), 65534, 65534), 0);
    mapper_ = path("tenant_mapper");
    ASSERT_EQ(std::system(("cc -O1 -o " + mapper_ + " tests/support/tenant_mapper.c -ldl").c_str()), 0)
        << "cc is needed to build the tenant's program (scripts/setup.sh installs it)";
    std::ofstream(path("fake.c")) << kFakeLibssl;
    fake_ = tenant_file("libssl.so.3");
    ASSERT_EQ(std::system(("cc -O1 -shared -fPIC -o " + fake_ + " " + path("fake.c")).c_str()), 0);
  }
  void TearDown() override {
    for (auto& p : tenants_) p.stop(2s);
    tenants_.clear();
    for (const std::string& c : cgroups_) fs::remove(c);
    TlsFixture::TearDown();
  }

  // A file in the tenant's directory, owned by the tenant.
  std::string tenant_file(const std::string& name) const { return tenant_dir_ + "/" + name; }
  void give_to_tenant(const std::string& file) const { ASSERT_EQ(chown(file.c_str(), 65534, 65534), 0); }

  // Copies of the fake library, each a file of its own (an inode of its own).
  std::vector<std::string> fake_copies(int n, const std::string& stem) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      const std::string f = tenant_file(stem + std::to_string(i) + "/libssl.so.3");
      fs::create_directories(fs::path(f).parent_path());
      fs::copy_file(fake_, f);
      out.push_back(f);
    }
    return out;
  }

  // A cgroup of its own: the tenant whose budget the files it maps spend.
  std::string new_cgroup(const std::string& name) {
    const std::string cg = capture::cgroup2_mount_point() + "/infertap-tenant-" + std::to_string(getpid()) + "-" + name;
    EXPECT_TRUE(fs::create_directory(cg)) << "cgroup v2 needed";
    cgroups_.push_back(cg);
    return cg;
  }
  static void move_to(const std::string& cgroup, int pid) { std::ofstream(cgroup + "/cgroup.procs") << pid << "\n"; }

  // The tenant's program as nobody, in `cgroup` from its first instruction
  // when one is given; returns once READY exists.
  Process& run_tenant(std::vector<std::string> args, const std::string& ready, const std::string& log,
                      const std::string& cgroup = "") {
    std::vector<std::string> argv(std::begin(kNobody), std::end(kNobody));
    argv.push_back(mapper_);
    argv.insert(argv.end(), args.begin(), args.end());
    if (!cgroup.empty()) {
      std::string joined;
      for (const std::string& a : argv) joined += " '" + a + "'";
      argv = {"/bin/sh", "-c", "echo $$ > " + cgroup + "/cgroup.procs && exec" + joined};
    }
    auto p = Process::spawn(argv, path(log));
    EXPECT_TRUE(p);
    tenants_.push_back(std::move(*p));
    EXPECT_TRUE(testing::wait_for_file(ready, 20s)) << read_file(path(log));
    return tenants_.back();
  }

  // The agent's counter or gauge NAME, scraped from its /metrics.
  double metric(const std::string& name) const {
    const std::string out = path("metrics.txt");
    const std::string cmd = "curl -s -m 5 http://127.0.0.1:" + std::to_string(metrics_port_) + "/metrics > " + out;
    if (std::system(cmd.c_str()) != 0) return -1;
    const std::regex line("^infertap_kernel_" + name + "(_total)? ([0-9.e+]+)$");
    std::ifstream in(out);
    std::string l;
    std::smatch m;
    while (std::getline(in, l))
      if (std::regex_match(l, m, line)) return std::stod(m[2]);
    return -1;
  }
  void start_agent_with_metrics() {
    metrics_port_ = testing::free_port();
    start_agent_with({"--socket", "", "--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port_)});
  }
  // Waits for the metric to satisfy `ok`; its last value.
  template <class Ok>
  double wait_metric(const std::string& name, Ok ok, std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    double v = metric(name);
    while (!ok(v) && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(200ms);
      v = metric(name);
    }
    return v;
  }

  std::string tenant_dir_, mapper_, fake_;
  std::vector<Process> tenants_;
  std::vector<std::string> cgroups_;
  std::uint16_t metrics_port_ = 0;
};

// The tenant maps its libssl.so.3 and, at the agent's first open of it, maps
// a root-owned file over the same addresses. A root process runs that file
// and checks its code every millisecond: no breakpoint may appear in it.
TEST_F(TenantTest, AMappingSwappedAtTheAgentsOpenGetsNoProbeInTheOtherFile) {
  const std::string victim_dir = path("root-owned");
  fs::create_directories(victim_dir);
  const std::string victim = victim_dir + "/libvictim.so";
  // The same code under other names (XSL_write): the same layout, so the
  // fake's probe offsets fall on its code, but nothing the agent probes.
  std::ofstream(path("victim.c")) << std::regex_replace(kFakeLibssl, std::regex("SSL_"), "XSL_");
  ASSERT_EQ(std::system(("cc -O1 -shared -fPIC -o " + victim + " " + path("victim.c")).c_str()), 0);
  fs::permissions(victim, fs::perms(0755));
  give_to_tenant(fake_);
  auto watcher = Process::spawn({mapper_, "victim", victim, "6", path("victim.report")}, path("victim.out"));
  ASSERT_TRUE(watcher);
  run_tenant({"swap", fake_, victim, tenant_file("swap.ready")}, tenant_file("swap.ready"), "swap.out");

  start_agent_with_metrics();
  ASSERT_TRUE(testing::wait_for_text(path("swap.out"), "swapped", 10s)) << "the agent opened the tenant's file";
  auto st = watcher->wait(20s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("victim.out"));
  EXPECT_EQ(read_file(path("victim.report")), "clean\n") << "a breakpoint was written into the root-owned file:\n"
                                                          << read_file(path("agent.log"));
  stop_agent_records();
  const std::string log = read_file(path("agent.log"));
  const json stats = agent_stats();
  // Either the agent's descriptor held the tenant's own file (probed: its
  // note names it), or it already held the replacement (refused, counted).
  const bool probed_own = log.find("probing TLS in libssl.so.3 as openssl-3 (defines SSL_write and SSL_read (" +
                                   fake_) != std::string::npos;
  EXPECT_TRUE(probed_own || kernel_counter(stats, "tls_files_changed") >= 1) << log;
  EXPECT_EQ(log.find("libvictim.so"), std::string::npos) << "the replacement was never read as a library:\n" << log;
}

// 1 100 fake libraries held mapped by one tenant spend its own share; a
// server of another tenant (its own copy of libssl, in a cgroup of its own)
// started after them still gets probes, and its streams are recorded. The
// agent's memory and descriptors stay bounded, and it stops in bounded time.
TEST_F(TenantTest, OneTenantsFakesDoNotBlindAnother) {
  const std::vector<std::string> fakes = fake_copies(1100, "fake");
  for (const auto& f : fakes) give_to_tenant(f);
  std::vector<std::string> args = {"many", tenant_file("many.ready")};
  args.insert(args.end(), fakes.begin(), fakes.end());
  run_tenant(args, tenant_file("many.ready"), "many.out", new_cgroup("hostile"));

  start_agent_with_metrics();
  const double refusals_at_start = metric("uprobe_budget_refusals");
  EXPECT_LE(metric("uprobe_files"), 32 + 4) << "its 32, and the host's own libraries";

  // The other tenant: a TLS server on its own copy of libssl.so.3.
  const std::string own_lib = path("other/libssl.so.3");
  fs::create_directories(fs::path(own_lib).parent_path());
  fs::copy_file("/usr/lib/x86_64-linux-gnu/libssl.so.3", own_lib);
  setenv("LD_LIBRARY_PATH", fs::path(own_lib).parent_path().c_str(), 1);
  const std::string started = start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "5"});
  unsetenv("LD_LIBRARY_PATH");
  ASSERT_EQ(started, "");
  move_to(new_cgroup("other"), peers_["server"]->pid());
  std::this_thread::sleep_for(1s);  // its exec's rescans
  ASSERT_EQ(run_to_end(tls_client("client", port_, {"--tokens", "10", "--requests", "3"}), "client.out"), 0)
      << read_file(path("client.out"));
  const std::string agent_pid = std::to_string(agent_->pid());
  const std::string status = read_file("/proc/" + agent_pid + "/status");
  const auto fds = std::distance(fs::directory_iterator("/proc/" + agent_pid + "/fd"), fs::directory_iterator());
  stop_tls_server("server");

  const auto stop_start = std::chrono::steady_clock::now();
  const auto records = stop_agent_after_joins();
  const double stop_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stop_start).count() - 1.5;  // less the join wait
  std::printf("  1100 fakes: agent %zd fds, %s; stopped in %.2f s\n", static_cast<std::ptrdiff_t>(fds),
              std::regex_replace(status.substr(status.find("VmRSS")), std::regex("\n[\\s\\S]*"), "").c_str(), stop_s);
  const auto servers = where(records, "role", "server");
  ASSERT_EQ(servers.size(), 3u) << "the other tenant's streams are recorded:\n" << read_file(path("agent.log"));
  for (const auto& r : servers) {
    EXPECT_TRUE(r["tls"].get<bool>()) << r.dump();
    EXPECT_EQ(r["content_events"], 10) << r.dump();
  }
  EXPECT_LT(fds, 600) << "uprobe_multi links: a handful of descriptors per probed file";
  const std::size_t rss_at = status.find("VmHWM:");
  ASSERT_NE(rss_at, std::string::npos);
  EXPECT_LT(std::stol(status.substr(rss_at + 6)), 200 * 1024) << "peak RSS in kB, with 1 100 files inspected";
  EXPECT_LT(stop_s, 15.0) << "probes come off in parallel: well within a DaemonSet's 30 s grace";
  const std::string log = read_file(path("agent.log"));
  EXPECT_NE(log.find("has 32 files with TLS probes already, its share"), std::string::npos) << "refusals are named";
  // Past its share of 32 files each fake is refused once. The tenant's own C
  // library is the host's (never charged) unless this host's init runs from
  // another root than the tests: then it is one more refusal, named too.
  const auto lines_with = [&](const std::regex& re) {
    return std::distance(std::sregex_iterator(log.begin(), log.end(), re), std::sregex_iterator());
  };
  const auto fakes_probed = lines_with(std::regex("probing TLS in libssl\\.so\\.3 [^\n]*/tenant/fake\\d+/"));
  const auto others_refused = lines_with(std::regex("failed: budget: its cgroup [^\n]*-hostile "));
  EXPECT_EQ(fakes_probed, 32) << "its share:\n" << log;
  EXPECT_LE(others_refused, 1) << "at most its C library";
  EXPECT_EQ(refusals_at_start, 1100 - 32 + others_refused) << "past its share of 32 files, each refused once";
}

// One process dlopens 200 copies and exits: their probes are released within
// seconds (its cgroup's share comes back), not kept for the agent's lifetime.
TEST_F(TenantTest, ProbesOfFilesNoProcessMapsAnyMoreAreReleased) {
  const std::vector<std::string> copies = fake_copies(200, "copy");
  for (const auto& f : copies) give_to_tenant(f);
  start_agent_with_metrics();
  const double baseline = metric("uprobe_files");
  std::vector<std::string> args = {"dlopen", "4", tenant_file("dlopen.ready")};
  args.insert(args.end(), copies.begin(), copies.end());
  Process& tenant = run_tenant(args, tenant_file("dlopen.ready"), "dlopen.out", new_cgroup("dlopen"));
  const double held = wait_metric("uprobe_files", [&](double v) { return v >= baseline + 32; }, 10s);
  EXPECT_EQ(held, baseline + 32) << "its share of 32 files probed";
  auto st = tenant.wait(20s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_file(path("dlopen.out"));
  const auto exited = std::chrono::steady_clock::now();
  const double after = wait_metric("uprobe_files", [&](double v) { return v == baseline; }, 15s);
  const double released_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - exited).count();
  std::printf("  200 copies: %g files probed, released %.1f s after the process exited\n", held - baseline,
              released_s);
  EXPECT_EQ(after, baseline) << "released once no process maps them:\n" << read_file(path("agent.log"));
  EXPECT_EQ(metric("uprobe_handles") >= 0, true);
  stop_agent_records();
  EXPECT_GE(kernel_counter(agent_stats(), "tls_libraries_released"), 32u);
}


// A Go-looking program that, at the agent's second open of its executable
// (the OpenSSL finder opens it first, through its mapping; the Go finder
// second, through /proc/PID/exe), execs a root-owned file of the same
// layout; that program then checks its own code every millisecond. What the
// agent read and probes is the first file: no breakpoint lands in the second.
constexpr const char* kGoLooking = R"(
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>
__attribute__((section(".go.buildinfo"), used)) static const char buildinfo[] =
    "\xff Go buildinf:\x08\x02" "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0" "\x08" "go1.21.0";
__asm__(".text\n.globl w\n.type \"crypto/tls.(*Conn).Write\",@function\n\"crypto/tls.(*Conn).Write\":\nnop\nnop\nret\n"
        ".size \"crypto/tls.(*Conn).Write\", 3\n"
        ".type \"crypto/tls.(*Conn).Read\",@function\n\"crypto/tls.(*Conn).Read\":\nnop\nnop\nret\n"
        ".size \"crypto/tls.(*Conn).Read\", 3\n");
extern char __executable_start[], etext[];
int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[1], "tenant")) {  /* tenant SELF REPLACEMENT */
    int in = inotify_init1(IN_CLOEXEC);
    if (in < 0 || inotify_add_watch(in, argv[2], IN_OPEN) < 0) return 2;
    printf("watching\n"); fflush(stdout);
    char buf[4096];
    for (int opens = 0; opens < 2;) {
      ssize_t n = read(in, buf, sizeof buf);
      if (n <= 0) return 2;
      for (char* p = buf; p < buf + n; p += sizeof(struct inotify_event) + ((struct inotify_event*)p)->len) ++opens;
    }
    execl(argv[3], argv[3], "victim", (char*)0);
    return 3;
  }
  /* victim: its code as loaded against a copy taken now, for 5 s */
  static char copy[1 << 20];
  size_t len = (size_t)(etext - __executable_start);
  if (len > sizeof copy) len = sizeof copy;
  memcpy(copy, __executable_start, len);
  printf("running\n"); fflush(stdout);
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 5000; ++i) {
    for (size_t k = 0; k < len; ++k)
      if (__executable_start[k] != copy[k]) { printf("changed at 0x%zx\n", k); fflush(stdout); return 0; }
    nanosleep(&ms, NULL);
  }
  printf("clean\n"); fflush(stdout);
  return 0;
}
)";

TEST_F(TenantTest, AnExecAtTheAgentsOpenGetsNoProbeInTheOtherFile) {
  std::ofstream(path("go_looking.c")) << kGoLooking;
  std::ofstream(path("go_other.c")) << std::regex_replace(kGoLooking, std::regex("crypto/tls"), "crypto/tlX");
  const std::string mine = tenant_file("goish"), other_dir = path("root-owned"), other = other_dir + "/goish";
  fs::create_directories(other_dir);
  ASSERT_EQ(std::system(("cc -O1 -no-pie -o " + mine + " " + path("go_looking.c")).c_str()), 0);
  ASSERT_EQ(std::system(("cc -O1 -no-pie -o " + other + " " + path("go_other.c")).c_str()), 0);
  give_to_tenant(mine);
  fs::permissions(other, fs::perms(0755));
  std::vector<std::string> argv(std::begin(kNobody), std::end(kNobody));
  argv.insert(argv.end(), {mine, "tenant", mine, other});
  auto p = Process::spawn(argv, path("goish.out"));
  ASSERT_TRUE(p);
  tenants_.push_back(std::move(*p));
  ASSERT_TRUE(testing::wait_for_text(path("goish.out"), "watching", 10s)) << read_file(path("goish.out"));
  start_agent_with_metrics();
  ASSERT_TRUE(testing::wait_for_text(path("goish.out"), "running", 10s)) << "the tenant exec'd at the agent's open";
  auto st = tenants_.back().wait(20s);
  ASSERT_TRUE(st) << read_file(path("goish.out"));
  const std::string out = read_file(path("goish.out"));
  EXPECT_NE(out.find("clean"), std::string::npos) << "a breakpoint was written into the root-owned file:\n"
                                                   << out << read_file(path("agent.log"));
  stop_agent_records();
  const std::string log = read_file(path("agent.log"));
  EXPECT_NE(log.find("as go:goish (go1.21.0, crypto/tls.(*Conn).Write/Read from symtab, 2 RET probes (" + mine + ")"),
            std::string::npos)
      << "the tenant's own file is what was read and probed:\n" << log;
}

// A tenant's server holds streams of tiny events far past the timeline's
// bound (32 768 events): each record keeps its first events whole and says it
// was cut, its counts stay exact, and the agent's memory stays bounded.
TEST_F(TenantTest, AFloodOfTinyEventsKeepsEachRecordExactAndTheAgentBounded) {
  constexpr int kStreams = 2, kEvents = 60000;
  auto server = Process::spawn({testing::build_dir() + "/sample-server", "--port", std::to_string(port_), "--ttft-ms",
                                "1", "--itl-ms", "0", "--tokens", std::to_string(kEvents), "--text", "a"},
                               path("server.out"));
  ASSERT_TRUE(server);
  ASSERT_TRUE(testing::wait_for_text(path("server.out"), "listening", 10s));
  // A ring buffer that holds the burst whole: the flood is ~300 k events/s, past what one core drains.
  start_agent_with({"--socket", "", "--metrics-listen", "", "--ringbuf-mb", "64", "--port", std::to_string(port_)});
  ASSERT_EQ(run_to_end({testing::build_dir() + "/sample-client", "--port", std::to_string(port_), "--concurrency",
                        std::to_string(kStreams)},
                       "client.out", 120s),
            0)
      << read_file(path("client.out"));
  const std::string status = read_file("/proc/" + std::to_string(agent_->pid()) + "/status");
  const std::size_t hwm_at = status.find("VmHWM:");
  ASSERT_NE(hwm_at, std::string::npos);
  const long peak_kb = std::stol(status.substr(hwm_at + 6));
  server->stop(5s);
  const auto records = stop_agent_after_joins();
  std::printf("  %d streams x %d events: agent peak RSS %ld kB\n", kStreams, kEvents, peak_kb);
  const auto servers = where(records, "role", "server");
  ASSERT_EQ(servers.size(), std::size_t(kStreams)) << read_file(path("agent.log"));
  for (const auto& r : servers) {
    EXPECT_EQ(r["content_events"], kEvents) << "counts stay exact past the bound";
    EXPECT_EQ(r["timeline_truncated"], true);
    EXPECT_EQ(r["timeline_events"], 32768);
    EXPECT_EQ(r["end"], "complete");
  }
  EXPECT_LT(peak_kb, 300 * 1024) << "the agent's peak RSS in kB, its 64 MiB ring buffer included";
}

// Files crafted against the reader, held mapped by a tenant (a sparse 12 KB
// file claiming 10 M sections, a sparse 4 GiB .symtab, a 16 MiB .strtab
// without NUL, a zlib .strtab inflating to 1 GiB, SSL_write into the middle
// of an instruction, a library truncated while the agent reads it) and a
// Go-looking executable with 5 000 RET instructions in each crypto/tls
// function, running: each is refused and named, the agent stays small and
// quick, another tenant's TLS server is recorded meanwhile, and the agent
// stops in bounded time.
TEST_F(TenantTest, CraftedFilesAreRefusedWhileOtherStreamsAreRecorded) {
  std::vector<std::string> args = {"many", tenant_file("bombs.ready")};
  for (const std::string kind : {"sections", "symtab", "strtab", "zlib", "midinsn"}) {
    const std::string f = tenant_file(kind + "/libssl.so.3");
    fs::create_directories(fs::path(f).parent_path());
    ASSERT_EQ(std::system(("python3 tests/support/elf_bombs.py " + kind + " " + f).c_str()), 0) << kind;
    give_to_tenant(f);
    args.push_back(f);
  }
  const std::string cgroup = new_cgroup("bombs");
  run_tenant(args, tenant_file("bombs.ready"), "bombs.out", cgroup);
  const std::string goret = tenant_file("goret");
  ASSERT_EQ(std::system(("python3 tests/support/elf_bombs.py goret " + goret).c_str()), 0);
  fs::permissions(goret, fs::perms(0755));
  give_to_tenant(goret);
  std::vector<std::string> go_argv(std::begin(kNobody), std::end(kNobody));
  go_argv.push_back(goret);
  auto go = Process::spawn({"/bin/sh", "-c", "echo $$ > " + cgroup + "/cgroup.procs && exec" + [&] {
                              std::string j;
                              for (const auto& a : go_argv) j += " '" + a + "'";
                              return j;
                            }()},
                           path("goret.out"));
  ASSERT_TRUE(go);
  tenants_.push_back(std::move(*go));
  // A library truncated by its tenant at the agent's first open of it.
  const std::string shrinking = tenant_file("truncated/libssl.so.3");
  fs::create_directories(fs::path(shrinking).parent_path());
  ASSERT_EQ(std::system(("python3 tests/support/elf_bombs.py strtab " + shrinking).c_str()), 0);
  give_to_tenant(shrinking);
  run_tenant({"truncate", shrinking, tenant_file("truncate.ready")}, tenant_file("truncate.ready"), "truncate.out",
             cgroup);

  const auto started = std::chrono::steady_clock::now();
  start_agent_with_metrics();
  const double start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string own_lib = path("other/libssl.so.3");
  fs::create_directories(fs::path(own_lib).parent_path());
  fs::copy_file("/usr/lib/x86_64-linux-gnu/libssl.so.3", own_lib);
  setenv("LD_LIBRARY_PATH", fs::path(own_lib).parent_path().c_str(), 1);
  const std::string listening = start_tls_server("server", {"--ttft-ms", "10", "--itl-ms", "5"});
  unsetenv("LD_LIBRARY_PATH");
  ASSERT_EQ(listening, "");
  std::this_thread::sleep_for(1s);
  ASSERT_EQ(run_to_end(tls_client("client", port_, {"--tokens", "10", "--requests", "3"}), "client.out"), 0)
      << read_file(path("client.out"));
  const std::string agent_pid = std::to_string(agent_->pid());
  const std::string status = read_file("/proc/" + agent_pid + "/status");
  const std::size_t hwm_at = status.find("VmHWM:");
  const long peak_kb = hwm_at == std::string::npos ? -1 : std::stol(status.substr(hwm_at + 6));
  stop_tls_server("server");
  const auto stopping = std::chrono::steady_clock::now();
  const auto records = stop_agent_records();
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopping).count();
  std::printf("  crafted files: agent ready in %.2f s, peak RSS %ld kB, stopped in %.2f s\n", start_s, peak_kb, stop_s);

  const std::string log = read_file(path("agent.log"));
  EXPECT_LT(peak_kb, 200 * 1024) << "no bomb grows the agent:\n" << log;
  EXPECT_LT(start_s, 15.0) << "no file holds the first scan for long";
  EXPECT_LT(stop_s, 10.0);
  const auto servers = where(records, "role", "server");
  EXPECT_EQ(servers.size(), 3u) << "the other tenant's streams are recorded:\n" << log;
  for (const std::string kind : {"sections", "symtab", "strtab", "zlib"})
    EXPECT_NE(log.find(tenant_file(kind + "/libssl.so.3")), std::string::npos) << kind << " is named:\n" << log;
  EXPECT_NE(log.find("SSL_write"), std::string::npos) << "the mid-instruction symbol is refused by name";
  EXPECT_EQ(log.find("probing TLS in libssl.so.3 as openssl-3 (defines SSL_write and SSL_read (" +
                     tenant_file("midinsn")),
            std::string::npos)
      << "no probe in the middle of an instruction:\n" << log;
  EXPECT_NE(log.find("Go TLS of " + goret), std::string::npos) << "the RET-heavy executable is named:\n" << log;
  EXPECT_EQ(kernel_counter(agent_stats(), "go_tls_binaries_attached"), 0u);
}

}  // namespace
}  // namespace infertap
