#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "daemon/config.h"
#include "daemon/objectives.h"
#include "output/prometheus/metrics.h"
#include "support/repo_file.h"

namespace infertap::daemon {
namespace {

namespace fs = std::filesystem;

DaemonConfig parse_ok(const std::string& text) {
  std::string error;
  auto c = parse_config(text, &error);
  EXPECT_TRUE(c.has_value()) << error << "\n--- document:\n" << text;
  return c.value_or(DaemonConfig{});
}

std::string parse_error(const std::string& text) {
  std::string error;
  auto c = parse_config(text, &error);
  EXPECT_FALSE(c.has_value()) << "accepted:\n" << text;
  EXPECT_FALSE(error.empty());
  return error;
}

using testing::repo_file;

TEST(DaemonConfig, EmptyDocumentGivesInfertapdDefaults) {
  for (const std::string& text : {std::string(""), std::string("# only a comment\n"), std::string("{}\n")}) {
    const DaemonConfig c = parse_ok(text);
    const capture::CaptureConfig cap;
    const core::PipelineConfig pipe;
    EXPECT_EQ(c.capture.attach, capture::AttachMethod::automatic);
    EXPECT_EQ(c.capture.head_bytes, std::uint32_t{ITAP_HEAD_DEFAULT});
    EXPECT_EQ(c.capture.tail_bytes, std::uint32_t{ITAP_TAIL_DEFAULT});
    EXPECT_EQ(c.capture.ringbuf_bytes, 16u << 20);
    EXPECT_EQ(c.capture.wakeup_bytes, cap.wakeup_bytes);
    EXPECT_TRUE(c.capture.ignore_self);
    EXPECT_TRUE(c.capture.pids.empty());
    EXPECT_TRUE(c.capture.ports.empty());
    EXPECT_TRUE(c.capture.cgroup_ids.empty());
    EXPECT_EQ(c.pipeline.stall_floor_ns, 100'000'000u);
    EXPECT_EQ(c.pipeline.stall_ratio, 4.0);
    EXPECT_EQ(c.pipeline.stream_idle_timeout_ns, pipe.stream_idle_timeout_ns);
    EXPECT_EQ(c.pipeline.conn_idle_timeout_ns, pipe.conn_idle_timeout_ns);
    EXPECT_EQ(c.pipeline.max_connections, pipe.max_connections);
    EXPECT_EQ(c.pipeline.max_timeline_events, pipe.max_timeline_events);
    EXPECT_EQ(c.pipeline.request_body_head, pipe.request_body_head);
    EXPECT_TRUE(c.output.to_stdout);
    EXPECT_EQ(c.output.file, "");
    EXPECT_EQ(c.output.rotate_bytes, 100ull << 20);
    EXPECT_EQ(c.output.keep_files, 5);
    EXPECT_FALSE(c.output.timeline);
    EXPECT_EQ(c.api.socket, "/run/infertap/infertap.sock");
    EXPECT_EQ(c.metrics.listen, "0.0.0.0:9464");
    EXPECT_EQ(c.metrics.max_label_values, 50u);
    EXPECT_EQ(c.metrics.max_series_per_family, output::MetricsConfig{}.max_series_per_family);
    EXPECT_EQ(c.pipeline.lag_floor_ns, pipe.lag_floor_ns);
    EXPECT_EQ(c.limits.max_streams_in_memory, 2000u);
    EXPECT_EQ(c.limits.sink_queue_lines, 65536u);
    EXPECT_EQ(c.limits.sink_queue_bytes, 64ull << 20);
    EXPECT_TRUE(c.targeting.cgroups.empty());
    EXPECT_TRUE(c.targeting.process_name_patterns.empty());
    EXPECT_EQ(c.node_name, "");
  }
}

TEST(DaemonConfig, EveryKeyIsRead) {
  const DaemonConfig c = parse_ok(R"(
node_name: gpu-node-7
capture:
  attach: raw_tp
  head_bytes: 1024
  tail_bytes: 256
  ringbuf_mb: 64
  wakeup_bytes: 512KiB
  ignore_self: false
targeting:
  pids: [100, 200]
  ports: [8000, 443]
  cgroups: ["/kubepods.slice/pod1"]
  process_name_patterns: ["vllm*", "python?"]
stall:
  floor_ms: 250.5
  ratio: 3
  lag_floor_ms: 350
pipeline:
  stream_idle_timeout_s: 30
  conn_idle_timeout_s: 0.5
  max_timeline_events: 5000
  request_body_head_bytes: 8KiB
limits:
  max_connections: 1000
  max_live_stream_bytes: 32MiB
  max_streams_in_memory: 10
  sink_queue_lines: 128
  sink_queue_bytes: 1MiB
output:
  stdout: false
  file: /var/log/infertap/streams.ndjson
  rotate_bytes: 10MiB
  keep_files: 0
  timeline: true
api:
  socket: /tmp/x.sock
metrics:
  listen: "[::]:9100"
  max_label_values: 7
  max_series_per_family: 30
)");
  EXPECT_EQ(c.node_name, "gpu-node-7");
  EXPECT_EQ(c.capture.attach, capture::AttachMethod::raw_tracepoints);
  EXPECT_EQ(c.capture.head_bytes, 1024u);
  EXPECT_EQ(c.capture.tail_bytes, 256u);
  EXPECT_EQ(c.capture.ringbuf_bytes, 64u << 20);
  EXPECT_EQ(c.capture.wakeup_bytes, 512u << 10);
  EXPECT_FALSE(c.capture.ignore_self);
  EXPECT_EQ(c.targeting.pids, (std::vector<std::uint32_t>{100, 200}));
  EXPECT_EQ(c.capture.pids, (std::vector<std::uint32_t>{100, 200}));
  EXPECT_EQ(c.targeting.ports, (std::vector<std::uint16_t>{8000, 443}));
  EXPECT_EQ(c.capture.ports, (std::vector<std::uint16_t>{8000, 443}));
  EXPECT_EQ(c.targeting.cgroups, (std::vector<std::string>{"/kubepods.slice/pod1"}));
  EXPECT_EQ(c.targeting.process_name_patterns, (std::vector<std::string>{"vllm*", "python?"}));
  EXPECT_EQ(c.pipeline.stall_floor_ns, 250'500'000u);
  EXPECT_EQ(c.pipeline.stall_ratio, 3.0);
  EXPECT_EQ(c.pipeline.lag_floor_ns, 350'000'000u);
  EXPECT_EQ(c.pipeline.stream_idle_timeout_ns, 30'000'000'000u);
  EXPECT_EQ(c.pipeline.conn_idle_timeout_ns, 500'000'000u);
  EXPECT_EQ(c.pipeline.max_timeline_events, 5000u);
  EXPECT_EQ(c.pipeline.max_live_stream_bytes, 32u << 20);
  EXPECT_EQ(c.pipeline.request_body_head, 8192u);
  EXPECT_EQ(c.pipeline.max_connections, 1000u);
  EXPECT_EQ(c.limits.max_streams_in_memory, 10u);
  EXPECT_EQ(c.limits.sink_queue_lines, 128u);
  EXPECT_EQ(c.limits.sink_queue_bytes, 1u << 20);
  EXPECT_FALSE(c.output.to_stdout);
  EXPECT_EQ(c.output.file, "/var/log/infertap/streams.ndjson");
  EXPECT_EQ(c.output.rotate_bytes, 10u << 20);
  EXPECT_EQ(c.output.keep_files, 0);
  EXPECT_TRUE(c.output.timeline);
  EXPECT_EQ(c.api.socket, "/tmp/x.sock");
  EXPECT_EQ(c.metrics.listen, "[::]:9100");
  EXPECT_EQ(c.metrics.max_label_values, 7u);
  EXPECT_EQ(c.metrics.max_series_per_family, 30u);
}

TEST(DaemonConfig, AttachNamesMatchTheCommandLine) {
  EXPECT_EQ(parse_ok("capture: {attach: auto}").capture.attach, capture::AttachMethod::automatic);
  EXPECT_EQ(parse_ok("capture: {attach: sock}").capture.attach, capture::AttachMethod::socket_tracepoints);
  EXPECT_EQ(parse_ok("capture: {attach: tracepoint}").capture.attach, capture::AttachMethod::tracepoints);
  EXPECT_EQ(parse_ok("capture: {attach: RAW_TP}").capture.attach, capture::AttachMethod::raw_tracepoints);
  EXPECT_NE(parse_error("capture: {attach: kprobe}").find("capture.attach: must be auto, sock, tracepoint or raw_tp, got 'kprobe'"),
            std::string::npos);
}

TEST(DaemonConfig, NullValuesKeepDefaults) {
  const DaemonConfig c = parse_ok("output:\n  file:\n  keep_files: ~\ncapture:\ntargeting:\n  ports:\n");
  EXPECT_EQ(c.output.file, "");
  EXPECT_EQ(c.output.keep_files, 5);
  EXPECT_TRUE(c.capture.ports.empty());
}

TEST(DaemonConfig, UnknownKeysNameTheKeyAndLine) {
  std::string e = parse_error("capture:\n  head_bytes: 64\n  head_byte: 64\n");
  EXPECT_NE(e.find("unknown key 'capture.head_byte' (line 3)"), std::string::npos) << e;
  EXPECT_NE(e.find("head_bytes"), std::string::npos) << "lists the known keys: " << e;

  e = parse_error("# comment\ncaptur:\n  head_bytes: 64\n");
  EXPECT_NE(e.find("unknown key 'captur' (line 2)"), std::string::npos) << e;

  e = parse_error("metrics:\n  listen: 0.0.0.0:1\n  port: 9\n");
  EXPECT_NE(e.find("unknown key 'metrics.port' (line 3)"), std::string::npos) << e;
}

TEST(DaemonConfig, RangesNameTheKey) {
  std::string e = parse_error("capture:\n  attach: auto\n  head_bytes: 5000\n");
  EXPECT_NE(e.find("capture.head_bytes: must be 16..4096, got 5000 (line 3)"), std::string::npos) << e;
  e = parse_error("capture: {head_bytes: 8}");
  EXPECT_NE(e.find("capture.head_bytes: must be 16..4096"), std::string::npos) << e;
  e = parse_error("capture: {tail_bytes: -1}");
  EXPECT_NE(e.find("capture.tail_bytes: must be 0..256, got -1"), std::string::npos) << e;
  e = parse_error("capture: {ringbuf_mb: 3}");
  EXPECT_NE(e.find("capture.ringbuf_mb: must be a power of two"), std::string::npos) << e;
  e = parse_error("capture: {ringbuf_mb: 4, wakeup_bytes: 8MiB}");
  EXPECT_NE(e.find("capture.wakeup_bytes: must not exceed the ring buffer"), std::string::npos) << e;
  e = parse_error("targeting: {ports: [80, 70000]}");
  EXPECT_NE(e.find("targeting.ports[1]: must be 1..65535, got 70000"), std::string::npos) << e;
  e = parse_error("targeting: {pids: [0]}");
  EXPECT_NE(e.find("targeting.pids[0]: must be 1..4294967295"), std::string::npos) << e;
  e = parse_error("output: {rotate_bytes: 1000}");
  EXPECT_NE(e.find("output.rotate_bytes: must be 0 (never rotate) or at least 4096"), std::string::npos) << e;
  e = parse_error("output: {keep_files: 5000}");
  EXPECT_NE(e.find("output.keep_files: must be 0..1000"), std::string::npos) << e;
  e = parse_error("stall: {ratio: -2}");
  EXPECT_NE(e.find("stall.ratio: must be 0..1000, got -2"), std::string::npos) << e;
  e = parse_error("metrics: {max_series_per_family: 0}");
  EXPECT_NE(e.find("metrics.max_series_per_family: must be 1..1000000"), std::string::npos) << e;
  e = parse_error("stall: {lag_floor_ms: -1}");
  EXPECT_NE(e.find("stall.lag_floor_ms: must be 0..3.6e+06, got -1"), std::string::npos) << e;
  e = parse_error("metrics: {max_label_values: 0}");
  EXPECT_NE(e.find("metrics.max_label_values: must be 1..10000"), std::string::npos) << e;
  e = parse_error("limits: {sink_queue_lines: 99999999999999999999999}");
  EXPECT_NE(e.find("limits.sink_queue_lines: must be 1..16777216"), std::string::npos) << e;
}

TEST(DaemonConfig, TypesNameTheKey) {
  std::string e = parse_error("capture:\n  head_bytes: lots\n");
  EXPECT_NE(e.find("capture.head_bytes: must be an integer 16..4096, got 'lots' (line 2)"), std::string::npos) << e;
  e = parse_error("capture: {head_bytes: 12.5}");
  EXPECT_NE(e.find("capture.head_bytes: must be an integer"), std::string::npos) << e;
  e = parse_error("capture: {head_bytes: [1]}");
  EXPECT_NE(e.find("capture.head_bytes: must be an integer 16..4096, got a list"), std::string::npos) << e;
  e = parse_error("output: {stdout: maybe}");
  EXPECT_NE(e.find("output.stdout: must be true or false, got 'maybe'"), std::string::npos) << e;
  e = parse_error("targeting: {ports: 8000}");
  EXPECT_NE(e.find("targeting.ports: must be a list"), std::string::npos) << e;
  e = parse_error("capture: 5");
  EXPECT_NE(e.find("capture: must be a mapping"), std::string::npos) << e;
  e = parse_error("- a\n- b\n");
  EXPECT_NE(e.find("the configuration must be a mapping"), std::string::npos) << e;
  e = parse_error("stall: {floor_ms: fast}");
  EXPECT_NE(e.find("stall.floor_ms: must be a number"), std::string::npos) << e;
  e = parse_error("stall: {floor_ms: .nan}");
  EXPECT_NE(e.find("stall.floor_ms: must be a number"), std::string::npos) << e;
  e = parse_error("output: {rotate_bytes: 5 TB}");
  EXPECT_NE(e.find("output.rotate_bytes: must be a size in bytes"), std::string::npos) << e;
}

TEST(DaemonConfig, StringChecks) {
  std::string e = parse_error("api: {socket: run/infertap.sock}");
  EXPECT_NE(e.find("api.socket: must be an absolute path"), std::string::npos) << e;
  e = parse_error("api: {socket: /" + std::string(120, 'a') + "}");
  EXPECT_NE(e.find("api.socket: must be shorter than 108 bytes"), std::string::npos) << e;
  for (const char* bad : {"9464", ":9464", "0.0.0.0:", "0.0.0.0:0", "0.0.0.0:70000", "::1:9464", "[::1]9464", "h:p"}) {
    e = parse_error(std::string("metrics: {listen: \"") + bad + "\"}");
    EXPECT_NE(e.find("metrics.listen: must be host:port"), std::string::npos) << bad << ": " << e;
  }
  for (const char* good : {"127.0.0.1:9464", "[::]:1", "localhost:65535"}) {
    EXPECT_EQ(parse_ok(std::string("metrics: {listen: \"") + good + "\"}").metrics.listen, good);
  }
  e = parse_error("targeting: {cgroups: [kubepods.slice]}");
  EXPECT_NE(e.find("targeting.cgroups[0]: must be an absolute cgroup v2 path"), std::string::npos) << e;
  e = parse_error("targeting: {process_name_patterns: [\"\"]}");
  EXPECT_NE(e.find("targeting.process_name_patterns[0]: must be a non-empty glob"), std::string::npos) << e;
  e = parse_error("output: {file: /var/log/}");
  EXPECT_NE(e.find("output.file: must name a file"), std::string::npos) << e;
}

TEST(DaemonConfig, EveryProblemIsReportedOnePerLine) {
  const std::string e = parse_error("capture:\n  head_bytes: 1\n  bogus: 2\noutput:\n  keep_files: -3\n");
  std::istringstream lines(e);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) ++n;
  EXPECT_EQ(n, 3) << e;
  EXPECT_LT(e.find("head_bytes"), e.find("bogus"));
  EXPECT_LT(e.find("bogus"), e.find("keep_files"));
}

TEST(DaemonConfig, DuplicateKeysAndSyntaxErrors) {
  std::string e = parse_error("capture:\n  head_bytes: 64\n  head_bytes: 128\n");
  EXPECT_NE(e.find("duplicate key 'capture.head_bytes' (line 3)"), std::string::npos) << e;
  e = parse_error("capture:\n  head_bytes: [64\n");
  EXPECT_NE(e.find("YAML syntax error at line"), std::string::npos) << e;
  e = parse_error("capture: {}\n---\noutput: {}\n");
  EXPECT_NE(e.find("expected one YAML document, found 2"), std::string::npos) << e;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/infertap-config-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(DaemonConfig, LoadConfigPrefixesErrorsWithThePath) {
  TempDir dir;
  const std::string path = dir.path() + "/config.yaml";
  std::string error;
  EXPECT_FALSE(load_config(path, &error));
  EXPECT_NE(error.find(path + ": cannot open"), std::string::npos) << error;

  std::ofstream(path) << "capture:\n  head_bytes: 1\n  nope: 1\n";
  EXPECT_FALSE(load_config(path, &error));
  EXPECT_EQ(error.rfind(path + ": capture.head_bytes: must be 16..4096", 0), 0u) << error;
  EXPECT_NE(error.find("\n" + path + ": unknown key 'capture.nope' (line 3)"), std::string::npos) << error;

  std::ofstream(path) << "capture:\n  head_bytes: 64\n";
  const auto c = load_config(path, &error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(c->capture.head_bytes, 64u);
}

// A file over the bound is refused before it is read: at start configure()
// fails with the message (infertapd exits with it), and on SIGHUP the same
// call fails, so the reload keeps the configuration it runs with.
TEST(DaemonConfig, AFileOverTheSizeBoundIsRefusedBeforeParsing) {
  TempDir dir;
  const std::string path = dir.path() + "/config.yaml";
  std::ofstream(path) << "stall:\n  floor_ms: 250\n";
  std::string error;
  const auto running = configure(path, CommandLine{}, &error);
  ASSERT_TRUE(running) << error;

  ASSERT_EQ(::truncate(path.c_str(), 100ll << 20), 0);  // sparse: 100 MB of NULs
  EXPECT_FALSE(load_config(path, &error));
  EXPECT_EQ(error, path + ": 104857600 bytes or more, over the 1048576-byte bound of a configuration file: not read");
  error.clear();
  EXPECT_FALSE(configure(path, CommandLine{}, &error));
  EXPECT_NE(error.find("over the 1048576-byte bound"), std::string::npos) << error;
  EXPECT_EQ(running->pipeline.stall_floor_ns, 250'000'000u) << "the running configuration is untouched";

  // One byte over refuses; at the bound the file is parsed (comments here).
  std::string text(kMaxConfigBytes, '#');
  text.back() = '\n';
  std::ofstream(path, std::ios::trunc) << text;
  EXPECT_TRUE(load_config(path, &error)) << error;
  std::ofstream(path, std::ios::app) << "#";
  EXPECT_FALSE(load_config(path, &error));
}

TEST(DaemonConfig, NodeNameFallsBackToTheEnvironmentThenTheHostName) {
  DaemonConfig c;
  const char* saved = std::getenv("NODE_NAME");
  const std::string saved_value = saved ? saved : "";
  unsetenv("NODE_NAME");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(effective_node_name(c), host);
  setenv("NODE_NAME", "node-from-downward-api", 1);
  EXPECT_EQ(effective_node_name(c), "node-from-downward-api");
  c.node_name = "explicit";
  EXPECT_EQ(effective_node_name(c), "explicit");
  if (saved) {
    setenv("NODE_NAME", saved_value.c_str(), 1);
  } else {
    unsetenv("NODE_NAME");
  }
}

TEST(DaemonConfig, CgroupPathsResolveToInodes) {
  TempDir root;
  fs::create_directories(root.path() + "/kubepods.slice/pod1");
  struct stat st {};
  ASSERT_EQ(stat((root.path() + "/kubepods.slice/pod1").c_str(), &st), 0);
  std::vector<std::uint64_t> ids;
  std::string error;
  ASSERT_TRUE(resolve_cgroup_ids({"/kubepods.slice/pod1", root.path() + "/kubepods.slice"}, &ids, &error, root.path()))
      << error;
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], st.st_ino);
  EXPECT_FALSE(resolve_cgroup_ids({"/missing"}, &ids, &error, root.path()));
  EXPECT_NE(error.find(root.path() + "/missing"), std::string::npos) << error;
}

// The ConfigMap shipped in deploy/ is read by the real parser.
TEST(DaemonConfig, DeployConfigMapIsAccepted) {
  const std::string manifest = repo_file("deploy/configmap.yaml");
  ASSERT_FALSE(manifest.empty());
  const YAML::Node doc = YAML::Load(manifest);
  ASSERT_EQ(doc["kind"].as<std::string>(), "ConfigMap");
  const std::string embedded = doc["data"]["config.yaml"].as<std::string>();
  const DaemonConfig c = parse_ok(embedded);
  EXPECT_EQ(c.metrics.listen.substr(c.metrics.listen.rfind(':') + 1), "9464") << "probes and scrape annotations use 9464";
  EXPECT_EQ(c.api.socket.rfind("/run/infertap/", 0), 0u) << "the DaemonSet mounts /run/infertap";
}

// ---- objectives: -------------------------------------------------------------

TEST(DaemonConfigObjectives, EveryKeyIsReadAndDefaultsAreSensible) {
  EXPECT_TRUE(parse_ok("").objectives.empty()) << "no objective unless configured";
  const DaemonConfig c = parse_ok(R"(
objectives:
  - name: chat-interactive
    models: ["llama-3*", "qwen*"]
    routes: ["/v1/chat/completions"]
    ttft_seconds: 0.8
    min_tokens_per_second: 20
    target: 0.995
    objective_ratio: 1.2
    baseline_ratio: 1.4
    ttft_floor_seconds: 0.1
    rate_floor_tokens_per_second: 3
    min_streams: 50
    delivery_lag_seconds: 0.25
    lag_floor_seconds: 0.05
    max_path_degraded_share: 0.02
  - name: batch
    ttft_seconds: 30
    min_tokens_per_second: 2.5
)");
  ASSERT_EQ(c.objectives.size(), 2u);
  const output::Objective& o = c.objectives[0];
  EXPECT_EQ(o.name, "chat-interactive");
  EXPECT_EQ(o.models, (std::vector<std::string>{"llama-3*", "qwen*"}));
  EXPECT_EQ(o.routes, (std::vector<std::string>{"/v1/chat/completions"}));
  EXPECT_EQ(o.ttft_seconds, 0.8);
  EXPECT_EQ(o.min_tokens_per_second, 20);
  EXPECT_EQ(o.target, 0.995);
  EXPECT_EQ(o.objective_ratio, 1.2);
  EXPECT_EQ(o.baseline_ratio, 1.4);
  EXPECT_EQ(o.ttft_floor_seconds, 0.1);
  EXPECT_EQ(o.rate_floor_tokens_per_second, 3);
  EXPECT_EQ(o.min_streams, 50u);
  EXPECT_EQ(o.delivery_lag_seconds, 0.25);
  EXPECT_EQ(o.lag_floor_seconds, 0.05);
  EXPECT_EQ(o.max_path_degraded_share, 0.02);
  const output::Objective& batch = c.objectives[1];
  EXPECT_EQ(batch.models, (std::vector<std::string>{"*"})) << "every model and route unless narrowed";
  EXPECT_EQ(batch.routes, (std::vector<std::string>{"*"}));
  EXPECT_EQ(batch.min_tokens_per_second, 2.5);
  EXPECT_EQ(batch.target, 0.99);
  EXPECT_EQ(batch.baseline_ratio, 1.5);
  EXPECT_EQ(batch.min_streams, 20u);
  EXPECT_TRUE(matches(o, "llama-3.1-8b", "/v1/chat/completions"));
  EXPECT_FALSE(matches(o, "mistral", "/v1/chat/completions"));
  EXPECT_FALSE(matches(o, "qwen2", "/v1/completions"));
}

TEST(DaemonConfigObjectives, ProblemsNameTheKeyAndLine) {
  const auto error_of = [](const std::string& entry) { return parse_error("objectives:\n  - " + entry + "\n"); };
  EXPECT_NE(error_of("{ttft_seconds: 1, min_tokens_per_second: 5}").find("objectives[0]: needs a name"),
            std::string::npos);
  EXPECT_NE(error_of("{name: a, min_tokens_per_second: 5}").find("objectives[0]: needs ttft_seconds"), std::string::npos);
  EXPECT_NE(error_of("{name: a, ttft_seconds: 1}").find("objectives[0]: needs min_tokens_per_second"),
            std::string::npos);
  EXPECT_NE(error_of("{name: a, ttft_seconds: 1, min_tokens_per_second: 5, target: 1}")
                .find("objectives[0].target: must be 0.5..0.9999, got 1 (line 2)"),
            std::string::npos)
      << error_of("{name: a, ttft_seconds: 1, min_tokens_per_second: 5, target: 1}");
  EXPECT_NE(error_of("{name: a, ttft_seconds: 0, min_tokens_per_second: 5}").find("objectives[0].ttft_seconds: must be"),
            std::string::npos);
  EXPECT_NE(error_of("{name: a, ttft_seconds: 1, min_tokens_per_second: 5, baseline_ratio: 0.5}")
                .find("objectives[0].baseline_ratio: must be"),
            std::string::npos);
  EXPECT_NE(error_of("{name: a, ttft_seconds: 1, min_tokens_per_second: 5, min_streams: 0}")
                .find("objectives[0].min_streams: must be 1..1000000000"),
            std::string::npos);
  EXPECT_NE(error_of("{name: a, ttft_seconds: 1, min_tokens_per_second: 5, models: []}")
                .find("objectives[0].models: must name at least one glob"),
            std::string::npos);
  EXPECT_NE(error_of("{name: a, ttft_seconds: 1, min_tokens_per_second: 5, routes: [\"\"]}")
                .find("objectives[0].routes[0]: must be a non-empty glob"),
            std::string::npos);
  EXPECT_NE(error_of("{name: \"a b\", ttft_seconds: 1, min_tokens_per_second: 5}").find("objectives[0].name: must be"),
            std::string::npos);
  EXPECT_NE(error_of("{name: a, ttft_seconds: 1, min_tokens_per_second: 5, ttft_ms: 3}")
                .find("unknown key 'objectives[0].ttft_ms'"),
            std::string::npos);
  EXPECT_NE(parse_error("objectives:\n  - {name: a, ttft_seconds: 1, min_tokens_per_second: 5}\n"
                        "  - {name: a, ttft_seconds: 2, min_tokens_per_second: 5}\n")
                .find("objectives[1]: name 'a' given twice"),
            std::string::npos);
  EXPECT_NE(parse_error("objectives: {name: a}\n").find("objectives: must be a list of objectives"), std::string::npos);
  std::string many = "objectives:\n";
  for (std::size_t i = 0; i <= kMaxObjectives; ++i) {
    many += "  - {name: o" + std::to_string(i) + ", ttft_seconds: 1, min_tokens_per_second: 5}\n";
  }
  EXPECT_NE(parse_error(many).find("objectives: must list at most 32 objectives, got 33"), std::string::npos);
}

// Every ```yaml block of docs/configuration.md is a valid configuration.
TEST(DaemonConfig, DocumentationExamplesAreAccepted) {
  const std::string doc = repo_file("docs/configuration.md");
  ASSERT_FALSE(doc.empty());
  std::size_t blocks = 0;
  for (std::size_t pos = doc.find("```yaml\n"); pos != std::string::npos; pos = doc.find("```yaml\n", pos)) {
    pos += 8;
    const std::size_t end = doc.find("```", pos);
    ASSERT_NE(end, std::string::npos);
    parse_ok(doc.substr(pos, end - pos));
    ++blocks;
    pos = end + 3;
  }
  EXPECT_GE(blocks, 1u);
}

}  // namespace
}  // namespace infertap::daemon

namespace infertap::daemon {
namespace {

TEST(DaemonConfigKubernetes, DirectoriesAreReadAndChecked) {
  DaemonConfig c = parse_ok("");
  EXPECT_EQ(c.kubernetes.pods_dir, "/var/log/pods");
  EXPECT_EQ(c.kubernetes.containers_dir, "/var/log/containers");
  c = parse_ok("kubernetes: {pods_dir: /host/var/log/pods, containers_dir: \"\"}");
  EXPECT_EQ(c.kubernetes.pods_dir, "/host/var/log/pods");
  EXPECT_EQ(c.kubernetes.containers_dir, "");
  const std::string e = parse_error("kubernetes:\n  pods_dir: var/log/pods\n");
  EXPECT_NE(e.find("kubernetes.pods_dir: must be an absolute directory path"), std::string::npos) << e;
  EXPECT_NE(e.find("(line 2)"), std::string::npos) << e;
}

TEST(Cgroup2MountPoint, UnifiedHybridAndNone) {
  char tmpl[] = "/tmp/infertap-mountinfo-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  const auto write = [&](const std::string& text) { std::ofstream(tmpl) << text; };
  write("25 1 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755\n"
        "26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw\n"
        "27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  EXPECT_EQ(cgroup2_mount_point(tmpl), "/sys/fs/cgroup/unified");
  write("30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  EXPECT_EQ(cgroup2_mount_point(tmpl), "/sys/fs/cgroup");
  write("30 1 0:26 / / rw - ext4 /dev/sda1 rw\n");
  EXPECT_EQ(cgroup2_mount_point(tmpl), "/sys/fs/cgroup");
  unlink(tmpl);
}

}  // namespace
}  // namespace infertap::daemon
