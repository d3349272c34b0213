#include "protocol/websocket/realtime.h"

#include <array>

namespace infertap::protocol::websocket {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Walks a JSON object's prefix, keeping the keys of the objects it is in.
class Scanner {
 public:
  Scanner(std::string_view s, MessageFacts& f) : s_(s), f_(f) {}

  void scan() {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '{') object();
  }

 private:
  void skip_ws() {
    while (i_ < s_.size() && is_ws(s_[i_])) ++i_;
  }
  bool at(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }

  // At an opening quote: the raw body, and whether the text closes it.
  std::string_view string(bool* closed) {
    const std::size_t begin = ++i_;
    for (;;) {
      const std::size_t q = s_.find_first_of("\"\\", i_);
      if (q == std::string_view::npos || (s_[q] == '\\' && q + 1 >= s_.size())) {
        i_ = s_.size();
        *closed = false;
        return s_.substr(begin);
      }
      if (s_[q] == '"') {
        i_ = q + 1;
        *closed = true;
        return s_.substr(begin, q - begin);
      }
      i_ = q + 2;  // an escape hides the next character, quotes included
    }
  }

  // False when the text ends (or stops being JSON) before the object does.
  bool object() {
    ++i_;
    if (at('}')) {
      ++i_;
      return true;
    }
    for (;;) {
      if (!at('"')) return false;
      bool closed = false;
      const std::string_view key = string(&closed);
      if (!closed || !at(':')) return false;
      ++i_;
      if (!value(key)) return false;
      if (at(',')) {
        ++i_;
        continue;
      }
      if (!at('}')) return false;
      ++i_;
      return true;
    }
  }

  bool value(std::string_view key) {
    skip_ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{' && depth_ < kMaxDepth) {
      path_[depth_++] = key;
      const bool ok = object();
      --depth_;
      return ok;
    }
    if (c == '{' || c == '[') return skip_container();
    if (c == '"') {
      const std::size_t body = i_ + 1;
      bool closed = false;
      const std::string_view v = string(&closed);
      on_string(key, v, body, closed);
      return closed;
    }
    const std::size_t begin = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']' && !is_ws(s_[i_])) ++i_;
    if (i_ >= s_.size()) return false;  // a number the text cut may have had more digits
    on_scalar(key, s_.substr(begin, i_ - begin));
    return true;
  }

  // Objects and arrays nobody reads: skipped, strings and all.
  bool skip_container() {
    std::size_t open = 0;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '"') {
        bool closed = false;
        string(&closed);
        if (!closed) return false;
        continue;
      }
      ++i_;
      if (c == '{' || c == '[') ++open;
      if ((c == '}' || c == ']') && --open == 0) return true;
    }
    return false;
  }

  bool in(std::initializer_list<std::string_view> keys) const {
    if (keys.size() != depth_) return false;
    std::size_t k = 0;
    for (std::string_view want : keys) {
      if (path_[k++] != want) return false;
    }
    return true;
  }

  void on_string(std::string_view key, std::string_view v, std::size_t body, bool closed) {
    if (depth_ == 0 && key == "delta") {
      f_.delta_at = body;
      if (closed) f_.delta_length = v.size();
      for (char c : v) f_.delta_escapes += c == '\\';
    }
    if (!closed) return;
    if (depth_ == 0 && key == "type") f_.type = v;
    if (depth_ == 0 && key == "response_id") f_.response_id = v;
    if (in({"response"}) && key == "id" && f_.response_id.empty()) f_.response_id = v;
    if (in({"session"}) && key == "output_audio_format") f_.audio_format = v;
    if (in({"session", "audio", "output"}) && key == "format") f_.audio_format = v;
    if (in({"session", "audio", "output", "format"}) && key == "type") f_.audio_format = v;
  }

  void on_scalar(std::string_view key, std::string_view v) {
    if (!in({"session", "audio", "output", "format"}) || key != "rate" || v.empty() || v.size() > 9) return;
    std::uint32_t rate = 0;
    for (char c : v) {
      if (c < '0' || c > '9') return;
      rate = rate * 10 + static_cast<std::uint32_t>(c - '0');
    }
    f_.audio_rate = rate;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  MessageFacts& f_;
  std::array<std::string_view, kMaxDepth> path_{};
  std::size_t depth_ = 0;
};

}  // namespace

MessageFacts read_message(std::string_view text) {
  MessageFacts f;
  Scanner(text, f).scan();
  return f;
}

bool is_response_message(std::string_view type) { return type.starts_with("response."); }

bool is_audio_delta(std::string_view type) {
  return type == "response.output_audio.delta" || type == "response.audio.delta";
}

bool is_session_message(std::string_view type) { return type == "session.created" || type == "session.updated"; }

std::optional<AudioFormat> audio_format(const MessageFacts& f) {
  const std::string_view name = f.audio_format;
  if (name == "pcm16") return AudioFormat{24000, 2};
  if (name == "audio/pcm") return AudioFormat{f.audio_rate ? f.audio_rate : 24000, 2};
  if (name == "g711_ulaw" || name == "g711_alaw" || name == "audio/pcmu" || name == "audio/pcma") {
    return AudioFormat{8000, 1};
  }
  return std::nullopt;
}

std::uint64_t audio_bytes(const MessageFacts& f, std::string_view text, std::uint64_t whole_length) {
  if (!f.delta_at) return 0;
  std::uint64_t chars = 0, padding = 0;
  if (f.delta_length) {
    // Each escape ("\/") is two raw bytes for one base64 character.
    chars = *f.delta_length - f.delta_escapes;
    const std::string_view body = text.substr(*f.delta_at, *f.delta_length);
    for (std::size_t i = body.size(); i > 0 && body[i - 1] == '=' && padding < 2; --i) ++padding;
  } else {
    constexpr std::uint64_t kAfterDelta = 2;  // its closing quote and the object's brace
    const std::uint64_t end = whole_length >= kAfterDelta ? whole_length - kAfterDelta : 0;
    const std::uint64_t raw = end > *f.delta_at ? end - *f.delta_at : 0;
    chars = raw > f.delta_escapes ? raw - f.delta_escapes : 0;
  }
  const std::uint64_t decoded = chars * 3 / 4;
  return decoded > padding ? decoded - padding : 0;
}

}  // namespace infertap::protocol::websocket
