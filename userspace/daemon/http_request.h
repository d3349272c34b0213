// The little HTTP/1.x the agent's endpoint needs (daemon/http_server.h): the
// head of a request, read with a size limit, and the head of an answer. The
// endpoint takes no request bodies and answers one request per connection.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace infertap::daemon {

struct RequestHead {
  std::string method;         // "GET"
  std::string target;         // "/metrics?x=1"
  std::string path;           // target without ?query
  std::string authorization;  // the Authorization header's value ("" when none)
  bool has_body = false;      // Content-Length > 0 or Transfer-Encoding: a body the endpoint will not read
  std::size_t head_bytes = 0;  // through the blank line that ends the head
};

enum class HeadParse {
  incomplete,  // no blank line yet, within the limit
  complete,
  too_large,  // no blank line within max_bytes: 431
  malformed,  // not an HTTP/1.x request head: 400
};

// Reads the request head at the start of `buffer` (bytes received so far);
// `max_bytes` bounds the head, request line included.
HeadParse parse_request_head(std::string_view buffer, std::size_t max_bytes, RequestHead* out);

// "HTTP/1.1 <status> <reason>", Content-Type and Content-Length, Connection:
// close, any `extra` header lines (each ending in "\r\n"), then the blank line.
std::string response_head(int status, std::string_view content_type, std::size_t content_length,
                          std::string_view extra = {});
std::string_view reason_phrase(int status);

}  // namespace infertap::daemon
