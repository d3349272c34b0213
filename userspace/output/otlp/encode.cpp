#include "output/otlp/encode.h"

#include <nlohmann/json.hpp>

#include "output/format.h"
#include "output/otlp/protobuf.h"

namespace infertap::output::otlp {
namespace {

using json = nlohmann::ordered_json;

// Field numbers of opentelemetry-proto (common/v1, resource/v1, metrics/v1,
// trace/v1, collector/*/v1): the names are the .proto's.
namespace field {
constexpr std::uint32_t kAnyString = 1, kAnyBool = 2, kAnyInt = 3, kAnyDouble = 4, kAnyArray = 5;
constexpr std::uint32_t kArrayValues = 1;
constexpr std::uint32_t kKeyValueKey = 1, kKeyValueValue = 2;
constexpr std::uint32_t kScopeName = 1, kScopeVersion = 2;
constexpr std::uint32_t kResourceAttributes = 1;
constexpr std::uint32_t kRequestResource = 1;  // ExportXServiceRequest.resource_x = 1, ResourceX.resource = 1
constexpr std::uint32_t kResourceScopes = 2;   // ResourceMetrics.scope_metrics, ResourceSpans.scope_spans
constexpr std::uint32_t kScopeScope = 1;       // ScopeMetrics.scope, ScopeSpans.scope
constexpr std::uint32_t kScopeItems = 2;       // ScopeMetrics.metrics, ScopeSpans.spans
// Metric
constexpr std::uint32_t kMetricName = 1, kMetricDescription = 2, kMetricUnit = 3, kMetricSum = 7, kMetricHistogram = 9;
constexpr std::uint32_t kDataPoints = 1, kTemporality = 2, kMonotonic = 3;
constexpr std::uint32_t kStartTime = 2, kTime = 3;  // both data points
constexpr std::uint32_t kNumberAsInt = 6, kNumberAttributes = 7;
constexpr std::uint32_t kHistCount = 4, kHistSum = 5, kHistBuckets = 6, kHistBounds = 7, kHistAttributes = 9;
// Span
constexpr std::uint32_t kTraceId = 1, kSpanId = 2, kParentSpanId = 4, kSpanName = 5, kSpanKind = 6, kSpanStart = 7,
                        kSpanEnd = 8, kSpanAttributes = 9, kSpanEvents = 11, kSpanDroppedEvents = 12, kSpanStatus = 15;
constexpr std::uint32_t kEventTime = 1, kEventName = 2, kEventAttributes = 3;
constexpr std::uint32_t kStatusMessage = 2, kStatusCode = 3;
}  // namespace field

constexpr int kCumulative = 2;  // AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE

bool is_zero(const std::uint8_t* bytes, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (bytes[i]) return false;
  }
  return true;
}

// ---- protobuf --------------------------------------------------------------

ProtoWriter any_value(const AnyValue& v) {
  ProtoWriter w;
  switch (v.kind) {
    case AnyValue::Kind::string: w.string(field::kAnyString, v.text); break;
    case AnyValue::Kind::boolean: w.boolean(field::kAnyBool, v.flag); break;
    case AnyValue::Kind::integer: w.int64(field::kAnyInt, v.integer); break;
    case AnyValue::Kind::real: w.double_(field::kAnyDouble, v.real); break;
    case AnyValue::Kind::strings: {
      ProtoWriter array;
      for (const std::string& s : v.list) {
        ProtoWriter item;
        item.string(field::kAnyString, s);
        array.message(field::kArrayValues, item);
      }
      w.message(field::kAnyArray, array);
      break;
    }
  }
  return w;
}

void put_attributes(ProtoWriter& w, std::uint32_t number, const Attributes& attributes) {
  for (const KeyValue& kv : attributes.items()) {
    ProtoWriter item;
    item.string(field::kKeyValueKey, kv.key);
    item.message(field::kKeyValueValue, any_value(kv.value));
    w.message(number, item);
  }
}

ProtoWriter scope_of(const Scope& scope) {
  ProtoWriter w;
  w.string(field::kScopeName, scope.name);
  if (!scope.version.empty()) w.string(field::kScopeVersion, scope.version);
  return w;
}

// ExportXServiceRequest { ResourceX { resource, ScopeX { scope, items } } }
std::string envelope(const Attributes& resource, const Scope& scope, const ProtoWriter& items_of_scope) {
  ProtoWriter res;
  put_attributes(res, field::kResourceAttributes, resource);
  ProtoWriter scoped;
  scoped.message(field::kScopeScope, scope_of(scope));
  scoped.append_raw(items_of_scope.data());
  ProtoWriter resource_x;
  resource_x.message(field::kRequestResource, res);
  resource_x.message(field::kResourceScopes, scoped);
  ProtoWriter request;
  request.message(field::kRequestResource, resource_x);
  return request.take();
}

ProtoWriter histogram_point(const HistogramPoint& p) {
  ProtoWriter w;
  w.fixed64(field::kStartTime, p.start_ns);
  w.fixed64(field::kTime, p.time_ns);
  w.fixed64(field::kHistCount, p.count);
  w.double_(field::kHistSum, p.sum);
  w.packed_fixed64(field::kHistBuckets, p.bucket_counts);
  w.packed_double(field::kHistBounds, p.bounds);
  put_attributes(w, field::kHistAttributes, p.attributes);
  return w;
}

ProtoWriter sum_point(const SumPoint& p) {
  ProtoWriter w;
  w.fixed64(field::kStartTime, p.start_ns);
  w.fixed64(field::kTime, p.time_ns);
  w.sfixed64(field::kNumberAsInt, p.value);
  put_attributes(w, field::kNumberAttributes, p.attributes);
  return w;
}

ProtoWriter metric_proto(const Metric& m) {
  ProtoWriter data;
  if (m.is_sum) {
    for (const SumPoint& p : m.sum) data.message(field::kDataPoints, sum_point(p));
  } else {
    for (const HistogramPoint& p : m.histogram) data.message(field::kDataPoints, histogram_point(p));
  }
  data.varint(field::kTemporality, kCumulative);
  if (m.is_sum) data.boolean(field::kMonotonic, true);
  ProtoWriter w;
  w.string(field::kMetricName, m.name);
  if (!m.description.empty()) w.string(field::kMetricDescription, m.description);
  if (!m.unit.empty()) w.string(field::kMetricUnit, m.unit);
  w.message(m.is_sum ? field::kMetricSum : field::kMetricHistogram, data);
  return w;
}

std::string span_proto(const Span& s) {
  ProtoWriter w;
  w.bytes(field::kTraceId, std::string_view(reinterpret_cast<const char*>(s.trace_id.data()), s.trace_id.size()));
  w.bytes(field::kSpanId, std::string_view(reinterpret_cast<const char*>(s.span_id.data()), s.span_id.size()));
  if (!is_zero(s.parent_span_id.data(), s.parent_span_id.size())) {
    w.bytes(field::kParentSpanId,
            std::string_view(reinterpret_cast<const char*>(s.parent_span_id.data()), s.parent_span_id.size()));
  }
  w.string(field::kSpanName, s.name);
  w.varint(field::kSpanKind, static_cast<std::uint64_t>(s.kind));
  w.fixed64(field::kSpanStart, s.start_ns);
  w.fixed64(field::kSpanEnd, s.end_ns);
  put_attributes(w, field::kSpanAttributes, s.attributes);
  for (const SpanEvent& e : s.events) {
    ProtoWriter ev;
    ev.fixed64(field::kEventTime, e.time_ns);
    ev.string(field::kEventName, e.name);
    put_attributes(ev, field::kEventAttributes, e.attributes);
    w.message(field::kSpanEvents, ev);
  }
  if (s.dropped_events) w.varint(field::kSpanDroppedEvents, s.dropped_events);
  if (s.status != Span::Status::unset) {
    ProtoWriter status;
    if (!s.status_message.empty()) status.string(field::kStatusMessage, s.status_message);
    status.varint(field::kStatusCode, static_cast<std::uint64_t>(s.status));
    w.message(field::kSpanStatus, status);
  }
  return w.take();
}

// ---- JSON ------------------------------------------------------------------

json any_value_json(const AnyValue& v) {
  switch (v.kind) {
    case AnyValue::Kind::string: return {{"stringValue", v.text}};
    case AnyValue::Kind::boolean: return {{"boolValue", v.flag}};
    case AnyValue::Kind::integer: return {{"intValue", std::to_string(v.integer)}};  // int64: a string in JSON
    case AnyValue::Kind::real: return {{"doubleValue", v.real}};
    case AnyValue::Kind::strings: {
      json values = json::array();
      for (const std::string& s : v.list) values.push_back({{"stringValue", s}});
      return {{"arrayValue", {{"values", std::move(values)}}}};
    }
  }
  return json::object();
}

json attributes_json(const Attributes& attributes) {
  json out = json::array();
  for (const KeyValue& kv : attributes.items()) out.push_back({{"key", kv.key}, {"value", any_value_json(kv.value)}});
  return out;
}

json scope_json(const Scope& scope) {
  json s = {{"name", scope.name}};
  if (!scope.version.empty()) s["version"] = scope.version;
  return s;
}

json metric_json(const Metric& m) {
  json points = json::array();
  if (m.is_sum) {
    for (const SumPoint& p : m.sum) {
      points.push_back({{"attributes", attributes_json(p.attributes)},
                        {"startTimeUnixNano", std::to_string(p.start_ns)},
                        {"timeUnixNano", std::to_string(p.time_ns)},
                        {"asInt", std::to_string(p.value)}});
    }
  } else {
    for (const HistogramPoint& p : m.histogram) {
      json buckets = json::array();
      for (std::uint64_t c : p.bucket_counts) buckets.push_back(std::to_string(c));
      points.push_back({{"attributes", attributes_json(p.attributes)},
                        {"startTimeUnixNano", std::to_string(p.start_ns)},
                        {"timeUnixNano", std::to_string(p.time_ns)},
                        {"count", std::to_string(p.count)},
                        {"sum", p.sum},
                        {"bucketCounts", std::move(buckets)},
                        {"explicitBounds", p.bounds}});
    }
  }
  json data = {{"dataPoints", std::move(points)}, {"aggregationTemporality", kCumulative}};
  if (m.is_sum) data["isMonotonic"] = true;
  json out = {{"name", m.name}};
  if (!m.description.empty()) out["description"] = m.description;
  if (!m.unit.empty()) out["unit"] = m.unit;
  out[m.is_sum ? "sum" : "histogram"] = std::move(data);
  return out;
}

json span_json(const Span& s) {
  json out = {{"traceId", hex(s.trace_id.data(), s.trace_id.size())}, {"spanId", hex(s.span_id.data(), s.span_id.size())}};
  if (!is_zero(s.parent_span_id.data(), s.parent_span_id.size())) {
    out["parentSpanId"] = hex(s.parent_span_id.data(), s.parent_span_id.size());
  }
  out["name"] = s.name;
  out["kind"] = static_cast<int>(s.kind);
  out["startTimeUnixNano"] = std::to_string(s.start_ns);
  out["endTimeUnixNano"] = std::to_string(s.end_ns);
  out["attributes"] = attributes_json(s.attributes);
  if (!s.events.empty()) {
    json events = json::array();
    for (const SpanEvent& e : s.events) {
      events.push_back({{"timeUnixNano", std::to_string(e.time_ns)}, {"name", e.name},
                        {"attributes", attributes_json(e.attributes)}});
    }
    out["events"] = std::move(events);
  }
  if (s.dropped_events) out["droppedEventsCount"] = s.dropped_events;
  if (s.status != Span::Status::unset) {
    json status = {{"code", static_cast<int>(s.status)}};
    if (!s.status_message.empty()) status["message"] = s.status_message;
    out["status"] = std::move(status);
  }
  return out;
}

// {"resourceX":[{"resource":{...},"scopeX":[{"scope":{...},"<items>":[ITEMS]}]}]} around
// already-encoded items.
std::string envelope_json(std::string_view resource_key, std::string_view scope_key, std::string_view items_key,
                          const Attributes& resource, const Scope& scope, const std::string& items) {
  const json res = {{"attributes", attributes_json(resource)}};
  std::string out = "{\"" + std::string(resource_key) + "\":[{\"resource\":" + output::dump(res) + ",\"" +
                    std::string(scope_key) + "\":[{\"scope\":" + output::dump(scope_json(scope)) + ",\"" +
                    std::string(items_key) + "\":[";
  out += items;
  out += "]}]}]}";
  return out;
}

}  // namespace

std::string_view content_type(Encoding e) {
  return e == Encoding::protobuf ? "application/x-protobuf" : "application/json";
}

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0xf]);
  }
  return out;
}

std::string encode_span(const Span& span, Encoding e) {
  return e == Encoding::protobuf ? span_proto(span) : output::dump(span_json(span));
}

std::string trace_request(const Attributes& resource, const Scope& scope, const std::vector<std::string>& spans,
                          Encoding e) {
  if (e == Encoding::protobuf) {
    ProtoWriter items;
    for (const std::string& s : spans) items.bytes(field::kScopeItems, s);
    return envelope(resource, scope, items);
  }
  std::string items;
  for (const std::string& s : spans) {
    if (!items.empty()) items += ',';
    items += s;
  }
  return envelope_json("resourceSpans", "scopeSpans", "spans", resource, scope, items);
}

std::string metrics_request(const Attributes& resource, const Scope& scope, const std::vector<Metric>& metrics,
                            Encoding e) {
  if (e == Encoding::protobuf) {
    ProtoWriter items;
    for (const Metric& m : metrics) items.message(field::kScopeItems, metric_proto(m));
    return envelope(resource, scope, items);
  }
  std::string items;
  for (const Metric& m : metrics) {
    if (!items.empty()) items += ',';
    items += output::dump(metric_json(m));
  }
  return envelope_json("resourceMetrics", "scopeMetrics", "metrics", resource, scope, items);
}

}  // namespace infertap::output::otlp
