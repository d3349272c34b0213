// Meaning of inference-stream events. Two readers feed one fact collector:
//  * complete JSON: simdjson DOM (runtime-dispatched SIMD kernel), walking
//    only keys we know and the arrays under them (choices, tool_calls);
//  * cut JSON: a prefix scanner that tokenises as far as the bytes go, string
//    and escape aware, so a key name inside a string value never matches. A
//    string cut by the end of the capture is reported as incomplete: it proves
//    "non-empty" if it has a character, but its value is never reported as a
//    whole (a cut model name is not a model name). Numbers cut at the end are
//    ignored (12 could be 123). Containers cut at the end are never "closed".
#include "protocol/payload/interpreter.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace infertap::protocol {

std::string_view to_string(EventKind k) {
  switch (k) {
    case EventKind::content: return "content";
    case EventKind::role_only: return "role_only";
    case EventKind::empty: return "empty";
    case EventKind::usage_only: return "usage_only";
    case EventKind::done: return "done";
    case EventKind::error: return "error";
    case EventKind::control: return "control";
    case EventKind::unparsed: return "unparsed";
  }
  return "unknown";
}

std::string_view to_string(Dialect d) {
  switch (d) {
    case Dialect::unknown: return "unknown";
    case Dialect::openai: return "openai";
    case Dialect::openai_responses: return "openai_responses";
    case Dialect::anthropic: return "anthropic";
  }
  return "unknown";
}

namespace {

constexpr std::size_t kMaxString = 128;

// ---------------------------------------------------------------------------
// Keys we care about, interned so that paths compare as small integers.

enum class Key : std::uint8_t {
  other,
  element,  // array element
  type,
  id,
  model,
  object,
  choices,
  delta,
  content,
  reasoning_content,
  reasoning,
  refusal,
  tool_calls,
  function_call,
  role,
  finish_reason,
  text,
  usage,
  prompt_tokens,
  completion_tokens,
  input_tokens,
  output_tokens,
  error,
  code,
  message,
  thinking,
  partial_json,
  stop_reason,
  response,
  status,
  stream,
  max_tokens,
  max_completion_tokens,
  max_output_tokens,
  system_fingerprint,
  stream_options,
  include_usage,
};

// Called for every key of every event: dispatch on length, then compare the
// few names of that length (constant-size compares the compiler inlines).
Key lookup_key(std::string_view k) {
  switch (k.size()) {
    case 2: return k == "id" ? Key::id : Key::other;
    case 4:
      if (k == "type") return Key::type;
      if (k == "text") return Key::text;
      if (k == "role") return Key::role;
      if (k == "code") return Key::code;
      return Key::other;
    case 5:
      if (k == "delta") return Key::delta;
      if (k == "model") return Key::model;
      if (k == "usage") return Key::usage;
      if (k == "error") return Key::error;
      return Key::other;
    case 6:
      if (k == "object") return Key::object;
      if (k == "status") return Key::status;
      if (k == "stream") return Key::stream;
      return Key::other;
    case 7:
      if (k == "content") return Key::content;
      if (k == "choices") return Key::choices;
      if (k == "message") return Key::message;
      if (k == "refusal") return Key::refusal;
      return Key::other;
    case 8:
      if (k == "response") return Key::response;
      if (k == "thinking") return Key::thinking;
      return Key::other;
    case 9: return k == "reasoning" ? Key::reasoning : Key::other;
    case 10:
      if (k == "tool_calls") return Key::tool_calls;
      if (k == "max_tokens") return Key::max_tokens;
      return Key::other;
    case 11: return k == "stop_reason" ? Key::stop_reason : Key::other;
    case 12:
      if (k == "partial_json") return Key::partial_json;
      if (k == "input_tokens") return Key::input_tokens;
      return Key::other;
    case 13:
      if (k == "finish_reason") return Key::finish_reason;
      if (k == "output_tokens") return Key::output_tokens;
      if (k == "prompt_tokens") return Key::prompt_tokens;
      if (k == "function_call") return Key::function_call;
      if (k == "include_usage") return Key::include_usage;
      return Key::other;
    case 14: return k == "stream_options" ? Key::stream_options : Key::other;
    case 17:
      if (k == "reasoning_content") return Key::reasoning_content;
      if (k == "completion_tokens") return Key::completion_tokens;
      if (k == "max_output_tokens") return Key::max_output_tokens;
      return Key::other;
    case 18: return k == "system_fingerprint" ? Key::system_fingerprint : Key::other;
    case 21: return k == "max_completion_tokens" ? Key::max_completion_tokens : Key::other;
    default: return Key::other;
  }
}

// Deeper than this nothing we need lives; deeper keys are not tracked.
constexpr std::size_t kMaxPath = 5;

struct Path {
  std::array<Key, kMaxPath> keys{};
  std::size_t depth = 0;
  // Paths deeper than kMaxPath or through an unknown key are "untracked".
  bool tracked = true;

  bool is(std::initializer_list<Key> want) const {
    if (!tracked || want.size() != depth) return false;
    return std::equal(want.begin(), want.end(), keys.begin());
  }
  // Path starts with `prefix` and has exactly extra more keys.
  bool under(std::initializer_list<Key> prefix, std::size_t extra) const {
    if (!tracked || depth != prefix.size() + extra) return false;
    return std::equal(prefix.begin(), prefix.end(), keys.begin());
  }
  Key last() const { return depth > 0 ? keys[depth - 1] : Key::other; }
};

// Scoped push of one path segment.
class PathPush {
 public:
  PathPush(Path& path, Key key) : path_(path), saved_tracked_(path.tracked) {
    if (path_.depth < kMaxPath && key != Key::other && path_.tracked) {
      path_.keys[path_.depth] = key;
    } else {
      path_.tracked = false;
    }
    ++path_.depth;
  }
  ~PathPush() {
    --path_.depth;
    path_.tracked = saved_tracked_;
  }
  PathPush(const PathPush&) = delete;
  PathPush& operator=(const PathPush&) = delete;

 private:
  Path& path_;
  bool saved_tracked_;
};

// A string value as seen: complete, or the captured prefix of a cut one.
struct Str {
  std::string_view value;
  bool complete = false;
  bool seen = false;
  void set(std::string_view v, bool c) {
    value = v;
    complete = c;
    seen = true;
  }
  bool nonempty() const { return seen && !value.empty(); }
  bool empty_complete() const { return seen && complete && value.empty(); }
  std::string_view proven() const { return seen && complete ? value : std::string_view{}; }
};

// ---------------------------------------------------------------------------
// Facts of one event payload, gathered from either reader.

struct EventFacts {
  Str type, id, model, object, finish_reason, system_fingerprint;
  Str error_type, error_code, error_message_str, top_code;
  Str msg_id, msg_model;
  Str resp_id, resp_model, resp_status, resp_error_code;
  Str delta_type, delta_string;
  std::string top_code_number;  // numeric "code" (vLLM error responses) rendered as text
  std::string error_code_number;
  std::optional<std::uint64_t> prompt_tokens, completion_tokens;
  bool error_seen = false;
  bool choices_seen = false, choices_closed = false;
  std::uint32_t choices_count = 0;
  bool delta_closed = false;
  bool content = false;        // a content signal was proven
  bool content_empty = false;  // a content field was present and empty
  bool role = false;

  void on_begin(const Path& p, bool is_array) {
    if (!p.tracked) return;
    if (p.is({Key::choices}) && is_array) choices_seen = true;
    if (p.is({Key::error})) error_seen = true;
    if (p.is({Key::choices, Key::element, Key::delta, Key::function_call})) content = true;
    if (p.is({Key::choices, Key::element, Key::delta, Key::tool_calls, Key::element})) content = true;
  }
  void on_end(const Path& p, bool is_array, std::uint32_t count) {
    if (!p.tracked) return;
    if (p.is({Key::choices}) && is_array) {
      choices_closed = true;
      choices_count = count;
    }
    if (p.is({Key::choices, Key::element, Key::delta}) && !is_array) delta_closed = true;
  }
  void on_string(const Path& p, std::string_view v, bool complete) {
    if (!p.tracked) return;
    switch (p.depth) {
      case 1:
        switch (p.last()) {
          case Key::type: type.set(v, complete); break;
          case Key::id: id.set(v, complete); break;
          case Key::model: model.set(v, complete); break;
          case Key::object: object.set(v, complete); break;
          case Key::system_fingerprint: system_fingerprint.set(v, complete); break;
          case Key::code: top_code.set(v, complete); break;
          case Key::error:
            error_seen = true;
            error_message_str.set(v, complete);
            break;
          case Key::delta:  // Responses API: "delta":"text"
            delta_string.set(v, complete);
            break;
          default: break;
        }
        return;
      case 2:
        if (p.is({Key::error, Key::type})) error_type.set(v, complete);
        if (p.is({Key::error, Key::code})) error_code.set(v, complete);
        if (p.is({Key::message, Key::id})) msg_id.set(v, complete);
        if (p.is({Key::message, Key::model})) msg_model.set(v, complete);
        if (p.is({Key::response, Key::id})) resp_id.set(v, complete);
        if (p.is({Key::response, Key::model})) resp_model.set(v, complete);
        if (p.is({Key::response, Key::status})) resp_status.set(v, complete);
        if (p.is({Key::delta, Key::type})) delta_type.set(v, complete);
        if (p.is({Key::delta, Key::stop_reason})) finish_reason.set(v, complete);
        if (p.is({Key::delta, Key::text}) || p.is({Key::delta, Key::thinking}) ||
            p.is({Key::delta, Key::partial_json})) {
          note_content(v, complete);
        }
        return;
      case 3:
        if (p.is({Key::choices, Key::element, Key::finish_reason})) finish_reason.set(v, complete);
        if (p.is({Key::choices, Key::element, Key::text})) note_content(v, complete);
        if (p.is({Key::response, Key::error, Key::code})) resp_error_code.set(v, complete);
        return;
      case 4:
        if (p.under({Key::choices, Key::element, Key::delta}, 1)) {
          switch (p.last()) {
            case Key::content:
            case Key::reasoning_content:
            case Key::reasoning:
            case Key::refusal: note_content(v, complete); break;
            case Key::role: role = true; break;
            default: break;
          }
        }
        if (p.is({Key::choices, Key::element, Key::message, Key::content})) note_content(v, complete);
        return;
      default: return;
    }
  }
  void on_uint(const Path& p, std::uint64_t v) {
    if (!p.tracked) return;
    const Key k = p.last();
    const bool usage = p.is({Key::usage, k}) || p.is({Key::message, Key::usage, k}) ||
                       p.is({Key::response, Key::usage, k});
    if (usage) {
      if (k == Key::prompt_tokens || k == Key::input_tokens) prompt_tokens = v;
      if (k == Key::completion_tokens || k == Key::output_tokens) completion_tokens = v;
    }
    if (p.is({Key::code})) top_code_number = std::to_string(v);
    if (p.is({Key::error, Key::code})) error_code_number = std::to_string(v);
  }
  void on_bool(const Path&, bool) {}
  void on_null(const Path&) {}

 private:
  void note_content(std::string_view v, bool complete) {
    if (!v.empty()) {
      content = true;
    } else if (complete) {
      content_empty = true;
    }
  }
};

struct RequestFacts {
  Str model;
  std::optional<bool> stream, include_usage;
  std::optional<std::uint64_t> max_tokens;

  void on_begin(const Path&, bool) {}
  void on_end(const Path&, bool, std::uint32_t) {}
  void on_string(const Path& p, std::string_view v, bool complete) {
    if (p.is({Key::model})) model.set(v, complete);
  }
  void on_uint(const Path& p, std::uint64_t v) {
    if (p.is({Key::max_tokens}) || p.is({Key::max_completion_tokens}) || p.is({Key::max_output_tokens})) {
      max_tokens = v;
    }
  }
  void on_bool(const Path& p, bool b) {
    if (p.is({Key::stream})) stream = b;
    if (p.is({Key::stream_options, Key::include_usage})) include_usage = b;
  }
  void on_null(const Path&) {}
};

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
      // Only elements of arrays we track are looked into (choices, tool_calls).
      const bool descend = path.tracked && path.depth < kMaxPath &&
                           (path.last() == Key::choices || path.last() == Key::tool_calls);
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
  thread_local dom::parser parser;
  thread_local std::string padded;  // reused: no allocation per event
  if (padded.capacity() < text.size() + simdjson::SIMDJSON_PADDING) {
    padded.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  }
  padded.assign(text);
  dom::element doc;
  if (parser.parse(padded.data(), text.size(), false).get(doc)) return false;
  if (doc.type() != dom::element_type::OBJECT) return false;
  Path path;
  walk_object(dom::object(doc), path, facts);
  return true;
}

std::string_view trim_ws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

void assign_capped(std::string& out, std::string_view v) { out.assign(v.substr(0, kMaxString)); }

bool is_anthropic_type(std::string_view t) {
  return t == "message_start" || t == "message_delta" || t == "message_stop" || t == "content_block_start" ||
         t == "content_block_delta" || t == "content_block_stop" || t == "ping" || t == "error";
}

bool is_responses_content_delta(std::string_view t) {
  return t == "response.output_text.delta" || t == "response.reasoning_text.delta" ||
         t == "response.reasoning_summary_text.delta" || t == "response.function_call_arguments.delta" ||
         t == "response.refusal.delta" || t == "response.custom_tool_call_input.delta";
}

std::string_view first_nonempty(std::initializer_list<std::string_view> values) {
  for (std::string_view v : values)
    if (!v.empty()) return v;
  return {};
}

void classify_openai(const EventFacts& f, bool partial, EventMeaning& m) {
  m.dialect = Dialect::openai;
  assign_capped(m.response_id, f.id.proven());
  assign_capped(m.model, f.model.proven());
  assign_capped(m.finish_reason, f.finish_reason.proven());
  assign_capped(m.system_fingerprint, f.system_fingerprint.proven());
  if (f.error_seen || f.object.proven() == "error") {
    m.kind = EventKind::error;
    // vLLM-style error responses carry the type at top level.
    const std::string_view top_type = f.object.proven() == "error" ? f.type.proven() : std::string_view{};
    assign_capped(m.error_type, first_nonempty({f.error_type.proven(), f.error_code.proven(), f.error_code_number,
                                                top_type, f.top_code.proven(), f.top_code_number}));
    return;
  }
  if (f.content) {
    m.kind = EventKind::content;
  } else if (f.choices_closed && f.choices_count == 0) {
    if (f.completion_tokens || f.prompt_tokens) {
      m.kind = EventKind::usage_only;
    } else {
      m.kind = partial ? EventKind::unparsed : EventKind::empty;
    }
  } else if (f.delta_closed || !partial) {
    m.kind = f.role ? EventKind::role_only : EventKind::empty;
  } else {
    m.kind = EventKind::unparsed;  // the head does not prove what the chunk carried
  }
}

void classify_anthropic(std::string_view type, const EventFacts& f, bool partial, EventMeaning& m) {
  m.dialect = Dialect::anthropic;
  if (type == "message_start") {
    m.kind = EventKind::control;
    assign_capped(m.response_id, f.msg_id.proven());
    assign_capped(m.model, f.msg_model.proven());
  } else if (type == "content_block_delta") {
    const std::string_view delta_type = f.delta_type.proven();
    if (f.content) {
      m.kind = EventKind::content;
    } else if (!delta_type.empty() && delta_type != "text_delta" && delta_type != "thinking_delta" &&
               delta_type != "input_json_delta") {
      m.kind = EventKind::control;  // signature_delta, citations_delta: no generated tokens
    } else if (!partial || f.content_empty) {
      m.kind = EventKind::empty;
    } else {
      m.kind = EventKind::unparsed;
    }
  } else if (type == "message_delta") {
    m.kind = EventKind::control;
    assign_capped(m.finish_reason, f.finish_reason.proven());
  } else if (type == "message_stop") {
    m.kind = EventKind::done;
  } else if (type == "error") {
    m.kind = EventKind::error;
    assign_capped(m.error_type, f.error_type.proven());
  } else {
    m.kind = EventKind::control;  // ping, content_block_start/stop
  }
}

void classify_responses(std::string_view type, const EventFacts& f, bool partial, EventMeaning& m) {
  m.dialect = Dialect::openai_responses;
  assign_capped(m.response_id, f.resp_id.proven());
  assign_capped(m.model, f.resp_model.proven());
  if (is_responses_content_delta(type)) {
    if (f.delta_string.nonempty()) {
      m.kind = EventKind::content;
    } else if (f.delta_string.empty_complete() || !partial) {
      m.kind = EventKind::empty;
    } else {
      m.kind = EventKind::unparsed;
    }
  } else if (type == "response.completed" || type == "response.incomplete") {
    m.kind = EventKind::done;
    assign_capped(m.finish_reason, f.resp_status.proven());
  } else if (type == "response.failed") {
    m.kind = EventKind::error;
    assign_capped(m.error_type, f.resp_error_code.proven());
  } else if (type == "error") {
    m.kind = EventKind::error;
    assign_capped(m.error_type, first_nonempty({f.top_code.proven(), f.top_code_number}));
  } else {
    m.kind = EventKind::control;
  }
}

}  // namespace

EventMeaning interpret_event(std::string_view event_type, std::string_view data, bool truncated) {
  EventMeaning meaning;
  const std::string_view body = trim_ws(data);
  if (body == "[DONE]") {
    meaning.kind = EventKind::done;
    meaning.dialect = Dialect::openai;
    meaning.from_partial = truncated;
    return meaning;
  }

  EventFacts facts;
  bool parsed = false;
  bool partial = truncated;
  if (!body.empty() && body.front() == '{') {
    // A truncated payload goes to simdjson too: if the captured bytes still
    // form one whole object, everything it says was captured.
    // A cut payload rarely ends in '}': spare simdjson the attempt.
    parsed = (!truncated || body.back() == '}') && parse_complete(body, facts);
    if (!parsed) {
      facts = EventFacts{};
      partial = true;
      parsed = PrefixScanner<EventFacts>(body, facts).scan();
    }
  }
  meaning.from_partial = partial;

  // The JSON "type" wins; the SSE event name stands in when it was cut or absent.
  std::string_view type = facts.type.proven();
  if (type.empty() && event_type != "message") type = event_type;

  const bool responses_error = type == "error" && !facts.error_seen &&
                               (facts.top_code.seen || !facts.top_code_number.empty());
  if (type.substr(0, 9) == "response." || responses_error) {
    classify_responses(type, facts, partial, meaning);
  } else if (is_anthropic_type(type)) {
    classify_anthropic(type, facts, partial, meaning);
  } else if (facts.choices_seen || facts.object.proven().starts_with("chat.completion") ||
             facts.object.proven() == "text_completion" || facts.error_seen || facts.object.proven() == "error") {
    classify_openai(facts, partial, meaning);
  } else if (!parsed) {
    meaning.kind = EventKind::unparsed;
  } else if (!partial && (facts.id.seen || facts.model.seen)) {
    classify_openai(facts, partial, meaning);  // a chunk without choices (some servers' keep-alives)
  } else {
    meaning.kind = EventKind::unparsed;
  }

  // Usage wherever the dialect puts it (all cumulative).
  meaning.prompt_tokens = facts.prompt_tokens;
  meaning.completion_tokens = facts.completion_tokens;
  return meaning;
}

namespace {

// End of a JSON string body starting at `from` (just past its opening quote):
// the index of the closing quote, or npos if the text ends first.
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

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// True if `body` is a string body simdjson accepts exactly as it would inside
// the memorised event: no raw control characters, only valid escapes, valid
// UTF-8. \u escapes of surrogates are left to a full parse (pairing rules).
bool plain_string_body(std::string_view body) {
  for (std::size_t i = 0; i < body.size(); ++i) {
    const auto c = static_cast<unsigned char>(body[i]);
    if (c < 0x20) return false;
    if (c != '\\') continue;
    if (++i >= body.size()) return false;
    switch (body[i]) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': break;
      case 'u': {
        int v = 0;
        for (int k = 1; k <= 4; ++k) {
          if (i + k >= body.size()) return false;
          const int h = hex_value(body[i + k]);
          if (h < 0) return false;
          v = v * 16 + h;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return false;
        i += 4;
        break;
      }
      default: return false;
    }
  }
  return simdjson::validate_utf8(body.data(), body.size());
}

// Where generated text sits in each dialect's token events.
constexpr std::array<std::string_view, 5> kTextKeys = {"\"content\":\"", "\"text\":\"", "\"thinking\":\"",
                                                       "\"reasoning_content\":\"", "\"delta\":\""};

}  // namespace

const EventMeaning& StreamEventInterpreter::interpret(std::string_view event_type, std::string_view data,
                                                      bool truncated) {
  if (has_memo_ && !truncated && event_type == memo_type_ && data.size() > memo_prefix_.size() + memo_suffix_.size() &&
      data.starts_with(memo_prefix_) && data.ends_with(memo_suffix_)) {
    const std::size_t close = string_body_end(data, memo_prefix_.size());
    // Non-empty text ending exactly where the memorised suffix begins.
    if (close == data.size() - memo_suffix_.size() && close > memo_prefix_.size() &&
        plain_string_body(data.substr(memo_prefix_.size(), close - memo_prefix_.size()))) {
      ++memo_hits_;
      return last_;
    }
  }
  last_ = interpret_event(event_type, data, truncated);
  has_memo_ = false;
  if (last_.kind == EventKind::content && !last_.from_partial && !last_.completion_tokens) learn(event_type, data);
  return last_;
}

void StreamEventInterpreter::learn(std::string_view event_type, std::string_view data) {
  // Exactly one text key in the event, or the shape is not one we memorise
  // (several choices, tool calls beside text, ...).
  for (std::string_view key : kTextKeys) {
    const std::size_t at = data.find(key);
    if (at == std::string_view::npos) continue;
    if (data.find(key, at + 1) != std::string_view::npos) return;
    const std::size_t body = at + key.size();
    const std::size_t close = string_body_end(data, body);
    if (close == std::string_view::npos || close == body) return;
    memo_type_.assign(event_type);
    memo_prefix_.assign(data.substr(0, body));
    memo_suffix_.assign(data.substr(close));
    has_memo_ = true;
    return;
  }
}

RequestMeaning interpret_request_body(std::string_view body_head) {
  RequestMeaning meaning;
  RequestFacts facts;
  const std::string_view body = trim_ws(body_head);
  if (body.empty() || body.front() != '{') return meaning;
  if (!parse_complete(body, facts)) {
    facts = RequestFacts{};
    PrefixScanner<RequestFacts>(body, facts).scan();
  }
  assign_capped(meaning.model, facts.model.proven());
  meaning.stream = facts.stream;
  meaning.include_usage = facts.include_usage;
  meaning.max_tokens = facts.max_tokens;
  return meaning;
}

}  // namespace infertap::protocol
