// What infertap sends to an OpenTelemetry Collector, as plain values shaped
// like the opentelemetry-proto messages they become (common, resource,
// metrics and trace v1): only the fields infertap fills. output/otlp/encode.h
// writes them as OTLP/HTTP protobuf or JSON.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace infertap::output::otlp {

// AnyValue of the kinds infertap writes.
struct AnyValue {
  enum class Kind : std::uint8_t { string, boolean, integer, real, strings };
  Kind kind = Kind::string;
  std::string text;
  bool flag = false;
  std::int64_t integer = 0;
  double real = 0;
  std::vector<std::string> list;  // an array of strings
};

struct KeyValue {
  std::string key;
  AnyValue value;
};

class Attributes {
 public:
  Attributes& add(std::string key, std::string value) {
    AnyValue v;
    v.text = std::move(value);
    return push(std::move(key), std::move(v));
  }
  Attributes& add_bool(std::string key, bool value) {
    AnyValue v{.kind = AnyValue::Kind::boolean};
    v.flag = value;
    return push(std::move(key), std::move(v));
  }
  Attributes& add_int(std::string key, std::int64_t value) {
    AnyValue v{.kind = AnyValue::Kind::integer};
    v.integer = value;
    return push(std::move(key), std::move(v));
  }
  Attributes& add_double(std::string key, double value) {
    AnyValue v{.kind = AnyValue::Kind::real};
    v.real = value;
    return push(std::move(key), std::move(v));
  }
  Attributes& add_strings(std::string key, std::vector<std::string> values) {
    AnyValue v{.kind = AnyValue::Kind::strings};
    v.list = std::move(values);
    return push(std::move(key), std::move(v));
  }
  // The value of `key`, nullptr when absent.
  const AnyValue* find(const std::string& key) const {
    for (const KeyValue& kv : items_) {
      if (kv.key == key) return &kv.value;
    }
    return nullptr;
  }
  const std::vector<KeyValue>& items() const { return items_; }
  bool empty() const { return items_.empty(); }

 private:
  Attributes& push(std::string key, AnyValue value) {
    items_.push_back({std::move(key), std::move(value)});
    return *this;
  }
  std::vector<KeyValue> items_;
};

// The instrumentation scope infertap's data comes from.
struct Scope {
  std::string name = "infertap";
  std::string version;
};

// ---- metrics -------------------------------------------------------------------

struct HistogramPoint {
  Attributes attributes;
  std::uint64_t start_ns = 0, time_ns = 0;  // wall clock, Unix epoch
  std::uint64_t count = 0;
  double sum = 0;
  std::vector<std::uint64_t> bucket_counts;  // bounds.size() + 1, not cumulative
  std::vector<double> bounds;
};

struct SumPoint {
  Attributes attributes;
  std::uint64_t start_ns = 0, time_ns = 0;
  std::int64_t value = 0;
};

// A histogram or a monotonic sum, cumulative (what infertap exports).
struct Metric {
  std::string name, description, unit;
  std::vector<HistogramPoint> histogram;  // a histogram metric: these
  std::vector<SumPoint> sum;              // a sum metric: these
  bool is_sum = false;
};

// ---- traces --------------------------------------------------------------------

using TraceId = std::array<std::uint8_t, 16>;
using SpanId = std::array<std::uint8_t, 8>;

struct SpanEvent {
  std::uint64_t time_ns = 0;
  std::string name;
  Attributes attributes;
};

struct Span {
  enum class Kind : std::uint8_t { internal = 1, server = 2, client = 3 };  // opentelemetry.proto.trace.v1.Span.SpanKind
  enum class Status : std::uint8_t { unset = 0, ok = 1, error = 2 };        // Status.StatusCode
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_span_id{};  // all zero: a root span
  std::string name;
  Kind kind = Kind::internal;
  std::uint64_t start_ns = 0, end_ns = 0;
  Attributes attributes;
  std::vector<SpanEvent> events;
  std::uint32_t dropped_events = 0;
  Status status = Status::unset;
  std::string status_message;
};

}  // namespace infertap::output::otlp
