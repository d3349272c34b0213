// The body of the per-dialect fuzzers (fuzz_dialect_*.cpp): one dialect's
// streams through StreamEventInterpreter, begun as the session begins it (the
// dialect's request path, media type and framing; a declared format's
// pointers), checked against a fresh interpretation of each event.
//
// Input: [control][bytes...]. Bit 0 of control picks the mode:
//   0  template: a token event of the dialect's recorded stream
//      (tools/native_formats.h; control bits 1..4 pick which) with its text
//      replaced by the bytes, between two unchanged ones: the memo path, with
//      quotes, escapes and bytes no JSON string holds.
//   1  raw: the bytes are the stream, one event per line (NDJSON) or per
//      blank line (SSE, "event:" lines naming the type); bit 1 marks every
//      other event cut by the capture.
// Bits 5..7 pick one of the dialect's formats (Ollama: chat or generate;
// declared: an NDJSON and a cumulative SSE format).
//
// Checks, for every event: the stream's answer equals a fresh interpret_event
// (interpret_declared) given the context the stream had (dialects whose text
// is cumulative: the same but for "the text grew", which only the stream
// knows); values stay capped; a stream's dialect, once shown, never changes;
// and every prefix of a short event read as cut says only what it proves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/payload/declared.h"
#include "protocol/payload/interpreter.h"
#include "tools/native_formats.h"

namespace infertap::fuzz {

// A failed check says which one before it aborts.
#define DIALECT_FUZZ_CHECK(cond, what)                            \
  do {                                                           \
    if (!(cond)) {                                               \
      std::fprintf(stderr, "dialect fuzz: %s\n", what);          \
      std::abort();                                              \
    }                                                            \
  } while (0)

using namespace infertap::protocol;
using tools::native::Format;
using tools::native::RecordedStream;

struct Event {
  std::string type, data;
};

// The events of a recorded stream, as the framers hand them over.
inline std::vector<Event> events_of(const RecordedStream& s) {
  std::vector<Event> out;
  for (std::size_t i = 0; i < s.wire.size(); ++i) {
    if (!s.event[i]) continue;
    Event e;
    std::string_view w = s.wire[i];
    if (s.framing == "ndjson") {
      e.data.assign(w.substr(0, w.find('\n')));
    } else {
      while (!w.empty()) {
        const std::size_t lf = w.find('\n');
        std::string_view line = w.substr(0, lf);
        w.remove_prefix(lf == std::string_view::npos ? w.size() : lf + 1);
        if (line.ends_with('\r')) line.remove_suffix(1);
        if (line.starts_with("event:")) e.type.assign(line.substr(line.starts_with("event: ") ? 7 : 6));
        if (line.starts_with("data:")) e.data.assign(line.substr(line.starts_with("data: ") ? 6 : 5));
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// The declared formats of tools/native_formats.h (kAcmeFormatYaml) and of
// docs/configuration.md's cumulative example, as the configuration builds them.
inline std::shared_ptr<const DeclaredFormat> declared_format(bool cumulative) {
  auto f = std::make_shared<DeclaredFormat>();
  if (!cumulative) {
    f->name = "acme";
    f->path = "/acme/v1/generate*";
    f->content_type = "application/x-acme-events";
    f->framing = EventFraming::ndjson;
    f->content = "/chunk/delta";
    f->finish = "/final";
    f->finish_value = "true";
    f->finish_reason = "/stop_reason";
    f->tokens = "/usage/output_tokens";
    f->prompt_tokens = "/usage/input_tokens";
    f->model = "/model";
    f->response_id = "/id";
    f->error = "/error/code";
  } else {
    f->name = "studio";
    f->path = "/studio/stream";
    f->content = "/output/text";
    f->cumulative = true;
    f->finish = "/status";
    f->finish_value = "completed";
    f->tokens = "/usage/tokens";
  }
  return f;
}

inline bool capped(const EventMeaning& m) {
  return m.model.size() <= 128 && m.response_id.size() <= 128 && m.finish_reason.size() <= 128 &&
         m.error_type.size() <= 128;
}

inline bool same_facts(const EventMeaning& a, const EventMeaning& b) {
  return a.dialect == b.dialect && a.response_id == b.response_id && a.model == b.model &&
         a.finish_reason == b.finish_reason && a.error_type == b.error_type &&
         a.completion_tokens == b.completion_tokens && a.prompt_tokens == b.prompt_tokens &&
         a.from_partial == b.from_partial && a.ends_stream == b.ends_stream && a.output_length == b.output_length &&
         a.output_cut == b.output_cut;
}

class Checker {
 public:
  Checker(const RecordedStream& s, std::shared_ptr<const DeclaredFormat> declared)
      : declared_(std::move(declared)), cumulative_(s.dialect == "sglang" || s.dialect == "vllm" ||
                                                    (declared_ && declared_->cumulative)) {
    const std::string_view path = declared_ && declared_->cumulative ? "/studio/stream" : std::string_view(s.path);
    path_ = path;
    media_ = s.content_type;
    StreamContext context;
    context.path = path_;
    context.media_type = media_;
    context.framing = s.framing == "ndjson" ? EventFraming::ndjson : EventFraming::sse;
    context.declared = declared_;
    stream_.begin(context);
  }

  void feed(const Event& e, bool truncated) {
    const EventContext before = stream_.context();
    const EventMeaning fresh = declared_ ? interpret_declared(*declared_, e.data, truncated)
                                         : interpret_event(before, e.type, e.data, truncated);
    const EventMeaning got =
        stream_.interpret(e.type, e.data, truncated, static_cast<std::uint32_t>(e.data.size() + 1));
    DIALECT_FUZZ_CHECK(capped(got) && capped(fresh), "values capped at 128 bytes");
    DIALECT_FUZZ_CHECK(same_facts(got, fresh), "the stream's facts equal a fresh interpretation's");
    if (got.kind != fresh.kind) {
      // Only "the text grew" is the stream's own: a token event that did not grow.
      const bool not_grown = cumulative_ && fresh.kind == EventKind::content &&
                             (got.kind == EventKind::empty || got.kind == EventKind::done);
      DIALECT_FUZZ_CHECK(not_grown, "the stream's kind equals a fresh interpretation's (but for growth)");
    }
    const Dialect now = stream_.context().dialect;
    DIALECT_FUZZ_CHECK(dialect_ == Dialect::unknown || now == dialect_, "a stream keeps its dialect");
    dialect_ = now;
    if (e.data.size() <= 256 && !truncated) {
      for (std::size_t n = 0; n < e.data.size(); n += 1 + n / 8) {
        const EventMeaning part = declared_ ? interpret_declared(*declared_, std::string_view(e.data).substr(0, n), true)
                                            : interpret_event(before, e.type, std::string_view(e.data).substr(0, n), true);
        DIALECT_FUZZ_CHECK(capped(part), "values of a cut event capped");
        DIALECT_FUZZ_CHECK(part.from_partial || part.kind == EventKind::unparsed || part.kind == EventKind::done,
                           "a cut event's meaning is partial");
      }
    }
  }

 private:
  std::shared_ptr<const DeclaredFormat> declared_;
  bool cumulative_;
  std::string path_, media_;
  StreamEventInterpreter stream_;
  Dialect dialect_ = Dialect::unknown;
};

// Replaces the body of the first string value after `key` with `text`.
inline std::string with_text(const std::string& data, std::string_view key, std::string_view text) {
  const std::size_t at = data.find(key);
  if (at == std::string::npos) return data;
  std::size_t body = data.find('"', at + key.size());
  if (body == std::string::npos) return data;
  ++body;
  std::size_t close = body;
  while (close < data.size() && data[close] != '"') close += data[close] == '\\' ? 2 : 1;
  if (close >= data.size()) return data;
  return data.substr(0, body) + std::string(text) + data.substr(close);
}

// The key a dialect's token events keep their text under.
inline std::string_view text_key(Format f) {
  switch (f) {
    case Format::ollama_chat: return "\"content\":";
    case Format::ollama_generate: return "\"response\":";
    case Format::tgi: return "\"text\":";
    case Format::llamacpp: return "\"content\":";
    case Format::sglang: return "\"text\":";
    case Format::vllm: return "\"text\": [";
    case Format::triton: return "\"text_output\":";
    case Format::gemini: return "\"text\":";
    case Format::responses: return "\"delta\":";
    case Format::declared_acme: return "\"delta\":";
  }
  return "\"text\":";
}

// `formats`: the dialect's; with `declared`, its events are read by declared formats.
inline int fuzz_dialect(std::span<const Format> formats, bool declared, const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t control = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const Format format = formats[(control >> 5) % formats.size()];
  const bool cumulative_declared = declared && (control >> 5) % 2 == 1;
  RecordedStream s = tools::native::recorded_stream(format, 6);
  if (cumulative_declared) {
    // docs/configuration.md's "studio" server: SSE events repeating the output so far.
    s.framing = "sse";
    s.content_type = "text/event-stream";
    s.wire.clear();
    s.token.clear();
    s.event.clear();
    std::string text;
    for (int i = 0; i < 6; ++i) {
      text += tools::native::detail::token_text(i);
      tools::native::detail::add(s, "data: {\"output\":{\"text\":\"" + text + "\"},\"status\":\"running\"}\n\n", true);
    }
    tools::native::detail::add(s, "data: {\"output\":{\"text\":\"" + text + "\"},\"status\":\"completed\",\"usage\":{\"tokens\":6}}\n\n", false);
  }
  std::shared_ptr<const DeclaredFormat> format_read = declared ? declared_format(cumulative_declared) : nullptr;
  const std::vector<Event> recorded = events_of(s);
  Checker checker(s, format_read);

  if ((control & 1) == 0) {
    std::vector<std::size_t> tokens;
    std::size_t k = 0;
    for (std::size_t i = 0; i < s.wire.size(); ++i) {
      if (!s.event[i]) continue;
      if (s.token[i]) tokens.push_back(k);
      ++k;
    }
    if (tokens.empty()) return 0;
    const std::size_t pick = tokens[((control >> 1) & 0xf) % tokens.size()];
    const std::string_view key = cumulative_declared ? std::string_view("\"text\":") : text_key(format);
    Event changed = recorded[pick];
    changed.data = with_text(changed.data, key, bytes);
    for (std::size_t i = 0; i < recorded.size(); ++i) {
      if (i == pick) {
        checker.feed(changed, false);
        checker.feed(recorded[i], false);
      } else {
        checker.feed(recorded[i], false);
      }
    }
    return 0;
  }

  const bool cut_some = control & 2;
  const bool sse = s.framing == "sse";
  std::size_t n = 0;
  std::string_view rest = bytes;
  while (!rest.empty() && n < 64) {
    Event e;
    if (!sse) {
      const std::size_t lf = rest.find('\n');
      e.data.assign(rest.substr(0, lf));
      rest.remove_prefix(lf == std::string_view::npos ? rest.size() : lf + 1);
      if (e.data.find_first_not_of(" \t\r") == std::string::npos) continue;  // keep-alive lines are no events
    } else {
      const std::size_t blank = rest.find("\n\n");
      std::string_view block = rest.substr(0, blank);
      rest.remove_prefix(blank == std::string_view::npos ? rest.size() : blank + 2);
      while (!block.empty()) {
        const std::size_t lf = block.find('\n');
        const std::string_view line = block.substr(0, lf);
        block.remove_prefix(lf == std::string_view::npos ? block.size() : lf + 1);
        if (line.starts_with("event:")) e.type.assign(line.substr(6));
        else if (line.starts_with("data:")) e.data += (e.data.empty() ? "" : "\n") + std::string(line.substr(5));
        else e.data += line;
      }
    }
    checker.feed(e, cut_some && n % 2 == 1);
    ++n;
  }
  return 0;
}

}  // namespace infertap::fuzz
