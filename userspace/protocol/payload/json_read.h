// The two readers of event and request JSON, feeding one fact collector
// (protocol/payload/facts.h):
//  * complete JSON: simdjson DOM (runtime-dispatched SIMD kernel), walking
//    only keys we know and the arrays under them (choices, tool_calls,
//    candidates, parts, text);
//  * cut JSON: a prefix scanner that tokenises as far as the bytes go, string
//    and escape aware, so a key name inside a string value never matches. A
//    string cut by the end of the capture is reported as incomplete: it proves
//    "non-empty" if it has a character, but its value is never reported as a
//    whole (a cut model name is not a model name). Numbers cut at the end are
//    ignored (12 could be 123). Containers cut at the end are never "closed".
// Internal to payload/.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string_view>

#include "protocol/payload/facts.h"
#include "protocol/payload/json_text.h"

namespace infertap::protocol::payload_detail {

// ---------------------------------------------------------------------------
// Prefix scanner: recursive descent over a possibly cut JSON text.

template <class Facts>
class PrefixScanner {
 public:
  PrefixScanner(std::string_view s, Facts& facts) : s_(s), facts_(facts) {}

  // Returns true if a top-level object started (something was scanned).
  bool scan() {
    skip_ws();
    if (i_ >= s_.size() || s_[i_] != '{') return false;
    Path path;
    value(path, 0);
    return true;
  }

 private:
  enum class Status : std::uint8_t { ok, stop };  // stop: cut or malformed
  static constexpr int kMaxNesting = 64;

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }

  // At an opening quote: reads a string. *complete is false if the text ends
  // inside it. Strings here are short: a register-only byte loop beats memchr's
  // per-call setup.
  std::string_view string(bool* complete) {
    const char* const begin = s_.data() + i_ + 1;
    const char* const end = s_.data() + s_.size();
    const char* p = begin;
    while (p < end) {
      const char c = *p;
      if (c == '"') {
        i_ = static_cast<std::size_t>(p + 1 - s_.data());
        *complete = true;
        return {begin, static_cast<std::size_t>(p - begin)};
      }
      p += (c == '\\') ? 2 : 1;  // an escape hides the next character, quotes included
    }
    i_ = s_.size();
    *complete = false;
    return {begin, static_cast<std::size_t>(end - begin)};
  }

  Status value(Path& path, int nesting) {
    skip_ws();
    if (i_ >= s_.size()) return Status::stop;
    const char c = s_[i_];
    if (c == '{' || c == '[') {
      if (nesting >= kMaxNesting) return Status::stop;
      return c == '{' ? object(path, nesting) : array(path, nesting);
    }
    if (c == '"') {
      bool complete = false;
      const std::string_view v = string(&complete);
      facts_.on_string(path, v, complete);
      return complete ? Status::ok : Status::stop;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(path);
    return literal(path);
  }

  Status object(Path& path, int nesting) {
    ++i_;
    facts_.on_begin(path, false);
    std::uint32_t count = 0;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      facts_.on_end(path, false, 0);
      return Status::ok;
    }
    while (true) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') return Status::stop;
      bool complete = false;
      const std::string_view key = string(&complete);
      if (!complete) return Status::stop;
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') return Status::stop;
      ++i_;
      {
        // Keys with escapes are never ones we look for.
        const Key k = key.find('\\') == std::string_view::npos ? lookup_key(key) : Key::other;
        PathPush push(path, k);
        if (value(path, nesting + 1) != Status::ok) return Status::stop;
      }
      ++count;
      skip_ws();
      if (i_ >= s_.size()) return Status::stop;
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] != '}') return Status::stop;
      ++i_;
      facts_.on_end(path, false, count);
      return Status::ok;
    }
  }

  Status array(Path& path, int nesting) {
    ++i_;
    facts_.on_begin(path, true);
    std::uint32_t count = 0;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      facts_.on_end(path, true, 0);
      return Status::ok;
    }
    while (true) {
      {
        PathPush push(path, Key::element);
        skip_ws();
        if (i_ >= s_.size()) return Status::stop;
        // An element that has started is proof the array is non-empty.
        if (s_[i_] != '{' && s_[i_] != '[') facts_.on_begin(path, false);
        if (value(path, nesting + 1) != Status::ok) return Status::stop;
      }
      ++count;
      skip_ws();
      if (i_ >= s_.size()) return Status::stop;
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] != ']') return Status::stop;
      ++i_;
      facts_.on_end(path, true, count);
      return Status::ok;
    }
  }

  Status number(const Path& path) {
    const std::size_t start = i_;
    bool plain = true;  // non-negative integer
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c >= '0' && c <= '9') {
        ++i_;
      } else if (c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
        plain = false;
        ++i_;
      } else {
        break;
      }
    }
    if (i_ >= s_.size()) return Status::stop;  // cut: more digits may follow
    const std::string_view digits = s_.substr(start, i_ - start);
    if (plain && digits.size() <= 19) {
      std::uint64_t v = 0;
      for (char c : digits) v = v * 10 + static_cast<std::uint64_t>(c - '0');
      facts_.on_uint(path, v);
    }
    return Status::ok;
  }

  Status literal(const Path& path) {
    for (std::string_view word : {std::string_view("true"), std::string_view("false"), std::string_view("null")}) {
      const std::string_view have = s_.substr(i_, word.size());
      if (have != word.substr(0, have.size())) continue;
      if (have.size() < word.size()) return Status::stop;  // cut inside the literal
      i_ += word.size();
      if (word == "null") {
        facts_.on_null(path);
      } else {
        facts_.on_bool(path, word == "true");
      }
      return Status::ok;
    }
    return Status::stop;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  Facts& facts_;
};

// ---------------------------------------------------------------------------
// simdjson reader for complete payloads. The DOM API is used rather than
// ondemand: ondemand picks its kernel at compile time (fallback without
// -march flags), DOM dispatches at run time to the best one (haswell, icelake).

namespace dom = simdjson::dom;

template <class Facts>
void walk(dom::element value, Path& path, Facts& facts);

template <class Facts>
void walk_object(dom::object object, Path& path, Facts& facts) {
  facts.on_begin(path, false);
  std::uint32_t count = 0;
  for (dom::key_value_pair field : object) {
    ++count;
    const Key k = lookup_key(field.key);
    if (k == Key::other || !path.tracked || path.depth >= kMaxPath) continue;
    PathPush push(path, k);
    walk(field.value, path, facts);
  }
  facts.on_end(path, false, count);
}

template <class Facts>
void walk(dom::element value, Path& path, Facts& facts) {
  switch (value.type()) {
    case dom::element_type::OBJECT: walk_object(dom::object(value), path, facts); return;
    case dom::element_type::ARRAY: {
      facts.on_begin(path, true);
      std::uint32_t count = 0;
      // Only elements of arrays we track are looked into.
      const Key last = path.last();
      const bool descend = path.tracked && path.depth < kMaxPath &&
                           (last == Key::choices || last == Key::tool_calls || last == Key::candidates ||
                            last == Key::parts || last == Key::text);
      for (dom::element child : dom::array(value)) {
        ++count;
        if (!descend || count > 16) continue;  // n > 16 choices: the first ones tell enough
        PathPush push(path, Key::element);
        const auto type = child.type();
        if (type != dom::element_type::OBJECT && type != dom::element_type::ARRAY) facts.on_begin(path, false);
        walk(child, path, facts);
      }
      facts.on_end(path, true, count);
      return;
    }
    case dom::element_type::STRING: facts.on_string(path, std::string_view(value), true); return;
    case dom::element_type::UINT64: facts.on_uint(path, std::uint64_t(value)); return;
    case dom::element_type::INT64: {
      const std::int64_t v = std::int64_t(value);
      if (v >= 0) facts.on_uint(path, static_cast<std::uint64_t>(v));
      return;
    }
    case dom::element_type::BOOL: facts.on_bool(path, bool(value)); return;
    case dom::element_type::NULL_VALUE: facts.on_null(path); return;
    case dom::element_type::DOUBLE: return;
  }
}

// Parses a complete JSON object into facts. False if the text is not one
// complete, well-formed object (the caller falls back to the prefix scanner).
template <class Facts>
bool parse_complete(std::string_view text, Facts& facts) {
  dom::element doc;
  if (!json_text::parse(text, &doc)) return false;
  if (doc.type() != dom::element_type::OBJECT) return false;
  Path path;
  walk_object(dom::object(doc), path, facts);
  return true;
}

}  // namespace infertap::protocol::payload_detail
