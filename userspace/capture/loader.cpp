// Loader of the kernel side (bpf/: one object linked from the program files):
// feature probes, attach set choice, rodata and filter maps, ring-buffer
// draining, counters.
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
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/clock.h"
#include "base/escape.h"
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

// The tracefs group/name a program attaches to, for messages.
std::string prog_target(const bpf_program* prog) {
  const char* sec = bpf_program__section_name(prog);
  return sec ? sec : bpf_program__name(prog);
}

std::string attach_error(const bpf_program* prog, int err) {
  const bool tracepoint = bpf_program__type(prog) == BPF_PROG_TYPE_TRACEPOINT;
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

// Kernel BTF, read once per open and asked by every probe below.
using KernelBtf = std::unique_ptr<btf, decltype(&btf__free)>;

KernelBtf load_kernel_btf() { return KernelBtf(btf__load_vmlinux_btf(), btf__free); }

// The kernel has raw tracepoint `name` (its btf_trace_<name> typedef).
bool has_raw_tracepoint(const btf* vmlinux, const char* name) {
  const std::string type = std::string("btf_trace_") + name;
  return vmlinux && btf__find_by_name_kind(vmlinux, type.c_str(), BTF_KIND_TYPEDEF) > 0;
}

// Empty when this kernel has the raw tracepoints sock_send_length and
// sock_recv_length (6.3+) and lets tracing programs read a task's user
// registers (bpf_task_pt_regs, 5.15+); else why not. Probed from BTF and by
// loading trivial programs, so no tracefs is needed.
std::string socket_tracepoints_problem(const btf* vmlinux) {
  if (!vmlinux) return "kernel BTF (/sys/kernel/btf/vmlinux) is unavailable";
  if (!has_raw_tracepoint(vmlinux, "sock_send_length") || !has_raw_tracepoint(vmlinux, "sock_recv_length"))
    return "tracepoints sock_send_length/sock_recv_length missing (kernel < 6.3)";
  if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_task_pt_regs, nullptr) != 1 ||
      libbpf_probe_bpf_helper(BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_FUNC_get_current_task_btf, nullptr) != 1)
    return "BPF helpers task_pt_regs/get_current_task_btf unavailable to raw tracepoints (kernel < 5.15)";
  return "";
}

// Delivery signals: each raw tracepoint this kernel has is used; a missing one
// only turns its vantage off.
struct DeliveryProbe {
  const char* tracepoint;
  const char* gives;
  bpf_program* (*program)(const infertap_bpf*);
};
constexpr DeliveryProbe kDeliveryProbes[] = {
    {"tcp_probe", "acked times, peer window (zero-window episodes)",
     [](const infertap_bpf* s) { return s->progs.itap_tcp_ack; }},
    {"sk_data_ready", "arrived times at local receivers", [](const infertap_bpf* s) { return s->progs.itap_data_ready; }},
    {"tcp_retransmit_skb", "retransmission counts", [](const infertap_bpf* s) { return s->progs.itap_retransmit; }},
    {"sock_exceed_buf_limit", "socket memory-limit episodes",
     [](const infertap_bpf* s) { return s->progs.itap_buf_limit; }},
};

// Each attach set runs the same capture code (bpf/programs/):
//   sock: sock:sock_{send,recv}_length run only on socket I/O;
//   syscalls: the 8 syscall tracepoints, for every fd;
//   raw: raw sys_enter/sys_exit, on every syscall (no tracefs needed).
enum class AttachSet { sock, syscalls, raw };

// Which programs load, decided before the object is opened.
struct ProgramChoice {
  AttachSet set = AttachSet::raw;
  bool send_start = false;        // socket set: tcp_sendmsg_locked stamps send starts
  bool state_tracepoint = false;  // inet_sock_set_state as a tracepoint (else raw)
  bool destroy = false;           // tcp_destroy_sock: sockets closed with unread bytes are read to the end
  bool unix_close = false;        // fentry/unix_sock_destructor: unix sockets' ends seen, no per-call inode read
  std::vector<const DeliveryProbe*> delivery;
  bool tls = false;  // OpenSSL probes (attached per library file later) and the exec signal
  UprobeMode uprobes = UprobeMode::single;  // how the TLS probes are placed
};

// Why each attach set cannot be used ("" = it can).
struct AttachSetProblems {
  std::string sock;
  std::string syscalls;
  bool tracefs_ready = false;  // tracefs was needed, and is mounted
};

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

std::optional<AttachMethod> parse_attach_method(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (AttachMethod m : kAttachMethods)
    if (to_string(m) == lower) return m;
  return std::nullopt;
}

std::string_view to_string(AttachMethod method) {
  switch (method) {
    case AttachMethod::automatic: return "auto";
    case AttachMethod::socket_tracepoints: return "sock";
    case AttachMethod::tracepoints: return "tracepoint";
    case AttachMethod::raw_tracepoints: return "raw_tp";
  }
  return "auto";
}

struct Capture::Impl {
  infertap_bpf* skel = nullptr;
  std::vector<bpf_link*> links;
  ring_buffer* rb = nullptr;
  std::vector<LoadNote> notes;
  const RecordHandler* handler = nullptr;
  std::uint64_t consumed = 0;
  int ncpus = 1;
  std::unique_ptr<TlsWorker> tls;  // OpenSSL libraries and Go executables, when TLS is captured

  ~Impl() {
    if (rb) ring_buffer__free(rb);
    tls.reset();
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
    if (self->tls && size >= sizeof(itap_event)) {  // signals for the TLS library finder, not for the pipeline
      const auto* e = static_cast<const itap_event*>(data);
      if (e->kind == ITAP_EV_EXEC || e->kind == ITAP_EV_DLOPEN) {
        if (e->kind == ITAP_EV_EXEC) self->tls->on_exec(e->pid);
        else self->tls->on_dlopen(e->pid);
        return 0;
      }
    }
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

// The steps of Capture::open, in order. Each returns "" or the error to report,
// and notes every decision it takes with its reason.
namespace {

using Notes = std::vector<LoadNote>;

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

// What stands in the way of each attach set. Mounts tracefs only when a set
// that needs it may be chosen.
AttachSetProblems probe_attach_sets(const CaptureConfig& config, const btf* vmlinux, Notes& notes) {
  AttachSetProblems problems;
  problems.sock = socket_tracepoints_problem(vmlinux);
  const bool want_tracefs = config.attach == AttachMethod::tracepoints ||
                            (config.attach == AttachMethod::automatic && !problems.sock.empty());
  std::string tracefs_problem = "not needed";
  if (want_tracefs) {
    const bool mounted = exists(std::string(kTracefs) + "/events");
    tracefs_problem = ensure_tracefs();
    if (tracefs_problem.empty() && !mounted)
      notes.push_back({std::string("mounted tracefs at ") + kTracefs, "it was not mounted"});
  }
  problems.tracefs_ready = tracefs_problem.empty();
  if (!tracefs_problem.empty()) {
    problems.syscalls = "tracefs unavailable: " + tracefs_problem;
  } else if (std::string missing = missing_syscall_tracepoints(); !missing.empty()) {
    problems.syscalls = "syscall tracepoints missing from tracefs: " + missing;
  }
  return problems;
}

std::string choose_attach_set(const CaptureConfig& config, const AttachSetProblems& problems,
                              ProgramChoice& choice, Notes& notes) {
  const char* const kSockNote = "attach: raw tracepoints sock_send_length + sock_recv_length";
  const char* const kSyscallsNote =
      "attach: tracepoints syscalls:sys_{enter,exit}_{write,writev,sendto,sendmsg,read,readv,recvfrom,recvmsg}";
  const char* const kRawNote = "attach: raw tracepoints sys_enter/sys_exit (every syscall, filtered by number)";
  switch (config.attach) {
    case AttachMethod::socket_tracepoints:
      if (!problems.sock.empty()) return "socket tracepoints were requested but cannot be used: " + problems.sock;
      choice.set = AttachSet::sock;
      notes.push_back({kSockNote, "chosen by configuration"});
      break;
    case AttachMethod::tracepoints:
      if (!problems.syscalls.empty())
        return "syscall tracepoints were requested but cannot be used: " + problems.syscalls;
      choice.set = AttachSet::syscalls;
      notes.push_back({kSyscallsNote, "chosen by configuration"});
      break;
    case AttachMethod::raw_tracepoints:
      choice.set = AttachSet::raw;
      notes.push_back({kRawNote, "chosen by configuration"});
      break;
    case AttachMethod::automatic:
      if (problems.sock.empty()) {
        choice.set = AttachSet::sock;
        notes.push_back({kSockNote, "only socket I/O runs a program; other syscalls cost nothing"});
      } else if (problems.syscalls.empty()) {
        choice.set = AttachSet::syscalls;
        notes.push_back({kSyscallsNote, "socket tracepoints unusable: " + problems.sock});
      } else {
        choice.set = AttachSet::raw;
        notes.push_back({kRawNote, problems.sock + "; " + problems.syscalls});
      }
      break;
  }
  return "";
}

// The programs that go with the attach set: send starts (socket set, 6.1+)
// and which variant of the TCP state program.
void choose_companions(const btf* vmlinux, const AttachSetProblems& problems, ProgramChoice& choice, Notes& notes) {
  if (choice.set == AttachSet::sock) {
    choice.send_start = has_raw_tracepoint(vmlinux, "tcp_sendmsg_locked");
    if (!choice.send_start)
      notes.push_back({"send durations not measured", "tracepoint tcp_sendmsg_locked missing (kernel < 6.1)"});
  }
  // The socket set needs no tracefs at all: its state program attaches raw too.
  choice.state_tracepoint = choice.set != AttachSet::sock && problems.tracefs_ready &&
                            exists(std::string(kTracefs) + "/events/sock/inet_sock_set_state/id");
  if (!choice.state_tracepoint)
    notes.push_back({"attach: raw tracepoint inet_sock_set_state", "tracepoint sock:inet_sock_set_state unavailable"});
  choice.destroy = vmlinux && has_raw_tracepoint(vmlinux, "tcp_destroy_sock");
  if (choice.destroy)
    notes.push_back({"attach: raw tracepoint tcp_destroy_sock",
                     "a socket that closes with bytes still unread is followed until they are read"});
  else
    notes.push_back({"a socket that closes with bytes still unread (a client that shut down its sending first) "
                     "ends at its close",
                     "tracepoint tcp_destroy_sock missing from this kernel"});
}

constexpr const char* kUnixCloseNote = "attach: fentry unix_sock_destructor";
constexpr const char* kUnixInodeNote = "unix sockets: each call reads the socket's inode";

// Whether this kernel loads an fentry program on `btf_id` (a BTF function):
// "" or why not. A two-instruction program (return 0) with that target, so a
// kernel without BPF trampolines, or a policy that forbids them, says so
// before the capture's own object is loaded.
std::string fentry_problem(int btf_id) {
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_TRACE_FENTRY,
              .attach_btf_id = static_cast<__u32>(btf_id));
  const int fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "itap_probe", "Dual BSD/GPL", insns, 2, &opts);
  if (fd < 0) return "loading an fentry program failed: " + errstr(errno);
  ::close(fd);
  return "";
}

// The end of unix sockets (bpf/programs/unix_close.bpf.c) when the kernel's
// BTF has the function and this kernel loads fentry programs on it (a load or
// attach of the capture's own that still fails is retried without it:
// Capture::open). Without it, each call on a unix socket reads its inode to
// tell it from a closed one at the same address.
void choose_unix_close(const btf* vmlinux, ProgramChoice& choice, Notes& notes) {
  const int id = vmlinux ? btf__find_by_name_kind(vmlinux, "unix_sock_destructor", BTF_KIND_FUNC) : -1;
  const std::string problem = id > 0 ? fentry_problem(id) : "function unix_sock_destructor not in the kernel's BTF";
  choice.unix_close = problem.empty();
  if (choice.unix_close)
    notes.push_back({kUnixCloseNote, "a unix socket's entry goes when the socket is freed; its calls read nothing"});
  else
    notes.push_back({kUnixInodeNote, "to tell it from a closed one at its address: " + problem});
}

void choose_delivery_probes(const CaptureConfig& config, const btf* vmlinux, ProgramChoice& choice, Notes& notes) {
  if (!config.path_signals) {
    notes.push_back({"delivery signals off (acked, arrived, TCP context)", "disabled by configuration"});
    return;
  }
  if (!vmlinux) {
    notes.push_back({"delivery signals off", "kernel BTF unreadable: cannot tell which tracepoints exist"});
    return;
  }
  std::string used;
  for (const DeliveryProbe& probe : kDeliveryProbes) {
    if (has_raw_tracepoint(vmlinux, probe.tracepoint)) {
      choice.delivery.push_back(&probe);
      used += (used.empty() ? "" : " + ") + std::string(probe.tracepoint);
    } else {
      notes.push_back({std::string("no ") + probe.gives,
                       std::string("tracepoint ") + probe.tracepoint + " missing from this kernel"});
    }
  }
  if (!used.empty()) notes.push_back({"attach: raw tracepoints " + used, "delivery signals of followed sockets"});
}

// Uprobes need the kernel's uprobe PMU (CONFIG_UPROBE_EVENTS).
void choose_tls(const CaptureConfig& config, ProgramChoice& choice, Notes& notes) {
  if (!config.tls) {
    notes.push_back({"TLS streams not seen (their sockets are muted)", "disabled by configuration"});
    return;
  }
  if (!exists("/sys/bus/event_source/devices/uprobe/type")) {
    notes.push_back({"TLS streams not seen (their sockets are muted)",
                     "this kernel has no uprobes (CONFIG_UPROBE_EVENTS is off: no "
                     "/sys/bus/event_source/devices/uprobe)"});
    return;
  }
  choice.tls = true;
  std::string why_not_multi;
  if (Uprobes::multi_supported(&why_not_multi)) {
    choice.uprobes = UprobeMode::multi;
    notes.push_back({"TLS uprobes as uprobe_multi links", "one link per program and file: one descriptor, and one "
                                                          "grace period to remove all its probes"});
  } else {
    notes.push_back({"TLS uprobes as one perf event each", why_not_multi});
  }
  notes.push_back({"TLS: OpenSSL probes on each library file that defines SSL_write and SSL_read (per file, or per "
                   "targeted process), and Go crypto/tls probes (entry and RET instructions) on each Go executable; "
                   "raw tracepoint sched_process_exec and dlopen returns find new ones",
                   "TLS sockets' plaintext is only visible in their library"});
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

// Autoload exactly the chosen programs, named through the skeleton: a program
// renamed in bpf/ fails to compile here instead of silently not loading, and
// one added without a decision here stays unloaded.
void select_programs(infertap_bpf* skel, const ProgramChoice& choice) {
  bpf_program* prog;
  bpf_object__for_each_program(prog, skel->obj) bpf_program__set_autoload(prog, false);
  const auto load = [](bpf_program* p, bool on) { bpf_program__set_autoload(p, on); };
  auto& p = skel->progs;
  const bool syscalls = choice.set == AttachSet::syscalls;
  for (bpf_program* tp : {p.itap_enter_write, p.itap_enter_writev, p.itap_enter_sendto, p.itap_enter_sendmsg,
                          p.itap_enter_read, p.itap_enter_readv, p.itap_enter_recvfrom, p.itap_enter_recvmsg,
                          p.itap_exit_write, p.itap_exit_writev, p.itap_exit_sendto, p.itap_exit_sendmsg,
                          p.itap_exit_read, p.itap_exit_readv, p.itap_exit_recvfrom, p.itap_exit_recvmsg})
    load(tp, syscalls);
  load(p.itap_raw_sys_enter, choice.set == AttachSet::raw);
  load(p.itap_raw_sys_exit, choice.set == AttachSet::raw);
  load(p.itap_sock_send, choice.set == AttachSet::sock);
  load(p.itap_sock_recv, choice.set == AttachSet::sock);
  load(p.itap_tcp_send_start, choice.set == AttachSet::sock && choice.send_start);
  load(p.itap_tp_sock_state, choice.state_tracepoint);
  load(p.itap_raw_sock_state, !choice.state_tracepoint);
  load(p.itap_tcp_destroy, choice.destroy);
  skel->rodata->destroy_signal = choice.destroy;
  for (bpf_program* tls : {p.itap_ssl_write_enter, p.itap_ssl_write_ex_enter, p.itap_ssl_read_enter,
                           p.itap_ssl_read_ex_enter, p.itap_ssl_io_exit, p.itap_ssl_free, p.itap_dlopen_exit,
                           p.itap_process_exec, p.itap_ssl_handshake_enter, p.itap_ssl_handshake_exit,
                           p.itap_go_tls_write_enter, p.itap_go_tls_read_enter, p.itap_go_tls_return})
    load(tls, choice.tls);
  if (choice.uprobes == UprobeMode::multi)
    for (bpf_program* up : {p.itap_ssl_write_enter, p.itap_ssl_write_ex_enter, p.itap_ssl_read_enter,
                            p.itap_ssl_read_ex_enter, p.itap_ssl_io_exit, p.itap_ssl_free, p.itap_dlopen_exit,
                            p.itap_ssl_handshake_enter, p.itap_ssl_handshake_exit, p.itap_go_tls_write_enter,
                            p.itap_go_tls_read_enter, p.itap_go_tls_return})
      bpf_program__set_expected_attach_type(up, static_cast<bpf_attach_type>(Uprobes::kMultiAttachType));
  skel->rodata->tls_enabled = choice.tls;
  load(p.itap_unix_destroy, choice.unix_close);
  skel->rodata->unix_close_signal = choice.unix_close;
  for (const DeliveryProbe* probe : choice.delivery) load(probe->program(skel), true);
}

// Filter maps exist only after load.
std::string fill_filters(const CaptureConfig& config, infertap_bpf* skel) {
  const auto fill = [](bpf_map* map, const auto& keys, const char* what, const char* many) -> std::string {
    const std::uint8_t one = 1;
    for (const auto& key : keys) {
      if (int e = bpf_map__update_elem(map, &key, sizeof(key), &one, sizeof(one), BPF_ANY))
        return std::string("filling the ") + what + " filter failed (more than " +
               std::to_string(bpf_map__max_entries(map)) + " " + many + "?): " + errstr(e);
    }
    return "";
  };
  std::string err = fill(skel->maps.itap_pid_filter, config.pids, "pid", "pids");
  if (err.empty()) err = fill(skel->maps.itap_port_filter, config.ports, "port", "ports");
  if (err.empty()) err = fill(skel->maps.itap_cgroup_filter, config.cgroup_ids, "cgroup", "cgroups");
  return err;
}

// Before attach: nothing is lost.
std::string open_ring_buffer(Capture::Impl& impl) {
  impl.rb = ring_buffer__new(bpf_map__fd(impl.skel->maps.itap_rb), &Capture::Impl::on_record, &impl, nullptr);
  if (!impl.rb) return "creating the ring-buffer consumer failed: " + errstr(errno);
  return "";
}

// The end of unix sockets first: no unix entry is made before it is seen.
// *unix_close_failed is set when that one cannot attach (the caller retries without it).
std::string attach_programs(Capture::Impl& impl, bool* unix_close_failed) {
  bpf_program* first = impl.skel->progs.itap_unix_destroy;
  if (bpf_program__autoload(first)) {
    bpf_link* link = bpf_program__attach(first);
    if (!link) {
      *unix_close_failed = true;
      return attach_error(first, errno);
    }
    impl.links.push_back(link);
  }
  bpf_program* prog;
  bpf_object__for_each_program(prog, impl.skel->obj) {
    if (!bpf_program__autoload(prog) || prog == first) continue;
    if (bpf_program__type(prog) == BPF_PROG_TYPE_KPROBE) continue;  // uprobes: per library file, later
    bpf_link* link = bpf_program__attach(prog);
    if (!link) return attach_error(prog, errno);
    impl.links.push_back(link);
  }
  return "";
}

void start_tls(const CaptureConfig& config, const ProgramChoice& choice, Capture::Impl& impl) {
  const auto& p = impl.skel->progs;
  const TlsPrograms programs{p.itap_ssl_write_enter, p.itap_ssl_write_ex_enter, p.itap_ssl_read_enter,
                             p.itap_ssl_read_ex_enter, p.itap_ssl_io_exit,       p.itap_ssl_free,
                             p.itap_dlopen_exit,          p.itap_ssl_handshake_enter, p.itap_ssl_handshake_exit};
  const TlsTargets targets(config.pids, config.cgroup_ids,
                           config.ignore_self ? static_cast<std::uint32_t>(getpid()) : 0);
  ProbeBudget::Limits limits = config.probe_budget;
  // Perf-event uprobes come off one grace period at a time (~77 ms each,
  // serialised in the kernel): 256 is ~20 s of stopping, within a 30 s grace.
  if (choice.uprobes == UprobeMode::single) limits.handles_total = std::min<std::size_t>(limits.handles_total, 256);
  impl.tls = std::make_unique<TlsWorker>(
      programs, GoTlsPrograms{p.itap_go_tls_write_enter, p.itap_go_tls_read_enter, p.itap_go_tls_return}, targets,
      Uprobes(choice.uprobes), limits);
  for (LoadNote& n : impl.tls->take_notes()) impl.notes.push_back(std::move(n));
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
  if (impl_->tls)
    for (LoadNote& n : impl_->tls->take_notes()) impl_->notes.push_back(std::move(n));
  if (m < 0) return m == -EINTR ? total : m;
  return total + m;
}

int Capture::drain(const RecordHandler& handler) {
  impl_->handler = &handler;
  int m = ring_buffer__consume(impl_->rb);
  impl_->handler = nullptr;
  return m == -EINTR ? 0 : m;
}

namespace {

// A unix entry made for another socket than the one userspace means (its close
// unseen, the address reused meanwhile). TCP entries (inode 0) always match.
bool another_unix_socket(const itap_conn& entry, std::uint32_t inode) {
  return inode != 0 && entry.transport == ITAP_TRANSPORT_UNIX && entry.ino != inode;
}

}  // namespace

void Capture::mute(std::uint64_t sock_id, std::uint32_t inode) {
  auto* conns = impl_->skel->maps.itap_conns;
  // Keep the entry's follow-hint mark, so the close still uncounts it. The
  // kernel may update other fields meanwhile; a muted socket's are unused.
  // BPF_EXIST: a close that deleted the entry since the lookup wins, and the
  // entry is not brought back for the next socket at that address.
  itap_conn old{};
  if (bpf_map__lookup_elem(conns, &sock_id, sizeof(sock_id), &old, sizeof(old), 0) != 0) return;
  if (another_unix_socket(old, inode)) return;
  itap_conn c{};
  c.verdict = ITAP_VERDICT_MUTED;
  c.hinted = old.hinted;
  c.first_seen_ns = base::monotonic_ns();
  // A unix entry keeps what tells its socket from the next one at this address.
  c.transport = old.transport;
  c.ino = old.ino;
  (void)bpf_map__update_elem(conns, &sock_id, sizeof(sock_id), &c, sizeof(c), BPF_EXIST);
}

bool Capture::knows(std::uint64_t sock_id) const {
  itap_conn entry{};
  return bpf_map__lookup_elem(impl_->skel->maps.itap_conns, &sock_id, sizeof(sock_id), &entry, sizeof(entry), 0) == 0;
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

void Capture::forget(std::uint64_t sock_id, std::uint32_t inode) {
  auto* conns = impl_->skel->maps.itap_conns;
  if (inode != 0) {
    itap_conn entry{};
    if (bpf_map__lookup_elem(conns, &sock_id, sizeof(sock_id), &entry, sizeof(entry), 0) != 0) return;
    // Between this lookup and the delete a newer socket could still take the
    // address: microseconds, against the agent's lag behind the kernel.
    if (another_unix_socket(entry, inode)) return;
  }
  (void)bpf_map__delete_elem(conns, &sock_id, sizeof(sock_id), 0);
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
  if (impl_->tls) {
    const TlsWorker::Stats w = impl_->tls->stats();
    s.tls = w.tls;
    s.go_tls = w.go;
    s.uprobes = w.budget;
  }
  return s;
}

std::string_view Capture::tls_library(std::uint16_t id) const {
  return impl_->tls ? impl_->tls->library_name(id) : std::string_view();
}

const std::vector<LoadNote>& Capture::notes() const { return impl_->notes; }

}  // namespace infertap::capture
