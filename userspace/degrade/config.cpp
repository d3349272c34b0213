#include "degrade/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace infertap::degrade {

std::string_view metric_name(Metric m) {
  switch (m) {
    case Metric::ttft: return "ttft_ms";
    case Metric::tokens_per_s: return "tokens_per_s";
    case Metric::itl_p95: return "itl_p95_ms";
    case Metric::itl_p99: return "itl_p99_ms";
    case Metric::longest_pause: return "longest_pause_ms";
  }
  return "?";
}

std::string_view objective_key(Metric m) {
  return m == Metric::tokens_per_s ? "min_tokens_per_s" : metric_name(m);
}

std::string_view phase_of(Metric m) { return m == Metric::ttft ? "ttft" : "decode"; }

bool higher_is_worse(Metric m) { return m != Metric::tokens_per_s; }

namespace {

using Node = YAML::Node;

// Strict reader of one section: every problem becomes a line naming the key.
struct Reader {
  std::vector<std::string>* errors;

  static std::string at(const Node& n) {
    const YAML::Mark mark = n.Mark();
    return mark.line < 0 ? "" : " (line " + std::to_string(mark.line + 1) + ")";
  }
  void fail(const Node& n, const std::string& key, const std::string& what) {
    errors->push_back(key + ": " + what + at(n));
  }

  using Handler = std::function<void(const Node&, const std::string&)>;
  // Every key of `n` must be in `fields`; a null node is an empty mapping.
  void fields(const Node& n, const std::string& prefix, const std::vector<std::pair<const char*, Handler>>& known) {
    if (n.IsNull()) return;
    if (!n.IsMap()) {
      fail(n, prefix, "must be a mapping (key: value)");
      return;
    }
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const Node k = it->first;
      const Node v = it->second;
      if (!k.IsScalar()) {
        errors->push_back("a key in " + prefix + " is not a plain name" + at(k));
        continue;
      }
      const std::string key = prefix + "." + k.Scalar();
      if (!seen.insert(k.Scalar()).second) {
        errors->push_back("duplicate key '" + key + "'" + at(k));
        continue;
      }
      const Handler* handler = nullptr;
      std::string names;
      for (const auto& [name, h] : known) {
        if (k.Scalar() == name) handler = &h;
        names += (names.empty() ? "" : ", ") + std::string(name);
      }
      if (!handler) {
        errors->push_back("unknown key '" + key + "'" + at(k) + "; known keys in " + prefix + ": " + names);
        continue;
      }
      if (!v.IsNull()) (*handler)(v, key);
    }
  }

  std::optional<std::string> text(const Node& n, const std::string& key, const std::string& expected) {
    if (n.IsScalar()) return n.Scalar();
    fail(n, key, "must be " + expected + ", got a " + (n.IsMap() ? "mapping" : "list"));
    return std::nullopt;
  }

  std::optional<double> number(const Node& n, const std::string& key, double lo, double hi) {
    std::ostringstream r;
    r << lo << ".." << hi;
    const auto s = text(n, key, "a number " + r.str());
    if (!s) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const bool plain = !s->empty() && s->find_first_not_of("0123456789+-.eE") == std::string::npos;
    const double v = plain ? std::strtod(s->c_str(), &end) : 0;
    if (!plain || end != s->c_str() + s->size() || errno != 0 || !std::isfinite(v)) {
      fail(n, key, "must be a number " + r.str() + ", got '" + *s + "'");
      return std::nullopt;
    }
    if (v < lo || v > hi) {
      fail(n, key, "must be " + r.str() + ", got " + *s);
      return std::nullopt;
    }
    return v;
  }

  std::optional<std::uint64_t> integer(const Node& n, const std::string& key, std::uint64_t lo, std::uint64_t hi) {
    const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
    const auto s = text(n, key, "an integer " + range);
    if (!s) return std::nullopt;
    if (s->empty() || s->find_first_not_of("0123456789") != std::string::npos || s->size() > 19) {
      fail(n, key, "must be an integer " + range + ", got '" + *s + "'");
      return std::nullopt;
    }
    const std::uint64_t v = std::strtoull(s->c_str(), nullptr, 10);
    if (v < lo || v > hi) {
      fail(n, key, "must be " + range + ", got " + *s);
      return std::nullopt;
    }
    return v;
  }

  std::optional<bool> boolean(const Node& n, const std::string& key) {
    const auto s = text(n, key, "true or false");
    bool v = false;
    if (s && YAML::convert<bool>::decode(n, v)) return v;
    if (s) fail(n, key, "must be true or false, got '" + *s + "'");
    return std::nullopt;
  }

  std::optional<std::string> name(const Node& n, const std::string& key) {
    const auto s = text(n, key, "a string");
    if (!s) return std::nullopt;
    if (s->empty() || s->size() > 128 || s->find_first_of("\n\r\t\"") != std::string::npos) {
      fail(n, key, "must be 1..128 printable characters, got '" + *s + "'");
      return std::nullopt;
    }
    return s;
  }
};

template <typename T, typename V>
void assign(T* out, const std::optional<V>& v) {
  if (v) *out = static_cast<T>(*v);
}

}  // namespace

void parse_config(const YAML::Node& node, const std::string& key, DegradationConfig* out,
                  std::vector<std::string>* errors) {
  Reader r{errors};
  DegradationConfig& c = *out;
  const std::size_t errors_before = errors->size();

  const auto length_classes = [&](const Node& n, const std::string& k) {
    if (!n.IsSequence() || n.size() == 0) {
      r.fail(n, k, "must be a non-empty list of {name, below} (the last without below)");
      return;
    }
    std::vector<LengthClass> classes;
    std::set<std::string> names;
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string ik = k + "[" + std::to_string(i) + "]";
      LengthClass lc;
      r.fields(n[i], ik,
               {{"name", [&](const Node& v, const std::string& kk) { assign(&lc.name, r.name(v, kk)); }},
                {"below", [&](const Node& v, const std::string& kk) {
                   if (auto b = r.integer(v, kk, 1, 100'000'000)) lc.below = *b;
                 }}});
      if (!n[i].IsMap()) continue;
      if (lc.name.empty()) r.fail(n[i], ik, "needs a name");
      if (!lc.name.empty() && !names.insert(lc.name).second) r.fail(n[i], ik, "name '" + lc.name + "' given twice");
      const bool last = i + 1 == n.size();
      if (last && lc.below) r.fail(n[i], ik, "the last class takes every longer stream: remove its 'below'");
      if (!last && !lc.below) r.fail(n[i], ik, "needs 'below' (only the last class has no bound)");
      if (lc.below && !classes.empty() && classes.back().below && *lc.below <= *classes.back().below) {
        r.fail(n[i], ik, "below must increase from class to class");
      }
      classes.push_back(lc);
    }
    c.length_classes = std::move(classes);
  };

  const auto objectives = [&](const Node& n, const std::string& k) {
    if (!n.IsSequence()) {
      r.fail(n, k, "must be a list of objectives");
      return;
    }
    c.objectives.clear();
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string ik = k + "[" + std::to_string(i) + "]";
      Objective o;
      std::vector<std::pair<const char*, Reader::Handler>> known = {
          {"name", [&](const Node& v, const std::string& kk) { assign(&o.name, r.name(v, kk)); }},
          {"model", [&](const Node& v, const std::string& kk) { assign(&o.model, r.name(v, kk)); }},
          {"route", [&](const Node& v, const std::string& kk) { assign(&o.route, r.name(v, kk)); }},
          {"process", [&](const Node& v, const std::string& kk) { assign(&o.process, r.name(v, kk)); }},
          {"container", [&](const Node& v, const std::string& kk) { assign(&o.container, r.name(v, kk)); }},
          {"length_class", [&](const Node& v, const std::string& kk) { assign(&o.length_class, r.name(v, kk)); }},
          {"vantage", [&](const Node& v, const std::string& kk) {
             const auto s = r.name(v, kk);
             if (!s) return;
             if (*s == "any") return;
             o.vantage = parse_vantage(*s);
             if (!o.vantage) r.fail(v, kk, "must be server_emit, client_observed or any, got '" + *s + "'");
           }},
      };
      for (Metric m : kAllMetrics) {
        known.emplace_back(objective_key(m).data(), [&, m](const Node& v, const std::string& kk) {
          o.limit[static_cast<std::size_t>(m)] = r.number(v, kk, 0.001, 1e9);
        });
      }
      r.fields(n[i], ik, known);
      if (!n[i].IsMap()) continue;
      if (o.name.empty()) o.name = "objectives[" + std::to_string(i) + "]";
      bool any = false;
      for (const auto& l : o.limit) any = any || l.has_value();
      if (!any) {
        r.fail(n[i], ik, "sets no limit: give at least one of ttft_ms, min_tokens_per_s, itl_p95_ms, itl_p99_ms, "
                         "longest_pause_ms");
      }
      c.objectives.push_back(std::move(o));
    }
  };

  const auto abuse = [&](const Node& n, const std::string& k) {
    AbuseConfig& a = c.abuse;
    r.fields(n, k,
             {{"enabled", [&](const Node& v, const std::string& kk) { assign(&a.enabled, r.boolean(v, kk)); }},
              {"share", [&](const Node& v, const std::string& kk) { assign(&a.share, r.number(v, kk, 0.01, 1)); }},
              {"release_share",
               [&](const Node& v, const std::string& kk) { assign(&a.release_share, r.number(v, kk, 0, 1)); }},
              {"min_streams",
               [&](const Node& v, const std::string& kk) { assign(&a.min_streams, r.integer(v, kk, 1, 1'000'000)); }},
              {"min_clients",
               [&](const Node& v, const std::string& kk) { assign(&a.min_clients, r.integer(v, kk, 1, 1'000'000)); }},
              {"enter_windows",
               [&](const Node& v, const std::string& kk) { assign(&a.enter_windows, r.integer(v, kk, 1, 1000)); }},
              {"exit_windows",
               [&](const Node& v, const std::string& kk) { assign(&a.exit_windows, r.integer(v, kk, 1, 1000)); }},
              {"max_clients",
               [&](const Node& v, const std::string& kk) { assign(&a.max_clients, r.integer(v, kk, 1, 1'000'000)); }}});
    if (a.release_share >= a.share) {
      r.fail(n, k + ".release_share", "must be below " + k + ".share (hysteresis)");
    }
  };

  r.fields(
      node, key,
      {{"enabled", [&](const Node& v, const std::string& k) { assign(&c.enabled, r.boolean(v, k)); }},
       {"window_s", [&](const Node& v, const std::string& k) { assign(&c.window_s, r.number(v, k, 0.1, 86400)); }},
       {"min_streams", [&](const Node& v, const std::string& k) { assign(&c.min_streams, r.integer(v, k, 1, 1'000'000)); }},
       {"breach_share", [&](const Node& v, const std::string& k) { assign(&c.breach_share, r.number(v, k, 0.001, 1)); }},
       {"recovery_share", [&](const Node& v, const std::string& k) { assign(&c.recovery_share, r.number(v, k, 0, 1)); }},
       {"enter_windows", [&](const Node& v, const std::string& k) { assign(&c.enter_windows, r.integer(v, k, 1, 1000)); }},
       {"exit_windows", [&](const Node& v, const std::string& k) { assign(&c.exit_windows, r.integer(v, k, 1, 1000)); }},
       {"stale_windows", [&](const Node& v, const std::string& k) { assign(&c.stale_windows, r.integer(v, k, 1, 100'000)); }},
       {"objective_ratio", [&](const Node& v, const std::string& k) { assign(&c.objective_ratio, r.number(v, k, 1, 100)); }},
       {"baseline_ratio", [&](const Node& v, const std::string& k) { assign(&c.baseline_ratio, r.number(v, k, 1, 100)); }},
       {"latency_floor_ms",
        [&](const Node& v, const std::string& k) { assign(&c.latency_floor_ms, r.number(v, k, 0, 3'600'000)); }},
       {"rate_floor_tokens_per_s",
        [&](const Node& v, const std::string& k) { assign(&c.rate_floor_tokens_per_s, r.number(v, k, 0, 1e6)); }},
       {"baseline", [&](const Node& v, const std::string& k) { assign(&c.baseline, r.boolean(v, k)); }},
       {"warmup_windows", [&](const Node& v, const std::string& k) { assign(&c.warmup_windows, r.integer(v, k, 1, 10'000)); }},
       {"history_windows", [&](const Node& v, const std::string& k) { assign(&c.history_windows, r.integer(v, k, 1, 10'000)); }},
       {"length_classes", length_classes},
       {"objectives", objectives},
       {"max_cohorts", [&](const Node& v, const std::string& k) { assign(&c.max_cohorts, r.integer(v, k, 1, 1'000'000)); }},
       {"recent_alerts", [&](const Node& v, const std::string& k) { assign(&c.recent_alerts, r.integer(v, k, 1, 100'000)); }},
       {"abuse", abuse}});

  if (errors->size() != errors_before) return;
  if (c.recovery_share >= c.breach_share) {
    errors->push_back(key + ".recovery_share: must be below " + key + ".breach_share (hysteresis), got " +
                      std::to_string(c.recovery_share) + " >= " + std::to_string(c.breach_share) + Reader::at(node));
  }
  if (c.history_windows < c.warmup_windows) {
    errors->push_back(key + ".history_windows: must be at least warmup_windows (" + std::to_string(c.warmup_windows) +
                      "), got " + std::to_string(c.history_windows) + Reader::at(node));
  }
  for (const Objective& o : c.objectives) {
    if (o.length_class == "*" || o.length_class.find_first_of("*?[") != std::string::npos) continue;
    bool found = false;
    for (const LengthClass& lc : c.length_classes) found = found || lc.name == o.length_class;
    if (!found) {
      errors->push_back(key + ".objectives: '" + o.name + "' names length_class '" + o.length_class +
                        "', which is not among length_classes" + Reader::at(node));
    }
  }
}

}  // namespace infertap::degrade
