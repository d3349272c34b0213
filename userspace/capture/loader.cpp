// Loader of the kernel side (bpf/: one object linked from the program files):
// the lifecycle (open, load, close) and what must hold before anything loads
// (configuration, privileges, kernel BTF). The attach choice, the ring
// buffer, the maps and the counters are in loader_programs.cpp,
// loader_rings.cpp, loader_maps.cpp and loader_stats.cpp (loader_internal.h).
#include "capture/loader.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>

#include "base/escape.h"
#include "capture/loader_internal.h"

namespace infertap::capture {

using namespace loading;

namespace {

constexpr const char* kBtf = "/sys/kernel/btf/vmlinux";
constexpr std::uint32_t kMinHeadBytes = 16;  // the in-kernel classifier looks at 16 bytes

// libbpf: drop debug and info chatter, keep warnings (verifier logs, attach
// errors). They may carry a tenant's file names: each line is escaped and
// prefixed, so none can pass for the agent's own.
int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level != LIBBPF_WARN) return 0;
  char buf[4096];
  const int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  if (n < 0) return n;
  std::string_view text(buf, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(buf) - 1));
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string line = base::log_line("libbpf", text.substr(0, end));
    std::fwrite(line.data(), 1, line.size(), stderr);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return n;
}

void install_libbpf_print() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpf_print); });
}

// Effective capability test without libcap.
bool has_capability(int capability) {
  __user_cap_header_struct hdr{};
  __user_cap_data_struct data[2]{};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  hdr.pid = 0;
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[capability / 32].effective >> (capability % 32)) & 1u;
}

bool may_load_bpf() {
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
  return has_capability(CAP_SYS_ADMIN) || (has_capability(CAP_BPF) && has_capability(CAP_PERFMON));
}

const char* kNeedCaps = "loading BPF programs needs CAP_BPF+CAP_PERFMON (or root)";

std::string load_error(int err) {
  err = err < 0 ? -err : err;
  switch (err) {
    case EPERM:
      if (may_load_bpf())
        return std::string(kNeedCaps) +
               "; the process has them, so the kernel refused anyway: check kernel lockdown "
               "(/sys/kernel/security/lockdown), an LSM policy, or kernel.unprivileged_bpf_disabled";
      return kNeedCaps;
    case EACCES:
    case EINVAL:
      return "the kernel's BPF verifier rejected a program (" + errstr(err) +
             "; the verifier log is printed above). The kernel may be too old (needs ring buffers, "
             "5.8+) or lack BTF/CO-RE support";
    case E2BIG:
      return "a BPF program is too large for this kernel's verifier (" + errstr(err) + ")";
    case ENOMEM:
      return "not enough memory for the BPF maps (" + errstr(err) +
             "): the ring buffer and maps are charged to the cgroup's memory (or RLIMIT_MEMLOCK on "
             "kernels before 5.11); lower ringbuf_bytes or raise the limit";
    case ENOENT:
    case ESRCH:
      return "a kernel type or field the BPF programs need is missing from the kernel's BTF (" +
             errstr(err) + "; CO-RE relocation failed, see the libbpf log above)";
    default:
      return "loading the BPF programs failed: " + errstr(err);
  }
}

bool is_pow2(std::uint32_t v) { return v && !(v & (v - 1)); }

std::string validate_config(const CaptureConfig& config) {
  if (config.head_bytes < kMinHeadBytes || config.head_bytes > ITAP_HEAD_MAX)
    return "head_bytes must be in [" + std::to_string(kMinHeadBytes) + ", " + std::to_string(ITAP_HEAD_MAX) +
           "] (got " + std::to_string(config.head_bytes) + ")";
  if (config.tail_bytes > ITAP_TAIL_MAX)
    return "tail_bytes must be at most " + std::to_string(ITAP_TAIL_MAX) + " (got " +
           std::to_string(config.tail_bytes) + ")";
  const long page = sysconf(_SC_PAGESIZE);
  if (!is_pow2(config.ringbuf_bytes) || config.ringbuf_bytes < std::uint32_t(page > 0 ? page : 4096))
    return "ringbuf_bytes must be a power of two and at least one page (got " +
           std::to_string(config.ringbuf_bytes) + ")";
  return "";
}

std::string check_privileges_and_features() {
  if (!may_load_bpf()) return kNeedCaps;
  if (!exists(kBtf))
    return std::string("kernel BTF is missing at ") + kBtf +
           ": infertap's CO-RE programs need a kernel built with CONFIG_DEBUG_INFO_BTF=y";
  // Kernels >= 5.11 charge BPF memory to the memory cgroup; on older ones a
  // low RLIMIT_MEMLOCK fails map creation. Raising it is best effort.
  rlimit rl{RLIM_INFINITY, RLIM_INFINITY};
  (void)setrlimit(RLIMIT_MEMLOCK, &rl);
  return "";
}

std::string open_and_configure(const CaptureConfig& config, Capture::Impl& impl) {
  impl.skel = infertap_bpf__open();
  if (!impl.skel) return "opening the embedded BPF object failed: " + errstr(errno);
  auto* rodata = impl.skel->rodata;
  rodata->self_tgid = config.ignore_self ? static_cast<std::uint32_t>(getpid()) : 0;
  rodata->filter_pids = !config.pids.empty();
  rodata->filter_cgroups = !config.cgroup_ids.empty();
  rodata->filter_ports = !config.ports.empty();
  rodata->filter_unix_paths = config.unix_paths;
  rodata->head_bytes = config.head_bytes;
  rodata->tail_bytes = config.tail_bytes;
  rodata->wakeup_bytes = config.wakeup_bytes;
  if (int e = bpf_map__set_max_entries(impl.skel->maps.itap_rb, config.ringbuf_bytes); e)
    return "sizing the ring buffer failed: " + errstr(e);
  return "";
}

}  // namespace

Capture::Capture(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Capture::~Capture() = default;

std::unique_ptr<Capture> Capture::open(const CaptureConfig& config, std::string* error) {
  std::string scratch_err;
  std::string& err = error ? *error : scratch_err;
  if (!(err = validate_config(config)).empty()) return nullptr;
  install_libbpf_print();
  if (!(err = check_privileges_and_features()).empty()) return nullptr;

  const KernelBtf vmlinux = load_kernel_btf();
  // A second attempt only without the end of unix sockets, when it was what
  // failed to load or attach (its kernel support is probed, not certain).
  std::optional<std::string> unix_close_error;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto impl = std::make_unique<Impl>();
    impl->ncpus = libbpf_num_possible_cpus();
    if (impl->ncpus <= 0) {
      err = "cannot read the number of possible CPUs (/sys/devices/system/cpu/possible): " + errstr(impl->ncpus);
      return nullptr;
    }
    ProgramChoice choice;
    const AttachSetProblems problems = probe_attach_sets(config, vmlinux.get(), impl->notes);
    if (!(err = choose_attach_set(config, problems, choice, impl->notes)).empty()) return nullptr;
    choose_companions(vmlinux.get(), problems, choice, impl->notes);
    if (unix_close_error) {
      impl->notes.push_back({kUnixInodeNote, "fentry unix_sock_destructor failed: " + *unix_close_error});
    } else {
      choose_unix_close(vmlinux.get(), choice, impl->notes);
    }
    choose_delivery_probes(config, vmlinux.get(), choice, impl->notes);
    choose_tls(config, choice, impl->notes);

    if (!(err = open_and_configure(config, *impl)).empty()) return nullptr;
    select_programs(impl->skel, choice);
    if (int e = infertap_bpf__load(impl->skel); e) {
      err = load_error(e);
      if (choice.unix_close && !unix_close_error) {
        unix_close_error = err;
        continue;
      }
      return nullptr;
    }
    if (!(err = fill_filters(config, impl->skel)).empty()) return nullptr;
    if (!(err = open_ring_buffer(*impl)).empty()) return nullptr;
    bool unix_close_failed = false;
    if (!(err = attach_programs(*impl, &unix_close_failed)).empty()) {
      if (unix_close_failed && !unix_close_error) {
        unix_close_error = err;
        continue;
      }
      return nullptr;
    }
    if (choice.tls) start_tls(config, choice, *impl);
    return std::unique_ptr<Capture>(new Capture(std::move(impl)));
  }
  return nullptr;
}

const std::vector<LoadNote>& Capture::notes() const { return impl_->notes; }

}  // namespace infertap::capture
