// infertapd's configuration: the YAML file (every key documented in
// docs/configuration.md) and the command-line flags, read by one option table
// (options()). Parsing is strict: an unknown key, a duplicate key, a value of
// the wrong type or out of range is an error naming the key (or the flag) and
// its line, so a typo never silently falls back to a default.
//
// Each YAML key maps to exactly one field below. Settings the capture and the
// pipeline already model live in their own structs (capture::CaptureConfig,
// core::PipelineConfig) so the daemon hands them over unchanged:
//
//   capture.*                      -> capture
//   targeting.pids / .ports        -> capture.pids / capture.ports (also kept in targeting)
//   targeting.unix_paths           -> targeting (matched in userspace); capture.unix_paths: any given
//   targeting.cgroups              -> targeting.cgroups (paths; resolve_cgroup_ids() at start)
//   stall.floor_ms / .ratio / .lag_floor_ms -> pipeline.stall_floor_ns / .stall_ratio / .lag_floor_ns
//   pipeline.*                     -> pipeline
//   limits.max_connections         -> pipeline.max_connections
//   formats (a list)               -> pipeline.formats (daemon/formats.h)
//   privacy.*                      -> pipeline.privacy (the assembler writes records' paths with it)
//   limits.* (others), output.*, api.*, metrics.*, kubernetes.*, node_name -> the daemon's own structs
//   objectives (a list)            -> objectives (daemon/objectives.h; exported by the metrics registry)
//   otlp (a section)               -> otlp (daemon/otlp_config.h: over the OTEL_* environment)
//
// Defaults equal infertapd's command-line defaults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capture/loader.h"
#include "core/types.h"
#include "daemon/otlp_config.h"
#include "degrade/config.h"
#include "output/ndjson/sink.h"
#include "output/prometheus/objectives.h"

namespace YAML {
class Node;
}

namespace infertap::base {
class YamlReader;
}

namespace infertap::daemon {

struct OutputSettings {
  // YAML key `stdout` (the C name `stdout` is a macro, hence to_stdout).
  bool to_stdout = true;
  std::string file;                            // "" = no file output
  std::uint64_t rotate_bytes = 100ull << 20;   // 0 = never rotate
  int keep_files = 5;                          // rotated files kept: file.1 .. file.N
  bool timeline = false;                       // per-event timeline in each record
  std::string group;                           // "" = the file is 0600; else 0640 with this group
};

struct ApiSettings {
  std::string socket = "/run/infertap/infertap.sock";  // unix socket of the query API
};

struct MetricsSettings {
  std::string listen = "0.0.0.0:9464";  // Prometheus /metrics, /healthz, /readyz
  std::string health_listen;            // "" = health on `listen`; else /healthz and /readyz here only
  std::size_t max_connections = 256;    // endpoint connections open at once
  double read_timeout_s = 5;            // accept -> whole request head
  double write_timeout_s = 10;          // request head -> whole answer sent
  std::size_t max_header_bytes = 8192;  // request line and headers
  std::string web_config_file;          // TLS and basic auth (daemon/web_security.h); "" = none
  std::size_t max_label_values = 50;    // distinct values per label before "other"
  std::size_t max_series_per_family = 100;  // series per stream family before its overflow series
  bool band_labels = false;  // the cohort gauge carries concurrency_band and input_band
};

struct LimitSettings {
  // limits.max_connections is pipeline.max_connections.
  std::size_t max_streams_in_memory = 2000;     // finished records kept for the API
  std::size_t sink_queue_lines = 65536;         // output queue, lines
  std::uint64_t sink_queue_bytes = 64ull << 20;  // output queue, bytes
};

struct TargetingSettings {
  std::vector<std::uint32_t> pids;    // also copied to capture.pids
  std::vector<std::uint16_t> ports;   // also copied to capture.ports
  std::vector<std::string> cgroups;   // cgroup v2 paths, absolute ("/kubepods.slice/..." or "/sys/fs/cgroup/...")
  std::vector<std::string> process_name_patterns;  // fnmatch(3) globs on the process name (comm)
  std::vector<std::string> unix_paths;  // fnmatch(3) globs on a unix socket's path; capture.unix_paths = !empty
};

// Where Kubernetes names of a traced container come from (daemon/workload.h).
struct KubernetesSettings {
  std::string pods_dir = "/var/log/pods";              // "" = do not look
  std::string containers_dir = "/var/log/containers";  // "" = do not look
};

struct DaemonConfig {
  capture::CaptureConfig capture;
  core::PipelineConfig pipeline;
  OutputSettings output;
  ApiSettings api;
  MetricsSettings metrics;
  LimitSettings limits;
  TargetingSettings targeting;
  KubernetesSettings kubernetes;
  degrade::DegradationConfig degradation;  // degradation.* (docs/degradation.md)
  std::vector<output::Objective> objectives;  // objectives: the fleet rules' (daemon/objectives.h)
  OtlpSettings otlp;                       // otlp.* (daemon/otlp_config.h, docs/otlp.md)
  std::string node_name;  // "" = $NODE_NAME, else the host name (effective_node_name())
};

// ---- the option table -------------------------------------------------------
// Every setting, declared once (config.cpp): its YAML key, its command-line
// flag if it has one, how its value is read (type, range, the checks behind
// the error messages) and the field it sets. The file and the flags read a
// value the same way; a flag overrides the file.

enum class FlagForm : std::uint8_t {
  none,        // the file only
  value,       // --flag VALUE
  repeatable,  // --flag VALUE, as often as needed: the values replace the file's list
  on,          // --flag alone sets the key to true
  off,         // --flag alone sets the key to false
};

struct Option {
  // Reads `value` (a YAML node; a flag's text as a scalar, a repeated flag's
  // as a list) into its field of `config`; problems name `key`.
  using Read =
      std::function<void(base::YamlReader& reader, const YAML::Node& value, const std::string& key, DaemonConfig& config)>;
  std::string key;         // "capture.head_bytes"; "degradation" is a whole section
  std::string flag;        // CLI11 names, "-o,--output"; "" = the file only
  FlagForm form = FlagForm::none;
  std::string help;        // --help
  std::string value_form;  // what a value looks like in --help: "16..4096", "PATH"
  Read read;
  Read flag_read;          // a flag that reads its value its own way ('-' = stdout, '' = none); empty: read
  std::string flag_name() const;  // the long name: "--output"
};

// In the order of docs/configuration.md.
const std::vector<Option>& options();

// The flags a command line gave, as typed.
class CommandLine {
 public:
  // `values`: the flag's value (value), each of its values (repeatable), none (on, off).
  void set(const Option& option, std::vector<std::string> values);
  // Sets every given flag's field of `config`. On a bad value returns false and
  // sets *error (when non-null), one line per problem naming the flag:
  //   "--head-bytes: must be 16..4096, got 5000"
  bool apply(DaemonConfig& config, std::string* error) const;

 private:
  std::vector<std::pair<const Option*, std::vector<std::string>>> given_;
};

// The configuration infertapd runs with: the file at `path` (none when ""),
// then the flags on top. Errors as load_config() and CommandLine::apply().
std::optional<DaemonConfig> configure(const std::string& path, const CommandLine& flags, std::string* error);

// Parses a YAML document. An empty document (or only comments) gives the
// defaults. On failure returns nullopt and sets *error (when non-null) to one
// line per problem, e.g.
//   "capture.head_bytes: must be 16..4096, got 5000 (line 3)"
//   "unknown key 'capture.head_byte' (line 3); known keys: attach, head_bytes, ..."
std::optional<DaemonConfig> parse_config(const std::string& yaml_text, std::string* error);

// A configuration file longer than this is refused before it is parsed: a
// real one is a few kB, and parsing 100 MB of YAML held 1.67 GB and stalled
// capture for 8 s (at start the daemon exits; on SIGHUP it keeps the
// configuration it runs with).
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

// Reads and parses a file; errors are prefixed with the path.
std::optional<DaemonConfig> load_config(const std::string& path, std::string* error);

// The node name records and metrics carry: config.node_name, else the NODE_NAME
// environment variable (set by the DaemonSet from the downward API), else the
// host name.
std::string effective_node_name(const DaemonConfig& config);

// Where the cgroup v2 hierarchy is mounted (from /proc/self/mountinfo):
// "/sys/fs/cgroup" on unified hosts, "/sys/fs/cgroup/unified" on hybrid ones;
// "/sys/fs/cgroup" when no cgroup2 mount is listed.
std::string cgroup2_mount_point(const std::string& mountinfo_path = "/proc/self/mountinfo");

// cgroup v2 ids (directory inode numbers) of targeting.cgroups. A cgroup
// targets its descendants too (the kernel checks every ancestor level). A path not
// under cgroup_root is taken relative to it. Returns false and sets *error
// naming the path when one cannot be stat'ed.
bool resolve_cgroup_ids(const std::vector<std::string>& paths, std::vector<std::uint64_t>* ids, std::string* error,
                        const std::string& cgroup_root = "/sys/fs/cgroup");

// output.*, limits.sink_queue_* of a daemon configuration.
output::SinkOptions sink_options(const DaemonConfig& config);

}  // namespace infertap::daemon
