// Loader of the syscall capture (bpf/infertap.bpf.c): feature probes, attach
// method choice, rodata and filter maps, ring-buffer draining, counters.
#include "capture/loader.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "capture/abi_check.h"
#include "infertap.skel.h"

namespace infertap::capture {

namespace {

constexpr const char* kTracefs = "/sys/kernel/tracing";
constexpr const char* kBtf = "/sys/kernel/btf/vmlinux";
constexpr std::uint32_t kMinHeadBytes = 16;  // the in-kernel classifier looks at 16 bytes

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string errstr(int err) {
  if (err < 0) err = -err;
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

// libbpf: drop debug and info chatter, keep warnings (verifier logs, attach errors).
int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level != LIBBPF_WARN) return 0;
  return std::vfprintf(stderr, fmt, args);
}

void install_libbpf_print() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpf_print); });
}

// Effective capability test without libcap.
bool has_cap(int cap) {
  __user_cap_header_struct hdr{};
  __user_cap_data_struct data[2]{};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  hdr.pid = 0;
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective >> (cap % 32)) & 1u;
}

bool may_load_bpf() {
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
  return has_cap(CAP_SYS_ADMIN) || (has_cap(CAP_BPF) && has_cap(CAP_PERFMON));
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

// The tracefs group/name a program attaches to, for messages.
std::string prog_target(const bpf_program* prog) {
  const char* sec = bpf_program__section_name(prog);
  return sec ? sec : bpf_program__name(prog);
}

std::string attach_error(const bpf_program* prog, int err, bool tracepoint) {
  err = err < 0 ? -err : err;
  std::string what = "attaching " + std::string(bpf_program__name(prog)) + " to " + prog_target(prog) + " failed: ";
  if (err == EPERM || err == EACCES)
    return what + errstr(err) + ": attaching tracepoints needs CAP_PERFMON (or root)";
  if (err == ENOENT && tracepoint)
    return what + "the tracepoint does not exist under " + std::string(kTracefs) +
           "/events (kernel without CONFIG_FTRACE_SYSCALLS, or tracefs not mounted)";
  if (err == ENOENT)
    return what + "the raw tracepoint does not exist in this kernel";
  return what + errstr(err);
}

bool is_pow2(std::uint32_t v) { return v && !(v & (v - 1)); }

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

const char* const kSyscalls[] = {"write", "writev", "sendto", "sendmsg", "read", "readv", "recvfrom", "recvmsg"};

// Which of the 16 syscall tracepoints are missing ("" = all present).
std::string missing_syscall_tracepoints() {
  std::string missing;
  for (const char* sc : kSyscalls) {
    for (const char* dir : {"enter", "exit"}) {
      std::string name = std::string("sys_") + dir + "_" + sc;
      if (!exists(std::string(kTracefs) + "/events/syscalls/" + name + "/id"))
        missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  return missing;
}

// Empty when this kernel has the raw tracepoints sock_send_length and
// sock_recv_length (6.3+) and lets tracing programs read a task's user
// registers (bpf_task_pt_regs, 5.15+); else why not. Probed from BTF and by
// loading trivial programs, so no tracefs is needed.
std::string socket_tracepoints_problem() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return "kernel BTF (/sys/kernel/btf/vmlinux) is unavailable";
  const bool send = btf__find_by_name_kind(vmlinux, "btf_trace_sock_send_length", BTF_KIND_TYPEDEF) > 0;
  const bool recv = btf__find_by_name_kind(vmlinux, "btf_trace_sock_recv_length", BTF_KIND_TYPEDEF) > 0;
  btf__free(vmlinux);
  if (!send || !recv) return "tracepoints sock_send_length/sock_recv_length missing (kernel < 6.3)";
  if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_task_pt_regs, nullptr) != 1 ||
      libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_get_current_task_btf, nullptr) != 1)
    return "BPF helpers task_pt_regs/get_current_task_btf unavailable to raw tracepoints (kernel < 5.15)";
  return "";
}

}  // namespace

std::string ensure_tracefs() {
  const std::string events = std::string(kTracefs) + "/events";
  if (exists(events)) return "";
  if (!exists(kTracefs) && ::mkdir(kTracefs, 0700) != 0 && errno != EEXIST)
    return std::string("tracefs mount point ") + kTracefs + " is missing and cannot be created: " + errstr(errno);
  if (::mount("nodev", kTracefs, "tracefs", 0, nullptr) != 0) {
    const int err = errno;
    if (err == EBUSY && exists(events)) return "";
    if (err == EPERM)
      return std::string("mounting tracefs at ") + kTracefs + " needs CAP_SYS_ADMIN (or mount it beforehand: "
             "mount -t tracefs nodev " + kTracefs + ")";
    if (err == ENODEV)
      return "this kernel has no tracefs (CONFIG_TRACING is off)";
    return std::string("mounting tracefs at ") + kTracefs + " failed: " + errstr(err);
  }
  if (!exists(events)) return std::string("tracefs mounted at ") + kTracefs + " but it has no events/ directory";
  return "";
}

struct Capture::Impl {
  infertap_bpf* skel = nullptr;
  std::vector<bpf_link*> links;
  ring_buffer* rb = nullptr;
  std::vector<LoadNote> notes;
  const RecordHandler* handler = nullptr;
  std::uint64_t consumed = 0;
  int ncpus = 1;

  ~Impl() {
    if (rb) ring_buffer__free(rb);
    destroy_links();
    if (skel) infertap_bpf__destroy(skel);
  }

  // Detaching a syscall tracepoint waits for an RCU grace period (tens of ms
  // each on 6.x, where syscall tracepoints are faultable); detaching the links
  // from parallel threads lets those waits overlap: ~1.3 s -> ~0.1 s for 17.
  void destroy_links() {
    std::vector<std::thread> threads;
    for (bpf_link* l : links) {
      try {
        threads.emplace_back([l] { bpf_link__destroy(l); });
      } catch (...) {
        bpf_link__destroy(l);  // no thread available: detach inline
      }
    }
    for (auto& t : threads) t.join();
    links.clear();
  }

  static int on_record(void* ctx, void* data, size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    self->consumed++;
    if (self->handler && *self->handler)
      (*self->handler)(std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(data), size));
    return 0;
  }

  std::uint64_t sum_percpu(bpf_map* map, std::uint32_t key) const {
    std::vector<std::uint64_t> vals(ncpus > 0 ? ncpus : 1);
    if (bpf_map_lookup_elem(bpf_map__fd(map), &key, vals.data()) != 0) return 0;
    std::uint64_t sum = 0;
    for (std::uint64_t v : vals) sum += v;
    return sum;
  }
};

Capture::Capture(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Capture::~Capture() = default;

std::unique_ptr<Capture> Capture::open(const CaptureConfig& config, std::string* error) {
  std::string scratch_err;
  std::string& err = error ? *error : scratch_err;
  err.clear();

  // ---- configuration ----
  if (config.head_bytes < kMinHeadBytes || config.head_bytes > ITAP_HEAD_MAX) {
    err = "head_bytes must be in [" + std::to_string(kMinHeadBytes) + ", " + std::to_string(ITAP_HEAD_MAX) +
          "] (got " + std::to_string(config.head_bytes) + ")";
    return nullptr;
  }
  if (config.tail_bytes > ITAP_TAIL_MAX) {
    err = "tail_bytes must be at most " + std::to_string(ITAP_TAIL_MAX) + " (got " +
          std::to_string(config.tail_bytes) + ")";
    return nullptr;
  }
  const long page = sysconf(_SC_PAGESIZE);
  if (!is_pow2(config.ringbuf_bytes) || config.ringbuf_bytes < std::uint32_t(page > 0 ? page : 4096)) {
    err = "ringbuf_bytes must be a power of two and at least one page (got " + std::to_string(config.ringbuf_bytes) +
          ")";
    return nullptr;
  }

  install_libbpf_print();

  // ---- privileges and kernel features ----
  if (!may_load_bpf()) {
    err = kNeedCaps;
    return nullptr;
  }
  if (!exists(kBtf)) {
    err = std::string("kernel BTF is missing at ") + kBtf +
          ": infertap's CO-RE programs need a kernel built with CONFIG_DEBUG_INFO_BTF=y";
    return nullptr;
  }
  {
    // Kernels >= 5.11 charge BPF memory to the memory cgroup; on older ones a
    // low RLIMIT_MEMLOCK fails map creation. Raising it is best effort.
    rlimit rl{RLIM_INFINITY, RLIM_INFINITY};
    (void)setrlimit(RLIMIT_MEMLOCK, &rl);
  }

  auto impl = std::make_unique<Impl>();
  impl->ncpus = libbpf_num_possible_cpus();
  if (impl->ncpus <= 0) {
    err = "cannot read the number of possible CPUs (/sys/devices/system/cpu/possible): " + errstr(impl->ncpus);
    return nullptr;
  }

  // ---- attach method, chosen before load (each set is the same capture code) ----
  //   socket tracepoints: sock:sock_{send,recv}_length run only on socket I/O;
  //   syscall tracepoints: run on the 8 syscalls, for every fd;
  //   raw sys_enter/sys_exit: run on every syscall (no tracefs needed).
  enum class Set { sock, syscalls, raw } set = Set::raw;
  std::string sock_problem = socket_tracepoints_problem();
  const bool want_tracefs = config.attach == AttachMethod::tracepoints ||
                            (config.attach == AttachMethod::automatic && !sock_problem.empty());
  std::string tracefs_problem = "not needed";
  if (want_tracefs) {
    const bool mounted = exists(std::string(kTracefs) + "/events");
    tracefs_problem = ensure_tracefs();
    if (tracefs_problem.empty() && !mounted)
      impl->notes.push_back({std::string("mounted tracefs at ") + kTracefs, "it was not mounted"});
  }
  const auto has_event = [&](const char* path) {
    return tracefs_problem.empty() && exists(std::string(kTracefs) + "/events/" + path + "/id");
  };
  std::string syscalls_problem;
  if (!tracefs_problem.empty()) {
    syscalls_problem = "tracefs unavailable: " + tracefs_problem;
  } else if (std::string missing = missing_syscall_tracepoints(); !missing.empty()) {
    syscalls_problem = "syscall tracepoints missing from tracefs: " + missing;
  }
  const char* const kSockNote = "attach: raw tracepoints sock_send_length + sock_recv_length";
  const char* const kSyscallsNote =
      "attach: tracepoints syscalls:sys_{enter,exit}_{write,writev,sendto,sendmsg,read,readv,recvfrom,recvmsg}";
  const char* const kRawNote = "attach: raw tracepoints sys_enter/sys_exit (every syscall, filtered by number)";
  switch (config.attach) {
    case AttachMethod::socket_tracepoints:
      if (!sock_problem.empty()) {
        err = "socket tracepoints were requested but cannot be used: " + sock_problem;
        return nullptr;
      }
      set = Set::sock;
      impl->notes.push_back({kSockNote, "chosen by configuration"});
      break;
    case AttachMethod::tracepoints:
      if (!syscalls_problem.empty()) {
        err = "syscall tracepoints were requested but cannot be used: " + syscalls_problem;
        return nullptr;
      }
      set = Set::syscalls;
      impl->notes.push_back({kSyscallsNote, "chosen by configuration"});
      break;
    case AttachMethod::raw_tracepoints:
      set = Set::raw;
      impl->notes.push_back({kRawNote, "chosen by configuration"});
      break;
    case AttachMethod::automatic:
      if (sock_problem.empty()) {
        set = Set::sock;
        impl->notes.push_back({kSockNote, "only socket I/O runs a program; other syscalls cost nothing"});
      } else if (syscalls_problem.empty()) {
        set = Set::syscalls;
        impl->notes.push_back({kSyscallsNote, "socket tracepoints unusable: " + sock_problem});
      } else {
        set = Set::raw;
        impl->notes.push_back({kRawNote, sock_problem + "; " + syscalls_problem});
      }
      break;
  }
  // In the socket set, send durations come from tcp_sendmsg_locked (6.1+).
  bool send_start_available = false;
  if (set == Set::sock) {
    if (btf* vmlinux = btf__load_vmlinux_btf()) {
      send_start_available =
          btf__find_by_name_kind(vmlinux, "btf_trace_tcp_sendmsg_locked", BTF_KIND_TYPEDEF) > 0;
      btf__free(vmlinux);
    }
    if (!send_start_available)
      impl->notes.push_back({"send durations not measured", "tracepoint tcp_sendmsg_locked missing (kernel < 6.1)"});
  }
  // The socket set needs no tracefs at all: its state program attaches raw too.
  const bool state_tp = set != Set::sock && has_event("sock/inet_sock_set_state");
  if (!state_tp)
    impl->notes.push_back({"attach: raw tracepoint inet_sock_set_state",
                           "tracepoint sock:inet_sock_set_state unavailable"});

  // Delivery signals: each raw tracepoint that this kernel has is used; a
  // missing one only turns its vantage off.
  struct PathProbe {
    const char* section;
    const char* tracepoint;
    const char* gives;
  };
  static constexpr PathProbe kPathProbes[] = {
      {"raw_tp/tcp_probe", "tcp_probe", "acked times, peer window (zero-window episodes)"},
      {"raw_tp/sk_data_ready", "sk_data_ready", "arrived times at local receivers"},
      {"raw_tp/tcp_retransmit_skb", "tcp_retransmit_skb", "retransmission counts"},
      {"raw_tp/sock_exceed_buf_limit", "sock_exceed_buf_limit", "socket memory-limit episodes"},
  };
  std::vector<std::string> path_sections;
  if (!config.path_signals) {
    impl->notes.push_back({"delivery signals off (acked, arrived, TCP context)", "disabled by configuration"});
  } else if (btf* vmlinux = btf__load_vmlinux_btf()) {
    std::string used;
    for (const PathProbe& p : kPathProbes) {
      const std::string type = std::string("btf_trace_") + p.tracepoint;
      if (btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) > 0) {
        path_sections.emplace_back(p.section);
        used += (used.empty() ? "" : " + ") + std::string(p.tracepoint);
      } else {
        impl->notes.push_back({std::string("no ") + p.gives, std::string("tracepoint ") + p.tracepoint +
                                                                 " missing from this kernel"});
      }
    }
    if (!used.empty()) impl->notes.push_back({"attach: raw tracepoints " + used, "delivery signals of followed sockets"});
    btf__free(vmlinux);
  } else {
    impl->notes.push_back({"delivery signals off", "kernel BTF unreadable: cannot tell which tracepoints exist"});
  }

  // ---- open, configure, load ----
  impl->skel = infertap_bpf__open();
  if (!impl->skel) {
    err = "opening the embedded BPF object failed: " + errstr(errno);
    return nullptr;
  }
  auto* skel = impl->skel;
  skel->rodata->self_tgid = config.ignore_self ? static_cast<std::uint32_t>(getpid()) : 0;
  skel->rodata->filter_pids = !config.pids.empty();
  skel->rodata->filter_cgroups = !config.cgroup_ids.empty();
  skel->rodata->filter_ports = !config.ports.empty();
  skel->rodata->head_bytes = config.head_bytes;
  skel->rodata->tail_bytes = config.tail_bytes;
  skel->rodata->wakeup_bytes = config.wakeup_bytes;
  if (int e = bpf_map__set_max_entries(skel->maps.itap_rb, config.ringbuf_bytes); e) {
    err = "sizing the ring buffer failed: " + errstr(e);
    return nullptr;
  }

  bpf_program* prog;
  bpf_object__for_each_program(prog, skel->obj) {
    const std::string sec = bpf_program__section_name(prog);
    bool load;
    if (sec.rfind("tracepoint/syscalls/", 0) == 0)
      load = set == Set::syscalls;
    else if (sec == "raw_tp/sock_send_length" || sec == "raw_tp/sock_recv_length")
      load = set == Set::sock;
    else if (sec == "raw_tp/tcp_sendmsg_locked")
      load = set == Set::sock && send_start_available;
    else if (sec == "raw_tp/sys_enter" || sec == "raw_tp/sys_exit")
      load = set == Set::raw;
    else if (sec == "tracepoint/sock/inet_sock_set_state")
      load = state_tp;
    else if (sec == "raw_tp/inet_sock_set_state")
      load = !state_tp;
    else if (std::find(path_sections.begin(), path_sections.end(), sec) != path_sections.end())
      load = true;
    else
      load = false;
    bpf_program__set_autoload(prog, load);
  }

  if (int e = infertap_bpf__load(skel); e) {
    err = load_error(e ? e : -errno);
    return nullptr;
  }

  // ---- filters (maps exist only after load) ----
  const std::uint8_t one = 1;
  for (std::uint32_t pid : config.pids) {
    if (int e = bpf_map__update_elem(skel->maps.itap_pid_filter, &pid, sizeof(pid), &one, sizeof(one), BPF_ANY)) {
      err = "filling the pid filter failed (more than 4096 pids?): " + errstr(e);
      return nullptr;
    }
  }
  for (std::uint16_t port : config.ports) {
    if (int e = bpf_map__update_elem(skel->maps.itap_port_filter, &port, sizeof(port), &one, sizeof(one), BPF_ANY)) {
      err = "filling the port filter failed (more than 1024 ports?): " + errstr(e);
      return nullptr;
    }
  }
  for (std::uint64_t cg : config.cgroup_ids) {
    if (int e = bpf_map__update_elem(skel->maps.itap_cgroup_filter, &cg, sizeof(cg), &one, sizeof(one), BPF_ANY)) {
      err = "filling the cgroup filter failed (more than 4096 cgroups?): " + errstr(e);
      return nullptr;
    }
  }

  // ---- ring buffer consumer (before attach: nothing is lost) ----
  impl->rb = ring_buffer__new(bpf_map__fd(skel->maps.itap_rb), &Impl::on_record, impl.get(), nullptr);
  if (!impl->rb) {
    err = "creating the ring-buffer consumer failed: " + errstr(errno);
    return nullptr;
  }

  // ---- attach ----
  bpf_object__for_each_program(prog, skel->obj) {
    if (!bpf_program__autoload(prog)) continue;
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      const int e = errno;
      const std::string sec = bpf_program__section_name(prog);
      err = attach_error(prog, e, sec.rfind("tracepoint/", 0) == 0);
      return nullptr;
    }
    impl->links.push_back(link);
  }

  return std::unique_ptr<Capture>(new Capture(std::move(impl)));
}

int Capture::poll(int timeout_ms, const RecordHandler& handler) {
  impl_->handler = &handler;
  int total = 0;
  int n = ring_buffer__poll(impl_->rb, timeout_ms);
  if (n < 0 && n != -EINTR) {
    impl_->handler = nullptr;
    return n;
  }
  if (n > 0) total += n;
  // Producers submit with BPF_RB_NO_WAKEUP below the wake-up threshold: the
  // epoll wait may time out with records pending, so always drain.
  int m = ring_buffer__consume(impl_->rb);
  impl_->handler = nullptr;
  if (m < 0) return m == -EINTR ? total : m;
  return total + m;
}

int Capture::drain(const RecordHandler& handler) {
  impl_->handler = &handler;
  int m = ring_buffer__consume(impl_->rb);
  impl_->handler = nullptr;
  return m == -EINTR ? 0 : m;
}

void Capture::mute(std::uint64_t sock_id) {
  auto* conns = impl_->skel->maps.itap_conns;
  // Keep the entry's follow-hint mark, so the close still uncounts it. The
  // kernel may update other fields meanwhile; a muted socket's are unused.
  itap_conn old{};
  const bool known = bpf_map__lookup_elem(conns, &sock_id, sizeof(sock_id), &old, sizeof(old), 0) == 0;
  itap_conn c{};
  c.verdict = ITAP_VERDICT_MUTED;
  c.hinted = known ? old.hinted : 0;
  c.first_seen_ns = now_ns();
  (void)bpf_map__update_elem(conns, &sock_id, sizeof(sock_id), &c, sizeof(c), BPF_ANY);
}

std::uint64_t Capture::followed_hint_total() const {
  auto* hint = impl_->skel->maps.itap_follow_hint;
  std::vector<std::uint32_t> keys(ITAP_HINT_SLOTS), values(ITAP_HINT_SLOTS);
  std::uint32_t out_batch = 0;
  std::uint32_t count = ITAP_HINT_SLOTS;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  std::uint64_t total = 0;
  if (bpf_map_lookup_batch(bpf_map__fd(hint), nullptr, &out_batch, keys.data(), values.data(), &count, &opts) == 0 ||
      errno == ENOENT) {
    for (std::uint32_t i = 0; i < count; ++i) total += values[i];
    return total;
  }
  for (std::uint32_t slot = 0; slot < ITAP_HINT_SLOTS; ++slot) {  // kernels without batch ops on arrays
    std::uint32_t v = 0;
    if (bpf_map__lookup_elem(hint, &slot, sizeof(slot), &v, sizeof(v), 0) == 0) total += v;
  }
  return total;
}

void Capture::forget(std::uint64_t sock_id) {
  (void)bpf_map__delete_elem(impl_->skel->maps.itap_conns, &sock_id, sizeof(sock_id), 0);
}

CaptureStats Capture::stats() const {
  CaptureStats s;
  auto* m = impl_->skel->maps.itap_stats;
#define CAPTURE_READ_STAT(NAME, name, help) s.name = impl_->sum_percpu(m, ITAP_STAT_##NAME);
  ITAP_STAT_LIST(CAPTURE_READ_STAT)
#undef CAPTURE_READ_STAT
  auto* d = impl_->skel->maps.itap_drops;
#define CAPTURE_READ_DROP(NAME, name, help) s.drops_##name = impl_->sum_percpu(d, ITAP_DROP_##NAME);
  ITAP_DROP_LIST(CAPTURE_READ_DROP)
#undef CAPTURE_READ_DROP
  s.records_consumed = impl_->consumed;
  return s;
}

const std::vector<LoadNote>& Capture::notes() const { return impl_->notes; }

}  // namespace infertap::capture
