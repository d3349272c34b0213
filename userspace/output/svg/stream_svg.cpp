#include "output/svg/stream_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "base/escape.h"
#include "core/labels.h"

namespace infertap::output {
namespace {

using json = nlohmann::json;

// Token events within this of the one before are one burst (as the
// record's delivery.max_burst counts them).
constexpr std::uint64_t kBurstNs = 1'000'000;
constexpr double kCharPx = 6.1;  // width of one character of the 11 px labels, for placing them apart

// ------------------------------------------------------------ record access

const json& field(const json& j, const char* key) {
  static const json null;
  if (!j.is_object()) return null;
  const auto it = j.find(key);
  return it == j.end() ? null : *it;
}

// Monotonic nanoseconds past this (146 years of uptime) are no time the
// agent wrote: treated as absent, so that no sum or span can overflow.
constexpr std::uint64_t kLatestNs = std::uint64_t{1} << 62;

// A time in ns; 0 when absent, negative or past kLatestNs.
std::uint64_t u64(const json& j, const char* key) {
  const json& v = field(j, key);
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= kLatestNs ? v.get<std::uint64_t>() : 0;
  if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    return i > 0 && static_cast<std::uint64_t>(i) <= kLatestNs ? static_cast<std::uint64_t>(i) : 0;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return d >= 0 && d <= static_cast<double>(kLatestNs) ? static_cast<std::uint64_t>(d) : 0;
  }
  return 0;
}

std::optional<double> number(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) return std::nullopt;
  return v.get<double>();
}

bool flag(const json& j, const char* key) {
  const json& v = field(j, key);
  return v.is_boolean() && v.get<bool>();
}

std::string str(const json& j, const char* key) {
  const json& v = field(j, key);
  if (v.is_string()) return v.get<std::string>();
  return v.is_null() ? std::string() : v.dump();
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string px(double v) { return fixed(v, 1); }

// At most `max` characters (code points) of `s`, "…" for the rest.
std::string shorten(const std::string& s, std::size_t max) {
  std::size_t chars = 0;
  for (std::size_t i = 0; i < s.size(); i += base::next_unit(s, i).size) {
    if (++chars > max) return s.substr(0, i) + "…";
  }
  return s;
}

std::string ms_text(const std::optional<double>& v) { return v ? fixed(*v, 1) + " ms" : std::string("-"); }

// ------------------------------------------------------------ SVG writing

using Attrs = std::initializer_list<std::pair<std::string_view, std::string>>;

class Svg {
 public:
  void open(std::string_view tag, Attrs attrs = {}) {
    start(tag, attrs);
    out_ += ">";
  }
  void close(std::string_view tag) {
    out_ += "</";
    out_ += tag;
    out_ += ">\n";
  }
  void leaf(std::string_view tag, Attrs attrs) {
    start(tag, attrs);
    out_ += "/>\n";
  }
  // An element holding escaped text (<text>, <title>).
  void text(std::string_view tag, Attrs attrs, std::string_view content) {
    start(tag, attrs);
    out_ += ">";
    out_ += xml_text(content);
    close(tag);
  }
  // An element with a tooltip (<title>) inside.
  void titled(std::string_view tag, Attrs attrs, std::string_view title) {
    start(tag, attrs);
    out_ += ">";
    text("title", {}, title);
    close(tag);
  }
  void raw(std::string_view s) { out_ += s; }
  std::string take() { return std::move(out_); }

 private:
  void start(std::string_view tag, Attrs attrs) {
    out_ += "<";
    out_ += tag;
    for (const auto& [name, value] : attrs) {
      out_ += " ";
      out_ += name;
      out_ += "=\"";
      out_ += xml_text(value);
      out_ += "\"";
    }
  }
  std::string out_;
};

constexpr const char* kStyle = R"(
text{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;font-size:11px;fill:#222}
.title{font-size:15px;font-weight:600}.sub{fill:#444}.lane-name{font-weight:600}.who{fill:#666;font-size:10px}
.note{fill:#8a5a00}.axis-label{fill:#555}.halo{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
.row{fill:#f6f7f9}.grid{stroke:#e3e6ea;stroke-width:1}.axis{stroke:#888;stroke-width:1}
.tick{stroke-width:1.6}.token{stroke:#1f4e79}.other{stroke:#a0a0a0}
.lag{stroke:#5b8fc7;stroke-width:0.8;stroke-opacity:0.55}
.gap{fill:#4f81bd}.gap.long{fill:#d9534f}.threshold{stroke:#d9534f;stroke-width:0.8;stroke-dasharray:3 3}
.stall{fill-opacity:0.35;stroke-opacity:0.9;stroke-width:1}
.burst{fill:none;stroke:#2a9d5c;stroke-width:1.4}.burst-label{fill:#1e7a46;font-size:10px}
.ttft{stroke:#333;stroke-width:1}.request{stroke:#777;stroke-width:1;stroke-dasharray:2 3}
.cause-model{fill:#f28e2b;stroke:#c06a10}.cause-gateway_buffering{fill:#9c6ade;stroke:#6d3fb0}
.cause-backpressure{fill:#e15759;stroke:#a83234}.cause-network{fill:#76b7b2;stroke:#3f8a85}
.cause-client_read{fill:#59a14f;stroke:#35752c}.cause-upstream{fill:#edc948;stroke:#b3952a}.cause-other{fill:#bab0ac;stroke:#7f7773}
)";

// A class for a stall cause: only the causes the schema names; anything else is "other".
std::string cause_class(const std::string& cause) {
  static const std::set<std::string> known = {"model", "gateway_buffering", "backpressure", "network", "client_read", "upstream"};
  return "cause-" + (known.count(cause) ? cause : std::string("other"));
}

// ------------------------------------------------------------ what is drawn

// One place on the stream's path: when each event was there (0: not seen).
struct Lane {
  std::string name;  // "server emit", "gateway read", ...
  std::string who;   // the process there, when the record names it
  std::string key;   // the timeline field it is drawn from
  std::vector<std::uint64_t> t;
  std::optional<double> threshold_ms;  // stall threshold of the times in this lane, when the record has one
};

struct LaneSpec {
  std::string name, who, key;
};

std::vector<std::string> hops_of(const std::string& path) {
  std::vector<std::string> hops;
  std::size_t start = 0;
  for (std::size_t gt; (gt = path.find('>', start)) != std::string::npos; start = gt + 1) hops.push_back(path.substr(start, gt - start));
  if (!path.empty()) hops.push_back(path.substr(start));
  return hops;
}

std::string delivered_name(const json& delivery) {
  const std::string vantage = str(delivery, "vantage");
  return vantage == "acked" ? "delivered (ACK)" : vantage == "read" ? "delivered (read)" : "delivered";
}

// The places a record's timeline has times for, in path order.
std::vector<LaneSpec> lane_specs(const json& r) {
  const std::string role = str(r, "role"), comm = str(r, "comm");
  const std::string leg = str(field(r, "gateway"), "leg");
  const json& delivery = field(r, "delivery");
  if (role == "gateway" && leg == "upstream") {
    return {{"server emit", "", "peer_ns"}, {"gateway read", comm, "ts_ns"}, {"gateway write", comm, "downstream_ns"},
            {delivered_name(delivery), "", "delivered_ns"}};
  }
  if (role == "gateway") {
    return {{"gateway read", comm, "upstream_ns"}, {"gateway write", comm, "ts_ns"},
            {delivered_name(delivery), "", "delivered_ns"}};
  }
  if (role == "client") return {{"peer emit", "", "peer_ns"}, {"client read", comm, "ts_ns"}};
  // A server record: its reader is a gateway when the delivery path says so
  // ("server>gateway(nginx)>client"); peer_ns is then the gateway's read.
  const std::vector<std::string> hops = hops_of(str(delivery, "path"));
  std::vector<LaneSpec> specs = {{"server emit", comm, "ts_ns"}};
  if (hops.size() > 2 && hops[1].rfind("gateway(", 0) == 0) {
    specs.push_back({"gateway read", hops[1].substr(8, hops[1].size() - 9), "peer_ns"});
  }
  specs.push_back({delivered_name(delivery), hops.size() > 1 ? hops.back() : "", "delivered_ns"});
  return specs;
}

struct Stall {
  std::uint64_t start = 0, end = 0;
  double gap_ms = 0;
  std::string cause, evidence;
};

struct Picture {
  const json& record;
  const json& timeline;
  std::vector<bool> token;  // per event: a token (content) event
  std::vector<Lane> lanes;
  std::vector<std::vector<Stall>> stalls;  // per lane
  std::optional<std::size_t> own, delivered;
  bool from_request = false;          // the origin is the request's end (else the first event seen)
  std::uint64_t origin = 0, lo = 0, hi = 0;
};

std::vector<Stall> stalls_of(const json& stalls) {
  std::vector<Stall> out;
  if (!stalls.is_array()) return out;
  for (const json& s : stalls) {
    const std::uint64_t start = u64(s, "start_ns");
    const double gap = std::min(number(s, "gap_ms").value_or(0.0), 1e9);  // ms: 11 days at most
    if (!start || !(gap > 0)) continue;
    out.push_back({start, start + static_cast<std::uint64_t>(gap * 1e6), gap, str(s, "cause"), str(s, "evidence")});
  }
  return out;
}

void add_lanes(Picture& p) {
  const json& delivery = field(p.record, "delivery");
  for (const LaneSpec& spec : lane_specs(p.record)) {
    Lane lane{spec.name, spec.who, spec.key, std::vector<std::uint64_t>(p.timeline.size(), 0), std::nullopt};
    bool any = false;
    for (std::size_t i = 0; i < p.timeline.size(); ++i) {
      lane.t[i] = u64(p.timeline[i], spec.key.c_str());
      any |= lane.t[i] != 0;
    }
    const bool own = spec.key == "ts_ns";
    if (!any && !own) continue;  // a place this record has no times for
    const std::size_t k = p.lanes.size();
    if (own) {
      p.own = k;
      lane.threshold_ms = number(p.record, "stall_threshold_ms");
      p.stalls.push_back(stalls_of(field(p.record, "stalls")));
    } else if (spec.key == "delivered_ns") {
      p.delivered = k;
      lane.threshold_ms = number(delivery, "stall_threshold_ms");
      p.stalls.push_back(stalls_of(field(delivery, "stalls")));
    } else {
      p.stalls.emplace_back();
    }
    p.lanes.push_back(std::move(lane));
  }
}

// The time range: from the request's end (or the first time seen) to the last time seen.
void set_range(Picture& p) {
  std::uint64_t lo = UINT64_MAX, hi = 0;
  for (const Lane& lane : p.lanes) {
    for (std::uint64_t t : lane.t) {
      if (!t) continue;
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
  }
  for (const auto& stalls : p.stalls) {
    for (const Stall& s : stalls) hi = std::max(hi, s.end);
  }
  const std::uint64_t request_end = u64(p.record, "request_end_ns");
  p.from_request = request_end != 0 && !flag(p.record, "joined_midstream");
  if (lo == UINT64_MAX) lo = hi = request_end;
  p.origin = p.from_request ? request_end : lo;
  p.lo = std::min(lo, p.origin);
  p.hi = std::max(hi, p.lo + 1'000'000);  // at least 1 ms wide
}

Picture picture_of(const json& record) {
  static const json empty = json::array();
  const json& timeline = field(record, "timeline").is_array() ? field(record, "timeline") : empty;
  Picture p{record, timeline, {}, {}, {}, {}, {}};
  p.token.reserve(timeline.size());
  for (const json& e : timeline) p.token.push_back(str(e, "kind") == "content");
  add_lanes(p);
  set_range(p);
  return p;
}

// ------------------------------------------------------------ geometry

struct Layout {
  double width = 960;
  double left = 168, right = 28;  // lane labels on the left
  double lanes_top = 0;           // set once the header's height is known
  double row = 18;                // a lane's tick row
  double band = 52;               // between two rows: the lag lines, labels
  double strip = 46, strip_gap = 16;
  std::size_t lanes = 0;

  double plot() const { return width - left - right; }
  double row_top(std::size_t k) const { return lanes_top + static_cast<double>(k) * (row + band); }
  double row_bottom(std::size_t k) const { return row_top(k) + row; }
  double strips_top() const { return row_bottom(lanes - 1) + 44; }
  double strip_top(std::size_t k) const { return strips_top() + static_cast<double>(k) * (strip + strip_gap); }
  double strip_bottom(std::size_t k) const { return strip_top(k) + strip; }
  double axis_y() const { return strip_bottom(lanes - 1) + 8; }
};

struct Axis {
  std::uint64_t origin, lo, hi;
  double left, width;
  double x(std::uint64_t t) const {
    const double offset = static_cast<double>(static_cast<std::int64_t>(t - lo));
    return left + offset / static_cast<double>(hi - lo) * width;
  }
  double x_ms(double ms) const { return x(origin) + ms * 1e6 / static_cast<double>(hi - lo) * width; }
  double ms(std::uint64_t t) const { return static_cast<double>(static_cast<std::int64_t>(t - origin)) / 1e6; }
  int column(std::uint64_t t) const { return static_cast<int>(std::floor(x(t))); }
};

// 1, 2 or 5 times a power of ten, about `span / 8`.
double nice_step(double span) {
  const double raw = span / 8.0;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10.0 * power;
}

int decimals_for(double step) { return step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step))); }

// ------------------------------------------------------------ header

std::string route_text(const json& r) {
  const std::string route = core::route_of(str(r, "path"));
  const std::string method = str(r, "method");
  if (route.empty()) return method.empty() ? "-" : method;
  return method.empty() ? route : method + " " + route;
}

std::string metrics_line(const json& r) {
  std::string line = "TTFT " + ms_text(number(r, "ttft_ms")) + " · e2e " + ms_text(number(r, "e2e_ms")) + " · " +
                     str(r, "tokens") + " tokens";
  if (const auto rate = number(r, "tokens_per_s")) line += " · " + fixed(*rate, 1) + " tok/s";
  line += " · ITL p50 " + ms_text(number(r, "itl_p50_ms")) + ", p99 " + ms_text(number(r, "itl_p99_ms")) + ", max " +
          ms_text(number(r, "itl_max_ms"));
  const json& stalls = field(r, "stalls");
  const std::size_t n = stalls.is_array() ? stalls.size() : 0;
  line += " · " + std::to_string(n) + (n == 1 ? " stall" : " stalls");
  return line;
}

// The client's view (server and gateway records): one line, and a second
// saying why the path degraded the stream when it did.
std::vector<std::string> delivery_lines(const json& d) {
  std::string line = "as delivered (" + str(d, "vantage") + ", " + str(d, "path") + "): TTFT " +
                     ms_text(number(d, "ttft_ms"));
  if (const auto added = number(d, "ttft_added_ms")) line += " (+" + fixed(*added, 1) + ")";
  line += " · ITL p99 " + ms_text(number(d, "itl_p99_ms")) + " · lag p99 " + ms_text(number(d, "lag_p99_ms")) +
          " · burst " + str(d, "max_burst");
  std::vector<std::string> lines = {line};
  if (flag(d, "degraded_by_path")) lines.push_back("degraded by the path: " + str(d, "degraded_reason"));
  return lines;
}

std::string title_of(const json& r) {
  const std::string model = str(r, "model");
  return "stream " + str(r, "stream_id") + " · model " + (model.empty() ? "-" : model) + " · " + route_text(r) + " · " +
         str(r, "role") + "/" + str(r, "vantage");
}

// Title, identity and metrics lines; returns the y below them.
double draw_header(Svg& svg, const json& r) {
  const double x = 14;
  svg.text("text", {{"class", "title"}, {"x", px(x)}, {"y", "24"}}, title_of(r));
  std::string who = str(r, "comm") + "[" + str(r, "pid") + "] · status " + str(r, "status") + " · end " + str(r, "end");
  if (!str(r, "ts").empty()) who += " · " + str(r, "ts");
  svg.text("text", {{"class", "sub"}, {"x", px(x)}, {"y", "44"}}, who);
  svg.text("text", {{"class", "sub"}, {"x", px(x)}, {"y", "60"}}, metrics_line(r));
  double y = 60;
  if (const json& d = field(r, "delivery"); d.is_object()) {
    for (const std::string& line : delivery_lines(d)) {
      y += 16;
      svg.text("text", {{"class", "sub"}, {"x", px(x)}, {"y", px(y)}}, line);
    }
  }
  return y;
}

void draw_legend(Svg& svg, double y, const Layout& layout) {
  svg.open("g", {{"class", "legend"}});
  double x = layout.left;
  const auto item = [&](const std::string& label, double mark_width) {
    svg.text("text", {{"x", px(x + mark_width + 4)}, {"y", px(y + 4)}}, label);
    x += mark_width + 10 + kCharPx * static_cast<double>(label.size());
  };
  svg.leaf("line", {{"class", "tick token"}, {"x1", px(x + 3)}, {"x2", px(x + 3)}, {"y1", px(y - 5)}, {"y2", px(y + 5)}});
  item("token", 6);
  svg.leaf("line", {{"class", "tick other"}, {"x1", px(x + 3)}, {"x2", px(x + 3)}, {"y1", px(y - 2)}, {"y2", px(y + 3)}});
  item("other event", 6);
  svg.leaf("line", {{"class", "lag"}, {"x1", px(x)}, {"x2", px(x + 14)}, {"y1", px(y - 5)}, {"y2", px(y + 5)}});
  item("one token's lag", 14);
  svg.leaf("rect", {{"class", "burst"}, {"x", px(x)}, {"y", px(y - 5)}, {"width", "14"}, {"height", "10"}});
  item("burst (tokens within 1 ms)", 14);
  svg.leaf("rect", {{"class", "stall cause-model"}, {"x", px(x)}, {"y", px(y - 5)}, {"width", "14"}, {"height", "10"}});
  item("stall, by cause", 14);
  svg.leaf("rect", {{"class", "gap"}, {"x", px(x + 4)}, {"y", px(y - 5)}, {"width", "4"}, {"height", "10"}});
  item("gap before a token", 10);
  svg.close("g");
}

// ------------------------------------------------------------ lanes

struct Column {
  int n = 0;
  bool token = false;
  std::size_t first = 0;
  std::uint64_t t = 0;
};

std::map<int, Column> columns_of(const Picture& p, const Lane& lane, const Axis& axis) {
  std::map<int, Column> columns;
  for (std::size_t i = 0; i < lane.t.size(); ++i) {
    if (!lane.t[i]) continue;
    Column& c = columns[axis.column(lane.t[i])];
    if (c.n == 0 || lane.t[i] < c.t) {
      c.first = i;
      c.t = lane.t[i];
    }
    ++c.n;
    c.token |= p.token[i];
  }
  return columns;
}

// One tick per pixel column: its events (data-n), the first one's index and time.
void draw_ticks(Svg& svg, const Picture& p, const Lane& lane, const Axis& axis, const Layout& layout, std::size_t k) {
  for (const auto& [col, c] : columns_of(p, lane, axis)) {
    const double x = axis.x(c.t);
    const double inset = c.token ? 1 : 5;
    svg.leaf("line", {{"class", c.token ? "tick token" : "tick other"},
                      {"x1", px(x)},
                      {"x2", px(x)},
                      {"y1", px(layout.row_top(k) + inset)},
                      {"y2", px(layout.row_bottom(k) - inset)},
                      {"data-n", std::to_string(c.n)},
                      {"data-i", std::to_string(c.first)},
                      {"data-ms", fixed(axis.ms(c.t), 3)}});
  }
}

// Labels placed left to right, each only where it does not run into the one before.
class LabelRow {
 public:
  bool fits(double x, const std::string& label) {
    if (x < next_free_) return false;
    next_free_ = x + kCharPx * static_cast<double>(label.size()) + 6;
    return true;
  }

 private:
  double next_free_ = -1e9;
};

struct Span {
  double x0, x1;
  int n;
  const Stall* largest;
  std::set<std::string> causes;
};

// Stalls closer than a pixel apart are one shaded span (data-n of them).
std::vector<Span> stall_spans(const std::vector<Stall>& stalls, const Axis& axis) {
  std::vector<const Stall*> sorted;
  for (const Stall& s : stalls) sorted.push_back(&s);
  std::sort(sorted.begin(), sorted.end(), [](const Stall* a, const Stall* b) { return a->start < b->start; });
  std::vector<Span> spans;
  for (const Stall* s : sorted) {
    const double x0 = axis.x(s->start), x1 = std::max(axis.x(s->end), x0 + 1);
    // Stalls follow each other (one ends at the token the next starts from):
    // only one too narrow to see on its own joins the span it touches.
    const bool narrow = x1 - x0 < 2 || (!spans.empty() && spans.back().x1 - spans.back().x0 < 2);
    if (!spans.empty() && narrow && x0 <= spans.back().x1 + 1) {
      Span& last = spans.back();
      last.x1 = std::max(last.x1, x1);
      ++last.n;
      if (s->gap_ms > last.largest->gap_ms) last.largest = s;
      last.causes.insert(s->cause);
      continue;
    }
    spans.push_back({x0, x1, 1, s, {s->cause}});
  }
  return spans;
}

void draw_stalls(Svg& svg, const std::vector<Stall>& stalls, const Axis& axis, const Layout& layout, std::size_t k) {
  LabelRow labels;
  for (const Span& span : stall_spans(stalls, axis)) {
    const Stall& s = *span.largest;
    const std::string cause = span.causes.size() == 1 ? s.cause : "mixed";
    std::string tip = "stall " + fixed(s.gap_ms, 1) + " ms: " + (s.cause.empty() ? "cause unknown" : s.cause);
    if (!s.evidence.empty()) tip += " - " + s.evidence;
    if (span.n > 1) tip = std::to_string(span.n) + " stalls; the largest: " + tip;
    svg.titled("rect",
               {{"class", "stall " + cause_class(cause)},
                {"x", px(span.x0)},
                {"y", px(layout.row_top(k) - 3)},
                {"width", px(span.x1 - span.x0)},
                {"height", px(layout.row + 6)},
                {"data-cause", cause},
                {"data-n", std::to_string(span.n)},
                {"data-start-ms", fixed(axis.ms(s.start), 3)},
                {"data-end-ms", fixed(axis.ms(s.end), 3)}},
               tip);
    const std::string label = (cause.empty() ? "stall" : cause) + " " + fixed(s.gap_ms, 0) + " ms" +
                              (span.n > 1 ? " (" + std::to_string(span.n) + " stalls)" : "");
    if (labels.fits(span.x0, label)) {
      svg.text("text", {{"class", "halo stall-label"}, {"x", px(span.x0)}, {"y", px(layout.row_top(k) - 6)}}, label);
    }
  }
}

// Runs of 2 or more token events within kBurstNs of the one before, one box
// per run (runs a pixel apart are one box).
void draw_bursts(Svg& svg, const Picture& p, const Lane& lane, const Axis& axis, const Layout& layout, std::size_t k) {
  struct Run {
    double x0, x1;
    int n;
  };
  std::vector<Run> runs;
  std::uint64_t prev = 0;
  int run = 0;
  for (std::size_t i = 0; i < lane.t.size(); ++i) {
    if (!p.token[i] || !lane.t[i]) continue;
    const std::uint64_t t = lane.t[i];
    const bool joins = prev && t >= prev && t - prev <= kBurstNs;
    run = joins ? run + 1 : 1;
    if (run == 2) runs.push_back({axis.x(prev), axis.x(t), 2});
    if (run > 2) {
      runs.back().x1 = axis.x(t);
      runs.back().n = run;
    }
    prev = t;
  }
  std::vector<Run> merged;
  for (const Run& r : runs) {
    if (!merged.empty() && r.x0 <= merged.back().x1 + 2) {
      merged.back().x1 = r.x1;
      merged.back().n += r.n;
    } else {
      merged.push_back(r);
    }
  }
  LabelRow labels;
  for (const Run& r : merged) {
    const double x0 = r.x0 - 2, w = std::max(4.0, r.x1 - r.x0 + 4);
    svg.leaf("rect", {{"class", "burst"}, {"x", px(x0)}, {"y", px(layout.row_top(k) - 1)}, {"width", px(w)},
                      {"height", px(layout.row + 2)}, {"rx", "2"}, {"data-n", std::to_string(r.n)}});
    const std::string label = "×" + std::to_string(r.n);
    if (r.n >= 3 && labels.fits(x0, label)) {
      svg.text("text", {{"class", "halo burst-label"}, {"x", px(x0)}, {"y", px(layout.row_bottom(k) + 11)}}, label);
    }
  }
}

// TTFT of a lane, bracketed above its row from the request's end.
void draw_ttft(Svg& svg, const Axis& axis, double row_top, double ttft_ms, const std::string& label) {
  const double x0 = axis.x(axis.origin), x1 = axis.x_ms(ttft_ms), y = row_top - 22;
  svg.open("g", {{"class", "ttft"}, {"data-ms", fixed(ttft_ms, 3)}});
  svg.leaf("line", {{"class", "ttft"}, {"x1", px(x0)}, {"x2", px(x1)}, {"y1", px(y)}, {"y2", px(y)}});
  svg.leaf("line", {{"class", "ttft"}, {"x1", px(x0)}, {"x2", px(x0)}, {"y1", px(y - 4)}, {"y2", px(y + 4)}});
  svg.leaf("line", {{"class", "ttft"}, {"x1", px(x1)}, {"x2", px(x1)}, {"y1", px(y - 4)}, {"y2", px(row_top + 6)}});
  const double text_width = kCharPx * static_cast<double>(label.size());
  const double tx = x1 - x0 > text_width + 8 ? (x0 + x1 - text_width) / 2 : x1 + 4;
  svg.text("text", {{"class", "halo"}, {"x", px(tx)}, {"y", px(y - 4)}}, label);
  svg.close("g");
}

void draw_lane_ttft(Svg& svg, const Picture& p, std::size_t k, const Axis& axis, const Layout& layout) {
  if (!p.from_request) return;
  if (k == p.own) {
    if (const auto ttft = number(p.record, "ttft_ms")) draw_ttft(svg, axis, layout.row_top(k), *ttft, "TTFT " + fixed(*ttft, 1) + " ms");
  } else if (k == p.delivered) {
    const json& d = field(p.record, "delivery");
    const auto ttft = number(d, "ttft_ms");
    if (!ttft) return;
    std::string label = "TTFT " + fixed(*ttft, 1) + " ms";
    if (const auto added = number(d, "ttft_added_ms")) label += " (+" + fixed(*added, 1) + ")";
    draw_ttft(svg, axis, layout.row_top(k), *ttft, label);
  }
}

void draw_lane(Svg& svg, const Picture& p, std::size_t k, const Axis& axis, const Layout& layout) {
  const Lane& lane = p.lanes[k];
  svg.open("g", {{"class", "lane"}, {"data-key", lane.key}, {"data-name", lane.name}});
  const double top = layout.row_top(k);
  svg.text("text", {{"class", "lane-name"}, {"x", "14"}, {"y", px(top + 9)}}, lane.name);
  if (!lane.who.empty()) {
    svg.text("text", {{"class", "who"}, {"x", "14"}, {"y", px(top + 21)}}, shorten(lane.who, 26));
  }
  svg.leaf("rect", {{"class", "row"}, {"x", px(layout.left)}, {"y", px(top)}, {"width", px(layout.plot())},
                    {"height", px(layout.row)}});
  draw_stalls(svg, p.stalls[k], axis, layout, k);
  draw_bursts(svg, p, lane, axis, layout, k);
  draw_ticks(svg, p, lane, axis, layout, k);
  draw_lane_ttft(svg, p, k, axis, layout);
  svg.close("g");
}

// A line per token event from its time in lane a to its time in lane b;
// with more events than pixel columns, per column of lane a the event with
// the largest lag (so a lag spike is never averaged away).
void draw_lags(Svg& svg, const Picture& p, std::size_t a, std::size_t b, const Axis& axis, const Layout& layout) {
  const Lane &from = p.lanes[a], &to = p.lanes[b];
  std::vector<std::size_t> events;
  for (std::size_t i = 0; i < p.token.size(); ++i) {
    if (p.token[i] && from.t[i] && to.t[i]) events.push_back(i);
  }
  if (events.size() > static_cast<std::size_t>(layout.plot())) {
    std::map<int, std::size_t> widest;
    const auto lag = [&](std::size_t i) { return static_cast<std::int64_t>(to.t[i] - from.t[i]); };
    for (std::size_t i : events) {
      auto [it, inserted] = widest.emplace(axis.column(from.t[i]), i);
      if (!inserted && lag(i) > lag(it->second)) it->second = i;
    }
    events.clear();
    for (const auto& [col, i] : widest) events.push_back(i);
  }
  svg.open("g", {{"class", "lags"}, {"data-from", from.key}, {"data-to", to.key}});
  for (std::size_t i : events) {
    svg.leaf("line", {{"class", "lag"}, {"x1", px(axis.x(from.t[i]))}, {"y1", px(layout.row_bottom(a))},
                      {"x2", px(axis.x(to.t[i]))}, {"y2", px(layout.row_top(b))}, {"data-i", std::to_string(i)}});
  }
  svg.close("g");
}

// ------------------------------------------------------------ gap strips

// Per lane, the gap before each token event (from the token before it), the
// largest per pixel column.
std::map<int, std::pair<double, std::uint64_t>> gaps_of(const Picture& p, const Lane& lane, const Axis& axis) {
  std::map<int, std::pair<double, std::uint64_t>> gaps;  // column -> (gap ms, time)
  std::uint64_t prev = 0;
  for (std::size_t i = 0; i < lane.t.size(); ++i) {
    if (!p.token[i] || !lane.t[i]) continue;
    if (prev && lane.t[i] >= prev) {
      const double gap = static_cast<double>(lane.t[i] - prev) / 1e6;
      auto [it, inserted] = gaps.emplace(axis.column(lane.t[i]), std::make_pair(gap, lane.t[i]));
      if (!inserted && gap > it->second.first) it->second = {gap, lane.t[i]};
    }
    prev = lane.t[i];
  }
  return gaps;
}

void draw_strips(Svg& svg, const Picture& p, const Axis& axis, const Layout& layout) {
  std::vector<std::map<int, std::pair<double, std::uint64_t>>> gaps;
  double largest = 0;
  std::size_t tokens = 1;
  for (const Lane& lane : p.lanes) {
    gaps.push_back(gaps_of(p, lane, axis));
    for (const auto& [col, g] : gaps.back()) largest = std::max(largest, g.first);
    tokens = std::max(tokens, gaps.back().size());
  }
  const double bar = std::clamp(0.5 * layout.plot() / static_cast<double>(tokens), 1.2, 6.0);
  for (std::size_t k = 0; k < p.lanes.size(); ++k) {
    const Lane& lane = p.lanes[k];
    const double top = layout.strip_top(k), bottom = layout.strip_bottom(k);
    svg.open("g", {{"class", "gaps"}, {"data-key", lane.key}});
    svg.text("text", {{"class", "lane-name"}, {"x", "14"}, {"y", px(top + 12)}}, "gaps · " + lane.name);
    svg.text("text", {{"class", "who"}, {"x", "14"}, {"y", px(top + 25)}}, "bar height: 0 – " + fixed(largest, 1) + " ms");
    svg.leaf("line", {{"class", "axis"}, {"x1", px(layout.left)}, {"x2", px(layout.left + layout.plot())},
                      {"y1", px(bottom)}, {"y2", px(bottom)}});
    const double threshold = lane.threshold_ms.value_or(0);
    for (const auto& [col, g] : gaps[k]) {
      const double h = largest > 0 ? std::max(1.0, g.first / largest * layout.strip) : 1.0;
      svg.leaf("rect", {{"class", threshold > 0 && g.first >= threshold ? "gap long" : "gap"},
                        {"x", px(axis.x(g.second) - bar / 2)}, {"y", px(bottom - h)}, {"width", px(bar)},
                        {"height", px(h)}, {"data-ms", fixed(g.first, 3)}});
    }
    if (threshold > 0 && threshold <= largest) {
      const double y = bottom - threshold / largest * layout.strip;
      svg.leaf("line", {{"class", "threshold"}, {"x1", px(layout.left)}, {"x2", px(layout.left + layout.plot())},
                        {"y1", px(y)}, {"y2", px(y)}});
      svg.text("text", {{"class", "halo who"}, {"x", px(layout.left + layout.plot() - 120)}, {"y", px(y - 3)}},
               "stall threshold " + fixed(threshold, 0) + " ms");
    }
    svg.close("g");
  }
}

// ------------------------------------------------------------ axis, notes

void draw_grid_and_axis(Svg& svg, const Picture& p, const Axis& axis, const Layout& layout) {
  const double lo_ms = axis.ms(axis.lo), hi_ms = axis.ms(axis.hi);
  const double step = nice_step(hi_ms - lo_ms);
  const double y = layout.axis_y();
  svg.open("g", {{"class", "time-axis"}});
  svg.leaf("line", {{"class", "axis"}, {"x1", px(layout.left)}, {"x2", px(layout.left + layout.plot())},
                    {"y1", px(y)}, {"y2", px(y)}});
  for (double ms = std::ceil(lo_ms / step) * step; ms <= hi_ms + step * 1e-9; ms += step) {
    const double x = axis.x_ms(ms);
    svg.leaf("line", {{"class", "grid"}, {"x1", px(x)}, {"x2", px(x)}, {"y1", px(layout.row_top(0) - 30)}, {"y2", px(y)}});
    svg.leaf("line", {{"class", "axis"}, {"x1", px(x)}, {"x2", px(x)}, {"y1", px(y)}, {"y2", px(y + 4)}});
    svg.text("text", {{"class", "axis-label"}, {"x", px(x)}, {"y", px(y + 16)}, {"text-anchor", "middle"},
                      {"data-ms", fixed(ms, 3)}},
             fixed(std::abs(ms) < step * 1e-6 ? 0.0 : ms, decimals_for(step)));
  }
  svg.text("text", {{"class", "axis-label"}, {"x", px(layout.left)}, {"y", px(y + 32)}},
           p.from_request ? "ms since the request's last byte (the TTFT origin)" : "ms since the first event seen");
  svg.close("g");
  if (p.from_request) {
    const double x = axis.x(axis.origin);
    svg.leaf("line", {{"class", "request"}, {"x1", px(x)}, {"x2", px(x)}, {"y1", px(layout.row_top(0) - 30)},
                      {"y2", px(layout.row_bottom(layout.lanes - 1))}});
  }
}

std::vector<std::string> notes_of(const Picture& p, const Layout& layout) {
  std::vector<std::string> notes;
  const json& r = p.record;
  if (flag(r, "joined_midstream")) {
    notes.push_back("joined mid-stream: times are from the first event the agent saw");
  }
  if (flag(r, "timeline_truncated")) {
    notes.push_back("timeline cut at " + str(r, "timeline_events") + " of " + str(r, "events") +
                    " events: later events are counted in the metrics above, not drawn");
  }
  std::size_t most = 0;
  for (const Lane& lane : p.lanes) most = std::max<std::size_t>(most, std::count_if(lane.t.begin(), lane.t.end(), [](std::uint64_t t) { return t != 0; }));
  if (static_cast<double>(most) > layout.plot() / 2) {
    notes.push_back(std::to_string(most) + " events over " + fixed(layout.plot(), 0) +
                    " pixel columns: a column's tick stands for all its events, its gap bar for its largest gap, "
                    "its lag line for its largest lag");
  }
  return notes;
}

std::string open_svg(double width, double height, const std::string& title) {
  Svg svg;
  svg.raw("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  svg.open("svg", {{"xmlns", "http://www.w3.org/2000/svg"}, {"width", fixed(width, 0)}, {"height", fixed(height, 0)},
                   {"viewBox", "0 0 " + fixed(width, 0) + " " + fixed(height, 0)}, {"role", "img"},
                   {"aria-labelledby", "picture-title"}});
  svg.raw("\n");
  svg.text("title", {{"id", "picture-title"}}, "infertap: " + title);
  svg.open("style");
  svg.raw(kStyle);
  svg.close("style");
  svg.leaf("rect", {{"x", "0"}, {"y", "0"}, {"width", fixed(width, 0)}, {"height", fixed(height, 0)}, {"fill", "#ffffff"}});
  return svg.take();
}

}  // namespace

std::string xml_text(std::string_view text) {
  const std::string safe = base::printable(text);
  std::string out;
  out.reserve(safe.size());
  for (std::size_t i = 0; i < safe.size();) {
    const base::TextUnit u = base::next_unit(safe, i);
    if (u.code_point == 0xFFFE || u.code_point == 0xFFFF) {  // valid UTF-8, yet not an XML character
      out += u.code_point == 0xFFFE ? "\\ufffe" : "\\uffff";
    } else if (u.size == 1 && safe[i] == '&') {
      out += "&amp;";
    } else if (u.size == 1 && safe[i] == '<') {
      out += "&lt;";
    } else if (u.size == 1 && safe[i] == '>') {
      out += "&gt;";
    } else if (u.size == 1 && safe[i] == '"') {
      out += "&quot;";
    } else if (u.size == 1 && safe[i] == '\'') {
      out += "&apos;";
    } else {
      out.append(safe, i, u.size);
    }
    i += u.size;
  }
  return out;
}

std::string render_stream_svg(const nlohmann::json& record, const SvgOptions& options) {
  const Picture p = picture_of(record);
  Layout layout;
  layout.width = std::max(480, options.width_px);
  layout.lanes = p.lanes.size();
  Svg body;
  const double header_bottom = draw_header(body, record);
  draw_legend(body, header_bottom + 22, layout);
  layout.lanes_top = header_bottom + 78;
  const Axis axis{p.origin, p.lo, p.hi, layout.left, layout.plot()};
  double bottom = layout.lanes_top;
  if (p.timeline.empty()) {
    body.text("text", {{"class", "note"}, {"x", "14"}, {"y", px(bottom)}},
              "no timeline kept for this stream: nothing to draw (the agent releases the oldest timelines first)");
    bottom += 12;
  } else {
    draw_grid_and_axis(body, p, axis, layout);
    for (std::size_t k = 0; k + 1 < p.lanes.size(); ++k) draw_lags(body, p, k, k + 1, axis, layout);
    for (std::size_t k = 0; k < p.lanes.size(); ++k) draw_lane(body, p, k, axis, layout);
    draw_strips(body, p, axis, layout);
    bottom = layout.axis_y() + 36;
    for (const std::string& note : notes_of(p, layout)) {
      bottom += 16;
      body.text("text", {{"class", "note"}, {"x", "14"}, {"y", px(bottom)}}, note);
    }
  }
  std::string out = open_svg(layout.width, bottom + 16, title_of(record));
  out += body.take();
  out += "</svg>\n";
  return out;
}

}  // namespace infertap::output
