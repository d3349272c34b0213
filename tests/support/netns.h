// A second "host" on this machine for path tests (issue 3): a network
// namespace joined to the root namespace by a veth pair, with an optional
// token-bucket (tbf) rate limit on either direction. Requires root.
//
//   NetnsPath net({.rate = "64kbit"});           // shapes host -> namespace
//   ASSERT_TRUE(net.ok()) << net.error();
//   server on net.host_ip() (or 0.0.0.0), client inside the namespace:
//   Process::spawn(net.wrap({build_dir() + "/sample-client", "--host", net.host_ip(), ...}))
//
// Addresses: host side 10.231.A.B+1/30, namespace side 10.231.A.B+2/30, a
// /30 nobody else on the machine uses. The kernel here has no netem: no
// delay/loss emulation; tbf (and htb) exist. The veth RTT is ~50 us.
//
// Cleanup: the destructor SIGKILLs whatever still runs in the namespace (the
// test's own processes) and deletes it, which deletes the veth pair. Names
// carry the creating pid ("itap-<pid>-<n>", veths "itv<pid>h<n>"/"itv<pid>n<n>"),
// so every new NetnsPath first sweeps namespaces and veths of pids that are no
// longer alive (a test binary that crashed or was killed).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace infertap::testing {

// Run a shell command, stdout+stderr into *out. Returns the exit status (-1: not run).
inline int run_shell(const std::string& cmd, std::string* out = nullptr) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int st = pclose(f);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct NetnsOptions {
  // tbf on the host-side veth (traffic host -> namespace, e.g. a server on
  // the host streaming to a client in the namespace). "" = no limit.
  std::string rate;                 // tc rate syntax: "64kbit", "1mbit"
  std::string burst = "1600";       // bucket size, bytes (>= MTU + headers)
  std::string latency = "2s";       // max queueing time before tbf drops (sets its queue limit)
  // The same for namespace -> host traffic (a server in the namespace).
  std::string ns_rate;
  std::string ns_burst = "1600";
  std::string ns_latency = "2s";
  int mtu = 0;  // 0 = veth default (1500)
};

class NetnsPath {
 public:
  static constexpr const char* kPrefix = "itap-";

  explicit NetnsPath(NetnsOptions opt = {}) : opt_(std::move(opt)) {
    if (geteuid() != 0) {
      error_ = "network namespaces need root";
      return;
    }
    if (run_shell("command -v ip >/dev/null && command -v tc >/dev/null") != 0) {
      error_ = "ip/tc not installed: run scripts/setup.sh (iproute2)";
      return;
    }
    sweep_stale();
    static std::atomic<int> seq{0};
    const int n = seq.fetch_add(1);
    const std::string pid = std::to_string(getpid());
    name_ = kPrefix + pid + "-" + std::to_string(n);
    host_dev_ = "itv" + pid + "h" + std::to_string(n);
    ns_dev_ = "itv" + pid + "n" + std::to_string(n);
    if (host_dev_.size() > 15) {  // IFNAMSIZ - 1
      error_ = "veth name too long: " + host_dev_;
      return;
    }
    if (!pick_subnet()) return;
    std::string out;
    if (!sh("ip netns add " + name_)) return;
    created_ = true;
    if (!sh("ip link add " + host_dev_ + " type veth peer name " + ns_dev_ + " netns " + name_)) return;
    if (opt_.mtu > 0 && (!sh("ip link set " + host_dev_ + " mtu " + std::to_string(opt_.mtu)) ||
                         !sh(in_ns("ip link set " + ns_dev_ + " mtu " + std::to_string(opt_.mtu)))))
      return;
    if (!sh("ip addr add " + host_ip_ + "/30 dev " + host_dev_) || !sh("ip link set " + host_dev_ + " up") ||
        !sh(in_ns("ip addr add " + ns_ip_ + "/30 dev " + ns_dev_)) || !sh(in_ns("ip link set " + ns_dev_ + " up")) ||
        !sh(in_ns("ip link set lo up")))
      return;
    if (!opt_.rate.empty() && !set_rate(host_dev_, opt_.rate, opt_.burst, opt_.latency, false)) return;
    if (!opt_.ns_rate.empty() && !set_rate(ns_dev_, opt_.ns_rate, opt_.ns_burst, opt_.ns_latency, true)) return;
    // Wait for the link (and IPv4 DAD-free address) to be usable both ways.
    for (int i = 0; i < 50; ++i) {
      if (run_shell(in_ns("ping -c1 -W1 " + host_ip_) + " >/dev/null") == 0 ||
          run_shell("command -v ping >/dev/null") != 0)
        return;
      usleep(20000);
    }
    error_ = "veth " + host_dev_ + " <-> " + ns_dev_ + " does not pass traffic";
  }

  ~NetnsPath() { destroy(); }
  NetnsPath(const NetnsPath&) = delete;
  NetnsPath& operator=(const NetnsPath&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }
  const std::string& host_ip() const { return host_ip_; }  // the root namespace's end
  const std::string& ns_ip() const { return ns_ip_; }      // the namespace's end
  const std::string& host_dev() const { return host_dev_; }
  const std::string& ns_dev() const { return ns_dev_; }

  // argv prefix that runs a command inside the namespace ("ip netns exec"
  // execs the command: the spawned pid is the command's pid).
  std::vector<std::string> exec_prefix() const { return {ip_path(), "netns", "exec", name_}; }
  std::vector<std::string> wrap(std::vector<std::string> argv) const {
    std::vector<std::string> out = exec_prefix();
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }
  // A shell command line run inside the namespace.
  std::string in_ns(const std::string& cmd) const { return "ip netns exec " + name_ + " " + cmd; }

  // Replace the root qdisc of a device (host_dev() or ns_dev()) with tbf.
  bool set_rate(const std::string& dev, const std::string& rate, const std::string& burst = "1600",
                const std::string& latency = "2s", bool in_namespace = false) {
    std::string cmd = "tc qdisc replace dev " + dev + " root tbf rate " + rate + " burst " + burst + " latency " + latency;
    return sh(in_namespace ? in_ns(cmd) : cmd);
  }
  // `tc -s qdisc show` of the host-side (default) or namespace-side device.
  std::string qdisc_stats(bool ns_side = false) const {
    std::string out;
    const std::string cmd = "tc -s qdisc show dev " + (ns_side ? ns_dev_ : host_dev_);
    run_shell(ns_side ? in_ns(cmd) : cmd, &out);
    return out;
  }
  // Pids of processes running in the namespace.
  std::vector<pid_t> pids() const {
    std::vector<pid_t> v;
    if (!created_) return v;
    std::string out;
    run_shell("ip netns pids " + name_, &out);
    std::istringstream in(out);
    long p;
    while (in >> p) v.push_back(pid_t(p));
    return v;
  }

  // Kill what runs inside, delete the namespace (and with it the veth pair).
  void destroy() {
    if (!created_) return;
    for (int round = 0; round < 50; ++round) {
      auto ps = pids();
      if (ps.empty()) break;
      for (pid_t p : ps) ::kill(p, SIGKILL);
      usleep(20000);
    }
    run_shell("ip netns del " + name_);
    run_shell("ip link del " + host_dev_ + " 2>/dev/null");  // gone with the namespace normally
    created_ = false;
  }

  // Delete namespaces "itap-<pid>-*" and veths "itv<pid>*" whose pid is not
  // alive. Returns how many namespaces were removed.
  static int sweep_stale() {
    int removed = 0;
    std::string out;
    run_shell("ip netns list", &out);
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      std::string name = line.substr(0, line.find(' '));
      if (name.rfind(kPrefix, 0) != 0) continue;
      const long pid = std::atol(name.c_str() + std::string(kPrefix).size());
      if (pid <= 0 || pid_alive(pid)) continue;
      std::string pids;
      run_shell("ip netns pids " + name, &pids);
      std::istringstream pin(pids);
      long p;
      while (pin >> p) ::kill(pid_t(p), SIGKILL);
      if (run_shell("ip netns del " + name) == 0) ++removed;
    }
    run_shell("ip -o link show", &out);
    std::istringstream lin(out);
    while (std::getline(lin, line)) {
      // "12: itv123h0@if11: <...>"
      const std::size_t a = line.find(": ");
      if (a == std::string::npos) continue;
      std::string dev = line.substr(a + 2);
      dev = dev.substr(0, dev.find_first_of("@:"));
      if (dev.rfind("itv", 0) != 0) continue;
      const long pid = std::atol(dev.c_str() + 3);
      if (pid > 0 && !pid_alive(pid)) run_shell("ip link del " + dev);
    }
    return removed;
  }

 private:
  static bool pid_alive(long pid) { return ::kill(pid_t(pid), 0) == 0 || errno == EPERM; }
  static std::string ip_path() { return access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip"; }

  bool sh(const std::string& cmd) {
    std::string out;
    if (run_shell(cmd, &out) == 0) return true;
    error_ = "`" + cmd + "` failed: " + out;
    return false;
  }

  // A /30 in 10.231.0.0/16 that no interface on the machine has yet.
  bool pick_subnet() {
    std::string addrs;
    run_shell("ip -4 -o addr show", &addrs);
    const unsigned start = (unsigned(getpid()) * 7u) % 16384u;
    for (unsigned k = 0; k < 16384; ++k) {
      const unsigned idx = (start + k) % 16384u;
      const std::string base = "10.231." + std::to_string(idx / 64) + ".";
      const unsigned b = (idx % 64) * 4;
      const std::string h = base + std::to_string(b + 1), n = base + std::to_string(b + 2);
      if (addrs.find(" " + h + "/") != std::string::npos || addrs.find(" " + n + "/") != std::string::npos) continue;
      host_ip_ = h;
      ns_ip_ = n;
      return true;
    }
    error_ = "no free /30 in 10.231.0.0/16";
    return false;
  }

  NetnsOptions opt_;
  std::string name_, host_dev_, ns_dev_, host_ip_, ns_ip_;
  std::string error_;
  bool created_ = false;
};

}  // namespace infertap::testing
