#include "daemon/objectives.h"

#include <set>

#include "base/yaml_reader.h"
#include "daemon/formats.h"

namespace infertap::daemon {
namespace {

using Node = YAML::Node;
using base::YamlReader;

YamlReader::Field number(YamlReader& r, const char* name, double* out, double lo, double hi, bool* given = nullptr) {
  return {name, [&r, out, lo, hi, given](const Node& v, const std::string& k) {
            if (const auto n = r.number(v, k, lo, hi)) {
              *out = *n;
              if (given) *given = true;
            }
          }};
}

// A non-empty list of non-empty globs.
YamlReader::Field globs(YamlReader& r, const char* name, std::vector<std::string>* out) {
  return {name, [&r, out](const Node& v, const std::string& k) {
            std::vector<std::string> items;
            r.list(v, k, [&](const Node& item, const std::string& item_key) {
              const auto s = item.IsNull() ? std::nullopt : r.string(item, item_key);
              if (item.IsNull() || (s && s->empty())) return r.fail(item, item_key, "must be a non-empty glob (e.g. \"llama-*\")");
              if (s) items.push_back(*s);
            });
            if (v.IsSequence() && v.size() == 0) return r.fail(v, k, "must name at least one glob (\"*\": every value)");
            *out = std::move(items);
          }};
}

// One entry: its keys, then what they must say together.
void read_objective(YamlReader& r, const Node& n, const std::string& key, std::set<std::string>& names,
                    std::vector<output::Objective>& out) {
  output::Objective o;
  bool has_ttft = false, has_rate = false;
  const std::size_t errors_before = r.error_count();
  r.fields(n, key,
           {{"name",
             [&](const Node& v, const std::string& k) {
               const auto s = r.string(v, k);
               if (!s) return;
               if (const std::string why = name_problem(*s); !why.empty()) return r.fail(v, k, why);
               o.name = *s;
             }},
            globs(r, "models", &o.models), globs(r, "routes", &o.routes),
            number(r, "ttft_seconds", &o.ttft_seconds, 0.001, 3600, &has_ttft),
            number(r, "min_tokens_per_second", &o.min_tokens_per_second, 0.01, 1e6, &has_rate),
            number(r, "target", &o.target, 0.5, 0.9999), number(r, "objective_ratio", &o.objective_ratio, 1, 100),
            number(r, "baseline_ratio", &o.baseline_ratio, 1, 100),
            number(r, "ttft_floor_seconds", &o.ttft_floor_seconds, 0, 3600),
            number(r, "rate_floor_tokens_per_second", &o.rate_floor_tokens_per_second, 0, 1e6),
            {"min_streams",
             [&](const Node& v, const std::string& k) {
               if (const auto i = r.integer(v, k, 1, 1'000'000'000)) o.min_streams = static_cast<std::uint32_t>(*i);
             }},
            number(r, "delivery_lag_seconds", &o.delivery_lag_seconds, 0.001, 3600),
            number(r, "lag_floor_seconds", &o.lag_floor_seconds, 0, 3600),
            number(r, "max_path_degraded_share", &o.max_path_degraded_share, 0, 1)});
  if (!n.IsMap() || r.error_count() != errors_before) return;  // one problem at a time per entry
  if (o.name.empty()) return r.fail(n, key, "needs a name");
  if (!names.insert(o.name).second) return r.fail(n, key, "name '" + o.name + "' given twice");
  if (!has_ttft) return r.fail(n, key, "needs ttft_seconds: the longest time to first token that meets it");
  if (!has_rate) return r.fail(n, key, "needs min_tokens_per_second: the slowest post-first-token rate that meets it");
  out.push_back(std::move(o));
}

}  // namespace

void parse_objectives(const YAML::Node& node, const std::string& key, std::vector<output::Objective>* out,
                      std::vector<std::string>* errors) {
  YamlReader r(*errors);
  if (!node.IsSequence()) {
    return r.fail(node, key, "must be a list of objectives (- name: ..., ttft_seconds: ..., min_tokens_per_second: ...)");
  }
  if (node.size() > kMaxObjectives) {
    return r.fail(node, key, "must list at most " + std::to_string(kMaxObjectives) + " objectives, got " +
                                 std::to_string(node.size()));
  }
  std::vector<output::Objective> objectives;
  std::set<std::string> names;
  for (std::size_t i = 0; i < node.size(); ++i) {
    read_objective(r, node[i], key + "[" + std::to_string(i) + "]", names, objectives);
  }
  *out = std::move(objectives);
}

}  // namespace infertap::daemon
