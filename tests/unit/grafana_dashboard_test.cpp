// deploy/grafana/infertap.json is a dashboard Grafana can provision with the
// Prometheus of the operator's choice: its shape, its variables, and that the
// shape check finds what would break it. (Its queries are run against a real
// Prometheus scraping a real agent in tests/integration/grafana_dashboard_test.cpp.)
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "support/grafana_dashboard.h"
#include "support/repo_file.h"

namespace infertap {
namespace {

using json = nlohmann::json;

json dashboard() { return json::parse(testing::repo_file("deploy/grafana/infertap.json"), nullptr, false); }

std::string joined(const std::vector<std::string>& problems) {
  std::string out;
  for (const std::string& p : problems) out += "  " + p + "\n";
  return out;
}

TEST(GrafanaDashboard, IsAProvisionableDashboardOnTheDatasourceVariable) {
  const json d = dashboard();
  ASSERT_FALSE(d.is_discarded()) << "deploy/grafana/infertap.json is not JSON";
  EXPECT_EQ(testing::dashboard_shape_problems(d), std::vector<std::string>{}) << joined(testing::dashboard_shape_problems(d));
  EXPECT_GE(testing::dashboard_targets(d).size(), 20u);
}

TEST(GrafanaDashboard, FiltersByNodeModelRouteAndVantage) {
  const auto vars = testing::dashboard_query_variables(dashboard());
  for (const char* name : {"node", "model", "route", "vantage"}) {
    ASSERT_TRUE(vars.count(name)) << name;
    EXPECT_EQ(vars.at(name).rfind("label_values(", 0), 0u) << vars.at(name);
  }
  // Every query of the agents' own series is filtered by node (the fleet's
  // recorded series, `cohort:...`, and ALERTS are not per node); no variable
  // is used that is not defined.
  const std::regex raw_selector(R"((^|[^:a-z_])(infertap|gen_ai)_[a-z_]+\{)");
  const std::map<std::string, std::string> values = {
      {"datasource", "x"}, {"node", "n"}, {"model", "m"}, {"route", "r"}, {"vantage", "v"},
      {"__rate_interval", "1m"}, {"__interval", "15s"}, {"__range", "1h"}};
  int raw = 0;
  for (const auto& t : testing::dashboard_targets(dashboard())) {
    std::set<std::string> unknown;
    testing::substitute_variables(t.expr, values, &unknown);
    EXPECT_TRUE(unknown.empty()) << t.panel << " " << t.ref_id << ": " << *unknown.begin();
    if (std::regex_search(t.expr, raw_selector)) {
      ++raw;
      EXPECT_NE(t.expr.find("instance=~\"$node\""), std::string::npos) << t.panel << " " << t.ref_id << ": " << t.expr;
    }
  }
  EXPECT_GE(raw, 20) << "queries of the agents' series";
}

TEST(GrafanaDashboard, ShapeCheckFindsWhatBreaksProvisioning) {
  json d = dashboard();
  ASSERT_TRUE(d["panels"].size() >= 3);
  d["panels"][2]["id"] = d["panels"][1]["id"];
  d["panels"][2]["datasource"] = {{"type", "prometheus"}, {"uid", "PBFA97CFB590B2093"}};
  d["panels"][1]["gridPos"]["x"] = 20;
  d["schemaVersion"] = 27;
  d["templating"]["list"].erase(0);
  const std::string problems = joined(testing::dashboard_shape_problems(d));
  for (const char* want : {"twice", "datasource not ${datasource}", "outside the 24 columns", "schemaVersion below 36",
                           "no variable `datasource`"}) {
    EXPECT_NE(problems.find(want), std::string::npos) << want << " not found in:\n" << problems;
  }
  json no_expr = dashboard();
  for (json& p : no_expr["panels"]) {
    if (p.contains("targets")) {
      p["targets"][0].erase("expr");
      p["targets"][0].erase("refId");
      break;
    }
  }
  const std::string missing = joined(testing::dashboard_shape_problems(no_expr));
  EXPECT_NE(missing.find("no expr"), std::string::npos) << missing;
  EXPECT_NE(missing.find("without refId"), std::string::npos) << missing;
}

TEST(GrafanaDashboard, SubstitutesVariablesAsGrafanaWritesThem) {
  std::set<std::string> unknown;
  EXPECT_EQ(testing::substitute_variables("rate(x{a=~\"$model\", b=\"${node}\"}[$__rate_interval])",
                                          {{"model", "m1|m2"}, {"node", "n"}, {"__rate_interval", "1m"}}, &unknown),
            "rate(x{a=~\"m1|m2\", b=\"n\"}[1m])");
  EXPECT_TRUE(unknown.empty());
  testing::substitute_variables("x[$__range_s] $mod", {{"__range", "1h"}, {"model", "m"}}, &unknown);
  EXPECT_EQ(unknown, (std::set<std::string>{"__range_s", "mod"})) << "names are whole, never prefixes";
}

}  // namespace
}  // namespace infertap
