// OTLP/HTTP request bodies from the values of output/otlp/model.h, in the
// two encodings of the OTLP specification: binary protobuf
// (application/x-protobuf) and the protobuf JSON mapping (application/json:
// lowerCamelCase names, trace and span ids as hex, 64-bit integers as
// decimal strings, enums as numbers).
//
// Spans are encoded one at a time, when their record is finished; a request
// is then the encoded spans placed in one envelope (trace_request), with no
// second pass over them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "output/otlp/model.h"

namespace infertap::output::otlp {

enum class Encoding : std::uint8_t { protobuf, json };
std::string_view content_type(Encoding e);  // "application/x-protobuf" | "application/json"

// One Span message (protobuf) or Span object (JSON).
std::string encode_span(const Span& span, Encoding e);
// ExportTraceServiceRequest of spans encode_span wrote in the same encoding.
std::string trace_request(const Attributes& resource, const Scope& scope, const std::vector<std::string>& spans,
                          Encoding e);
// ExportMetricsServiceRequest: every metric cumulative.
std::string metrics_request(const Attributes& resource, const Scope& scope, const std::vector<Metric>& metrics,
                            Encoding e);

// Lower-case hex of an id ("" for none).
std::string hex(const std::uint8_t* bytes, std::size_t n);

}  // namespace infertap::output::otlp
