// The OTLP exporter's configuration (docs/otlp.md#configuration): the file's
// `otlp:` section over the standard OpenTelemetry environment variables
// (OTEL_EXPORTER_OTLP_*, OTEL_METRIC_EXPORT_INTERVAL, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_SERVICE_NAME, OTEL_SDK_DISABLED).
//
// Precedence, per setting: a key of the file, then the variable for that
// signal (…_TRACES_…, …_METRICS_…), then the general variable, then the
// default. An endpoint is a signal's own (otlp.traces_endpoint, then
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: used as is) or the base one with
// /v1/traces or /v1/metrics appended (otlp.endpoint, then
// OTEL_EXPORTER_OTLP_ENDPOINT). With no endpoint anywhere, OTLP is off.
//
// Errors name the key or the variable; header values are secrets and are
// never part of an error, a log line or the status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "output/otlp/exporter.h"

namespace YAML {
class Node;
}

namespace infertap::base {
class YamlReader;
}

namespace infertap::daemon {

struct DaemonConfig;

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// The `otlp:` section as the file gives it: unset keys leave the setting to
// the environment (then the default).
struct OtlpSettings {
  std::optional<bool> enabled;  // false: off whatever the environment says; true: an endpoint is required
  std::optional<std::string> endpoint, metrics_endpoint, traces_endpoint;
  std::optional<output::otlp::Encoding> protocol;
  std::optional<KeyValues> headers;
  std::optional<double> export_interval_s, timeout_s;
  double shutdown_timeout_s = 3;
  std::size_t queue_spans = 2048;
  std::uint64_t queue_bytes = 16ull << 20;
  bool span_events = false;
  std::optional<std::string> service_name;
  KeyValues resource_attributes;
};

// Reads the `otlp:` mapping (base/yaml_reader.h: problems name the key).
void parse_otlp_section(base::YamlReader& reader, const YAML::Node& node, const std::string& key, OtlpSettings* out);

// A variable's value, nullopt when unset. Tests pass their own.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;
Environment process_environment();

// The exporter's options, or nullopt: OTLP off (*error left empty), or a bad
// value (*error: one line per problem, naming the key or the variable).
std::optional<output::otlp::ExporterOptions> otlp_options(const DaemonConfig& config, const Environment& env,
                                                          std::string* error);

// "http://collector:4318/v1/traces": a URL as the log may show it, without
// any query string (a token there would be a secret).
std::string loggable_url(const std::string& url);

// W3C Baggage-like "k1=v1,k2=v2" (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_RESOURCE_ATTRIBUTES): keys and values trimmed, values percent-decoded.
// nullopt and *error (never quoting a value) when an item is not key=value.
std::optional<KeyValues> parse_key_values(const std::string& text, std::string* error);

}  // namespace infertap::daemon
