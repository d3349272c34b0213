// Declared formats: JSON pointers read from a whole event with simdjson's
// at_pointer, from a cut one by a prefix walk that follows the pointer's
// tokens and reports only what the captured bytes prove (a value is "unknown"
// when the bytes end before it, "absent" when its container closed without it).
#include "protocol/payload/declared.h"

#include <fnmatch.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <string>

#include "protocol/payload/json_text.h"

namespace infertap::protocol {
namespace {

constexpr std::size_t kMaxString = 128;

// A value at a pointer, as far as the event proves it.
struct Value {
  enum class Kind : std::uint8_t { unknown, absent, string, number, boolean, null, container } kind = Kind::absent;
  std::string text;           // string (decoded when whole, raw when cut), number, "true" / "false"
  bool complete = true;       // a string or number wholly captured
  std::uint64_t length = 0;   // string: decoded bytes (of the captured part when cut)
  bool present() const { return kind != Kind::absent && kind != Kind::unknown; }
  // Any value but null, false, "" (and 0, which says "not yet" as often as not).
  bool truthy() const {
    switch (kind) {
      case Kind::string: return !text.empty();
      case Kind::number: return text != "0";
      case Kind::boolean: return text == "true";
      case Kind::container: return true;
      default: return false;
    }
  }
};

std::string unescape_token(std::string_view t) {
  std::string out;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '~' && i + 1 < t.size()) {
      out.push_back(t[++i] == '1' ? '/' : '~');
    } else {
      out.push_back(t[i]);
    }
  }
  return out;
}

std::vector<std::string> tokens_of(std::string_view pointer) {
  std::vector<std::string> out;
  while (!pointer.empty()) {
    pointer.remove_prefix(1);  // the '/'
    const std::size_t next = pointer.find('/');
    out.push_back(unescape_token(pointer.substr(0, next)));
    pointer.remove_prefix(next == std::string_view::npos ? pointer.size() : next);
  }
  return out;
}

// ---- a whole event ---------------------------------------------------------

Value from_element(simdjson::dom::element e) {
  namespace dom = simdjson::dom;
  Value v;
  switch (e.type()) {
    case dom::element_type::STRING: {
      const std::string_view s(e);
      v.kind = Value::Kind::string;
      v.text.assign(s.substr(0, kMaxString));
      v.length = s.size();
      break;
    }
    case dom::element_type::UINT64: v.kind = Value::Kind::number, v.text = std::to_string(std::uint64_t(e)); break;
    case dom::element_type::INT64: v.kind = Value::Kind::number, v.text = std::to_string(std::int64_t(e)); break;
    case dom::element_type::DOUBLE: v.kind = Value::Kind::number, v.text = std::to_string(double(e)); break;
    case dom::element_type::BOOL: v.kind = Value::Kind::boolean, v.text = bool(e) ? "true" : "false"; break;
    case dom::element_type::NULL_VALUE: v.kind = Value::Kind::null; break;
    case dom::element_type::OBJECT:
    case dom::element_type::ARRAY: v.kind = Value::Kind::container; break;
  }
  return v;
}

Value at_pointer(simdjson::dom::element doc, const std::string& pointer) {
  simdjson::dom::element e;
  if (pointer.empty() || doc.at_pointer(pointer).get(e)) return {};
  return from_element(e);
}

// ---- a cut event -------------------------------------------------------------

class PrefixWalk {
 public:
  explicit PrefixWalk(std::string_view s) : s_(s) {}

  Value at(const std::vector<std::string>& tokens) {
    for (const std::string& token : tokens) {
      skip_ws();
      if (i_ >= s_.size()) return unknown();
      const char c = s_[i_];
      const Step step = c == '{' ? enter_member(token) : c == '[' ? enter_element(token) : Step::absent;
      if (step != Step::found) return step == Step::absent ? Value{} : unknown();
    }
    return value();
  }

 private:
  enum class Step : std::uint8_t { found, absent, cut };
  static Value unknown() {
    Value v;
    v.kind = Value::Kind::unknown;
    return v;
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  // At a '"': the raw body; false when the text ends inside it.
  bool string(std::string_view* body) {
    const std::size_t close = json_text::string_body_end(s_, i_ + 1);
    if (close == std::string_view::npos) {
      *body = s_.substr(i_ + 1);
      i_ = s_.size();
      return false;
    }
    *body = s_.substr(i_ + 1, close - i_ - 1);
    i_ = close + 1;
    return true;
  }
  // Skips one value; false when the text ends inside it.
  bool skip_value() {
    skip_ws();
    int depth = 0;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '"') {
        std::string_view ignored;
        if (!string(&ignored)) return false;
      } else if (c == '{' || c == '[') {
        if (++depth > 64) return false;
        ++i_;
      } else if (c == '}' || c == ']') {
        if (depth == 0) return true;  // the end of the enclosing container
        --depth;
        ++i_;
      } else if (c == ',' && depth == 0) {
        return true;
      } else {
        ++i_;
      }
      if (depth == 0 && (c == '"' || c == '}' || c == ']')) return true;
    }
    return false;
  }
  // After a value inside a container: ',' goes on, the closer ends it.
  Step next_item(char closer) {
    skip_ws();
    if (i_ >= s_.size()) return Step::cut;
    if (s_[i_] == closer) return Step::absent;
    if (s_[i_] != ',') return Step::absent;  // malformed: nothing more is proven
    ++i_;
    return Step::found;
  }
  Step enter_member(const std::string& token) {
    ++i_;
    while (true) {
      skip_ws();
      if (i_ >= s_.size()) return Step::cut;
      if (s_[i_] == '}') return Step::absent;
      std::string_view key;
      if (s_[i_] != '"') return Step::absent;
      if (!string(&key)) return Step::cut;
      skip_ws();
      if (i_ >= s_.size()) return Step::cut;
      if (s_[i_++] != ':') return Step::absent;
      if (key == token) return Step::found;
      if (!skip_value()) return Step::cut;
      if (const Step s = next_item('}'); s != Step::found) return s;
    }
  }
  Step enter_element(const std::string& token) {
    if (token.empty() || token.size() > 9 || !std::all_of(token.begin(), token.end(), ::isdigit) ||
        (token.size() > 1 && token[0] == '0'))
      return Step::absent;  // "-" and non-indices name no element
    const std::size_t index = std::stoul(token);
    ++i_;
    for (std::size_t k = 0;; ++k) {
      skip_ws();
      if (i_ >= s_.size()) return Step::cut;
      if (s_[i_] == ']') return Step::absent;
      if (k == index) return Step::found;
      if (!skip_value()) return Step::cut;
      if (const Step s = next_item(']'); s != Step::found) return s;
    }
  }
  Value value() {
    skip_ws();
    Value v;
    if (i_ >= s_.size()) return unknown();
    const char c = s_[i_];
    if (c == '"') {
      std::string_view body;
      v.kind = Value::Kind::string;
      v.complete = string(&body);
      v.text.assign(body.substr(0, kMaxString));
      v.length = json_text::decoded_length(body);
      return v;
    }
    if (c == '{' || c == '[') {
      v.kind = Value::Kind::container;
      return v;
    }
    const std::size_t start = i_;
    while (i_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[i_])) != 0) ++i_;
    while (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == '-' || s_[i_] == '+' ||
                              std::isalnum(static_cast<unsigned char>(s_[i_])) != 0))
      ++i_;
    if (i_ >= s_.size()) return unknown();  // 12 could be 123, tru could be true
    v.text.assign(s_.substr(start, i_ - start));
    v.kind = v.text == "null"                       ? Value::Kind::null
             : v.text == "true" || v.text == "false" ? Value::Kind::boolean
                                                     : Value::Kind::number;
    return v;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

struct Reader {
  bool whole = false;
  simdjson::dom::element doc;
  std::string_view text;
  Value at(const std::string& pointer) const {
    if (pointer.empty()) return {};
    if (whole) return at_pointer(doc, pointer);
    return PrefixWalk(text).at(tokens_of(pointer));
  }
};

bool finishes(const DeclaredFormat& f, const Value& v) {
  if (!v.present()) return false;
  if (f.finish_value) return v.complete && v.text == *f.finish_value;
  return v.complete && v.truthy();
}

// A token count: a whole number of digits alone (a cut one, an empty one
// from a malformed event, a sign, a fraction or one past 64 bits is none).
std::optional<std::uint64_t> count_of(const Value& v) {
  if (v.kind != Value::Kind::number || !v.complete || v.text.empty() ||
      v.text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.text.data(), v.text.data() + v.text.size(), n);
  if (ec != std::errc() || end != v.text.data() + v.text.size()) return std::nullopt;
  return n;
}

void classify(const DeclaredFormat& f, const Reader& r, EventMeaning& m) {
  const Value error = r.at(f.error);
  const Value content = r.at(f.content);
  m.ends_stream = finishes(f, r.at(f.finish));
  if (const Value v = r.at(f.finish_reason); v.kind == Value::Kind::string && v.complete) m.finish_reason = v.text;
  if (const Value v = r.at(f.model); v.kind == Value::Kind::string && v.complete) m.model = v.text;
  if (const Value v = r.at(f.response_id); v.kind == Value::Kind::string && v.complete) m.response_id = v.text;
  m.completion_tokens = count_of(r.at(f.tokens));
  m.prompt_tokens = count_of(r.at(f.prompt_tokens));
  if (content.kind == Value::Kind::string) {
    m.output_length = content.length;
    m.output_cut = !content.complete;
  }
  if (error.present() && error.truthy()) {
    m.kind = EventKind::error;
    if (error.kind == Value::Kind::string && error.complete) m.error_type = error.text;
  } else if (content.kind == Value::Kind::string && content.length > 0) {
    m.kind = EventKind::content;
  } else if (content.kind == Value::Kind::unknown) {
    m.kind = m.ends_stream ? EventKind::done : EventKind::unparsed;  // the head does not prove what it carried
  } else if (m.ends_stream) {
    m.kind = EventKind::done;
  } else {
    m.kind = m.completion_tokens ? EventKind::usage_only : EventKind::empty;
  }
  if (!f.cumulative) m.output_length.reset();
}

}  // namespace

std::string json_pointer_problem(std::string_view pointer) {
  if (pointer.empty() || pointer.front() != '/') {
    return "must be a JSON pointer starting with '/' (RFC 6901, e.g. \"/choices/0/text\"), got '" +
           std::string(pointer) + "'";
  }
  for (std::size_t i = 0; i < pointer.size(); ++i) {
    if (pointer[i] != '~') continue;
    if (i + 1 >= pointer.size() || (pointer[i + 1] != '0' && pointer[i + 1] != '1')) {
      return "'~' must be followed by 0 or 1 (RFC 6901: \"~0\" is '~', \"~1\" is '/'), got '" + std::string(pointer) +
             "'";
    }
  }
  return "";
}

std::string_view media_type(std::string_view content_type) {
  content_type = content_type.substr(0, content_type.find(';'));
  while (!content_type.empty() && (content_type.back() == ' ' || content_type.back() == '\t'))
    content_type.remove_suffix(1);
  return content_type;
}

std::shared_ptr<const DeclaredFormat> match_declared(const DeclaredFormats& formats, std::string_view path,
                                                     std::string_view media, bool websocket) {
  if (formats.empty()) return nullptr;
  const std::string p(path.substr(0, path.find_first_of("?#")));
  const std::string m(media);
  for (const auto& f : formats) {
    if (f->framing && (*f->framing == EventFraming::websocket) != websocket) continue;
    if (fnmatch(f->path.c_str(), p.c_str(), 0) != 0) continue;
    if (!f->content_type.empty() && fnmatch(f->content_type.c_str(), m.c_str(), 0) != 0) continue;
    return f;
  }
  return nullptr;
}

EventMeaning interpret_declared(const DeclaredFormat& format, std::string_view data, bool truncated) {
  EventMeaning m;
  m.dialect = Dialect::declared;
  const std::string_view body = json_text::trim_ws(data);
  if (body == "[DONE]") {  // SSE streams often end so, whatever their events say
    m.kind = EventKind::done;
    m.ends_stream = true;
    m.from_partial = truncated;
    return m;
  }
  m.from_partial = truncated;
  if (body.empty() || (body.front() != '{' && body.front() != '[')) return m;  // unparsed
  Reader r;
  r.text = body;
  r.whole = (!truncated || body.back() == '}' || body.back() == ']') && json_text::parse(body, &r.doc);
  // A cut event is partial even when its captured bytes parse: what was cut
  // is unknown (as interpret_event says of its dialects).
  m.from_partial = truncated || !r.whole;
  classify(format, r, m);
  return m;
}

}  // namespace infertap::protocol
