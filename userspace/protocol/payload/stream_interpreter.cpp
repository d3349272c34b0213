// The per-stream interpreter: the stream's dialect, "the text grew" for
// cumulative dialects, and the memo of the last token event's bytes with the
// values its meaning does not depend on left as holes.
#include <algorithm>
#include <array>
#include <span>
#include <string>

#include "protocol/payload/declared.h"
#include "protocol/payload/interpreter.h"
#include "protocol/payload/json_text.h"

namespace infertap::protocol {
namespace {

using json_text::plain_string_body;
using json_text::string_body_end;

// Values of a dialect's token events the meaning does not depend on. The text
// keys are tried in order, the first one present is the text (it must be
// non-empty); every other key present becomes a hole of its kind.
struct HoleKey {
  std::string_view key;  // "\"name\":"
  bool number;           // a number, else a string
};

constexpr std::array<std::string_view, 5> kOpenAiText = {"\"content\":", "\"text\":", "\"thinking\":",
                                                         "\"reasoning_content\":", "\"delta\":"};
constexpr std::array<std::string_view, 3> kOllamaText = {"\"content\":", "\"response\":", "\"thinking\":"};
constexpr std::array<HoleKey, 1> kOllamaHoles = {{{"\"created_at\":", false}}};
constexpr std::array<std::string_view, 1> kTgiText = {"\"text\":"};
constexpr std::array<HoleKey, 3> kTgiHoles = {{{"\"index\":", true}, {"\"id\":", true}, {"\"logprob\":", true}}};
constexpr std::array<std::string_view, 1> kLlamaText = {"\"content\":"};
constexpr std::array<HoleKey, 2> kLlamaHoles = {{{"\"index\":", true}, {"\"tokens_predicted\":", true}}};
constexpr std::array<std::string_view, 1> kTritonText = {"\"text_output\":"};
// Responses API deltas number every event of the stream.
constexpr std::array<std::string_view, 1> kResponsesText = {"\"delta\":"};
constexpr std::array<HoleKey, 1> kResponsesHoles = {{{"\"sequence_number\":", true}}};

struct Shape {
  std::span<const std::string_view> text;
  std::span<const HoleKey> holes;
};

// Dialects with counts in every event (Gemini) or cumulative text (SGLang,
// vLLM) are never memorised (interpret() checks the meaning).
Shape shape_of(Dialect d) {
  switch (d) {
    case Dialect::ollama: return {kOllamaText, kOllamaHoles};
    case Dialect::tgi: return {kTgiText, kTgiHoles};
    case Dialect::llamacpp: return {kLlamaText, kLlamaHoles};
    case Dialect::triton: return {kTritonText, {}};
    case Dialect::openai_responses: return {kResponsesText, kResponsesHoles};
    default: return {kOpenAiText, {}};
  }
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// End of the JSON number starting at s[from], or npos unless it is one that
// any JSON reader takes as the same kind of value (bounded digits, no huge
// exponent).
std::size_t number_end(std::string_view s, std::size_t from) {
  std::size_t i = from;
  if (i < s.size() && s[i] == '-') ++i;
  const std::size_t int_start = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  const std::size_t int_digits = i - int_start;
  if (int_digits == 0 || int_digits > 18 || (int_digits > 1 && s[int_start] == '0')) return std::string_view::npos;
  if (i < s.size() && s[i] == '.') {
    const std::size_t frac_start = ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i == frac_start || i - frac_start > 20) return std::string_view::npos;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const std::size_t exp_start = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i == exp_start || i - exp_start > 2) return std::string_view::npos;
  }
  return i;
}

// Where the value of `key` starts (after the colon and any spaces), when the
// key occurs exactly once; npos when absent, npos - 1 when it occurs twice.
constexpr std::size_t kTwice = std::string_view::npos - 1;
std::size_t value_of(std::string_view data, std::string_view key) {
  const std::size_t at = data.find(key);
  if (at == std::string_view::npos) return at;
  if (data.find(key, at + 1) != std::string_view::npos) return kTwice;
  std::size_t v = at + key.size();
  while (v < data.size() && data[v] == ' ') ++v;
  return v;
}

struct Span {
  std::size_t begin, end;
  bool number;
  bool text;
};

// The text hole: the first text key present, once, with a non-empty string.
bool find_text(std::string_view data, Shape shape, std::string_view declared_key, Span* out) {
  std::array<std::string_view, 1> declared = {declared_key};
  const std::span<const std::string_view> keys = declared_key.empty() ? shape.text : declared;
  for (std::string_view key : keys) {
    const std::size_t v = value_of(data, key);
    if (v == std::string_view::npos) continue;
    if (v == kTwice) return false;
    if (v >= data.size() || data[v] != '"') continue;  // null, a list: not where the text is
    const std::size_t close = string_body_end(data, v + 1);
    if (close == std::string_view::npos || close == v + 1) return false;
    *out = {v + 1, close, false, true};
    return true;
  }
  return false;
}

// At most this many values are holes (the text and a dialect's others).
constexpr std::size_t kMaxHoles = 4;
struct Spans {
  std::array<Span, kMaxHoles> at{};
  std::size_t n = 0;
};

// The other holes: each key present once with a value of its kind.
bool find_holes(std::string_view data, Shape shape, Spans& spans) {
  for (const HoleKey& h : shape.holes) {
    const std::size_t v = value_of(data, h.key);
    if (v == std::string_view::npos) continue;
    if (v == kTwice || v >= data.size() || spans.n == kMaxHoles) return false;
    if (h.number) {
      const std::size_t end = number_end(data, v);
      if (end == std::string_view::npos) return false;
      spans.at[spans.n++] = {v, end, true, false};
    } else {
      if (data[v] != '"') return false;
      const std::size_t close = string_body_end(data, v + 1);
      if (close == std::string_view::npos) return false;
      spans.at[spans.n++] = {v + 1, close, false, false};
    }
  }
  return true;
}

// The key a declared format's text lives under: the pointer's last token.
std::string declared_text_key(const DeclaredFormat* f) {
  if (!f || f->cumulative) return "";
  const std::string_view p = f->content;
  const std::string_view last = p.substr(p.rfind('/') + 1);
  if (last.empty() || last.find_first_of("~\"\\") != std::string_view::npos) return "";
  return "\"" + std::string(last) + "\":";
}

}  // namespace

void StreamEventInterpreter::begin(const StreamContext& context) {
  *this = StreamEventInterpreter{};
  path_hint_ = dialect_of_path(context.path);
  declared_ = context.declared;
  declared_key_ = declared_text_key(declared_.get());
  if (declared_) dialect_ = Dialect::declared;
  grpc_ = context.framing == EventFraming::grpc;
  if (grpc_) dialect_ = Dialect::grpc;
  // WebSocket messages are a realtime API's unless a declared format says otherwise.
  if (context.framing == EventFraming::websocket && !declared_) dialect_ = Dialect::openai_realtime;
}

const EventMeaning& StreamEventInterpreter::interpret(std::string_view event_type, std::string_view data,
                                                      bool truncated, std::uint32_t wire_bytes) {
  if (grpc_) {
    last_ = EventMeaning{};
    last_.kind = EventKind::content;
    last_.dialect = Dialect::grpc;
    return last_;
  }
  if (has_memo_ && !truncated && memo_matches(event_type, data)) {
    ++memo_hits_;
    return last_;
  }
  last_ = declared_ ? interpret_declared(*declared_, data, truncated)
                    : interpret_event(context(), event_type, data, truncated);
  if (dialect_ == Dialect::unknown) dialect_ = last_.dialect;
  note_growth(last_, wire_bytes);
  has_memo_ = false;
  if (last_.kind == EventKind::content && !last_.from_partial && !last_.completion_tokens && !last_.ends_stream &&
      !last_.output_length && dialect_ != Dialect::gemini)
    learn(event_type, data);
  return last_;
}

// Cumulative text: a token event is one whose output grew. Lengths compare
// when both events were whole; otherwise the wire tells (each event repeats
// the whole output, so it grows with every token).
void StreamEventInterpreter::note_growth(EventMeaning& m, std::uint32_t wire_bytes) {
  if (!m.output_length) return;
  const std::uint64_t length = *m.output_length;
  bool grew;
  if (m.output_cut || !output_exact_) {
    grew = (output_exact_ && length > output_length_) || wire_bytes > last_wire_;
  } else {
    grew = length > output_length_;
  }
  if (m.kind == EventKind::content && !grew) m.kind = m.ends_stream ? EventKind::done : EventKind::empty;
  output_length_ = length;
  output_exact_ = !m.output_cut;
  last_wire_ = wire_bytes;
}

bool StreamEventInterpreter::memo_matches(std::string_view event_type, std::string_view data) const {
  if (event_type != memo_type_ || !data.starts_with(segments_.front()) || !data.ends_with(segments_.back()))
    return false;
  std::size_t pos = segments_.front().size();
  for (std::size_t i = 0; i < holes_.size(); ++i) {
    std::size_t end;
    if (holes_[i] == Hole::number) {
      end = number_end(data, pos);
      if (end == std::string_view::npos) return false;
    } else {
      end = string_body_end(data, pos);
      if (end == std::string_view::npos || (holes_[i] == Hole::text && end == pos) ||
          !plain_string_body(data.substr(pos, end - pos)))
        return false;
    }
    const std::string& next = segments_[i + 1];
    if (data.compare(end, next.size(), next) != 0) return false;
    pos = end + next.size();
  }
  return pos == data.size();
}

void StreamEventInterpreter::learn(std::string_view event_type, std::string_view data) {
  const Shape shape = shape_of(dialect_);
  Spans spans;
  if (!find_text(data, shape, declared_key_, &spans.at[0])) return;
  spans.n = 1;
  if (!declared_ && !find_holes(data, shape, spans)) return;
  std::sort(spans.at.begin(), spans.at.begin() + spans.n,
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  // Strings and vectors are reused: a stream learns once per token event when its events keep changing.
  segments_.resize(spans.n + 1);
  holes_.resize(spans.n);
  std::size_t at = 0;
  for (std::size_t i = 0; i < spans.n; ++i) {
    const Span& s = spans.at[i];
    if (s.begin < at) return;  // overlapping values: not a shape we memorise
    segments_[i].assign(data.substr(at, s.begin - at));
    holes_[i] = s.text ? Hole::text : s.number ? Hole::number : Hole::string;
    at = s.end;
  }
  segments_[spans.n].assign(data.substr(at));
  memo_type_.assign(event_type);
  has_memo_ = true;
}

}  // namespace infertap::protocol
