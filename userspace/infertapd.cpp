// infertapd: attaches the kernel capture, rebuilds per-stream timelines and
// writes one NDJSON record per finished stream; serves the query API (unix
// socket, for the `infertap` CLI) and Prometheus metrics.
//
// Threads: this one owns the capture and the pipeline (single-threaded by
// design); the sink, the API and the HTTP endpoint have their own and only see
// finished records or snapshots taken here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "capture/loader.h"
#include "core/pipeline.h"
#include "daemon/api.h"
#include "daemon/config.h"
#include "daemon/http_server.h"
#include "daemon/metrics.h"
#include "daemon/sink.h"
#include "daemon/store.h"
#include "daemon/workload.h"
#include "degrade/monitor.h"
#include "output/ndjson.h"

namespace {

using namespace infertap;

// Set by signal handlers; the only process-wide state.
std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

void on_stop(int) { g_stop.store(true); }
void on_hup(int) { g_reload.store(true); }

// "0::/system.slice/foo.service" -> "/system.slice/foo.service"
std::string read_cgroup_path(std::uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return {};
}

std::string read_comm(std::uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

void log(const std::string& message) { std::fprintf(stderr, "infertapd: %s\n", message.c_str()); }

// {name: value} of one counter table.
template <class Table>
nlohmann::json table_json(const Table& table) {
  nlohmann::json out = nlohmann::json::object();
  table.for_each([&](const base::Counter& c) { out[std::string(c.name)] = c.value; });
  return out;
}

// The counters of `infertap status`: every entry of the capture, pipeline
// and sink tables, under the names the tables give them.
nlohmann::json counters_json(const capture::CaptureStats& k, const core::PipelineCounters& p,
                             const daemon::SinkCounters& s) {
  nlohmann::json kernel = nlohmann::json::object(), drops = nlohmann::json::object();
  k.for_each_stat([&](const base::Counter& c) { kernel[std::string(c.name)] = c.value; });
  k.for_each_drop([&](const base::Counter& c) { drops[std::string(c.name)] = c.value; });
  kernel["drops"] = std::move(drops);
  return {{"kernel", std::move(kernel)}, {"pipeline", table_json(p)}, {"sink", table_json(s)}};
}

std::vector<daemon::LiveStream> live_streams(const core::Pipeline& pipeline) {
  std::vector<daemon::LiveStream> live;
  pipeline.for_each_active_stream([&](const core::StreamRecord& r) {
    daemon::LiveStream s;
    s.id = core::stream_id(r);
    s.pid = r.conn.pid;
    s.comm = r.conn.comm;
    s.path = r.path;
    s.model = r.model;
    s.role = r.role;
    s.started_ns = r.request_start_ns ? r.request_start_ns : r.response_head_ns;
    s.events = static_cast<std::uint32_t>(r.timeline.size());
    s.last_event_ns = r.last_event_ns;
    s.first_token_ns = r.first_token_ns;
    s.cgroup = r.conn.cgroup_path;
    live.push_back(std::move(s));
  });
  return live;
}

}  // namespace

int main(int argc, char** argv) {
  core::keep_freed_heap_for_reuse();
  CLI::App app{"infertapd: kernel-level timing of LLM streaming responses (SSE), no code change needed"};
  std::string config_path;
  daemon::DaemonConfig cfg;
  std::string output_path;
  std::string ready_file;
  std::string attach;
  double duration_s = 0;
  double stall_floor_ms = 0;
  double stall_ratio = 0;
  std::uint32_t ringbuf_mb = 0;
  bool print_stats = false;

  app.add_option("-c,--config", config_path, "YAML configuration file (docs/configuration.md); flags override it");
  bool timeline_flag = false;
  auto* timeline_opt = app.add_flag("--timeline", timeline_flag, "Include the per-event timeline in each record");
  auto* output_opt = app.add_option("-o,--output", output_path, "NDJSON output file instead of stdout ('-' = stdout)");
  auto* head_opt = app.add_option("--head-bytes", cfg.capture.head_bytes, "Payload head bytes copied per syscall")
                       ->check(CLI::Range(16u, static_cast<unsigned>(ITAP_HEAD_MAX)));
  auto* tail_opt = app.add_option("--tail-bytes", cfg.capture.tail_bytes, "Payload tail bytes copied per syscall")
                       ->check(CLI::Range(0u, static_cast<unsigned>(ITAP_TAIL_MAX)));
  auto* pid_opt = app.add_option("--pid", cfg.targeting.pids, "Only trace these process ids (repeatable)");
  auto* port_opt = app.add_option("--port", cfg.targeting.ports,
                                  "Only trace connections with this local or remote port (repeatable)");
  auto* cgroup_opt = app.add_option("--cgroup", cfg.targeting.cgroups,
                                    "Only trace processes in this cgroup v2 path or below it (repeatable)");
  auto* name_opt = app.add_option("--process-name", cfg.targeting.process_name_patterns,
                                  "Only trace processes whose name (comm) matches this glob, e.g. 'vllm*' (repeatable)");
  auto* ring_opt = app.add_option("--ringbuf-mb", ringbuf_mb, "Ring buffer size in MiB (power of two)");
  auto* attach_opt = app.add_option("--attach", attach, "How the capture attaches: auto, sock, tracepoint or raw_tp")
                         ->check(CLI::IsMember({"auto", "sock", "tracepoint", "raw_tp"}));
  bool no_signals = false;
  auto* signals_opt = app.add_flag("--no-delivery-signals", no_signals,
                                   "Do not attach the ACK/arrival/retransmit probes (no acked/arrived vantages, "
                                   "no TCP context)");
  auto* floor_opt = app.add_option("--stall-floor-ms", stall_floor_ms, "Smallest gap between tokens that is a stall");
  auto* ratio_opt = app.add_option("--stall-ratio", stall_ratio, "A stall is also above this many median ITLs");
  auto* socket_opt = app.add_option("--socket", cfg.api.socket, "Query API unix socket ('' = no API)");
  auto* listen_opt =
      app.add_option("--metrics-listen", cfg.metrics.listen, "Prometheus endpoint host:port ('' = none)");
  app.add_option("--duration", duration_s, "Stop after this many seconds (0 = until SIGINT/SIGTERM)");
  app.add_option("--ready-file", ready_file, "Create this file once the capture is attached");
  app.add_flag("--stats", print_stats, "Print capture and pipeline counters to stderr at exit");
  CLI11_PARSE(app, argc, argv);

  // The file first, then every flag given on the command line on top of it.
  const auto apply_flags = [&](daemon::DaemonConfig& c) {
    if (*timeline_opt) c.output.timeline = true;
    if (*output_opt) {
      c.output.to_stdout = output_path == "-";
      c.output.file = output_path == "-" ? "" : output_path;
    }
    if (*head_opt) c.capture.head_bytes = cfg.capture.head_bytes;
    if (*tail_opt) c.capture.tail_bytes = cfg.capture.tail_bytes;
    if (*pid_opt) c.targeting.pids = cfg.targeting.pids;
    if (*port_opt) c.targeting.ports = cfg.targeting.ports;
    if (*cgroup_opt) c.targeting.cgroups = cfg.targeting.cgroups;
    if (*name_opt) c.targeting.process_name_patterns = cfg.targeting.process_name_patterns;
    if (*ring_opt) c.capture.ringbuf_bytes = ringbuf_mb << 20;
    if (*attach_opt) {
      static const std::map<std::string, capture::AttachMethod> methods = {
          {"auto", capture::AttachMethod::automatic},
          {"sock", capture::AttachMethod::socket_tracepoints},
          {"tracepoint", capture::AttachMethod::tracepoints},
          {"raw_tp", capture::AttachMethod::raw_tracepoints}};
      c.capture.attach = methods.at(attach);
    }
    if (*signals_opt) c.capture.path_signals = !no_signals;
    if (*floor_opt) c.pipeline.stall_floor_ns = static_cast<std::uint64_t>(stall_floor_ms * 1e6);
    if (*ratio_opt) c.pipeline.stall_ratio = stall_ratio;
    if (*socket_opt) c.api.socket = cfg.api.socket;
    if (*listen_opt) c.metrics.listen = cfg.metrics.listen;
    c.capture.pids = c.targeting.pids;
    c.capture.ports = c.targeting.ports;
  };
  const auto load = [&](daemon::DaemonConfig* out) {
    daemon::DaemonConfig c;
    if (!config_path.empty()) {
      std::string error;
      auto loaded = daemon::load_config(config_path, &error);
      if (!loaded) {
        log(error);
        return false;
      }
      c = std::move(*loaded);
    }
    apply_flags(c);
    *out = std::move(c);
    return true;
  };
  daemon::DaemonConfig config;
  if (!load(&config)) return 2;
  {
    std::string error;
    if (!daemon::resolve_cgroup_ids(config.targeting.cgroups, &config.capture.cgroup_ids, &error,
                                    daemon::cgroup2_mount_point())) {
      log(error);
      return 2;
    }
  }

  struct sigaction stop_action {};
  stop_action.sa_handler = on_stop;
  sigaction(SIGINT, &stop_action, nullptr);
  sigaction(SIGTERM, &stop_action, nullptr);
  struct sigaction hup_action {};
  hup_action.sa_handler = on_hup;
  sigaction(SIGHUP, &hup_action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a CLI that hangs up must not kill the daemon

  std::string error;
  daemon::SinkOptions sink_options = daemon::sink_options(config);
  // A character device (/dev/null, a tty) or a FIFO (a log shipper's pipe) is
  // written like stdout: no rotation, and a reader that stops reading makes
  // the sink drop lines with a counter, never the capture wait.
  int device_fd = -1;
  struct stat output_stat {};
  if (!sink_options.file.empty() && stat(sink_options.file.c_str(), &output_stat) == 0 &&
      (S_ISCHR(output_stat.st_mode) || S_ISFIFO(output_stat.st_mode))) {
    // O_NONBLOCK: opening a FIFO nobody reads fails (ENXIO) instead of hanging;
    // the sink polls a non-blocking descriptor before each write.
    device_fd = open(sink_options.file.c_str(), O_WRONLY | O_CLOEXEC | (S_ISFIFO(output_stat.st_mode) ? O_NONBLOCK : 0));
    if (device_fd < 0) {
      const bool no_reader = errno == ENXIO;
      log("output: " + sink_options.file + ": " + std::strerror(errno) +
          (no_reader ? " (a FIFO needs its reader started first)" : ""));
      return 2;
    }
    sink_options.to_stdout = true;
    sink_options.stdout_fd = device_fd;
    sink_options.file.clear();
  }
  auto sink = daemon::RecordSink::open(sink_options, &error);
  if (!sink) {
    log("output: " + error);
    return 2;
  }
  auto capture = capture::Capture::open(config.capture, &error);
  if (!capture) {
    log(error);
    return 1;
  }
  std::vector<std::string> attach_notes;
  for (const auto& note : capture->notes()) {
    log(note.what + " (" + note.why + ")");
    attach_notes.push_back(note.what + " (" + note.why + ")");
  }

  const output::WallClock clock;
  output::RenderOptions render;
  render.host = daemon::effective_node_name(config);
  render.timeline = config.output.timeline;

  daemon::MetricsConfig metrics_config;
  metrics_config.max_label_values = config.metrics.max_label_values;
  daemon::MetricsRegistry metrics(metrics_config);
  std::unique_ptr<daemon::HttpServer> http;
  if (!config.metrics.listen.empty()) {
    http = daemon::HttpServer::start(config.metrics.listen, metrics, &error);
    if (!http) {
      log("metrics endpoint: " + error);
      return 2;
    }
  }

  daemon::StoreOptions store_options;
  store_options.capacity = config.limits.max_streams_in_memory;
  store_options.clock = clock;
  store_options.host = render.host;
  daemon::RecordStore store(store_options);

  // Degradation detection: fed every finished record; alerts go to the same sink.
  degrade::Monitor degradation(config.degradation, clock, render.host,
                               [&sink](std::string line) { sink->offer(std::move(line)); });
  const auto publish_degradation = [&] {
    std::vector<daemon::CohortStateSample> cohorts;
    for (const degrade::CohortGauge& g : degradation.gauges()) {
      cohorts.push_back({std::string(degrade::to_string(g.key.vantage)), g.key.model, g.key.route, g.key.process,
                         g.key.length_class, g.degraded});
    }
    metrics.set_degradation(cohorts, degradation.active_abuse());
  };

  // What `infertap status` shows: refreshed by the capture thread once a
  // second, read by API threads.
  std::mutex status_mu;
  nlohmann::json status = {{"attach", attach_notes}, {"node", render.host}};
  std::unique_ptr<daemon::ApiServer> api;
  if (!config.api.socket.empty()) {
    daemon::ApiOptions api_options;
    api_options.socket_path = config.api.socket;
    api_options.alerts = [&] { return degradation.alerts_response(); };
    api_options.status = [&] {
      std::lock_guard<std::mutex> lock(status_mu);
      return status;
    };
    api = std::make_unique<daemon::ApiServer>(store, api_options);
    try {
      api->start();
    } catch (const std::exception& e) {
      log(std::string("query API: ") + e.what());
      return 2;
    }
  }

  capture::Capture* cap = capture.get();
  core::Pipeline pipeline(
      config.pipeline,
      [&](core::StreamRecord&& record) {
        sink->offer(output::render_stream(record, clock, render));
        metrics.observe(record);
        degradation.observe(record);
        store.add(std::move(record));  // last: the store keeps it
      },
      [cap](std::uint64_t sock_id) { cap->mute(sock_id); }, read_cgroup_path, read_comm);

  // Per new connection: process name targeting (the kernel filters pids,
  // ports and cgroups itself) and the container / pod the process runs in.
  daemon::WorkloadResolver workloads(
      daemon::KubernetesSources::from_environment(config.kubernetes.pods_dir, config.kubernetes.containers_dir));
  const std::vector<std::string> name_patterns = config.targeting.process_name_patterns;
  pipeline.set_admit([&workloads, name_patterns](core::ConnIdentity& id) {
    // The kernel reports the name of the thread that made the call; a process
    // whose threads are renamed (prctl) is matched by its own name too.
    if (!daemon::comm_matches(name_patterns, id.comm) && !daemon::comm_matches(name_patterns, read_comm(id.pid))) {
      return false;
    }
    workloads.fill(id, id.first_seen_ns);
    return true;
  });

  const auto refresh = [&] {
    const capture::CaptureStats k = capture->stats();
    const daemon::SinkCounters s = sink->counters();
    metrics.set_self(k, pipeline.counters(), s, {pipeline.connection_count()});
    store.set_live(live_streams(pipeline));
    publish_degradation();
    std::lock_guard<std::mutex> lock(status_mu);
    status["counters"] = counters_json(k, pipeline.counters(), s);
    status["tracked_connections"] = pipeline.connection_count();
  };
  refresh();
  if (http) http->set_ready(true);
  if (!ready_file.empty()) {
    if (FILE* f = std::fopen(ready_file.c_str(), "w")) std::fclose(f);
  }
  log("capture attached; records to " +
      std::string(config.output.file.empty() ? "stdout" : config.output.file) +
      (api ? "; API on " + config.api.socket : "") + (http ? "; metrics on port " + std::to_string(http->port()) : ""));

  const std::uint64_t start = base::monotonic_ns();
  std::uint64_t last_tick = start;
  const auto handler = [&](std::span<const std::uint8_t> record) { pipeline.on_record(record); };
  while (!g_stop.load()) {
    const int n = capture->poll(50, handler);
    if (n < 0) {
      log(std::string("ring buffer poll failed: ") + std::strerror(-n));
      break;
    }
    if (g_reload.exchange(false)) {
      // What can change without reattaching: stall thresholds, timeline output.
      daemon::DaemonConfig next;
      if (load(&next)) {
        pipeline.set_stall_threshold(next.pipeline.stall_floor_ns, next.pipeline.stall_ratio);
        render.timeline = next.output.timeline;
        if (degradation.reconfigure(next.degradation)) log("degradation detection restarted with the new settings");
        log("configuration reloaded (capture, targeting, output and endpoints need a restart to change)");
      } else {
        log("configuration reload failed: keeping the running configuration");
      }
    }
    const std::uint64_t now = base::monotonic_ns();
    if (now - last_tick > 1'000'000'000ull) {
      pipeline.expire(now);
      degradation.tick(now);
      refresh();
      last_tick = now;
    }
    if (duration_s > 0 && static_cast<double>(now - start) / 1e9 >= duration_s) break;
  }
  if (http) http->set_ready(false);
  capture->drain(handler);
  pipeline.flush(base::monotonic_ns());
  refresh();
  if (api) api->stop();
  if (http) http->stop();
  sink->close(std::chrono::milliseconds(5000));
  if (device_fd >= 0) close(device_fd);

  if (print_stats) {
    std::lock_guard<std::mutex> lock(status_mu);
    log("stats " + status["counters"].dump());
  }
  return 0;
}
