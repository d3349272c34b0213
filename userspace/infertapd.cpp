// infertapd: attaches the kernel capture, rebuilds per-stream timelines and
// writes one NDJSON record per finished stream; serves the query API (unix
// socket, for the `infertap` CLI) and Prometheus metrics; with an OTLP
// endpoint, exports spans and metrics to an OpenTelemetry Collector.
//
// Threads: this one owns the capture and the pipeline (single-threaded by
// design); the sink, the OTLP sender, the API and the HTTP endpoint have their own and only see
// finished records or snapshots taken here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <bpf/libbpf.h>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/escape.h"
#include "capture/loader.h"
#include "capture/privileges.h"
#include "core/pipeline.h"
#include "daemon/api.h"
#include "daemon/config.h"
#include "daemon/http_server.h"
#include "daemon/load_probe.h"
#include "output/prometheus/metrics.h"
#include "output/ndjson/sink.h"
#include "output/otlp/exporter.h"
#include "daemon/store.h"
#include "daemon/workload.h"
#include "degrade/monitor.h"
#include "output/ndjson/records.h"

namespace {

using namespace infertap;
using json = nlohmann::json;

// Set by signal handlers; the only process-wide state.
std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

void on_stop(int) { g_stop.store(true); }
void on_hup(int) { g_reload.store(true); }

void install_signal_handlers() {
  struct sigaction stop_action {};
  stop_action.sa_handler = on_stop;
  sigaction(SIGINT, &stop_action, nullptr);
  sigaction(SIGTERM, &stop_action, nullptr);
  struct sigaction hup_action {};
  hup_action.sa_handler = on_hup;
  sigaction(SIGHUP, &hup_action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a CLI that hangs up must not kill the daemon
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

std::string read_comm(std::uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

// Every line the daemon writes: loader notes, process names, paths, models and
// versions are a tenant's text, escaped here so none can forge a line.
void log(const std::string& message) { std::fputs(base::log_line("infertapd", message).c_str(), stderr); }

// libbpf's warnings name tenant paths (a uprobe's library): through log() too.
int libbpf_to_log(enum libbpf_print_level level, const char* format, va_list args) {
  if (level != LIBBPF_WARN) return 0;
  char text[2048];
  std::vsnprintf(text, sizeof text, format, args);
  std::string line(text);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  log(line);
  return 0;
}

// ---- the command line -------------------------------------------------------

// What only the command line sets: how long to run and what to report.
struct RunControl {
  std::string config_path;
  double duration_s = 0;
  std::string ready_file;
  bool print_stats = false;
};

// One option of the table (daemon::options()) as CLI11 fills it.
struct FlagSlot {
  const daemon::Option* option = nullptr;
  std::string value;
  std::vector<std::string> values;
  bool on = false;
  CLI::Option* given = nullptr;
};

// Run control and every flag of the option table; `slots` receive the values.
void add_flags(CLI::App& app, RunControl& run, std::deque<FlagSlot>& slots) {
  app.add_option("-c,--config", run.config_path, "YAML configuration file (docs/configuration.md); flags override it");
  for (const daemon::Option& o : daemon::options()) {
    if (o.form == daemon::FlagForm::none) continue;
    FlagSlot& slot = slots.emplace_back();
    slot.option = &o;
    const std::string help = o.help + " [" + o.key + "]";
    switch (o.form) {
      case daemon::FlagForm::value: slot.given = app.add_option(o.flag, slot.value, help); break;
      case daemon::FlagForm::repeatable: slot.given = app.add_option(o.flag, slot.values, help); break;
      case daemon::FlagForm::on:
      case daemon::FlagForm::off: slot.given = app.add_flag(o.flag, slot.on, help); break;
      case daemon::FlagForm::none: break;
    }
    if (o.form == daemon::FlagForm::value || o.form == daemon::FlagForm::repeatable) slot.given->type_name(o.value_form);
  }
  app.add_option("--duration", run.duration_s, "Stop after this many seconds (0 = until SIGINT/SIGTERM)");
  app.add_option("--ready-file", run.ready_file, "Create this file once the capture is attached");
  app.add_flag("--stats", run.print_stats, "Print capture and pipeline counters to stderr at exit");
}

daemon::CommandLine given_flags(const std::deque<FlagSlot>& slots) {
  daemon::CommandLine flags;
  for (const FlagSlot& slot : slots) {
    if (!*slot.given) continue;
    switch (slot.option->form) {
      case daemon::FlagForm::value: flags.set(*slot.option, {slot.value}); break;
      case daemon::FlagForm::repeatable: flags.set(*slot.option, slot.values); break;
      default: flags.set(*slot.option, {}); break;
    }
  }
  return flags;
}

// ---- what the daemon publishes ------------------------------------------------

// {name: value} of one counter table.
template <class Table>
json table_json(const Table& table) {
  json out = json::object();
  table.for_each([&](const base::Counter& c) { out[std::string(c.name)] = c.value; });
  return out;
}

// The counters of `infertap status`: every entry of the capture, pipeline
// and sink tables, under the names the tables give them.
json counters_json(const capture::CaptureStats& capture, const core::PipelineCounters& pipeline,
                   const output::SinkCounters& sink) {
  json kernel = json::object(), drops = json::object();
  capture.for_each_stat([&](const base::Counter& c) { kernel[std::string(c.name)] = c.value; });
  capture.for_each_drop([&](const base::Counter& c) { drops[std::string(c.name)] = c.value; });
  kernel["drops"] = std::move(drops);
  return {{"kernel", std::move(kernel)}, {"pipeline", table_json(pipeline)}, {"sink", table_json(sink)}};
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
    s.events = static_cast<std::uint32_t>(r.timeline.size() + r.tail.events);  // events past the timeline bound too
    s.last_event_ns = r.last_event_ns;
    s.first_token_ns = r.first_token_ns;
    s.cgroup = r.conn.cgroup_path;
    live.push_back(std::move(s));
  });
  return live;
}

output::MetricsConfig metrics_config(const daemon::DaemonConfig& config) {
  output::MetricsConfig m;
  m.max_label_values = config.metrics.max_label_values;
  m.max_series_per_family = config.metrics.max_series_per_family;
  m.band_labels = config.metrics.band_labels;
  m.objectives = config.objectives;
  if (m.band_labels) {
    m.band_of = [bands = config.degradation](const core::StreamRecord& r) { return degrade::bands_of(bands, r); };
  }
  return m;
}

// ---- the agent ------------------------------------------------------------------

// Everything infertapd runs, in the order it is started (and stopped in
// reverse): the output, the capture, the endpoints, the pipeline.
class Agent {
 public:
  Agent(daemon::DaemonConfig config, daemon::CommandLine flags, RunControl run,
        std::optional<output::otlp::ExporterOptions> otlp)
      : config_(std::move(config)),
        otlp_options_(std::move(otlp)),
        flags_(std::move(flags)),
        run_(std::move(run)),
        render_{config_.output.timeline, daemon::effective_node_name(config_)},
        metrics_(metrics_config(config_)),
        store_(store_options()),
        degradation_(config_.degradation, clock_, render_.host, [this](std::string line) { sink_->offer(std::move(line)); }),
        workloads_(daemon::KubernetesSources::from_environment(config_.kubernetes.pods_dir,
                                                              config_.kubernetes.containers_dir)) {}

  // 0 once everything runs, else the exit code (the reason is logged). The
  // output, the metrics port and the API socket are taken before the capture
  // attaches: a second agent given any of them stops before it attaches
  // anything.
  int start() {
    if (const int rc = open_output()) return rc;
    start_otlp();
    if (const int rc = start_metrics()) return rc;
    if (const int rc = start_api()) return rc;
    if (const int rc = open_capture()) return rc;
    build_pipeline();
    refresh();
    if (http_) {
      http_->watch(&heartbeat_);
      http_->set_ready(true);
    }
    if (!run_.ready_file.empty()) {
      if (FILE* f = std::fopen(run_.ready_file.c_str(), "w")) std::fclose(f);
    }
    log("capture attached; records to " + std::string(config_.output.file.empty() ? "stdout" : config_.output.file) +
        (api_ ? "; API on " + config_.api.socket : "") +
        (http_ ? "; metrics on port " + std::to_string(http_->port()) : ""));
    return 0;
  }

  // Until SIGINT/SIGTERM or --duration: drain the ring, once a second expire
  // idle streams, tick the degradation windows and refresh what others read.
  void run() {
    const std::uint64_t start = base::monotonic_ns();
    std::uint64_t last_tick = start;
    while (!g_stop.load()) {
      heartbeat_.beat(base::monotonic_ns());
      const int n = capture_->poll(50, handler_);
      if (n < 0) {
        log(std::string("ring buffer poll failed: ") + std::strerror(-n));
        break;
      }
      if (g_reload.exchange(false)) reload();
      if (store_.live_asked()) store_.set_live(live_streams(*pipeline_));  // `streams --live` waits for it
      const std::uint64_t now = base::monotonic_ns();
      if (now - last_tick > 1'000'000'000ull) {
        log_new_notes();
        reconcile_after_loss(now);
        pipeline_->expire(now);
        pipeline_->sample_load(now);  // PSI and CPU time: once a second, never per event
        degradation_.tick(now);
        refresh();
        report_drops(now);
        report_otlp_drops(now);
        last_tick = now;
      }
      if (run_.duration_s > 0 && static_cast<double>(now - start) / 1e9 >= run_.duration_s) break;
    }
  }

  // What is in the ring and in flight becomes records; then every writer ends.
  void stop() {
    if (http_) http_->set_ready(false);
    capture_->drain(handler_);
    pipeline_->flush(base::monotonic_ns());
    refresh();
    if (api_) api_->stop();
    if (http_) http_->stop();
    sink_->close(std::chrono::milliseconds(5000));
    if (device_fd_ >= 0) close(device_fd_);
    device_fd_ = -1;
    // What the output lost is said, with the counters as they are after its last write.
    const output::SinkCounters sink = sink_->counters();
    const std::string error = sink_->last_error();
    log("output: " + output::describe_output(sink) + (sink.dropped_lines && !error.empty() ? "; last error: " + error : ""));
    stop_otlp();
    if (run_.print_stats) {
      json stats = counters_json(capture_->stats(), pipeline_->counters(), sink);
      if (otlp_) stats["otlp"] = table_json(otlp_->counters());
      log("stats " + stats.dump());
    }
  }

 private:
  daemon::StoreOptions store_options() const {
    daemon::StoreOptions o;
    o.capacity = config_.limits.max_streams_in_memory;
    o.clock = clock_;
    o.host = render_.host;
    return o;
  }

  // A character device (/dev/null, a tty) or a FIFO (a log shipper's pipe) is
  // written like stdout: no rotation, and a reader that stops reading makes
  // the sink drop lines with a counter, never the capture wait.
  int open_output() {
    output::SinkOptions options = daemon::sink_options(config_);
    struct stat output_stat {};
    if (!options.file.empty() && stat(options.file.c_str(), &output_stat) == 0 &&
        (S_ISCHR(output_stat.st_mode) || S_ISFIFO(output_stat.st_mode))) {
      // O_NONBLOCK: opening a FIFO nobody reads fails (ENXIO) instead of hanging;
      // the sink polls a non-blocking descriptor before each write.
      device_fd_ = open(options.file.c_str(), O_WRONLY | O_CLOEXEC | (S_ISFIFO(output_stat.st_mode) ? O_NONBLOCK : 0));
      if (device_fd_ < 0) {
        const bool no_reader = errno == ENXIO;
        log("output: " + options.file + ": " + std::strerror(errno) +
            (no_reader ? " (a FIFO needs its reader started first)" : ""));
        return 2;
      }
      options.to_stdout = true;
      options.stdout_fd = device_fd_;
      options.file.clear();
    }
    std::string error;
    sink_ = output::RecordSink::open(options, &error);
    if (!sink_) {
      log("output: " + error);
      return 2;
    }
    return 0;
  }

  // The OTLP exporter, when an endpoint is configured (file or OTEL_*): its
  // own sender thread; a dead collector costs the capture nothing.
  void start_otlp() {
    if (!otlp_options_) return;
    const output::otlp::ExporterOptions& o = *otlp_options_;
    const auto where = [](const std::optional<output::otlp::SignalOptions>& s) {
      return s ? daemon::loggable_url(s->url) + (s->encoding == output::otlp::Encoding::json ? " (http/json)" : " (http/protobuf)")
               : std::string("off");
    };
    otlp_ = std::make_unique<output::otlp::Exporter>(o, clock_);
    log("otlp: traces to " + where(o.traces) + "; metrics to " + where(o.metrics) + " every " +
        std::to_string(static_cast<double>(o.export_interval.count()) / 1000.0).substr(0, 5) + " s");
  }

  // Sends what is queued and a last metrics export (bounded), then says what was lost.
  void stop_otlp() {
    if (!otlp_) return;
    otlp_->close();
    const output::otlp::Counters c = otlp_->counters();
    const std::string error = otlp_->last_error();
    log("otlp: " + output::otlp::describe(c) + (error.empty() ? "" : "; last error: " + error));
  }

  // What the exporter drops is said when it starts and then at most every 10 s.
  void report_otlp_drops(std::uint64_t now) {
    if (!otlp_) return;
    const output::otlp::Counters c = otlp_->counters();
    const std::uint64_t dropped = c.spans_dropped + c.metric_exports_dropped;
    if (dropped == otlp_dropped_reported_) return;
    if (otlp_reported_at_ != 0 && now - otlp_reported_at_ < 10'000'000'000ull) return;
    const std::string error = otlp_->last_error();
    log("otlp is losing data: " + output::otlp::describe(c) + (error.empty() ? "" : "; last error: " + error));
    otlp_dropped_reported_ = dropped;
    otlp_reported_at_ = now;
  }

  int open_capture() {
    check_privileges();
    std::string error;
    capture_ = capture::Capture::open(config_.capture, &error);
    if (!capture_) {
      log(error);
      return 1;
    }
    libbpf_set_print(libbpf_to_log);  // after open: the loader installs its own printer there
    log_new_notes();
    return 0;
  }

  // One line per capability the capture lacks, before it opens; the same in
  // `infertap status` (privileges) and /metrics (infertap_capability_missing).
  void check_privileges() {
    const auto effective = capture::effective_capabilities();
    json missing = json::array();
    if (effective) {
      for (const capture::MissingCapability& m : capture::missing_capabilities(*effective, config_.capture.tls)) {
        log(capture::describe(m));
        missing.push_back(capture::describe(m));
        missing_capabilities_.emplace_back(capture::name_of(m.capability));
      }
    } else {
      log("capabilities: capget failed, the capture's privileges are not checked");
    }
    std::lock_guard<std::mutex> lock(status_mu_);
    status_["privileges"] = {{"missing", missing.empty() ? json("none") : missing}};
  }

  // Load decisions, then the TLS libraries probed as processes start: each
  // is logged once and listed in the status under "attach".
  void log_new_notes() {
    const auto& notes = capture_->notes();
    if (notes.size() == notes_logged_) return;
    std::lock_guard<std::mutex> lock(status_mu_);
    if (!status_.contains("attach")) {
      status_["attach"] = json::array();
      status_["node"] = render_.host;
    }
    for (; notes_logged_ < notes.size(); ++notes_logged_) {
      const std::string line = notes[notes_logged_].what + " (" + notes[notes_logged_].why + ")";
      log(line);
      if (status_["attach"].size() < kMaxStatusNotes) status_["attach"].push_back(line);
    }
  }

  int start_metrics() {
    if (config_.metrics.listen.empty()) return 0;
    std::string error;
    http_ = daemon::HttpServer::start(daemon::http_options(config_), metrics_, &error);
    if (!http_) {
      log("metrics endpoint: " + error);
      return 2;
    }
    return 0;
  }

  int start_api() {
    if (config_.api.socket.empty()) return 0;
    daemon::ApiOptions options;
    options.socket_path = config_.api.socket;
    options.live_wait = std::chrono::milliseconds(250);
    options.alerts = [this] { return degradation_.alerts_response(); };
    options.status = [this] {
      std::lock_guard<std::mutex> lock(status_mu_);
      return status_;
    };
    api_ = std::make_unique<daemon::ApiServer>(store_, options);
    try {
      api_->start();
    } catch (const std::exception& e) {
      log(std::string("query API: ") + e.what());
      return 2;
    }
    return 0;
  }

  void build_pipeline() {
    capture::Capture* cap = capture_.get();
    pipeline_ = std::make_unique<core::Pipeline>(
        config_.pipeline, [this](core::StreamRecord&& record) { on_record(std::move(record)); },
        [cap](std::uint64_t sock_id, std::uint32_t inode) { cap->mute(sock_id, inode); }, read_cgroup_path, read_comm);
    pipeline_->set_forget([cap](std::uint64_t sock_id, std::uint32_t inode) { cap->forget(sock_id, inode); });
    pipeline_->set_tls_library_names([cap](std::uint16_t id) { return std::string(cap->tls_library(id)); });
    // Per new connection: process name and unix path targeting (the kernel
    // filters pids, ports and cgroups itself) and the container / pod the
    // process runs in.
    pipeline_->set_admit([this, patterns = config_.targeting.process_name_patterns,
                          unix_paths = config_.targeting.unix_paths](core::ConnIdentity& id) {
      // The kernel reports the name of the thread that made the call; a process
      // whose threads are renamed (prctl) is matched by its own name too.
      if (!daemon::comm_matches(patterns, id.comm) && !daemon::comm_matches(patterns, read_comm(id.pid))) {
        return false;
      }
      // A unix socket's path, where a port would be (the kernel lets unix sockets through when paths are listed).
      if (!daemon::unix_path_matches(unix_paths, id)) return false;
      workloads_.fill(id, id.first_seen_ns);
      return true;
    });
    handler_ = [this](std::span<const std::uint8_t> record) { pipeline_->on_record(record); };
    pipeline_->set_load_probe(&load_probe_);
    pipeline_->sample_load(base::monotonic_ns());
  }

  // A finished stream: to the output, the metrics, degradation, and the store (last: it keeps it).
  void on_record(core::StreamRecord&& record) {
    sink_->offer(output::render_stream(record, clock_, render_));
    metrics_.observe(record);
    if (otlp_) otlp_->observe(record);
    degradation_.observe(record);
    store_.add(std::move(record));
  }

  // What the API, the metrics endpoint and `infertap status` read, once a second.
  void refresh() {
    const capture::CaptureStats kernel = capture_->stats();
    const output::SinkCounters sink = sink_->counters();
    const output::otlp::Counters otlp = otlp_ ? otlp_->counters() : output::otlp::Counters{};
    metrics_.set_self(kernel, pipeline_->counters(), sink, {pipeline_->connection_count(), missing_capabilities_, otlp});
    store_.set_live(live_streams(*pipeline_));
    std::vector<output::CohortStateSample> cohorts;
    for (const degrade::CohortGauge& g : degradation_.gauges()) {
      cohorts.push_back({std::string(degrade::to_string(g.key.vantage)), g.key.model, g.key.route, g.key.process,
                         g.key.length_class, g.degraded, g.key.concurrency_band, g.key.input_band});
    }
    metrics_.set_degradation(cohorts, degradation_.active_abuse());
    std::vector<output::ProcessLoadSample> load;
    for (const core::ScopeLoad& s : pipeline_->load_scopes()) {
      if (s.scope == "process") load.push_back({s.comm, s.in_flight, s.waiting});
    }
    metrics_.set_load(load);
    std::lock_guard<std::mutex> lock(status_mu_);
    status_["counters"] = counters_json(kernel, pipeline_->counters(), sink);
    if (http_) status_["counters"]["http"] = table_json(http_->counters());
    if (otlp_) status_["counters"]["otlp"] = table_json(otlp);
    status_["tracked_connections"] = pipeline_->connection_count();
  }

  // Lines the output drops are said when they start and then at most every
  // 10 s, with their reasons; the total is said again at shutdown.
  void report_drops(std::uint64_t now) {
    const output::SinkCounters c = sink_->counters();
    if (c.dropped_lines == drops_reported_.dropped_lines) return;
    if (drops_reported_at_ != 0 && now - drops_reported_at_ < 10'000'000'000ull) return;
    const output::SinkCounters since = output::counted_since(c, drops_reported_);
    const std::string error = sink_->last_error();
    log("output is losing records: " + output::describe_output(since) + (drops_reported_at_ ? " in the last 10 s" : "") +
        (error.empty() ? "; the output does not keep up" : "; " + error));
    drops_reported_ = c;
    drops_reported_at_ = now;
  }

  // SIGHUP: the file and the flags again; what can change without
  // reattaching takes effect (stall thresholds and the lag floor, timeline output, degradation).
  void reload() {
    std::string error;
    const auto next = daemon::configure(run_.config_path, flags_, &error);
    if (!next) {
      log(error);
      log("configuration reload failed: keeping the running configuration");
      return;
    }
    pipeline_->set_stall_threshold(next->pipeline.stall_floor_ns, next->pipeline.stall_ratio);
    pipeline_->set_lag_floor(next->pipeline.lag_floor_ns);
    render_.timeline = next->output.timeline;
    if (degradation_.reconfigure(next->degradation)) log("degradation detection restarted with the new settings");
    log("configuration reloaded (capture, targeting, formats, output, endpoints and objectives need a restart to change)");
  }

  const daemon::DaemonConfig config_;
  const std::optional<output::otlp::ExporterOptions> otlp_options_;
  const daemon::CommandLine flags_;
  const RunControl run_;
  int device_fd_ = -1;
  output::SinkCounters drops_reported_;   // the sink's counters when drops were last logged
  std::uint64_t drops_reported_at_ = 0;
  std::unique_ptr<output::RecordSink> sink_;
  std::unique_ptr<output::otlp::Exporter> otlp_;  // null: OTLP off
  std::uint64_t otlp_dropped_reported_ = 0;       // spans + metric exports dropped when last logged
  std::uint64_t otlp_reported_at_ = 0;
  std::unique_ptr<capture::Capture> capture_;
  const output::WallClock clock_;
  output::RenderOptions render_;
  output::MetricsRegistry metrics_;
  daemon::Heartbeat heartbeat_;  // beaten by run(), read by /healthz: outlives http_
  std::unique_ptr<daemon::HttpServer> http_;
  daemon::RecordStore store_;
  degrade::Monitor degradation_;  // fed every finished record; alerts go to the same sink
  // Closes the kernel could not report (a full ring buffer) would leave
  // connections open until their idle timeout: after a drop, ask the kernel
  // which sockets it still knows.
  void reconcile_after_loss(std::uint64_t now) {
    const capture::CaptureStats kernel = capture_->stats();
    std::uint64_t drops = 0;
    kernel.for_each_drop([&](const base::Counter& c) { drops += c.value; });
    if (drops == drops_seen_) return;
    drops_seen_ = drops;
    capture::Capture* cap = capture_.get();
    pipeline_->reconcile(now, [cap](std::uint64_t sock) { return cap->knows(sock); });
  }
  std::uint64_t drops_seen_ = 0;
  std::vector<std::string> missing_capabilities_;  // capture/privileges.h names, for /metrics

  // What `infertap status` shows: refreshed by this thread, read by API threads.
  std::mutex status_mu_;
  json status_;
  std::size_t notes_logged_ = 0;
  static constexpr std::size_t kMaxStatusNotes = 200;
  std::unique_ptr<daemon::ApiServer> api_;
  std::unique_ptr<core::Pipeline> pipeline_;
  daemon::WorkloadResolver workloads_;
  daemon::ProcLoadProbe load_probe_{"/proc", daemon::cgroup2_mount_point()};
  capture::Capture::RecordHandler handler_;
};

}  // namespace

int main(int argc, char** argv) {
  core::keep_freed_heap_for_reuse();
  CLI::App app{"infertapd: kernel-level timing of LLM streaming responses (SSE), no code change needed"};
  RunControl run;
  std::deque<FlagSlot> slots;
  add_flags(app, run, slots);
  CLI11_PARSE(app, argc, argv);

  const daemon::CommandLine flags = given_flags(slots);
  std::string error;
  auto config = daemon::configure(run.config_path, flags, &error);
  if (!config || !daemon::resolve_cgroup_ids(config->targeting.cgroups, &config->capture.cgroup_ids, &error,
                                             daemon::cgroup2_mount_point())) {
    log(error);
    return 2;
  }
  // OTLP: the file's otlp section over the OTEL_* environment (docs/otlp.md).
  auto otlp = daemon::otlp_options(*config, daemon::process_environment(), &error);
  if (!otlp && !error.empty()) {
    log(error);
    return 2;
  }
  install_signal_handlers();
  Agent agent(std::move(*config), flags, std::move(run), std::move(otlp));
  if (const int rc = agent.start()) return rc;
  agent.run();
  agent.stop();
  return 0;
}
