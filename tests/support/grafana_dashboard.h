// Reading a Grafana dashboard (deploy/grafana/infertap.json) as its tests
// need it: every panel, rows' children included; every query target; the
// shape Grafana's provisioning expects; a query with its template variables
// and Grafana's interval variables replaced by values.
#pragma once

#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infertap::testing {

// Every panel: top-level ones, and the children of collapsed rows (an open
// row's children follow it at the top level).
inline std::vector<nlohmann::json> dashboard_panels(const nlohmann::json& dashboard) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& p : dashboard.value("panels", nlohmann::json::array())) {
    out.push_back(p);
    for (const nlohmann::json& child : p.value("panels", nlohmann::json::array())) out.push_back(child);
  }
  return out;
}

struct DashboardTarget {
  std::string panel;  // "#id title"
  std::string ref_id;
  std::string expr;
};

inline std::vector<DashboardTarget> dashboard_targets(const nlohmann::json& dashboard) {
  std::vector<DashboardTarget> out;
  for (const nlohmann::json& p : dashboard_panels(dashboard)) {
    const std::string panel = "#" + p.value("id", nlohmann::json(0)).dump() + " " + p.value("title", "");
    for (const nlohmann::json& t : p.value("targets", nlohmann::json::array())) {
      out.push_back({panel, t.value("refId", ""), t.value("expr", "")});
    }
  }
  return out;
}

// The template variables of type query: name -> its query (label_values(...)).
inline std::map<std::string, std::string> dashboard_query_variables(const nlohmann::json& dashboard) {
  std::map<std::string, std::string> out;
  for (const nlohmann::json& v : dashboard["templating"].value("list", nlohmann::json::array())) {
    if (v.value("type", "") != "query") continue;
    const nlohmann::json& q = v["query"];
    out[v.value("name", "")] = q.is_object() ? q.value("query", "") : q.get<std::string>();
  }
  return out;
}

// `text` with every `$name` and `${name}` replaced by vars[name]; a variable
// not in `vars` is left as it is and its name added to *unknown.
inline std::string substitute_variables(const std::string& text, const std::map<std::string, std::string>& vars,
                                        std::set<std::string>* unknown) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '$') {
      out += text[i++];
      continue;
    }
    const bool braced = i + 1 < text.size() && text[i + 1] == '{';
    std::size_t j = i + (braced ? 2 : 1);
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
    const std::string name = text.substr(i + (braced ? 2 : 1), j - i - (braced ? 2 : 1));
    if (braced && (j >= text.size() || text[j] != '}')) {
      unknown->insert("${" + name + " (unclosed)");
      out += text.substr(i, j - i);
      i = j;
      continue;
    }
    const auto it = vars.find(name);
    if (it == vars.end()) {
      unknown->insert(name);
      out += text.substr(i, j + (braced ? 1 : 0) - i);
    } else {
      out += it->second;
    }
    i = j + (braced ? 1 : 0);
  }
  return out;
}

// What keeps `dashboard` from being a provisionable dashboard whose every
// query goes to the Prometheus chosen in its `datasource` variable; empty
// when nothing does.
inline std::vector<std::string> dashboard_shape_problems(const nlohmann::json& d) {
  std::vector<std::string> problems;
  const auto problem = [&](const std::string& what) { problems.push_back(what); };
  if (!d.is_object()) return {"not a JSON object"};
  for (const char* key : {"title", "uid"}) {
    if (!d.contains(key) || !d[key].is_string() || d[key].get<std::string>().empty()) {
      problem(std::string("no ") + key);
    }
  }
  if (!d.value("schemaVersion", nlohmann::json(0)).is_number_integer() || d.value("schemaVersion", 0) < 36) {
    problem("schemaVersion below 36");
  }
  if (d.contains("__inputs")) problem("__inputs: an export for import, not for provisioning");
  // The datasource variable, and the reference every panel and target must use.
  const nlohmann::json ds_ref = {{"type", "prometheus"}, {"uid", "${datasource}"}};
  bool has_ds_var = false;
  const nlohmann::json vars = d.contains("templating") ? d["templating"].value("list", nlohmann::json::array())
                                                        : nlohmann::json::array();
  std::set<std::string> var_names;
  for (const nlohmann::json& v : vars) {
    const std::string name = v.value("name", "");
    if (!var_names.insert(name).second) problem("variable " + name + " twice");
    if (name == "datasource") {
      has_ds_var = v.value("type", "") == "datasource" && v.value("query", "") == "prometheus";
    } else if (v.value("type", "") == "query") {
      if (v.value("datasource", nlohmann::json()) != ds_ref) problem("variable " + name + ": datasource not ${datasource}");
      const nlohmann::json& q = v.value("query", nlohmann::json());
      const std::string text = q.is_object() ? q.value("query", "") : q.is_string() ? q.get<std::string>() : "";
      if (text.rfind("label_values(", 0) != 0) problem("variable " + name + ": not a label_values query");
    }
  }
  if (!has_ds_var) problem("no variable `datasource` of type datasource for prometheus");
  std::set<long long> ids;
  int targets = 0;
  for (const nlohmann::json& p : dashboard_panels(d)) {
    const std::string title = p.value("title", "");
    const nlohmann::json id = p.value("id", nlohmann::json());
    if (!id.is_number_integer()) {
      problem("panel \"" + title + "\": no integer id");
    } else if (!ids.insert(id.get<long long>()).second) {
      problem("panel id " + id.dump() + " twice (\"" + title + "\")");
    }
    const nlohmann::json g = p.value("gridPos", nlohmann::json());
    bool grid_ok = g.is_object();
    for (const char* k : {"h", "w", "x", "y"}) grid_ok = grid_ok && g.contains(k) && g[k].is_number_integer();
    if (!grid_ok || g.value("x", 0) < 0 || g.value("w", 0) < 1 || g.value("x", 0) + g.value("w", 0) > 24 ||
        g.value("h", 0) < 1) {
      problem("panel \"" + title + "\": gridPos missing or outside the 24 columns");
    }
    if (title.empty()) problem("panel " + id.dump() + ": no title");
    if (p.value("type", "") == "row") continue;
    if (p.value("datasource", nlohmann::json()) != ds_ref) problem("panel \"" + title + "\": datasource not ${datasource}");
    const nlohmann::json ts = p.value("targets", nlohmann::json::array());
    if (ts.empty()) problem("panel \"" + title + "\": no targets");
    std::set<std::string> refs;
    for (const nlohmann::json& t : ts) {
      ++targets;
      const std::string ref = t.value("refId", "");
      if (ref.empty()) problem("panel \"" + title + "\": a target without refId");
      if (!refs.insert(ref).second) problem("panel \"" + title + "\": refId " + ref + " twice");
      if (t.value("expr", "").empty()) problem("panel \"" + title + "\" " + ref + ": no expr");
      if (t.value("datasource", ds_ref) != ds_ref) problem("panel \"" + title + "\" " + ref + ": datasource not ${datasource}");
    }
  }
  if (targets == 0) problem("no query at all");
  return problems;
}

}  // namespace infertap::testing
