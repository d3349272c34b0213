#include "daemon/cli_format.h"

#include "daemon/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

namespace infertap::cli {
namespace {

using json = nlohmann::json;

const char* const kSpark[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
const char* const kEighths[8] = {"▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};

std::string str(const json& j, const char* key, const char* fallback = "") {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
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
  return it->dump();
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

std::string route(const json& j) {
  const std::string p = daemon::route_of(str(j, "path"));
  return p.empty() ? "-" : p;
}

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

std::string format_show(const json& r, const FormatOptions& options) {
  std::ostringstream out;
  const std::string vantage = str(r, "vantage", "event");
  out << "stream " << str(r, "stream_id") << "  " << str(r, "role") << "/" << vantage << "  " << process(r);
  const std::string method = str(r, "method"), path = str(r, "path");
  if (!method.empty() || !path.empty()) out << "  " << method << " " << path;
  out << "  model " << (str(r, "model").empty() ? "-" : str(r, "model")) << "\n";
  out << "status " << num(r, "status") << "  end " << str(r, "end") << "  " << str(r, "ts") << "  "
      << str(r, "local") << " <-> " << str(r, "remote") << "\n";
  out << "ttft " << fmt_ms(r.value("ttft_ms", json())) << " ms  e2e " << fmt_ms(r.value("e2e_ms", json()))
      << " ms  tokens " << num(r, "tokens") << " (" << str(r, "token_source") << ")  rate "
      << fmt_ms(r.value("tokens_per_s", json())) << " tok/s\n";
  const json stalls = r.value("stalls", json::array());
  out << "itl p50 " << fmt_ms(r.value("itl_p50_ms", json())) << "  p95 " << fmt_ms(r.value("itl_p95_ms", json()))
      << "  p99 " << fmt_ms(r.value("itl_p99_ms", json())) << "  max " << fmt_ms(r.value("itl_max_ms", json()))
      << " ms  stalls " << stalls.size() << " (threshold " << fmt_ms(r.value("stall_threshold_ms", json()))
      << " ms)\n";
  if (r.value("joined_midstream", false)) out << "joined mid-stream: times are from the first event seen\n";
  // The stream as its final client got it (server and gateway records).
  if (const auto d = r.find("delivery"); d != r.end() && d->is_object()) {
    const json& dv = *d;
    out << "client view (" << str(dv, "vantage") << ", " << str(dv, "path") << "): ttft "
        << fmt_ms(dv.value("ttft_ms", json())) << " ms (+" << fmt_ms(dv.value("ttft_added_ms", json())) << ")  itl p99 "
        << fmt_ms(dv.value("itl_p99_ms", json())) << "  max " << fmt_ms(dv.value("itl_max_ms", json()))
        << " ms  burst " << num(dv, "max_burst") << "  stalls " << dv.value("stalls", json::array()).size() << "\n";
    if (dv.value("degraded_by_path", false)) out << "degraded by the path: " << str(dv, "degraded_reason") << "\n";
    if (!dv.value("ttft_cause", json()).is_null())
      out << "first token waited: " << str(dv, "ttft_cause") << " - " << str(dv, "ttft_evidence") << "\n";
  }

  const auto tl_it = r.find("timeline");
  if (tl_it == r.end() || !tl_it->is_array()) {
    out << "(no timeline kept for this stream)\n";
    return out.str();
  }
  const json& timeline = *tl_it;
  if (timeline.empty()) {
    out << "(no events)\n";
    return out.str();
  }

  // Origin: request end (TTFT origin); else the first event.
  const std::uint64_t request_end = u64(r, "request_end_ns");
  const std::uint64_t origin = request_end ? request_end : u64(timeline[0], "ts_ns");
  std::vector<double> plus, gap;  // ms
  std::vector<bool> has_gap;
  std::uint64_t prev = request_end;
  for (const json& e : timeline) {
    const std::uint64_t ts = u64(e, "ts_ns");
    plus.push_back((static_cast<double>(ts) - static_cast<double>(origin)) / 1e6);
    has_gap.push_back(prev != 0);
    gap.push_back(prev ? (static_cast<double>(ts) - static_cast<double>(prev)) / 1e6 : 0.0);
    prev = ts;
  }

  // Stalls: after_event indexes token (content) events; the marker goes on
  // the token event that ended the gap.
  std::map<std::size_t, double> stall_at;
  std::map<std::size_t, std::string> stall_why;  // cause - evidence
  std::vector<std::size_t> content_index;
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    if (str(timeline[i], "kind") == "content") content_index.push_back(i);
  }
  for (const json& s : stalls) {
    const std::uint64_t after = u64(s, "after_event");
    const double gap_ms = s.value("gap_ms", 0.0);
    std::optional<std::size_t> at;
    const std::uint64_t start = u64(s, "start_ns");
    for (std::size_t k = 0; k < content_index.size() && start; ++k) {  // by time: robust to capped timelines
      if (u64(timeline[content_index[k]], "ts_ns") == start && k + 1 < content_index.size()) {
        at = content_index[k + 1];
        break;
      }
    }
    if (!at && after + 1 < content_index.size()) at = content_index[after + 1];
    if (at) {
      stall_at[*at] = gap_ms;
      if (!str(s, "cause").empty()) stall_why[*at] = str(s, "cause") + " - " + str(s, "evidence");
    }
  }

  std::vector<double> inter(gap.begin() + 1, gap.end());
  const std::size_t spark_room = options.width > 30 ? options.width - 30 : 10;
  const double max_inter = inter.empty() ? 0.0 : *std::max_element(inter.begin(), inter.end());
  out << "gaps " << sparkline(inter, spark_room, options.unicode) << "  (" << timeline.size() << " events, max gap "
      << fixed(max_inter, 1) << " ms)\n";
  // Where each stall is, so it can be found in a long table (and in `less`: /stall).
  for (const auto& [at, gap_ms] : stall_at) {
    out << (options.unicode ? "▶ stall " : "> stall ") << fixed(gap_ms, 0) << " ms before event " << at << " (+"
        << fixed(plus[at], 1) << " ms)";
    if (auto why = stall_why.find(at); why != stall_why.end()) out << ": " << why->second;
    out << "\n";
  }
  out << "\n";

  // Other vantages of each event, when seen: the peer's ACK, and the end of
  // the path (the final client's read) or the traced peer's side.
  const auto at_ms = [&](const json& e, const char* key) -> std::string {
    const json v = e.value(key, json());
    if (!v.is_number()) return "-";
    return fixed((v.get<double>() - static_cast<double>(origin)) / 1e6, 1);
  };
  bool show_acked = false, show_client = false;
  for (const json& e : timeline) {
    show_acked |= e.value("acked_ns", json()).is_number();
    show_client |= e.value("delivered_ns", json()).is_number() || e.value("peer_ns", json()).is_number();
  }
  const char* client_key = str(r, "role") == "client" ? "peer_ns" : "delivered_ns";
  const std::string client_title = str(r, "role") == "client" ? "+emit" : "+client";
  const auto extra = [&](const json* e) {
    std::string cols;
    char buf[32];
    if (show_acked) {
      std::snprintf(buf, sizeof buf, "%9s ", e ? at_ms(*e, "acked_ns").c_str() : "+acked");
      cols += buf;
    }
    if (show_client) {
      std::snprintf(buf, sizeof buf, "%9s ", e ? at_ms(*e, client_key).c_str() : client_title.c_str());
      cols += buf;
    }
    return cols;
  };

  // Columns: i, kind, +ms, [+acked, +client,] gap ms, bytes, batch, bar.
  const std::string plus_title = "+" + vantage + " ms";
  char row[200];
  std::snprintf(row, sizeof row, "%4s %-10s %9s %s%7s %5s %5s  ", "i", "kind", plus_title.c_str(),
                extra(nullptr).c_str(), "gap ms", "bytes", "batch");
  const std::size_t prefix = std::string(row).size();
  std::size_t marker_room = 0;  // " ◀ stall N ms" after the bar
  for (const auto& [at, gap_ms] : stall_at) marker_room = std::max(marker_room, 12 + fixed(gap_ms, 0).size());
  const std::size_t bar_room = options.width > prefix + marker_room + 8 ? options.width - prefix - marker_room : 8;
  double max_gap = 0;
  for (std::size_t i = 0; i < gap.size(); ++i) {
    if (has_gap[i]) max_gap = std::max(max_gap, gap[i]);
  }
  out << row << (options.unicode ? "gap (█ = " : "gap (# = ") << fixed(max_gap / static_cast<double>(bar_room), 1)
      << " ms)\n";
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    const json& e = timeline[i];
    std::string kind = str(e, "kind");
    if (e.value("truncated", false)) kind += "~";
    const std::string gap_text = has_gap[i] ? fixed(gap[i], 1) : "-";
    std::snprintf(row, sizeof row, "%4s %-10s %9s %s%7s %5s %5s  ", num(e, "i").c_str(), kind.c_str(),
                  fixed(plus[i], 1).c_str(), extra(&e).c_str(), gap_text.c_str(), num(e, "bytes").c_str(),
                  num(e, "batch").c_str());
    std::string line = row;
    if (has_gap[i] && max_gap > 0) line += bar(gap[i] / max_gap * static_cast<double>(bar_room), options.unicode);
    if (auto it = stall_at.find(i); it != stall_at.end()) {
      line += std::string(options.unicode ? " ◀ stall " : " < stall ") + fixed(it->second, 0) + " ms";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
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
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    }
    return;
  }
  if (j.is_array() && std::all_of(j.begin(), j.end(), [](const json& v) { return v.is_string(); })) {
    std::string joined;
    for (const json& v : j) joined += (joined.empty() ? "" : "; ") + v.get<std::string>();
    out.emplace_back(prefix, joined.empty() ? "-" : joined);
    return;
  }
  out.emplace_back(prefix, j.is_string() ? j.get<std::string>() : j.dump());
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

}  // namespace infertap::cli
