#include "protocol/exchange.h"
#include "protocol/session.h"

namespace infertap::protocol {

std::string_view to_string(BodyFraming f) {
  switch (f) {
    case BodyFraming::none: return "none";
    case BodyFraming::content_length: return "content_length";
    case BodyFraming::chunked: return "chunked";
    case BodyFraming::until_close: return "until_close";
  }
  return "none";
}

std::string_view to_string(ParseError e) {
  switch (e) {
    case ParseError::bad_start_line: return "bad_start_line";
    case ParseError::bad_header: return "bad_header";
    case ParseError::header_too_large: return "header_too_large";
    case ParseError::bad_chunk_size: return "bad_chunk_size";
    case ParseError::bad_chunk_trailer: return "bad_chunk_trailer";
    case ParseError::gap_in_head: return "gap_in_head";
    case ParseError::gap_in_framing: return "gap_in_framing";
    case ParseError::not_http: return "not_http";
    case ParseError::truncated_message: return "truncated_message";
  }
  return "unknown";
}

std::string_view to_string(SessionProblem p) {
  switch (p) {
    case SessionProblem::desynchronised: return "desynchronised";
    case SessionProblem::resynchronised: return "resynchronised";
    case SessionProblem::header_block_lost: return "header_block_lost";
    case SessionProblem::header_block_too_large: return "header_block_too_large";
    case SessionProblem::exchanges_over_limit: return "exchanges_over_limit";
    case SessionProblem::frame_error: return "frame_error";
    case SessionProblem::message_too_large: return "message_too_large";
    case SessionProblem::undecodable: return "undecodable";
  }
  return "frame_error";
}

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
