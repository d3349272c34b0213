#include "daemon/otlp_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "base/host_port.h"
#include "base/yaml_reader.h"
#include "daemon/config.h"

namespace infertap::daemon {
namespace {

using output::otlp::Encoding;
using output::otlp::ExporterOptions;
using output::otlp::SignalOptions;
using Node = YAML::Node;
using std::chrono::milliseconds;

// ---- values ------------------------------------------------------------------

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

// "" when `url` is an OTLP/HTTP endpoint: http(s)://host[:port][/path].
std::string url_problem(const std::string& url) {
  const std::string form = "must be an http:// or https:// URL (\"http://collector:4318\")";
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return form + ", got '" + loggable_url(url) + "'";
  const std::string scheme = lower(url.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") {
    return scheme == "grpc" ? "gRPC is not supported: use OTLP/HTTP (http://collector:4318)" : form;
  }
  const std::size_t host_start = scheme_end + 3;
  const std::size_t host_end = url.find_first_of("/?#", host_start);
  const std::string authority = url.substr(host_start, host_end == std::string::npos ? std::string::npos : host_end - host_start);
  if (authority.find('@') != std::string::npos) {
    return "must not carry credentials (user:password@): give them as headers (otlp.headers)";
  }
  const auto host = base::split_host_port(authority.find(':') == std::string::npos || authority.back() == ']'
                                              ? authority + ":1"  // no port: the scheme's
                                              : authority);
  if (!host || host->host.empty()) return form + ", got '" + loggable_url(url) + "'";
  if (url.find('#') != std::string::npos) return "must not have a #fragment";
  if (std::any_of(url.begin(), url.end(), [](unsigned char c) { return c <= ' ' || c == 0x7f; })) {
    return "must not contain spaces or control characters";
  }
  return "";
}

// An HTTP field name (RFC 9110 token); a value without CR, LF or NUL.
std::string header_problem(const std::string& name, const std::string& value) {
  static const std::string kTokenChars = "!#$%&'*+-.^_`|~";
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](unsigned char c) {
        return std::isalnum(c) || kTokenChars.find(static_cast<char>(c)) != std::string::npos;
      })) {
    return "header name '" + name + "' is not an HTTP field name";
  }
  if (value.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
    return "the value of header '" + name + "' holds a line break or NUL";  // never the value itself
  }
  return "";
}

std::string signal_path(const std::string& base, std::string_view signal) {
  return base + (!base.empty() && base.back() == '/' ? "" : "/") + "v1/" + std::string(signal);
}

// ---- the file's section --------------------------------------------------------

// A mapping of strings to strings (headers, resource attributes).
void read_map(base::YamlReader& r, const Node& n, const std::string& key, KeyValues* out, bool secret) {
  if (!n.IsMap()) {
    r.fail(n, key, "must be a mapping (name: value)");
    return;
  }
  out->clear();
  for (auto it = n.begin(); it != n.end(); ++it) {
    const Node k = it->first, v = it->second;
    if (!k.IsScalar() || !(v.IsScalar() || v.IsNull())) {
      r.fail(k, key, "must map names to strings");
      continue;
    }
    const std::string value = v.IsNull() ? "" : v.Scalar();
    if (secret) {
      if (const std::string why = header_problem(k.Scalar(), value); !why.empty()) {
        r.fail(k, key, why);
        continue;
      }
    } else if (k.Scalar().empty()) {
      r.fail(k, key, "an attribute name must not be empty");
      continue;
    }
    out->emplace_back(k.Scalar(), value);
  }
}

std::optional<Encoding> parse_protocol(const std::string& v, std::string* why) {
  const std::string p = lower(trim(v));
  if (p == "http/protobuf") return Encoding::protobuf;
  if (p == "http/json") return Encoding::json;
  *why = p == "grpc" ? "grpc is not supported: use http/protobuf (port 4318) or http/json"
                     : "must be http/protobuf or http/json, got '" + v + "'";
  return std::nullopt;
}

// ---- the environment ------------------------------------------------------------

// Settings of one signal from the environment: its own variable, else the general one.
class EnvReader {
 public:
  EnvReader(const Environment& env, std::vector<std::string>& errors) : env_(env), errors_(errors) {}

  // The signal's variable (OTEL_EXPORTER_OTLP_TRACES_<what>) when set, else the general one.
  std::optional<std::pair<std::string, std::string>> signal(std::string_view signal, std::string_view what) const {
    const std::string own = "OTEL_EXPORTER_OTLP_" + upper(signal) + "_" + std::string(what);
    if (auto v = get(own)) return std::make_pair(own, *v);
    const std::string general = "OTEL_EXPORTER_OTLP_" + std::string(what);
    if (auto v = get(general)) return std::make_pair(general, *v);
    return std::nullopt;
  }
  std::optional<std::string> get(const std::string& name) const {
    auto v = env_(name);
    if (v && trim(*v).empty()) return std::nullopt;  // set but empty: as unset (the specification's rule)
    return v;
  }
  // Milliseconds, a whole number (the variables' unit).
  std::optional<milliseconds> millis(const std::string& name, const std::string& value, std::int64_t lo,
                                     std::int64_t hi) const {
    const std::string v = trim(value);
    if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(v) < lo || std::stoll(v) > hi) {
      errors_.push_back(name + ": must be a whole number of milliseconds " + std::to_string(lo) + ".." +
                        std::to_string(hi) + ", got '" + value + "'");
      return std::nullopt;
    }
    return milliseconds(std::stoll(v));
  }
  void error(std::string line) const { errors_.push_back(std::move(line)); }

 private:
  static std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
  }
  const Environment& env_;
  std::vector<std::string>& errors_;
};

// One signal's endpoint, encoding, headers and timeout; nullopt when it has no endpoint.
std::optional<SignalOptions> signal_options(const OtlpSettings& f, const EnvReader& env, std::string_view signal,
                                            const std::optional<std::string>& file_own) {
  SignalOptions s;
  std::string source;
  if (file_own) {
    s.url = *file_own, source = "otlp." + std::string(signal) + "_endpoint";
  } else if (f.endpoint) {
    s.url = signal_path(*f.endpoint, signal), source = "otlp.endpoint";
  } else if (auto own = env.get("OTEL_EXPORTER_OTLP_" + std::string(signal == "traces" ? "TRACES" : "METRICS") + "_ENDPOINT")) {
    s.url = trim(*own), source = "OTEL_EXPORTER_OTLP_" + std::string(signal == "traces" ? "TRACES" : "METRICS") + "_ENDPOINT";
  } else if (auto base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")) {
    s.url = signal_path(trim(*base), signal), source = "OTEL_EXPORTER_OTLP_ENDPOINT";
  } else {
    return std::nullopt;
  }
  if (const std::string why = url_problem(s.url); !why.empty()) env.error(source + ": " + why);
  if (f.protocol) {
    s.encoding = *f.protocol;
  } else if (auto p = env.signal(signal, "PROTOCOL")) {
    std::string why;
    if (auto e = parse_protocol(p->second, &why)) s.encoding = *e;
    else env.error(p->first + ": " + why);
  }
  if (f.headers) {
    s.headers = *f.headers;
  } else if (auto h = env.signal(signal, "HEADERS")) {
    std::string why;
    auto parsed = parse_key_values(h->second, &why);
    if (!parsed) env.error(h->first + ": " + why);
    for (const auto& [name, value] : parsed.value_or(KeyValues{})) {
      if (const std::string problem = header_problem(name, value); !problem.empty()) env.error(h->first + ": " + problem);
    }
    if (parsed) s.headers = std::move(*parsed);
  }
  if (f.timeout_s) {
    s.timeout = milliseconds(static_cast<std::int64_t>(*f.timeout_s * 1000));
  } else if (auto t = env.signal(signal, "TIMEOUT")) {
    if (auto ms = env.millis(t->first, t->second, 1, 300'000)) s.timeout = *ms;
  }
  return s;
}

// Resource: what infertap knows of itself and its node, then the
// environment's attributes, then the file's; service.name last.
output::otlp::Attributes resource_of(const DaemonConfig& c, const EnvReader& env) {
  KeyValues attrs = {{"service.name", "infertap"}, {"service.version", std::string(output::otlp::kAgentVersion)},
                     {"host.name", effective_node_name(c)}};
  const std::pair<const char*, const char*> downward[] = {
      {"NODE_NAME", "k8s.node.name"}, {"POD_NAME", "k8s.pod.name"}, {"POD_NAMESPACE", "k8s.namespace.name"}, {"POD_UID", "k8s.pod.uid"}};
  for (const auto& [variable, key] : downward) {
    if (auto v = env.get(variable)) attrs.emplace_back(key, trim(*v));
  }
  const auto set = [&](const std::string& key, const std::string& value) {
    for (auto& kv : attrs) {
      if (kv.first == key) return void(kv.second = value);
    }
    attrs.emplace_back(key, value);
  };
  if (auto text = env.get("OTEL_RESOURCE_ATTRIBUTES")) {
    std::string why;
    if (auto parsed = parse_key_values(*text, &why)) {
      for (const auto& [k, v] : *parsed) set(k, v);
    } else {
      env.error("OTEL_RESOURCE_ATTRIBUTES: " + why);
    }
  }
  for (const auto& [k, v] : c.otlp.resource_attributes) set(k, v);
  if (c.otlp.service_name) set("service.name", *c.otlp.service_name);
  else if (auto name = env.get("OTEL_SERVICE_NAME")) set("service.name", trim(*name));
  output::otlp::Attributes out;
  for (auto& [k, v] : attrs) out.add(k, v);
  return out;
}

bool env_true(const EnvReader& env, const std::string& name) {
  const auto v = env.get(name);
  return v && lower(trim(*v)) == "true";
}

bool signal_off(const EnvReader& env, const std::string& variable) {
  const auto v = env.get(variable);
  return v && lower(trim(*v)) == "none";
}

}  // namespace

std::string loggable_url(const std::string& url) { return url.substr(0, url.find_first_of("?#")); }

std::optional<KeyValues> parse_key_values(const std::string& text, std::string* error) {
  KeyValues out;
  std::size_t item = 0;
  for (std::size_t start = 0; start <= text.size(); ++item) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string part = trim(std::string_view(text).substr(start, comma - start));
    start = comma + 1;
    if (part.empty()) {
      if (comma == text.size()) break;
      continue;
    }
    const std::size_t eq = part.find('=');
    if (eq == std::string::npos || trim(part.substr(0, eq)).empty()) {
      *error = "item " + std::to_string(item + 1) + " is not key=value";
      return std::nullopt;
    }
    std::string value;
    const std::string raw = trim(part.substr(eq + 1));
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '%' && i + 2 < raw.size() + 0 && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
        value.push_back(static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16)));
        i += 2;
      } else {
        value.push_back(raw[i]);
      }
    }
    out.emplace_back(trim(part.substr(0, eq)), std::move(value));
  }
  return out;
}

Environment process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

void parse_otlp_section(base::YamlReader& r, const Node& node, const std::string& prefix, OtlpSettings* out) {
  const auto url = [&r](std::optional<std::string>* field) {
    return [&r, field](const Node& v, const std::string& k) {
      const auto s = r.string(v, k);
      if (!s || s->empty()) return;  // "": the environment's, as when the key is left out
      if (const std::string why = url_problem(*s); !why.empty()) return r.fail(v, k, why);
      *field = *s;
    };
  };
  const auto seconds = [&r](std::optional<double>* field, double lo, double hi) {
    return [&r, field, lo, hi](const Node& v, const std::string& k) {
      if (auto x = r.number(v, k, lo, hi)) *field = *x;
    };
  };
  std::vector<base::YamlReader::Field> fields = {
      {"enabled", [&](const Node& v, const std::string& k) { if (auto b = r.boolean(v, k)) out->enabled = *b; }},
      {"endpoint", url(&out->endpoint)},
      {"metrics_endpoint", url(&out->metrics_endpoint)},
      {"traces_endpoint", url(&out->traces_endpoint)},
      {"protocol",
       [&](const Node& v, const std::string& k) {
         const auto s = r.string(v, k);
         std::string why;
         if (!s) return;
         if (auto e = parse_protocol(*s, &why)) out->protocol = *e;
         else r.fail(v, k, why);
       }},
      {"headers",
       [&](const Node& v, const std::string& k) {
         KeyValues h;
         read_map(r, v, k, &h, true);
         out->headers = std::move(h);
       }},
      {"export_interval_s", seconds(&out->export_interval_s, 0.1, 86'400)},
      {"timeout_s", seconds(&out->timeout_s, 0.1, 300)},
      {"shutdown_timeout_s",
       [&](const Node& v, const std::string& k) { if (auto x = r.number(v, k, 0, 60)) out->shutdown_timeout_s = *x; }},
      {"queue_spans",
       [&](const Node& v, const std::string& k) {
         if (auto x = r.integer(v, k, 1, 1'000'000)) out->queue_spans = static_cast<std::size_t>(*x);
       }},
      {"queue_bytes",
       [&](const Node& v, const std::string& k) { if (auto x = r.integer(v, k, 64ull << 10, 4ull << 30, true)) out->queue_bytes = *x; }},
      {"span_events", [&](const Node& v, const std::string& k) { if (auto b = r.boolean(v, k)) out->span_events = *b; }},
      {"service_name",
       [&](const Node& v, const std::string& k) {
         const auto s = r.string(v, k);
         if (s && !s->empty()) out->service_name = *s;  // "": the environment's, else infertap
       }},
      {"resource_attributes", [&](const Node& v, const std::string& k) { read_map(r, v, k, &out->resource_attributes, false); }},
  };
  r.fields(node, prefix, fields);
}

std::optional<ExporterOptions> otlp_options(const DaemonConfig& c, const Environment& environment, std::string* error) {
  std::vector<std::string> errors;
  const EnvReader env(environment, errors);
  const OtlpSettings& f = c.otlp;
  if (f.enabled == false || (!f.enabled && env_true(env, "OTEL_SDK_DISABLED"))) return std::nullopt;
  ExporterOptions o;
  if (!signal_off(env, "OTEL_METRICS_EXPORTER")) o.metrics = signal_options(f, env, "metrics", f.metrics_endpoint);
  if (!signal_off(env, "OTEL_TRACES_EXPORTER")) o.traces = signal_options(f, env, "traces", f.traces_endpoint);
  if (!o.metrics && !o.traces) {
    if (f.enabled == true) errors.push_back("otlp.enabled: true needs an endpoint (otlp.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)");
  }
  if (f.export_interval_s) {
    o.export_interval = milliseconds(static_cast<std::int64_t>(*f.export_interval_s * 1000));
  } else if (auto v = env.get("OTEL_METRIC_EXPORT_INTERVAL")) {
    if (auto ms = env.millis("OTEL_METRIC_EXPORT_INTERVAL", *v, 100, 86'400'000)) o.export_interval = *ms;
  }
  o.shutdown_timeout = milliseconds(static_cast<std::int64_t>(f.shutdown_timeout_s * 1000));
  o.queue_spans = f.queue_spans;
  o.queue_bytes = f.queue_bytes;
  o.spans.timeline_events = f.span_events;
  o.limits = {c.metrics.max_label_values, 128, c.metrics.max_series_per_family};
  o.resource = resource_of(c, env);
  o.scope.version = std::string(output::otlp::kAgentVersion);
  if (!errors.empty()) {
    *error = "";
    for (const std::string& e : errors) *error += (error->empty() ? "" : "\n") + e;
    return std::nullopt;
  }
  if (!o.metrics && !o.traces) return std::nullopt;
  return o;
}

}  // namespace infertap::daemon
