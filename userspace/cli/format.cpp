#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "base/escape.h"
#include "core/labels.h"

namespace infertap::cli {
namespace {

using json = nlohmann::json;

const char* const kSpark[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
const char* const kEighths[8] = {"▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};

// Every text cell comes from here: a tenant's process name, path or model
// is made printable, so it cannot split a row or reach the terminal raw.
std::string str(const json& j, const char* key, const char* fallback = "") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_string()) return base::printable(it->get<std::string>());
  return base::printable(it->dump());
}

std::uint64_t u64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer()) return static_cast<std::uint64_t>(std::max<std::int64_t>(0, it->get<std::int64_t>()));
  return static_cast<std::uint64_t>(std::max(0.0, it->get<double>()));
}

std::string num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return base::printable(it->dump());  // a string where a number belongs is a tenant's, too
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string pad(const std::string& s, std::size_t width, bool right) {
  const std::size_t w = display_width(s);
  if (w >= width) return s;
  return right ? std::string(width - w, ' ') + s : s + std::string(width - w, ' ');
}

// A bar of `cells` character cells (eighth-cell resolution).
std::string bar(double cells, bool unicode) {
  if (cells <= 0) return "";
  std::string out;
  if (!unicode) {
    const auto n = std::max<long>(1, std::lround(cells));
    return std::string(static_cast<std::size_t>(n), '#');
  }
  auto eighths = static_cast<long>(std::lround(cells * 8));
  if (eighths < 1) eighths = 1;  // a gap, however small, shows
  for (long i = 0; i < eighths / 8; ++i) out += kEighths[7];
  if (eighths % 8) out += kEighths[eighths % 8 - 1];
  return out;
}

std::string process(const json& j) { return str(j, "comm", "?") + "[" + num(j, "pid") + "]"; }

std::string clock_of(const std::string& rfc3339) {  // "2026-11-29T17:34:09.123456789Z" -> "17:34:09.123"
  const std::size_t t = rfc3339.find('T');
  if (t == std::string::npos || rfc3339.size() < t + 13) return rfc3339;
  return rfc3339.substr(t + 1, 12);
}

std::string route(const json& j) { return core::route_of(str(j, "path"), "-"); }

}  // namespace

std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string ellipsize(const std::string& s, std::size_t max) {
  if (display_width(s) <= max || max == 0) return s;
  std::string out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80 && ++n > max - 1) break;
    out.push_back(s[i]);
  }
  return out + "…";
}

std::string fmt_ms(const json& value, int decimals) {
  if (!value.is_number()) return "-";
  return fixed(value.get<double>(), decimals);
}

std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& right) {
  std::vector<std::size_t> widths(header.size(), 0);
  for (std::size_t c = 0; c < header.size(); ++c) widths[c] = display_width(header[c]);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size() && c < widths.size(); ++c) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  std::string out;
  const auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t c = 0; c < widths.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      const bool r = c < right.size() && right[c];
      const bool last = c + 1 == widths.size();
      line += (last && !r) ? cell : pad(cell, widths[c], r);
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string sparkline(const std::vector<double>& values, std::size_t max_chars, bool unicode) {
  if (values.empty() || max_chars == 0) return "";
  const std::size_t chars = std::min(values.size(), max_chars);
  std::vector<double> buckets(chars, 0.0);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::size_t b = i * chars / values.size();
    buckets[b] = std::max(buckets[b], values[i]);
  }
  const double top = *std::max_element(buckets.begin(), buckets.end());
  std::string out;
  for (double v : buckets) {
    int level = top > 0 ? static_cast<int>(std::ceil(v / top * 8.0)) : 1;
    level = std::clamp(level, 1, 8);
    if (unicode) {
      out += kSpark[level - 1];
    } else {
      out.push_back(" .:-=+*#"[level - 1]);
    }
  }
  return out;
}

namespace {

// The record's identity and metrics, and the client view of a server or
// gateway record: the lines above the timeline.
void show_header(std::ostringstream& out, const json& r, const std::string& vantage) {
  out << "stream " << str(r, "stream_id") << "  " << str(r, "role") << "/" << vantage << "  " << process(r);
  const std::string method = str(r, "method"), path = str(r, "path");
  if (!method.empty() || !path.empty()) out << "  " << method << " " << path;
  out << "  model " << (str(r, "model").empty() ? "-" : str(r, "model")) << "\n";
  out << "status " << num(r, "status") << "  end " << str(r, "end") << "  " << str(r, "ts") << "  "
      << str(r, "local") << " <-> " << str(r, "remote") << "\n";
  out << "ttft " << fmt_ms(r.value("ttft_ms", json())) << " ms  e2e " << fmt_ms(r.value("e2e_ms", json()))
      << " ms  tokens " << num(r, "tokens") << " (" << str(r, "token_source") << ")  rate "
      << fmt_ms(r.value("tokens_per_s", json())) << " tok/s\n";
  out << "itl p50 " << fmt_ms(r.value("itl_p50_ms", json())) << "  p95 " << fmt_ms(r.value("itl_p95_ms", json()))
      << "  p99 " << fmt_ms(r.value("itl_p99_ms", json())) << "  max " << fmt_ms(r.value("itl_max_ms", json()))
      << " ms  stalls " << r.value("stalls", json::array()).size() << " (threshold "
      << fmt_ms(r.value("stall_threshold_ms", json())) << " ms)\n";
  if (r.value("joined_midstream", false)) out << "joined mid-stream: times are from the first event seen\n";
  // The stream as its final client got it (server and gateway records).
  const auto d = r.find("delivery");
  if (d == r.end() || !d->is_object()) return;
  const json& dv = *d;
  out << "client view (" << str(dv, "vantage") << ", " << str(dv, "path") << "): ttft "
      << fmt_ms(dv.value("ttft_ms", json())) << " ms (+" << fmt_ms(dv.value("ttft_added_ms", json())) << ")  itl p99 "
      << fmt_ms(dv.value("itl_p99_ms", json())) << "  max " << fmt_ms(dv.value("itl_max_ms", json()))
      << " ms  burst " << num(dv, "max_burst") << "  stalls " << dv.value("stalls", json::array()).size() << "\n";
  if (dv.value("degraded_by_path", false)) out << "degraded by the path: " << str(dv, "degraded_reason") << "\n";
  if (!dv.value("ttft_cause", json()).is_null()) {
    out << "first token waited: " << str(dv, "ttft_cause") << " - " << str(dv, "ttft_evidence") << "\n";
  }
}

// Each event's time and gap, in ms.
struct EventTimes {
  std::uint64_t origin = 0;   // request end (the TTFT origin), else the first event
  std::vector<double> plus;   // since the origin
  std::vector<double> gap;    // since the previous event (event 0: since the request end)
  std::vector<bool> has_gap;  // false: event 0 of a stream joined mid-way
};

EventTimes event_times(const json& r, const json& timeline) {
  EventTimes t;
  const std::uint64_t request_end = u64(r, "request_end_ns");
  t.origin = request_end ? request_end : u64(timeline[0], "ts_ns");
  std::uint64_t prev = request_end;
  for (const json& e : timeline) {
    const std::uint64_t ts = u64(e, "ts_ns");
    t.plus.push_back((static_cast<double>(ts) - static_cast<double>(t.origin)) / 1e6);
    t.has_gap.push_back(prev != 0);
    t.gap.push_back(prev ? (static_cast<double>(ts) - static_cast<double>(prev)) / 1e6 : 0.0);
    prev = ts;
  }
  return t;
}

// The record's stalls by the timeline event that ended each one.
struct StallMarks {
  std::map<std::size_t, double> gap_ms;
  std::map<std::size_t, std::string> why;  // "cause - evidence"
};

StallMarks stall_marks(const json& stalls, const json& timeline) {
  // after_event indexes token (content) events; the marker goes on the token
  // event that ended the gap.
  std::vector<std::size_t> content_index;
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    if (str(timeline[i], "kind") == "content") content_index.push_back(i);
  }
  StallMarks marks;
  for (const json& s : stalls) {
    const std::uint64_t after = u64(s, "after_event");
    std::optional<std::size_t> at;
    const std::uint64_t start = u64(s, "start_ns");
    for (std::size_t k = 0; k < content_index.size() && start; ++k) {  // by time: robust to capped timelines
      if (u64(timeline[content_index[k]], "ts_ns") == start && k + 1 < content_index.size()) {
        at = content_index[k + 1];
        break;
      }
    }
    if (!at && after + 1 < content_index.size()) at = content_index[after + 1];
    if (!at) continue;
    marks.gap_ms[*at] = s.value("gap_ms", 0.0);
    if (!str(s, "cause").empty()) marks.why[*at] = str(s, "cause") + " - " + str(s, "evidence");
  }
  return marks;
}

// The gap sparkline and, under it, where each stall is, so it can be found in
// a long table (and in `less`: /stall).
void show_gaps(std::ostringstream& out, const EventTimes& t, const StallMarks& marks, const FormatOptions& options) {
  std::vector<double> inter(t.gap.begin() + 1, t.gap.end());
  const std::size_t spark_room = options.width > 30 ? options.width - 30 : 10;
  const double max_inter = inter.empty() ? 0.0 : *std::max_element(inter.begin(), inter.end());
  out << "gaps " << sparkline(inter, spark_room, options.unicode) << "  (" << t.plus.size() << " events, max gap "
      << fixed(max_inter, 1) << " ms)\n";
  for (const auto& [at, gap_ms] : marks.gap_ms) {
    out << (options.unicode ? "▶ stall " : "> stall ") << fixed(gap_ms, 0) << " ms before event " << at << " (+"
        << fixed(t.plus[at], 1) << " ms)";
    if (auto why = marks.why.find(at); why != marks.why.end()) out << ": " << why->second;
    out << "\n";
  }
  out << "\n";
}

// Other vantages of each event, when any event has them: the peer's ACK, and
// the end of the path (the final client's read) or the traced peer's side.
class VantageColumns {
 public:
  VantageColumns(const json& r, const json& timeline, std::uint64_t origin) : origin_(origin) {
    for (const json& e : timeline) {
      acked_ |= e.value("acked_ns", json()).is_number();
      client_ |= e.value("delivered_ns", json()).is_number() || e.value("peer_ns", json()).is_number();
    }
    const bool client_record = str(r, "role") == "client";
    client_key_ = client_record ? "peer_ns" : "delivered_ns";
    client_title_ = client_record ? "+emit" : "+client";
  }

  // The cells of one event; their titles for nullptr.
  std::string cells(const json* e) const {
    std::string cols;
    char buf[32];
    if (acked_) {
      std::snprintf(buf, sizeof buf, "%9s ", e ? at_ms(*e, "acked_ns").c_str() : "+acked");
      cols += buf;
    }
    if (client_) {
      std::snprintf(buf, sizeof buf, "%9s ", e ? at_ms(*e, client_key_).c_str() : client_title_.c_str());
      cols += buf;
    }
    return cols;
  }

 private:
  std::string at_ms(const json& e, const char* key) const {
    const json v = e.value(key, json());
    if (!v.is_number()) return "-";
    return fixed((v.get<double>() - static_cast<double>(origin_)) / 1e6, 1);
  }

  std::uint64_t origin_;
  bool acked_ = false, client_ = false;
  const char* client_key_;
  std::string client_title_;
};

// Columns: i, kind, +ms, [+acked, +client,] gap ms, bytes, batch, bar.
void show_events(std::ostringstream& out, const json& timeline, const std::string& vantage, const EventTimes& t,
                 const StallMarks& marks, const VantageColumns& columns, const FormatOptions& options) {
  const std::string plus_title = "+" + vantage + " ms";
  char row[200];
  std::snprintf(row, sizeof row, "%4s %-10s %9s %s%7s %5s %5s  ", "i", "kind", plus_title.c_str(),
                columns.cells(nullptr).c_str(), "gap ms", "bytes", "batch");
  const std::size_t prefix = std::string(row).size();
  std::size_t marker_room = 0;  // " ◀ stall N ms" after the bar
  for (const auto& [at, gap_ms] : marks.gap_ms) marker_room = std::max(marker_room, 12 + fixed(gap_ms, 0).size());
  const std::size_t bar_room = options.width > prefix + marker_room + 8 ? options.width - prefix - marker_room : 8;
  double max_gap = 0;
  for (std::size_t i = 0; i < t.gap.size(); ++i) {
    if (t.has_gap[i]) max_gap = std::max(max_gap, t.gap[i]);
  }
  out << row << (options.unicode ? "gap (█ = " : "gap (# = ") << fixed(max_gap / static_cast<double>(bar_room), 1)
      << " ms)\n";
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    const json& e = timeline[i];
    std::string kind = str(e, "kind");
    if (e.value("truncated", false)) kind += "~";
    const std::string gap_text = t.has_gap[i] ? fixed(t.gap[i], 1) : "-";
    std::snprintf(row, sizeof row, "%4s %-10s %9s %s%7s %5s %5s  ", num(e, "i").c_str(), kind.c_str(),
                  fixed(t.plus[i], 1).c_str(), columns.cells(&e).c_str(), gap_text.c_str(), num(e, "bytes").c_str(),
                  num(e, "batch").c_str());
    std::string line = row;
    if (t.has_gap[i] && max_gap > 0) line += bar(t.gap[i] / max_gap * static_cast<double>(bar_room), options.unicode);
    if (auto it = marks.gap_ms.find(i); it != marks.gap_ms.end()) {
      line += std::string(options.unicode ? " ◀ stall " : " < stall ") + fixed(it->second, 0) + " ms";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

}  // namespace

std::string format_show(const json& r, const FormatOptions& options) {
  std::ostringstream out;
  const std::string vantage = str(r, "vantage", "event");
  show_header(out, r, vantage);
  const auto timeline = r.find("timeline");
  if (timeline == r.end() || !timeline->is_array()) {
    out << "(no timeline kept for this stream)\n";
    return out.str();
  }
  if (timeline->empty()) {
    out << "(no events)\n";
    return out.str();
  }
  const EventTimes times = event_times(r, *timeline);
  const StallMarks marks = stall_marks(r.value("stalls", json::array()), *timeline);
  show_gaps(out, times, marks, options);
  show_events(out, *timeline, vantage, times, marks, VantageColumns(r, *timeline, times.origin), options);
  return out.str();
}

std::string format_streams(const json& streams) {
  std::vector<std::vector<std::string>> rows;
  for (const json& r : streams) {
    rows.push_back({str(r, "stream_id"), clock_of(str(r, "end_ts")), str(r, "role"), ellipsize(process(r), 22),
                    ellipsize(route(r), 28), ellipsize(str(r, "model").empty() ? "-" : str(r, "model"), 24),
                    fmt_ms(r.value("ttft_ms", json())), fmt_ms(r.value("itl_p50_ms", json())),
                    fmt_ms(r.value("itl_max_ms", json())), num(r, "tokens"), fmt_ms(r.value("tokens_per_s", json())),
                    std::to_string(r.value("stalls", json::array()).size()), str(r, "end")});
  }
  if (rows.empty()) return "no finished streams yet\n";
  return format_table({"ID", "ENDED (UTC)", "ROLE", "PROCESS", "ROUTE", "MODEL", "TTFT ms", "ITL p50", "ITL max",
                       "TOKENS", "TOK/S", "STALLS", "END"},
                      rows, {false, false, false, false, false, false, true, true, true, true, true, true, false});
}

std::string format_live(const json& live) {
  std::vector<std::vector<std::string>> rows;
  for (const json& l : live) {
    rows.push_back({str(l, "id"), str(l, "role"), ellipsize(process(l), 22), ellipsize(route(l), 28),
                    ellipsize(str(l, "model").empty() ? "-" : str(l, "model"), 24),
                    fmt_ms(l.value("age_ms", json()).is_number() ? json(l["age_ms"].get<double>() / 1000.0) : json(), 1),
                    num(l, "events"), fmt_ms(l.value("idle_ms", json()), 0), l.value("first_token", false) ? "yes" : "no"});
  }
  if (rows.empty()) return "no streams in flight\n";
  return format_table({"ID", "ROLE", "PROCESS", "ROUTE", "MODEL", "AGE s", "EVENTS", "IDLE ms", "TOKEN"}, rows,
                      {false, false, false, false, false, true, true, true, false});
}

namespace {

std::vector<std::string> group_cells(const json& g) {
  return {num(g, "streams"), num(g, "partial"), fmt_ms(g.value("ttft_p50_ms", json())),
          fmt_ms(g.value("ttft_p95_ms", json())), fmt_ms(g.value("itl_p50_ms", json())),
          fmt_ms(g.value("itl_p95_ms", json())), fmt_ms(g.value("itl_p99_ms", json())),
          fmt_ms(g.value("tokens_per_s_p50", json())), num(g, "tokens"), num(g, "stalls")};
}

}  // namespace

std::string format_stats(const json& response) {
  std::vector<std::vector<std::string>> rows;
  for (const json& g : response.value("groups", json::array())) {
    std::vector<std::string> row{ellipsize(str(g, "key"), 40)};
    for (auto& c : group_cells(g)) row.push_back(std::move(c));
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return "no finished streams kept yet\n";
  if (rows.size() > 1 && response.contains("total")) {
    std::vector<std::string> row{"(all)"};
    for (auto& c : group_cells(response["total"])) row.push_back(std::move(c));
    rows.push_back(std::move(row));
  }
  std::string by = str(response, "by", "model");
  std::transform(by.begin(), by.end(), by.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return "over the last " + num(response, "records") + " finished streams kept (ITL columns: percentiles of per-stream values)\n" +
         format_table({by, "STREAMS", "PARTIAL", "TTFT p50", "TTFT p95", "ITL p50", "ITL p95", "ITL p99", "TOK/S p50",
                       "TOKENS", "STALLS"},
                      rows, {false, true, true, true, true, true, true, true, true, true, true});
}

std::string format_top(const json& response) {
  std::string head = "last " + fmt_ms(response.value("window_s", json()), 0) + " s: " + num(response, "streams") +
                     " streams finished, " + num(response, "live") + " live, " + num(response, "tokens") + " tokens (" +
                     fmt_ms(response.value("tokens_per_s", json())) + " tok/s), " + num(response, "stalls") +
                     " stalls\n";
  std::vector<std::vector<std::string>> rows;
  for (const json& r : response.value("rows", json::array())) {
    rows.push_back({ellipsize(str(r, "process"), 22), ellipsize(str(r, "model"), 24), ellipsize(str(r, "route"), 28),
                    num(r, "live"), num(r, "streams"), fmt_ms(r.value("ttft_p50_ms", json())),
                    fmt_ms(r.value("itl_p50_ms", json())), fmt_ms(r.value("itl_p99_ms", json())),
                    fmt_ms(r.value("tokens_per_s", json())), num(r, "stalls")});
  }
  if (rows.empty()) return head + "no streams\n";
  return head + format_table({"PROCESS", "MODEL", "ROUTE", "LIVE", "DONE", "TTFT p50", "ITL p50", "ITL p99", "TOK/S",
                              "STALLS"},
                             rows, {false, false, false, true, true, true, true, true, true, true});
}

namespace {

void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string key = base::printable(it.key());
      flatten(it.value(), prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  if (j.is_array() && std::all_of(j.begin(), j.end(), [](const json& v) { return v.is_string(); })) {
    std::string joined;
    for (const json& v : j) joined += (joined.empty() ? "" : "; ") + base::printable(v.get<std::string>());
    out.emplace_back(prefix, joined.empty() ? "-" : joined);
    return;
  }
  out.emplace_back(prefix, base::printable(j.is_string() ? j.get<std::string>() : j.dump()));
}

}  // namespace

std::string format_status(const json& response) {
  json copy = response;
  copy.erase("ok");
  std::vector<std::pair<std::string, std::string>> lines;
  // Well-known fields first, then the rest as the daemon sent them.
  if (copy.contains("uptime_s") && copy["uptime_s"].is_number()) {
    lines.emplace_back("uptime", fixed(copy["uptime_s"].get<double>(), 0) + " s");
    copy.erase("uptime_s");
  }
  for (const char* key : {"version", "socket"}) {
    if (copy.contains(key)) {
      flatten(copy[key], key, lines);
      copy.erase(key);
    }
  }
  flatten(copy, "", lines);
  std::size_t width = 0;
  for (const auto& [k, v] : lines) width = std::max(width, display_width(k));
  std::string out = "infertapd is running\n";
  for (const auto& [k, v] : lines) out += "  " + pad(k + ":", width + 1, false) + " " + v + "\n";
  return out;
}

namespace {

std::string cohort_text(const json& c) {
  std::string out = str(c, "model", "-") + " " + str(c, "route", "-") + " " + str(c, "process", "-") + " " +
                    str(c, "vantage", "-") + " " + str(c, "length_class", "-");
  // Load bands, when the dimensions are on.
  for (const char* band : {"concurrency_band", "input_band"}) {
    if (c.contains(band) && c[band].is_string()) out += " " + str(c, band);
  }
  return out;
}

// "  alert 3: decode-stage pressure may be contributing: concurrency 1 -> 30 ..." per lead.
std::string leads_text(const json& alerts) {
  std::string out;
  for (const json& a : alerts) {
    for (const json& l : a.value("leads", json::array())) {
      out += "  alert " + str(a, "alert_id", "-") + ": " + str(l, "says", "-") + "\n";
    }
  }
  return out.empty() ? out : "leads of the active alerts (what to check, not verdicts):\n" + out;
}

// "  review 4 started: system_fingerprint fp_a -> fp_b (llama /v1/chat/completions ...)"
std::string reviews_text(const json& reviews) {
  std::string out;
  for (const json& r : reviews) {
    std::string what;
    for (const json& f : r.value("changed", json::array())) {
      const std::string field = f.is_string() ? f.get<std::string>() : f.dump();
      what += (what.empty() ? "" : ", ") + base::printable(field) + " " + str(r.value("from", json::object()), field.c_str(), "-") +
              " -> " + str(r.value("to", json::object()), field.c_str(), "-");
    }
    out += "  review " + str(r, "review_id", "-") + " " + str(r, "state", "-") + ": " + what + " (" +
           cohort_text(r.value("cohort", json::object())) + ")\n";
  }
  return out;
}

// "tokens_per_s 9.8 (objective 20, baseline 31.2; 92% of 40)"
std::string evidence_text(const json& alert) {
  std::string out;
  for (const json& e : alert.value("evidence", json::array())) {
    if (!out.empty()) out += "; ";
    out += str(e, "metric", "-") + " " + str(e, "observed", "-") + " (objective " + str(e, "objective", "-") +
           ", baseline " + str(e, "baseline", "-") + ", " + fixed(e.value("affected_share", 0.0) * 100, 0) + "% of " +
           str(e, "streams", "-") + ")";
  }
  return out.empty() ? "-" : out;
}

std::string alerts_table(const char* title, const json& list) {
  std::string out = std::string(title) + " (" + std::to_string(list.size()) + ")\n";
  if (list.empty()) return out;
  std::vector<std::vector<std::string>> rows;
  for (const json& a : list) {
    rows.push_back({ellipsize(str(a, "ts", "-"), 23), str(a, "state", "-"),
                    cohort_text(a.value("cohort", json::object())), str(a, "layer", "-"),
                    str(a, "dominant_stall_cause", "-"), evidence_text(a)});
  }
  return out + format_table({"TIME", "STATE", "COHORT (model route process vantage class)", "LAYER", "STALLS",
                             "EVIDENCE"},
                            rows, {false, false, false, false, false, false});
}

std::string abuse_table(const json& signals) {
  std::vector<std::vector<std::string>> rows;
  for (const json& s : signals) {
    rows.push_back({ellipsize(str(s, "ts", "-"), 23), str(s, "state", "-"), str(s, "process", "-"),
                    str(s, "client", "-"), fixed(s.value("decode_share", 0.0) * 100, 0) + "%", str(s, "streams", "-"),
                    str(s, "tokens", "-"), str(s, "clients", "-")});
  }
  return format_table({"TIME", "STATE", "PROCESS", "CLIENT", "DECODE SHARE", "STREAMS", "TOKENS", "CLIENTS"}, rows,
                      {false, false, false, false, true, true, true, true});
}

}  // namespace

std::string format_alerts(const json& response) {
  if (!response.value("enabled", true)) return "degradation detection is disabled (degradation.enabled: false)\n";
  std::string out = alerts_table("active alerts", response.value("active", json::array()));
  out += "\n";
  out += alerts_table("recent alerts, newest first", response.value("recent", json::array()));
  const json abuse = response.value("abuse_active", json::array());
  const json abuse_recent = response.value("abuse_recent", json::array());
  out += "\nabuse signals: " + std::to_string(abuse.size()) + " active, " + std::to_string(abuse_recent.size()) +
         " recent\n";
  if (!abuse_recent.empty()) out += abuse_table(abuse_recent);
  const std::string leads = leads_text(response.value("active", json::array()));
  if (!leads.empty()) out += "\n" + leads;
  const json reviews = response.value("reviews_recent", json::array());
  if (!reviews.empty()) out += "\nbaseline reviews, newest first:\n" + reviews_text(reviews);
  return out;
}

}  // namespace infertap::cli
