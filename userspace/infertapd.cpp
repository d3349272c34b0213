// infertapd: attaches the kernel capture, rebuilds per-stream timelines and
// writes one NDJSON record per finished stream.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "capture/loader.h"
#include "core/pipeline.h"
#include "output/ndjson.h"

namespace {

std::atomic<bool> g_stop{false};  // set by SIGINT/SIGTERM; the only process-wide state

void on_signal(int) { g_stop.store(true); }

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// "0::/system.slice/foo.service" -> "/system.slice/foo.service"
std::string read_cgroup_path(std::uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return {};
}

// cgroup v2 id of a cgroup directory is its inode number.
bool cgroup_id_of(const std::string& path, std::uint64_t* id, std::string* error) {
  std::string full = path.rfind("/sys/fs/cgroup", 0) == 0 ? path : "/sys/fs/cgroup" + path;
  struct stat st {};
  if (stat(full.c_str(), &st) != 0) {
    *error = "cgroup " + full + ": " + std::strerror(errno);
    return false;
  }
  *id = st.st_ino;
  return true;
}

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infertapd: kernel-level timing of LLM streaming responses (SSE), no code change needed"};
  infertap::capture::CaptureConfig capture_config;
  infertap::core::PipelineConfig pipeline_config;
  infertap::output::RenderOptions render;
  std::string output_path = "-";
  std::string ready_file;
  double duration_s = 0;
  double stall_floor_ms = 100;
  std::vector<std::string> cgroups;
  bool print_stats = false;

  app.add_flag("--timeline", render.timeline, "Include the per-event timeline in each record");
  const std::map<std::string, infertap::capture::AttachMethod> attach_methods = {
      {"auto", infertap::capture::AttachMethod::automatic},
      {"sock", infertap::capture::AttachMethod::socket_tracepoints},
      {"tracepoint", infertap::capture::AttachMethod::tracepoints},
      {"raw_tp", infertap::capture::AttachMethod::raw_tracepoints}};
  app.add_option("--attach", capture_config.attach, "How the capture attaches: auto, sock, tracepoint or raw_tp")
      ->transform(CLI::CheckedTransformer(attach_methods, CLI::ignore_case));
  app.add_option("-o,--output", output_path, "NDJSON output file ('-' = stdout)");
  app.add_option("--head-bytes", capture_config.head_bytes, "Payload head bytes copied per syscall")
      ->check(CLI::Range(16u, static_cast<unsigned>(ITAP_HEAD_MAX)));
  app.add_option("--tail-bytes", capture_config.tail_bytes, "Payload tail bytes copied per syscall")
      ->check(CLI::Range(0u, static_cast<unsigned>(ITAP_TAIL_MAX)));
  app.add_option("--pid", capture_config.pids, "Only trace these process ids (repeatable)");
  app.add_option("--port", capture_config.ports, "Only trace connections with this local or remote port (repeatable)");
  app.add_option("--cgroup", cgroups, "Only trace processes in this cgroup v2 path (repeatable)");
  app.add_option("--ringbuf-mb", capture_config.ringbuf_bytes, "Ring buffer size in MiB (power of two)")
      ->transform([](std::string s) { return std::to_string(std::stoul(s) << 20); });
  app.add_option("--stall-floor-ms", stall_floor_ms, "Smallest gap between tokens that counts as a stall");
  app.add_option("--stall-ratio", pipeline_config.stall_ratio, "A stall is also above this many median ITLs");
  app.add_option("--duration", duration_s, "Stop after this many seconds (0 = until SIGINT/SIGTERM)");
  app.add_option("--ready-file", ready_file, "Create this file once the capture is attached");
  app.add_flag("--stats", print_stats, "Print capture and pipeline counters to stderr at exit");
  CLI11_PARSE(app, argc, argv);

  pipeline_config.stall_floor_ns = static_cast<std::uint64_t>(stall_floor_ms * 1e6);
  render.host = hostname();
  for (const std::string& path : cgroups) {
    std::uint64_t id = 0;
    std::string error;
    if (!cgroup_id_of(path, &id, &error)) {
      std::fprintf(stderr, "infertapd: %s\n", error.c_str());
      return 2;
    }
    capture_config.cgroup_ids.push_back(id);
  }

  FILE* out = stdout;
  if (output_path != "-") {
    out = std::fopen(output_path.c_str(), "w");
    if (!out) {
      std::fprintf(stderr, "infertapd: cannot open %s: %s\n", output_path.c_str(), std::strerror(errno));
      return 2;
    }
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::string error;
  auto capture = infertap::capture::Capture::open(capture_config, &error);
  if (!capture) {
    std::fprintf(stderr, "infertapd: %s\n", error.c_str());
    return 1;
  }
  for (const auto& note : capture->notes()) {
    std::fprintf(stderr, "infertapd: %s (%s)\n", note.what.c_str(), note.why.c_str());
  }

  const infertap::output::WallClock clock;
  infertap::capture::Capture* cap = capture.get();
  infertap::core::Pipeline pipeline(
      pipeline_config,
      [&](infertap::core::StreamRecord&& record) {
        const std::string line = infertap::output::render_stream(record, clock, render);
        std::fwrite(line.data(), 1, line.size(), out);
        std::fputc('\n', out);
        std::fflush(out);
      },
      [cap](std::uint64_t sock_id) { cap->mute(sock_id); }, read_cgroup_path);

  if (!ready_file.empty()) {
    if (FILE* f = std::fopen(ready_file.c_str(), "w")) std::fclose(f);
  }
  std::fprintf(stderr, "infertapd: capture attached; writing stream records to %s\n",
               output_path == "-" ? "stdout" : output_path.c_str());

  const std::uint64_t start = monotonic_ns();
  std::uint64_t last_expire = start;
  const auto handler = [&](std::span<const std::uint8_t> record) { pipeline.on_record(record); };
  while (!g_stop.load()) {
    const int n = capture->poll(50, handler);
    if (n < 0) {
      std::fprintf(stderr, "infertapd: ring buffer poll failed: %s\n", std::strerror(-n));
      break;
    }
    const std::uint64_t now = monotonic_ns();
    if (now - last_expire > 1'000'000'000ull) {
      pipeline.expire(now);
      last_expire = now;
    }
    if (duration_s > 0 && static_cast<double>(now - start) / 1e9 >= duration_s) break;
  }
  capture->drain(handler);
  pipeline.flush(monotonic_ns());

  if (print_stats) {
    const auto k = capture->stats();
    const auto& p = pipeline.counters();
    std::fprintf(stderr,
                 "infertapd: stats kernel{syscalls=%llu not_tcp=%llu muted=%llu events=%llu followed=%llu "
                 "muted_sockets=%llu drop_ringbuf=%llu drop_args=%llu drop_conns=%llu} "
                 "pipeline{records=%llu data=%llu state=%llu decode_errors=%llu conns=%llu streams=%llu "
                 "complete=%llu partial=%llu non_stream=%llu sse=%llu bytes_lost=%llu not_captured=%llu "
                 "parse_errors=%llu}\n",
                 (unsigned long long)k.syscalls_seen, (unsigned long long)k.not_tcp, (unsigned long long)k.muted,
                 (unsigned long long)k.events, (unsigned long long)k.sockets_followed,
                 (unsigned long long)k.sockets_muted, (unsigned long long)k.drops_ringbuf_full,
                 (unsigned long long)k.drops_args_map_full, (unsigned long long)k.drops_conn_map_full,
                 (unsigned long long)p.records, (unsigned long long)p.data_events, (unsigned long long)p.state_events,
                 (unsigned long long)p.decode_errors, (unsigned long long)p.connections_opened,
                 (unsigned long long)p.streams_started, (unsigned long long)p.streams_completed,
                 (unsigned long long)p.streams_partial, (unsigned long long)p.non_stream_responses,
                 (unsigned long long)p.sse_events, (unsigned long long)p.bytes_lost,
                 (unsigned long long)p.bytes_not_captured, (unsigned long long)p.http_parse_errors);
  }
  if (out != stdout) std::fclose(out);
  return 0;
}
