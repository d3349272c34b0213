#include "protocol/payload/json_text.h"

#include <string>

namespace infertap::protocol::json_text {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of a \u escape whose hex digits start at s[i], or -1.
int unicode_escape(std::string_view s, std::size_t i) {
  int v = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    if (i + k >= s.size()) return -1;
    const int h = hex_value(s[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

}  // namespace

bool parse(std::string_view text, simdjson::dom::element* out) {
  thread_local simdjson::dom::parser parser;
  thread_local std::string padded;  // reused: no allocation per event
  if (padded.capacity() < text.size() + simdjson::SIMDJSON_PADDING) {
    padded.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  }
  padded.assign(text);
  return !parser.parse(padded.data(), text.size(), false).get(*out);
}

std::string_view trim_ws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::size_t string_body_end(std::string_view s, std::size_t from) {
  for (std::size_t i = from; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;  // an escape hides the next character, quotes included
    } else if (s[i] == '"') {
      return i;
    }
  }
  return std::string_view::npos;
}

bool plain_string_body(std::string_view body) {
  for (std::size_t i = 0; i < body.size(); ++i) {
    const auto c = static_cast<unsigned char>(body[i]);
    if (c < 0x20) return false;
    if (c != '\\') continue;
    if (++i >= body.size()) return false;
    switch (body[i]) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': break;
      case 'u': {
        const int v = unicode_escape(body, i + 1);
        if (v < 0 || (v >= 0xD800 && v <= 0xDFFF)) return false;
        i += 4;
        break;
      }
      default: return false;
    }
  }
  return simdjson::validate_utf8(body.data(), body.size());
}

std::uint64_t decoded_length(std::string_view raw) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      ++n;
      continue;
    }
    ++i;
    if (raw[i] != 'u') {
      ++n;
      continue;
    }
    const int v = unicode_escape(raw, i + 1);
    if (v < 0) break;  // cut inside the escape
    i += 4;
    if (v >= 0xD800 && v <= 0xDBFF && i + 2 < raw.size() && raw[i + 1] == '\\' && raw[i + 2] == 'u') {
      const int low = unicode_escape(raw, i + 3);
      if (low >= 0xDC00 && low <= 0xDFFF) {
        n += 4;  // a surrogate pair is one 4-byte character
        i += 6;
        continue;
      }
    }
    n += v < 0x80 ? 1 : v < 0x800 ? 2 : 3;
  }
  return n;
}

}  // namespace infertap::protocol::json_text
