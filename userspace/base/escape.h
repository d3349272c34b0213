// Tenant text (process names, paths, model names, versions, library notes)
// made safe for a terminal, a log line or a table cell: it can never start a
// line, move the cursor or begin a terminal sequence. Printable UTF-8 stays as
// it is; what is not becomes a visible escape.
//
// Escaped: C0 controls (NUL, TAB, LF, CR, ESC, ...), DEL, C1 controls
// (U+0080..U+009F, which some terminals take as CSI and friends), the line and
// paragraph separators and the bidirectional overrides (they reorder or break
// what a reader sees), and bytes that are not UTF-8. A backslash is not
// escaped: the output is for people, not for parsing back.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace infertap::base {

// One character of a scanned text, or one byte that starts no UTF-8 sequence.
struct TextUnit {
  std::size_t size = 1;     // input bytes it covers
  char32_t code_point = 0;  // the byte itself when !utf8
  bool utf8 = true;         // false: a byte that is not (part of) valid UTF-8
  bool unsafe = false;      // must be written as an escape
};

// How an unsafe unit is written.
enum class EscapeForm {
  c_style,  // "\n" "\r" "\t", "\x1b" per byte (C0, DEL, non-UTF-8), "\u009b" (other code points)
  json,     // "\u001b", "\u009b": valid inside a JSON string, for text that is JSON already
};

namespace escape_detail {

constexpr bool continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Code points that break or reorder lines: U+2028/U+2029, bidi embeddings,
// overrides and isolates (U+202A..U+202E, U+2066..U+2069).
constexpr bool layout_control(char32_t cp) {
  return cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

constexpr bool control(char32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || layout_control(cp); }

// Length of the UTF-8 sequence led by `lead` and the range its second byte
// must fall in (overlong forms, surrogates and > U+10FFFF excluded); 0: no lead byte.
struct Lead {
  std::size_t size;
  unsigned char low, high;
};
constexpr Lead lead_of(unsigned char c) {
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace escape_detail

// The unit that starts at s[i] (i < s.size()).
inline TextUnit next_unit(std::string_view s, std::size_t i) {
  using namespace escape_detail;
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {1, c, true, control(c)};
  const Lead lead = lead_of(c);
  const auto invalid = TextUnit{1, c, false, true};
  if (lead.size == 0 || i + lead.size > s.size()) return invalid;
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if (second < lead.low || second > lead.high) return invalid;
  char32_t cp = c & (0xFF >> (lead.size + 1));
  for (std::size_t k = 1; k < lead.size; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (!continuation(b)) return invalid;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {lead.size, cp, true, control(cp)};
}

// The escape of an unsafe unit.
inline std::string escape_of(const TextUnit& u, EscapeForm form = EscapeForm::c_style) {
  char buf[16];
  if (form == EscapeForm::json) {
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(u.code_point));
    return buf;
  }
  if (u.utf8 && u.code_point == '\n') return "\\n";
  if (u.utf8 && u.code_point == '\r') return "\\r";
  if (u.utf8 && u.code_point == '\t') return "\\t";
  if (!u.utf8 || u.code_point < 0x80) {
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(u.code_point));
  } else {
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(u.code_point));
  }
  return buf;
}

// `s` with every unsafe unit escaped; the one function for human-facing output.
inline std::string printable(std::string_view s, EscapeForm form = EscapeForm::c_style) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const TextUnit u = next_unit(s, i);
    if (u.unsafe) {
      out += escape_of(u, form);
    } else {
      out.append(s, i, u.size);
    }
    i += u.size;
  }
  return out;
}

// Whether `text` holds anything printable() would escape; with
// `line_ends_allowed`, '\n' is not counted (an output of several lines).
inline bool has_unsafe(std::string_view text, bool line_ends_allowed = false) {
  for (std::size_t i = 0; i < text.size();) {
    const TextUnit u = next_unit(text, i);
    if (u.unsafe && !(line_ends_allowed && u.utf8 && u.code_point == '\n')) return true;
    i += u.size;
  }
  return false;
}

// "program: message\n", the message printable: one line whatever it carries.
inline std::string log_line(std::string_view program, std::string_view message) {
  std::string line(program);
  line += ": ";
  line += printable(message);
  line += '\n';
  return line;
}

}  // namespace infertap::base
