#include "daemon/load_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>

namespace infertap::daemon {
namespace {

// A small file read whole with one read(2): procfs and cgroupfs files are
// generated per read.
std::optional<std::string> read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return std::string(buf, static_cast<std::size_t>(n));
}

std::optional<double> avg10_of(std::string_view line) {
  const std::size_t at = line.find("avg10=");
  if (at == std::string_view::npos) return std::nullopt;
  const std::string value(line.substr(at + 6, line.find(' ', at) - (at + 6)));
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || v < 0 || v > 100) return std::nullopt;
  return v;
}

}  // namespace

PsiLevels parse_psi(std::string_view text) {
  PsiLevels out;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.starts_with("some ")) out.some = avg10_of(line);
    if (line.starts_with("full ")) out.full = avg10_of(line);
  }
  return out;
}

std::optional<std::uint64_t> parse_stat_cpu_ticks(std::string_view stat) {
  // The command name is in parentheses and may hold spaces: fields count from its close.
  const std::size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view rest = stat.substr(close + 1);
  std::uint64_t utime = 0, stime = 0;
  // After ")": state(3) ppid(4) ... utime(14) stime(15): the 12th and 13th fields.
  for (int field = 3; field <= 15; ++field) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const std::size_t sp = rest.find(' ');
    const std::string_view token = rest.substr(0, sp);
    if (token.empty()) return std::nullopt;
    if (field == 14 || field == 15) {
      std::uint64_t v = 0;
      const auto [p, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
      if (ec != std::errc() || p != token.data() + token.size()) return std::nullopt;
      (field == 14 ? utime : stime) = v;
    }
    rest.remove_prefix(sp == std::string_view::npos ? rest.size() : sp);
  }
  return utime + stime;
}

ProcLoadProbe::ProcLoadProbe(std::string proc, std::string cgroup2)
    : proc_(std::move(proc)), cgroup2_(std::move(cgroup2)) {
  const long hz = sysconf(_SC_CLK_TCK);
  ns_per_tick_ = hz > 0 ? 1'000'000'000ull / static_cast<std::uint64_t>(hz) : 10'000'000ull;
}

std::optional<core::Pressure> ProcLoadProbe::read_levels(const std::string& cpu, const std::string& memory,
                                                         const std::string& io) {
  core::Pressure p;
  if (const auto t = read_small(cpu)) {
    const PsiLevels l = parse_psi(*t);
    p.cpu_some = l.some;
    p.cpu_full = l.full;
  }
  if (const auto t = read_small(memory)) {
    const PsiLevels l = parse_psi(*t);
    p.memory_some = l.some;
    p.memory_full = l.full;
  }
  if (const auto t = read_small(io)) {
    const PsiLevels l = parse_psi(*t);
    p.io_some = l.some;
    p.io_full = l.full;
  }
  if (!p.any()) return std::nullopt;
  return p;
}

std::optional<core::Pressure> ProcLoadProbe::host_pressure() {
  return read_levels(proc_ + "/pressure/cpu", proc_ + "/pressure/memory", proc_ + "/pressure/io");
}

std::optional<core::Pressure> ProcLoadProbe::cgroup_pressure(const std::string& cgroup) {
  if (cgroup2_.empty() || cgroup.empty() || cgroup.front() != '/' || cgroup.find("/..") != std::string::npos) {
    return std::nullopt;
  }
  const std::string dir = cgroup2_ + (cgroup == "/" ? "" : cgroup);
  return read_levels(dir + "/cpu.pressure", dir + "/memory.pressure", dir + "/io.pressure");
}

std::optional<std::uint64_t> ProcLoadProbe::process_cpu_ns(std::uint32_t pid) {
  const auto stat = read_small(proc_ + "/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  const auto ticks = parse_stat_cpu_ticks(*stat);
  if (!ticks) return std::nullopt;
  return *ticks * ns_per_tick_;
}

}  // namespace infertap::daemon
