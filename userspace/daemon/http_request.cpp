#include "daemon/http_request.h"

#include <algorithm>
#include <cctype>

namespace infertap::daemon {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// "GET /metrics HTTP/1.1"
bool parse_request_line(std::string_view line, RequestHead* out) {
  const std::size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return false;
  const std::size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return false;
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method) || target.empty() || version.size() != 8 || version.substr(0, 7) != "HTTP/1.") return false;
  out->method = std::string(method);
  out->target = std::string(target);
  out->path = std::string(target.substr(0, target.find('?')));
  return true;
}

void note_header(std::string_view name, std::string_view value, RequestHead* out) {
  if (iequals(name, "authorization")) {
    out->authorization = std::string(value);
  } else if (iequals(name, "transfer-encoding")) {
    out->has_body = true;
  } else if (iequals(name, "content-length")) {
    out->has_body = out->has_body || value.find_first_not_of("0") != std::string_view::npos;
  }
}

}  // namespace

HeadParse parse_request_head(std::string_view buffer, std::size_t max_bytes, RequestHead* out) {
  std::size_t end = buffer.find("\r\n\r\n");
  std::size_t sep = 4;
  if (const std::size_t bare = buffer.find("\n\n"); bare != std::string_view::npos && bare < end) {
    end = bare;
    sep = 2;
  }
  if (end == std::string_view::npos) return buffer.size() > max_bytes ? HeadParse::too_large : HeadParse::incomplete;
  if (end + sep > max_bytes) return HeadParse::too_large;
  *out = RequestHead{};
  out->head_bytes = end + sep;
  std::string_view head = buffer.substr(0, end);
  bool first = true;
  while (!head.empty()) {
    const std::size_t nl = head.find('\n');
    const std::string_view line = trim(head.substr(0, nl));
    head = nl == std::string_view::npos ? std::string_view{} : head.substr(nl + 1);
    if (first) {
      if (!parse_request_line(line, out)) return HeadParse::malformed;
      first = false;
      continue;
    }
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return HeadParse::malformed;
    note_header(line.substr(0, colon), trim(line.substr(colon + 1)), out);
  }
  return first ? HeadParse::malformed : HeadParse::complete;
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
  }
  return "Unknown";
}

std::string response_head(int status, std::string_view content_type, std::size_t content_length,
                          std::string_view extra) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_phrase(status)) + "\r\n";
  out += "Content-Type: " + std::string(content_type) + "\r\n";
  out += "Content-Length: " + std::to_string(content_length) + "\r\n";
  out += "Connection: close\r\n";
  out += extra;
  out += "\r\n";
  return out;
}

}  // namespace infertap::daemon
