#include "daemon/config.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "base/host_port.h"
#include "base/yaml_reader.h"
#include "capture/event.h"
#include "capture/tls_targets.h"
#include "daemon/formats.h"
#include "daemon/http_server.h"
#include "daemon/objectives.h"

namespace infertap::daemon {
namespace {

using Node = YAML::Node;
using base::YamlReader;
using Read = Option::Read;

// ---- attach method names ---------------------------------------------------
// Spelled once, by the loader (capture::parse_attach_method, to_string).

using capture::kAttachMethods;
using capture::parse_attach_method;

// "auto, sock, tracepoint or raw_tp" (separator ", ", last " or ")
std::string attach_method_names(std::string_view separator, std::string_view last) {
  std::string out;
  for (std::size_t i = 0; i < std::size(kAttachMethods); ++i) {
    if (i) out += i + 1 == std::size(kAttachMethods) ? last : separator;
    out += capture::to_string(kAttachMethods[i]);
  }
  return out;
}

// ---- how values are read: the parsers of the option table --------------------
// Each returns the option's reader and how its value looks in --help. `field`
// is the DaemonConfig member the option sets (FIELD below).

#define FIELD(member) [](DaemonConfig& c) -> auto& { return c.member; }

struct Value {
  Read read;
  std::string form;  // "16..4096", "PATH", ...
};

template <class Field>
using FieldType = std::remove_reference_t<decltype(std::declval<Field>()(std::declval<DaemonConfig&>()))>;

template <class Field>
Value integer(Field field, std::uint64_t lo, std::uint64_t hi) {
  return {[=](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            if (auto v = r.integer(n, k, lo, hi)) field(c) = static_cast<FieldType<Field>>(*v);
          },
          std::to_string(lo) + ".." + std::to_string(hi)};
}

// A size in bytes: an integer with a unit suffix allowed (512KiB).
template <class Field>
Value size(Field field, std::uint64_t lo, std::uint64_t hi) {
  return {[=](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            if (auto v = r.integer(n, k, lo, hi, true)) field(c) = static_cast<FieldType<Field>>(*v);
          },
          "SIZE"};
}

// A number in [lo, hi], stored times `scale` (ms -> ns: 1e6).
template <class Field>
Value number(Field field, double lo, double hi, double scale = 1, std::string form = "NUMBER") {
  return {[=](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            if (auto v = r.number(n, k, lo, hi)) field(c) = static_cast<FieldType<Field>>(*v * scale);
          },
          std::move(form)};
}

template <class Field>
Value boolean(Field field) {
  return {[=](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            if (auto v = r.boolean(n, k)) field(c) = *v;
          },
          "true|false"};
}

// A string that `problem` accepts: it returns what is wrong, or "".
using Check = std::function<std::string(const std::string&)>;

template <class Field>
Value text(Field field, std::string form, Check problem) {
  return {[=](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            const auto v = r.string(n, k);
            if (!v) return;
            if (const std::string why = problem(*v); !why.empty()) {
              r.fail(n, k, why);
              return;
            }
            field(c) = *v;
          },
          std::move(form)};
}

// A list of integers in [lo, hi]; it replaces the default (and, from a flag, the file's).
template <class Field>
Value integers(Field field, std::uint64_t lo, std::uint64_t hi, std::string form) {
  return {[=](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            auto& out = field(c);
            out.clear();
            r.list(n, k, [&](const Node& item, const std::string& item_key) {
              if (auto v = r.integer(item, item_key, lo, hi)) {
                out.push_back(static_cast<typename FieldType<Field>::value_type>(*v));
              }
            });
          },
          std::move(form)};
}

// A list of strings that `problem` accepts; an empty item is `if_missing`.
template <class Field>
Value strings(Field field, std::string form, std::string if_missing, Check problem) {
  return {[=](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            auto& out = field(c);
            out.clear();
            r.list(n, k, [&](const Node& item, const std::string& item_key) {
              if (item.IsNull()) return r.fail(item, item_key, if_missing);
              const auto v = r.string(item, item_key);
              if (!v) return;
              if (const std::string why = problem(*v); !why.empty()) return r.fail(item, item_key, why);
              out.push_back(*v);
            });
          },
          std::move(form)};
}

bool has_control_chars(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; });
}

// A listen address of the file names its host and a port other than 0.
bool valid_listen(const std::string& s) {
  const auto address = base::split_host_port(s);
  return address && !address->host.empty() && address->port != 0;
}

// ---- the checks behind the error messages -----------------------------------

std::string absolute_cgroup(const std::string& v) {
  if (!v.empty() && v.front() == '/') return "";
  return "must be an absolute cgroup v2 path (\"/kubepods.slice/...\"), got '" + v + "'";
}

std::string glob_problem(const std::string& v) { return v.empty() ? "must be a non-empty glob (e.g. \"vllm*\")" : ""; }

std::string unix_glob_problem(const std::string& v) {
  return v.empty() ? "must be a non-empty glob on a socket path (e.g. \"/run/*.sock\")" : "";
}

std::string file_problem(const std::string& v) {
  if (!v.empty() && v.back() == '/') return "must name a file, not a directory, got '" + v + "'";
  if (has_control_chars(v)) return "must not contain control characters";
  return "";
}

std::string socket_problem(const std::string& v) {
  if (v.empty() || v.front() != '/') return "must be an absolute path, got '" + v + "'";
  if (v.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return "must be shorter than " + std::to_string(sizeof(sockaddr_un{}.sun_path)) +
           " bytes (unix socket path limit), got " + std::to_string(v.size());
  }
  return "";
}

std::string listen_problem(const std::string& v) {
  if (valid_listen(v)) return "";
  return "must be host:port with port 1..65535 (\"0.0.0.0:9464\", \"[::]:9464\"), got '" + v + "'";
}

std::string health_listen_problem(const std::string& v) {
  return v.empty() ? "" : listen_problem(v);
}

std::string group_problem(const std::string& v) {
  if (has_control_chars(v) || v.find(':') != std::string::npos) return "must be a group name or number, got '" + v + "'";
  return "";
}

std::string query_param_problem(const std::string& v) {
  if (v.empty() || v.find_first_of("&=?#/ ") != std::string::npos || has_control_chars(v)) {
    return "must be a query parameter name (no & = ? # / or spaces), got '" + v + "'";
  }
  return "";
}

std::string directory_problem(const std::string& v) {
  if (v.empty() || v.front() == '/') return "";
  return "must be an absolute directory path or \"\" (do not look), got '" + v + "'";
}

std::string node_name_problem(const std::string& v) {
  return v.size() > 253 || has_control_chars(v) ? "must be at most 253 printable characters" : "";
}

// ---- options that read their value their own way -----------------------------

Value attach_method() {
  return {[](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            const auto v = r.scalar(n, k, attach_method_names(", ", " or "));
            if (!v) return;
            std::string name = *v;
            for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            if (const auto method = parse_attach_method(name)) {
              c.capture.attach = *method;
            } else {
              r.fail(n, k, "must be " + attach_method_names(", ", " or ") + ", got '" + *v + "'");
            }
          },
          attach_method_names("|", "|")};
}

Value ringbuf_mb() {
  return {[](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            const auto v = r.integer(n, k, 1, 1024);
            if (!v) return;
            if ((*v & (*v - 1)) != 0) {
              r.fail(n, k, "must be a power of two (1, 2, 4 .. 1024), got " + std::to_string(*v));
              return;
            }
            c.capture.ringbuf_bytes = static_cast<std::uint32_t>(*v << 20);
          },
          "1..1024"};
}

Value rotate_bytes() {
  return {[](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
            const auto v = r.integer(n, k, 0, 1ull << 40, true);
            if (!v) return;
            if (*v != 0 && *v < 4096) {
              r.fail(n, k, "must be 0 (never rotate) or at least 4096 bytes, got " + std::to_string(*v));
              return;
            }
            c.output.rotate_bytes = *v;
          },
          "SIZE"};
}

Read formats_section() {
  return [](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
    std::vector<std::string> errors;
    parse_formats(n, k, &c.pipeline.formats, &errors);
    for (std::string& e : errors) r.error(std::move(e));
  };
}

Read objectives_section() {
  return [](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
    std::vector<std::string> errors;
    parse_objectives(n, k, &c.objectives, &errors);
    for (std::string& e : errors) r.error(std::move(e));
  };
}

Read otlp_section() {
  return [](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) { parse_otlp_section(r, n, k, &c.otlp); };
}

Read degradation_section() {
  return [](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
    std::vector<std::string> errors;
    degrade::parse_config(n, k, &c.degradation, &errors);
    for (std::string& e : errors) r.error(std::move(e));
  };
}

// -o FILE writes FILE instead of stdout; -o - writes stdout only.
Read output_flag(Read file) {
  return [file = std::move(file)](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
    if (n.IsScalar() && n.Scalar() == "-") {
      c.output.to_stdout = true;
      c.output.file.clear();
      return;
    }
    const std::size_t before = r.error_count();
    file(r, n, k, c);
    if (r.error_count() == before) c.output.to_stdout = false;
  };
}

// The endpoints on the command line: '' runs none (the file always names
// one), and any value the endpoint itself takes is taken. A file is read by
// a daemon started anywhere, so its socket path must be absolute; a flag may
// name one relative to where infertapd starts. The file's listen address names
// its host and port; a flag may also ask for ':port' or port 0 (any free one),
// which the endpoint understands (docs/prometheus.md, HttpServer).
Read socket_flag() {
  return [](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
    if (const auto v = r.string(n, k)) c.api.socket = *v;
  };
}

Read listen_flag() {
  return [](YamlReader& r, const Node& n, const std::string& k, DaemonConfig& c) {
    const auto v = r.string(n, k);
    std::string host, error;
    std::uint16_t port = 0;
    if (!v) return;
    if (!v->empty() && !parse_listen_address(*v, &host, &port, &error)) {
      r.fail(n, k, error);
      return;
    }
    c.metrics.listen = *v;
  };
}

// ---- the option table ----------------------------------------------------------

Option option(std::string key, Value value, std::string flag = {}, FlagForm form = FlagForm::none,
              std::string help = {}, Read flag_read = {}) {
  Option o;
  o.key = std::move(key);
  o.flag = std::move(flag);
  o.form = o.flag.empty() ? FlagForm::none : form;
  o.help = std::move(help);
  o.value_form = std::move(value.form);
  o.read = std::move(value.read);
  o.flag_read = std::move(flag_read);
  return o;
}

// Every option, in the order of docs/configuration.md: the YAML key, then
// (for the command line) its flag, how it is given and its --help. Data, not
// steps: long by nature.
std::vector<Option> make_options() {
  using F = FlagForm;
  const Value output_file = text(FIELD(output.file), "FILE", file_problem);
  std::vector<Option> o = {
      option("node_name", text(FIELD(node_name), "NAME", node_name_problem)),
      option("capture.attach", attach_method(), "--attach", F::value, "How the capture attaches"),
      option("capture.head_bytes", integer(FIELD(capture.head_bytes), 16, capture::kMaxHeadBytes), "--head-bytes", F::value,
             "Payload head bytes copied per syscall"),
      option("capture.tail_bytes", integer(FIELD(capture.tail_bytes), 0, capture::kMaxTailBytes), "--tail-bytes", F::value,
             "Payload tail bytes copied per syscall"),
      option("capture.delivery_signals", boolean(FIELD(capture.path_signals)), "--no-delivery-signals", F::off,
             "Do not attach the ACK/arrival/retransmit probes (no acked/arrived vantages, no TCP context)"),
      option("capture.tls", boolean(FIELD(capture.tls)), "--no-tls", F::off,
             "Do not probe TLS libraries (TLS streams are then not seen)"),
      option("capture.ringbuf_mb", ringbuf_mb(), "--ringbuf-mb", F::value, "Ring buffer size in MiB (power of two)"),
      option("capture.wakeup_bytes", size(FIELD(capture.wakeup_bytes), 0, 256ull << 20)),
      option("capture.ignore_self", boolean(FIELD(capture.ignore_self))),
      option("targeting.pids", integers(FIELD(targeting.pids), 1, UINT32_MAX, "PID"), "--pid", F::repeatable,
             "Only trace these process ids (repeatable)"),
      option("targeting.ports", integers(FIELD(targeting.ports), 1, 65535, "PORT"), "--port", F::repeatable,
             "Only trace connections with this local or remote port (repeatable)"),
      option("targeting.unix_paths",
             strings(FIELD(targeting.unix_paths), "GLOB", unix_glob_problem(""), unix_glob_problem), "--unix-path",
             F::repeatable,
             "Only trace unix sockets whose path matches this glob, e.g. '/run/*.sock' (repeatable; see --port)"),
      option("targeting.cgroups",
             strings(FIELD(targeting.cgroups), "PATH", "must be a cgroup v2 path, got nothing", absolute_cgroup),
             "--cgroup", F::repeatable, "Only trace processes in this cgroup v2 path or below it (repeatable)"),
      option("targeting.process_name_patterns",
             strings(FIELD(targeting.process_name_patterns), "GLOB", glob_problem(""), glob_problem), "--process-name",
             F::repeatable, "Only trace processes whose name (comm) matches this glob, e.g. 'vllm*' (repeatable)"),
      option("stall.floor_ms", number(FIELD(pipeline.stall_floor_ns), 0, 3'600'000, 1e6, "MS"), "--stall-floor-ms",
             F::value, "Smallest gap between tokens that is a stall"),
      option("stall.ratio", number(FIELD(pipeline.stall_ratio), 0, 1000, 1, "RATIO"), "--stall-ratio", F::value,
             "A stall is also above this many median ITLs"),
      option("stall.lag_floor_ms", number(FIELD(pipeline.lag_floor_ns), 0, 3'600'000, 1e6, "MS"), "--lag-floor-ms",
             F::value, "A client fell behind when its delivery lag grew by at least this over the stream"),
      option("pipeline.stream_idle_timeout_s", number(FIELD(pipeline.stream_idle_timeout_ns), 0.001, 86'400, 1e9)),
      option("pipeline.conn_idle_timeout_s", number(FIELD(pipeline.conn_idle_timeout_ns), 0.001, 604'800, 1e9)),
      option("pipeline.max_timeline_events", integer(FIELD(pipeline.max_timeline_events), 1, 10'000'000)),
      option("pipeline.request_body_head_bytes", size(FIELD(pipeline.request_body_head), 0, 1ull << 20)),
      option("limits.max_connections", integer(FIELD(pipeline.max_connections), 1, 16'777'216)),
      option("limits.max_live_stream_bytes", size(FIELD(pipeline.max_live_stream_bytes), 16ull << 20, 64ull << 30)),
      option("limits.max_streams_in_memory", integer(FIELD(limits.max_streams_in_memory), 0, 1'000'000)),
      option("limits.sink_queue_lines", integer(FIELD(limits.sink_queue_lines), 1, 16'777'216)),
      option("limits.sink_queue_bytes", size(FIELD(limits.sink_queue_bytes), 64ull << 10, 16ull << 30)),
      option("output.stdout", boolean(FIELD(output.to_stdout))),
      option("output.file", output_file, "-o,--output", F::value,
             "NDJSON output file instead of stdout ('-' = stdout)", output_flag(output_file.read)),
      option("output.rotate_bytes", rotate_bytes()),
      option("output.keep_files", integer(FIELD(output.keep_files), 0, 1000)),
      option("output.timeline", boolean(FIELD(output.timeline)), "--timeline", F::on,
             "Include the per-event timeline in each record"),
      option("output.group", text(FIELD(output.group), "GROUP", group_problem)),
      option("privacy.keep_query_params",
             strings(FIELD(pipeline.privacy.keep_query_params), "NAME", query_param_problem(""), query_param_problem),
             "--keep-query-param", F::repeatable,
             "Keep this query parameter in records' paths (repeatable; others are dropped)"),
      option("privacy.normalize_routes", boolean(FIELD(pipeline.privacy.normalize_routes)), "--no-normalize-routes",
             F::off, "Keep id-like and secret-like path segments instead of writing {id}"),
      option("api.socket", text(FIELD(api.socket), "PATH", socket_problem), "--socket", F::value,
             "Query API unix socket ('' = no API)", socket_flag()),
      option("metrics.listen", text(FIELD(metrics.listen), "HOST:PORT", listen_problem), "--metrics-listen", F::value,
             "Prometheus endpoint host:port ('' = none)", listen_flag()),
      option("metrics.health_listen", text(FIELD(metrics.health_listen), "HOST:PORT", health_listen_problem)),
      option("metrics.max_connections", integer(FIELD(metrics.max_connections), 1, 65'536)),
      option("metrics.read_timeout_s", number(FIELD(metrics.read_timeout_s), 0.1, 300)),
      option("metrics.write_timeout_s", number(FIELD(metrics.write_timeout_s), 0.1, 300)),
      option("metrics.max_header_bytes", size(FIELD(metrics.max_header_bytes), 1024, 1ull << 20)),
      option("metrics.web_config_file", text(FIELD(metrics.web_config_file), "FILE", file_problem), "--web-config-file",
             F::value, "TLS and basic auth of /metrics, as Prometheus exporters' web configuration file"),
      option("metrics.max_label_values", integer(FIELD(metrics.max_label_values), 1, 10'000)),
      option("metrics.max_series_per_family", integer(FIELD(metrics.max_series_per_family), 1, 1'000'000)),
      option("metrics.band_labels", boolean(FIELD(metrics.band_labels))),
      option("kubernetes.pods_dir", text(FIELD(kubernetes.pods_dir), "DIR", directory_problem)),
      option("kubernetes.containers_dir", text(FIELD(kubernetes.containers_dir), "DIR", directory_problem)),
      option("formats", {formats_section(), ""}),
      option("degradation", {degradation_section(), ""}),
      option("objectives", {objectives_section(), ""}),
      option("otlp", {otlp_section(), ""}),
  };
  return o;
}

#undef FIELD

// The fields of one mapping of the document: `prefix` "" is the top level,
// where a section's options become one field that reads the section.
std::vector<YamlReader::Field> fields_of(YamlReader& r, const std::string& prefix, DaemonConfig& c) {
  std::vector<YamlReader::Field> out;
  const auto has = [&](const std::string& name) {
    return std::any_of(out.begin(), out.end(), [&](const YamlReader::Field& f) { return f.name == name; });
  };
  for (const Option& o : options()) {
    const std::size_t dot = o.key.find('.');
    const std::string section = dot == std::string::npos ? "" : o.key.substr(0, dot);
    if (prefix.empty() && !section.empty()) {
      if (!has(section)) {
        out.push_back({section, [&r, &c, section](const Node& v, const std::string& k) {
                         r.fields(v, k, fields_of(r, section, c));
                       }});
      }
    } else if (section == prefix) {
      const Read& read = o.read;
      out.push_back({prefix.empty() ? o.key : o.key.substr(dot + 1),
                     [&r, &c, &read](const Node& v, const std::string& k) { read(r, v, k, c); }});
    }
  }
  return out;
}

// The pids and ports filters are the capture's too; so is whether unix paths are targeted.
void copy_targeting(DaemonConfig& c) {
  c.capture.pids = c.targeting.pids;
  c.capture.ports = c.targeting.ports;
  c.capture.unix_paths = !c.targeting.unix_paths.empty();
}

void parse_document(YamlReader& r, const YAML::Node& root, DaemonConfig& c) {
  r.fields(root, "", fields_of(r, "", c));
  if (c.capture.wakeup_bytes > c.capture.ringbuf_bytes) {
    r.error("capture.wakeup_bytes: must not exceed the ring buffer (capture.ringbuf_mb = " +
            std::to_string(c.capture.ringbuf_bytes >> 20) + "), got " + std::to_string(c.capture.wakeup_bytes));
  }
  copy_targeting(c);
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace

const std::vector<Option>& options() {
  static const std::vector<Option> table = make_options();
  return table;
}

std::string Option::flag_name() const {
  const std::size_t comma = flag.rfind(',');
  return comma == std::string::npos ? flag : flag.substr(comma + 1);
}

void CommandLine::set(const Option& option, std::vector<std::string> values) {
  given_.emplace_back(&option, std::move(values));
}

bool CommandLine::apply(DaemonConfig& config, std::string* error) const {
  std::vector<std::string> errors;
  YamlReader r(errors);
  for (const auto& [option, values] : given_) {
    Node value;
    switch (option->form) {
      case FlagForm::none: continue;
      case FlagForm::value: value = Node(values.empty() ? std::string() : values.front()); break;
      case FlagForm::repeatable:
        value = Node(YAML::NodeType::Sequence);
        for (const std::string& v : values) value.push_back(v);
        break;
      case FlagForm::on: value = Node(std::string("true")); break;
      case FlagForm::off: value = Node(std::string("false")); break;
    }
    const Read& read = option->flag_read ? option->flag_read : option->read;
    read(r, value, option->flag_name(), config);
  }
  copy_targeting(config);
  if (!errors.empty() && error) *error = join_lines(errors);
  return errors.empty();
}

std::optional<DaemonConfig> parse_config(const std::string& yaml_text, std::string* error) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(yaml_text);
  } catch (const YAML::ParserException& e) {
    if (error) {
      *error = "YAML syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
               std::to_string(e.mark.column + 1) + ": " + e.msg;
    }
    return std::nullopt;
  } catch (const YAML::Exception& e) {
    if (error) *error = std::string("YAML error: ") + e.what();
    return std::nullopt;
  }
  if (docs.size() > 1) {
    if (error) *error = "expected one YAML document, found " + std::to_string(docs.size()) + " (remove the '---' separators)";
    return std::nullopt;
  }
  DaemonConfig config;
  std::vector<std::string> errors;
  YamlReader reader(errors);
  try {
    if (!docs.empty()) parse_document(reader, docs.front(), config);
  } catch (const YAML::Exception& e) {  // not expected: every access is type-checked first
    errors.push_back(std::string("YAML error: ") + e.what());
  }
  if (!errors.empty()) {
    if (error) *error = join_lines(errors);
    return std::nullopt;
  }
  return config;
}

std::optional<DaemonConfig> configure(const std::string& path, const CommandLine& flags, std::string* error) {
  DaemonConfig config;
  if (!path.empty()) {
    auto loaded = load_config(path, error);
    if (!loaded) return std::nullopt;
    config = std::move(*loaded);
  }
  if (!flags.apply(config, error)) return std::nullopt;
  return config;
}

namespace {

// The file's text, refused before parsing when longer than kMaxConfigBytes
// (its size, then what a read gives: a file that grows meanwhile is not read
// past the bound).
std::optional<std::string> read_bounded_config(const std::string& path, std::string* error) {
  const auto too_large = [&](std::uint64_t size) {
    if (error)
      *error = path + ": " + std::to_string(size) + " bytes or more, over the " + std::to_string(kMaxConfigBytes) +
               "-byte bound of a configuration file: not read";
    return std::nullopt;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error) *error = path + ": cannot open: " + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) > kMaxConfigBytes)
    return too_large(static_cast<std::uint64_t>(st.st_size));
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    if (error) *error = path + ": read failed: " + std::strerror(errno);
    return std::nullopt;
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) return too_large(text.size());
  return text;
}

}  // namespace

std::optional<DaemonConfig> load_config(const std::string& path, std::string* error) {
  const auto text = read_bounded_config(path, error);
  if (!text) return std::nullopt;
  std::string inner;
  auto config = parse_config(*text, &inner);
  if (!config && error) *error = base::prefix_lines(path, inner);
  return config;
}

std::string effective_node_name(const DaemonConfig& config) {
  if (!config.node_name.empty()) return config.node_name;
  if (const char* env = std::getenv("NODE_NAME"); env && *env) return env;
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string cgroup2_mount_point(const std::string& mountinfo_path) {
  return capture::cgroup2_mount_point(mountinfo_path);  // the TLS probes' targeting reads it too
}

bool resolve_cgroup_ids(const std::vector<std::string>& paths, std::vector<std::uint64_t>* ids, std::string* error,
                        const std::string& cgroup_root) {
  for (const std::string& path : paths) {
    const bool under_root = path == cgroup_root || path.rfind(cgroup_root + "/", 0) == 0;
    const std::string full = under_root ? path : cgroup_root + path;
    struct stat st {};
    if (stat(full.c_str(), &st) != 0) {
      if (error) *error = "cgroup " + full + ": " + std::strerror(errno);
      return false;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (error) *error = "cgroup " + full + ": not a directory";
      return false;
    }
    ids->push_back(static_cast<std::uint64_t>(st.st_ino));
  }
  return true;
}

output::SinkOptions sink_options(const DaemonConfig& config) {
  output::SinkOptions o;
  o.to_stdout = config.output.to_stdout;
  o.file = config.output.file;
  o.group = config.output.group;
  o.rotate_bytes = config.output.rotate_bytes;
  o.keep_files = config.output.keep_files;
  o.queue_lines = config.limits.sink_queue_lines;
  o.queue_bytes = config.limits.sink_queue_bytes;
  return o;
}

}  // namespace infertap::daemon
