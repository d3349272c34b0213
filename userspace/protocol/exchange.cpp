#include "protocol/exchange.h"

namespace infertap::protocol {

std::string_view to_string(Protocol p) {
  switch (p) {
    case Protocol::http1: return "http1";
    case Protocol::http2: return "http2";
    case Protocol::websocket: return "websocket";
  }
  return "http1";
}

std::string_view to_string(HttpVersion v) {
  switch (v) {
    case HttpVersion::http1_0: return "1.0";
    case HttpVersion::http1_1: return "1.1";
    case HttpVersion::http2: return "2";
  }
  return "1.1";
}

std::string_view to_string(Http2StreamStats::Scope s) {
  switch (s) {
    case Http2StreamStats::Scope::none: return "none";
    case Http2StreamStats::Scope::stream: return "stream";
    case Http2StreamStats::Scope::connection: return "connection";
    case Http2StreamStats::Scope::both: return "both";
  }
  return "none";
}

}  // namespace infertap::protocol
