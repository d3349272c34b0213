#include "degrade/config.h"

#include <set>

#include "base/yaml_reader.h"

namespace infertap::degrade {

std::string_view metric_name(Metric m) {
  switch (m) {
    case Metric::ttft: return "ttft_ms";
    case Metric::tokens_per_s: return "tokens_per_s";
    case Metric::itl_p95: return "itl_p95_ms";
    case Metric::itl_p99: return "itl_p99_ms";
    case Metric::longest_pause: return "longest_pause_ms";
    case Metric::delivery_lag: return "delivery_lag_ms";
  }
  return "?";
}

std::string_view objective_key(Metric m) {
  return m == Metric::tokens_per_s ? "min_tokens_per_s" : metric_name(m);
}

std::string_view phase_of(Metric m) {
  if (m == Metric::ttft) return "ttft";
  return path_only(m) ? "delivery" : "decode";
}

bool higher_is_worse(Metric m) { return m != Metric::tokens_per_s; }

bool path_only(Metric m) { return m == Metric::delivery_lag; }

namespace {

using Node = YAML::Node;
using Fields = std::vector<base::YamlReader::Field>;

// A name of the degradation section: 1..128 printable characters.
std::optional<std::string> name(base::YamlReader& r, const Node& n, const std::string& key) {
  const auto s = r.scalar(n, key, "a string");
  if (!s) return std::nullopt;
  if (s->empty() || s->size() > 128 || s->find_first_of("\n\r\t\"") != std::string::npos) {
    r.fail(n, key, "must be 1..128 printable characters, got '" + *s + "'");
    return std::nullopt;
  }
  return s;
}

template <typename T, typename V>
void assign(T* out, const std::optional<V>& v) {
  if (v) *out = static_cast<T>(*v);
}

// Readers of the usual fields: `key: value` into *out.
template <typename T>
base::YamlReader::Field number(base::YamlReader& r, const char* key, T* out, double lo, double hi) {
  return {key, [&r, out, lo, hi](const Node& v, const std::string& k) { assign(out, r.number(v, k, lo, hi)); }};
}
template <typename T>
base::YamlReader::Field integer(base::YamlReader& r, const char* key, T* out, std::uint64_t lo, std::uint64_t hi) {
  return {key, [&r, out, lo, hi](const Node& v, const std::string& k) { assign(out, r.integer(v, k, lo, hi)); }};
}
base::YamlReader::Field boolean(base::YamlReader& r, const char* key, bool* out) {
  return {key, [&r, out](const Node& v, const std::string& k) { assign(out, r.boolean(v, k)); }};
}
base::YamlReader::Field text(base::YamlReader& r, const char* key, std::string* out) {
  return {key, [&r, out](const Node& v, const std::string& k) { assign(out, name(r, v, k)); }};
}

// One entry of length_classes; `previous` is the class before it (nullptr for the first).
void read_length_class(base::YamlReader& r, const Node& n, const std::string& key, bool last,
                       const LengthClass* previous, std::set<std::string>& names, std::vector<LengthClass>& out) {
  LengthClass lc;
  r.fields(n, key,
           {text(r, "name", &lc.name), {"below", [&](const Node& v, const std::string& k) {
              if (auto b = r.integer(v, k, 1, 100'000'000)) lc.below = *b;
            }}});
  if (!n.IsMap()) return;
  if (lc.name.empty()) r.fail(n, key, "needs a name");
  if (!lc.name.empty() && !names.insert(lc.name).second) r.fail(n, key, "name '" + lc.name + "' given twice");
  if (last && lc.below) r.fail(n, key, "the last class takes every longer stream: remove its 'below'");
  if (!last && !lc.below) r.fail(n, key, "needs 'below' (only the last class has no bound)");
  if (lc.below && previous && previous->below && *lc.below <= *previous->below) {
    r.fail(n, key, "below must increase from class to class");
  }
  out.push_back(lc);
}

// A list of {name, below} classes, the last without below; `may_be_empty`: [] turns the dimension off.
void read_classes(base::YamlReader& r, const Node& n, const std::string& key, bool may_be_empty,
                  std::vector<LengthClass>& out) {
  if (!n.IsSequence() || (n.size() == 0 && !may_be_empty)) {
    r.fail(n, key,
           may_be_empty ? "must be a list of {name, below} (the last without below), or [] to turn it off"
                        : "must be a non-empty list of {name, below} (the last without below)");
    return;
  }
  std::vector<LengthClass> classes;
  std::set<std::string> names;
  for (std::size_t i = 0; i < n.size(); ++i) {
    read_length_class(r, n[i], key + "[" + std::to_string(i) + "]", i + 1 == n.size(),
                      classes.empty() ? nullptr : &classes.back(), names, classes);
  }
  out = std::move(classes);
}

void read_length_classes(base::YamlReader& r, const Node& n, const std::string& key, DegradationConfig& c) {
  read_classes(r, n, key, false, c.length_classes);
}
void read_concurrency_bands(base::YamlReader& r, const Node& n, const std::string& key, DegradationConfig& c) {
  read_classes(r, n, key, true, c.concurrency_bands);
}
void read_input_bands(base::YamlReader& r, const Node& n, const std::string& key, DegradationConfig& c) {
  read_classes(r, n, key, true, c.input_bands);
}

// One entry of objectives: its cohort globs, vantage and limits.
void read_objective(base::YamlReader& r, const Node& n, const std::string& key, std::size_t index,
                    std::vector<Objective>& out) {
  Objective o;
  Fields known = {text(r, "name", &o.name),       text(r, "model", &o.model),
                  text(r, "route", &o.route),     text(r, "process", &o.process),
                  text(r, "container", &o.container), text(r, "length_class", &o.length_class),
                  text(r, "concurrency_band", &o.concurrency_band), text(r, "input_band", &o.input_band),
                  {"vantage", [&](const Node& v, const std::string& k) {
                     const auto s = name(r, v, k);
                     if (!s || *s == "any") return;
                     o.vantage = parse_vantage(*s);
                     if (!o.vantage) r.fail(v, k, "must be server_emit, client_observed or any, got '" + *s + "'");
                   }}};
  for (Metric m : kAllMetrics) {
    known.push_back({std::string(objective_key(m)), [&, m](const Node& v, const std::string& k) {
                       o.limit[static_cast<std::size_t>(m)] = r.number(v, k, 0.001, 1e9);
                     }});
  }
  r.fields(n, key, known);
  if (!n.IsMap()) return;
  if (o.name.empty()) o.name = "objectives[" + std::to_string(index) + "]";
  bool any = false;
  for (const auto& l : o.limit) any = any || l.has_value();
  if (!any) {
    std::string keys;
    for (Metric m : kAllMetrics) keys += (keys.empty() ? "" : ", ") + std::string(objective_key(m));
    r.fail(n, key, "sets no limit: give at least one of " + keys);
  }
  out.push_back(std::move(o));
}

void read_objectives(base::YamlReader& r, const Node& n, const std::string& key, DegradationConfig& c) {
  if (!n.IsSequence()) {
    r.fail(n, key, "must be a list of objectives");
    return;
  }
  c.objectives.clear();
  for (std::size_t i = 0; i < n.size(); ++i) read_objective(r, n[i], key + "[" + std::to_string(i) + "]", i, c.objectives);
}

void read_abuse(base::YamlReader& r, const Node& n, const std::string& key, AbuseConfig& a) {
  r.fields(n, key,
           {boolean(r, "enabled", &a.enabled), number(r, "share", &a.share, 0.01, 1),
            number(r, "release_share", &a.release_share, 0, 1),
            integer(r, "min_streams", &a.min_streams, 1, 1'000'000),
            integer(r, "min_clients", &a.min_clients, 1, 1'000'000),
            integer(r, "enter_windows", &a.enter_windows, 1, 1000), integer(r, "exit_windows", &a.exit_windows, 1, 1000),
            integer(r, "max_clients", &a.max_clients, 1, 1'000'000)});
  if (a.release_share >= a.share) r.fail(n, key + ".release_share", "must be below " + key + ".share (hysteresis)");
}

// What no single key can say: the thresholds' order, objectives naming known classes.
void check_across_keys(base::YamlReader& r, const Node& node, const std::string& key, const DegradationConfig& c) {
  if (c.recovery_share >= c.breach_share) {
    r.error(key + ".recovery_share: must be below " + key + ".breach_share (hysteresis), got " +
            std::to_string(c.recovery_share) + " >= " + std::to_string(c.breach_share) + base::YamlReader::at(node));
  }
  if (c.history_windows < c.warmup_windows) {
    r.error(key + ".history_windows: must be at least warmup_windows (" + std::to_string(c.warmup_windows) +
            "), got " + std::to_string(c.history_windows) + base::YamlReader::at(node));
  }
  for (const Objective& o : c.objectives) {
    if (o.length_class == "*" || o.length_class.find_first_of("*?[") != std::string::npos) continue;
    bool found = false;
    for (const LengthClass& lc : c.length_classes) found = found || lc.name == o.length_class;
    if (!found) {
      r.error(key + ".objectives: '" + o.name + "' names length_class '" + o.length_class +
              "', which is not among length_classes" + base::YamlReader::at(node));
    }
  }
}

}  // namespace

void parse_config(const YAML::Node& node, const std::string& key, DegradationConfig* out,
                  std::vector<std::string>* errors) {
  base::YamlReader r(*errors);
  DegradationConfig& c = *out;
  const std::size_t errors_before = r.error_count();
  const auto section = [&](void (*read)(base::YamlReader&, const Node&, const std::string&, DegradationConfig&)) {
    return [&r, &c, read](const Node& v, const std::string& k) { read(r, v, k, c); };
  };
  r.fields(node, key,
           {boolean(r, "enabled", &c.enabled), number(r, "window_s", &c.window_s, 0.1, 86400),
            integer(r, "min_streams", &c.min_streams, 1, 1'000'000),
            number(r, "breach_share", &c.breach_share, 0.001, 1), number(r, "recovery_share", &c.recovery_share, 0, 1),
            integer(r, "enter_windows", &c.enter_windows, 1, 1000), integer(r, "exit_windows", &c.exit_windows, 1, 1000),
            integer(r, "stale_windows", &c.stale_windows, 1, 100'000),
            number(r, "objective_ratio", &c.objective_ratio, 1, 100),
            number(r, "baseline_ratio", &c.baseline_ratio, 1, 100),
            number(r, "latency_floor_ms", &c.latency_floor_ms, 0, 3'600'000),
            number(r, "lag_floor_ms", &c.lag_floor_ms, 0, 3'600'000),
            number(r, "rate_floor_tokens_per_s", &c.rate_floor_tokens_per_s, 0, 1e6),
            boolean(r, "baseline", &c.baseline), integer(r, "warmup_windows", &c.warmup_windows, 1, 10'000),
            integer(r, "history_windows", &c.history_windows, 1, 10'000),
            {"length_classes", section(read_length_classes)},
            {"concurrency_bands", section(read_concurrency_bands)}, {"input_bands", section(read_input_bands)},
            {"objectives", section(read_objectives)},
            integer(r, "max_cohorts", &c.max_cohorts, 1, 1'000'000),
            integer(r, "recent_alerts", &c.recent_alerts, 1, 100'000),
            {"abuse", [&](const Node& v, const std::string& k) { read_abuse(r, v, k, c.abuse); }}});
  if (r.error_count() == errors_before) check_across_keys(r, node, key, c);
}

}  // namespace infertap::degrade
