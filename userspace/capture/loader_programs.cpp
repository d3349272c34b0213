// The attach choice and the attach: which attach set this kernel allows,
// the programs that go with it, delivery signals, unix ends, TLS; each
// program turned on or off by its skeleton name before load, then attached.
#include <bpf/bpf.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "capture/loader_internal.h"

namespace infertap::capture {
namespace loading {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string errstr(int err) {
  if (err < 0) err = -err;
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

KernelBtf load_kernel_btf() { return KernelBtf(btf__load_vmlinux_btf(), btf__free); }

namespace {

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

constexpr const char* kUnixCloseNote = "attach: fentry unix_sock_destructor";

}  // namespace

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

// Whether this kernel loads an fentry program on `btf_id` (a BTF function):
// "" or why not. A two-instruction program (return 0) with that target, so a
// kernel without BPF trampolines, or a policy that forbids them, says so
// before the capture's own object is loaded.
static std::string fentry_problem(int btf_id) {
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

}  // namespace loading

std::string ensure_tracefs() {
  const std::string events = std::string(loading::kTracefs) + "/events";
  if (loading::exists(events)) return "";
  if (!loading::exists(loading::kTracefs) && ::mkdir(loading::kTracefs, 0700) != 0 && errno != EEXIST)
    return std::string("tracefs mount point ") + loading::kTracefs + " is missing and cannot be created: " + loading::errstr(errno);
  if (::mount("nodev", loading::kTracefs, "tracefs", 0, nullptr) != 0) {
    const int err = errno;
    if (err == EBUSY && loading::exists(events)) return "";
    if (err == EPERM)
      return std::string("mounting tracefs at ") + loading::kTracefs + " needs CAP_SYS_ADMIN (or mount it beforehand: "
             "mount -t tracefs nodev " + loading::kTracefs + ")";
    if (err == ENODEV)
      return "this kernel has no tracefs (CONFIG_TRACING is off)";
    return std::string("mounting tracefs at ") + loading::kTracefs + " failed: " + loading::errstr(err);
  }
  if (!loading::exists(events)) return std::string("tracefs mounted at ") + loading::kTracefs + " but it has no events/ directory";
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

}  // namespace infertap::capture
