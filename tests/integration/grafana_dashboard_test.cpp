// The Grafana dashboard (deploy/grafana/infertap.json) against the real
// thing: a real Prometheus (Debian `prometheus`) scrapes a real infertapd
// timing sample traffic made to exercise what the panels show, and evaluates
// the repository's rules; every query of every panel, with its template
// variables set to values the traffic created, runs through Prometheus's HTTP
// API and must parse and return data. A panel that shows nothing for the
// traffic it is meant to show fails the test.
//
// The traffic, all at once against one sample server whose every stream
// pauses 150 ms after its 5th token (a stall the model caused):
//   - clients on the node (vantage client) and one in a network namespace,
//     seen through the ACKs its kernel sends (vantage acked);
//   - a slow reader that falls behind: delivery lag, the path degrading the
//     stream (client_read);
//   - one client address holding most of the server's decode time for
//     several 1 s windows: the abuse signal;
//   - two long streams still running while the queries run (streams in
//     flight), load bands on (metrics.band_labels: true);
//   - then more models than metrics.max_label_values keeps (label overflow);
//   - the agent runs without CAP_DAC_READ_SEARCH (a capability missing).
// Prometheus evaluates the repository's rules (deploy/prometheus/) every
// second. Yesterday and last week are history a fresh Prometheus cannot have:
// the day-over-day panels read recorded series imported with `promtool tsdb
// create-blocks-from openmetrics` into its data directory before it starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "output/prometheus/metrics.h"
#include "support/grafana_dashboard.h"
#include "support/netns.h"
#include "support/process.h"
#include "support/prometheus_server.h"
#include "support/repo_file.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::Process;
using testing::PrometheusServer;
using testing::read_file;

constexpr const char* kModel = "dash-model";
constexpr const char* kRoute = "/v1/chat/completions";
constexpr const char* kRulesFile = "deploy/prometheus/infertap-rules.yaml";

// The agent's configuration: the sample peers only (the remote reader runs
// under another name, so its server's record is the last hop and its view is
// the ACKs), load bands as labels, a label cap the overflow models pass, 1 s
// degradation windows so the abuse signal is raised within the test.
constexpr const char* kAgentConfig = R"(targeting:
  process_name_patterns: ["sample-*"]
metrics:
  band_labels: true
  max_label_values: 4
degradation:
  window_s: 1
  abuse: {share: 0.5, release_share: 0.3, min_streams: 5, min_clients: 2, enter_windows: 2, exit_windows: 4}
)";

// History a fresh Prometheus cannot have, as the rules of kRulesFile would
// have recorded it for the sample model's cohort at the server, in OpenMetrics
// for `promtool tsdb create-blocks-from openmetrics`:
//   - the hourly bucket rates of the last day (cohort:..._bucket:rate1h, every
//     5 min), from which the rules make today's daily medians (p50_1d);
//   - the daily medians a day and a week ago (p50_1d), which the day-over-day
//     and week-over-week ratios divide by;
//   - the hourly medians a day ago (p50_1h), the baselines of the alerts.
// Yesterday's decode rate was 38 tokens/s and its TTFT 30 ms; the day's
// hourly rates put today's medians near 35 tokens/s and 25 ms.
class History {
 public:
  explicit History(long now_s) : now_s_(now_s) {}

  void gauge(const std::string& name, const std::string& labels, double value, long from_s, long to_s, long step_s) {
    out_ << "# TYPE " << name << " gauge\n";
    for (long t = from_s; t <= to_s; t += step_s) out_ << name << "{" << labels << "} " << value << " " << t << "\n";
  }
  // Bucket rates of one observation of `value` per 100 s: 0.01/s in every bucket from `value` up.
  void bucket_rates(const std::string& name, const std::string& labels, const std::vector<double>& bounds, double value) {
    out_ << "# TYPE " << name << " gauge\n";
    for (long t = now_s_ - 86400; t <= now_s_ - 60; t += 300) {
      for (double le : bounds) {
        out_ << name << "{" << labels << ",le=\"" << le << "\"} " << (value <= le ? 0.01 : 0) << " " << t << "\n";
      }
      out_ << name << "{" << labels << ",le=\"+Inf\"} 0.01 " << t << "\n";
    }
  }
  // `value` every minute from 10 min before to 5 min after `ago_s` ago.
  void around(const std::string& name, const std::string& labels, double value, long ago_s) {
    gauge(name, labels, value, now_s_ - ago_s - 600, now_s_ - ago_s + 300, 60);
  }
  std::string text() const { return out_.str() + "# EOF\n"; }

 private:
  long now_s_;
  std::ostringstream out_;
};

void write_history(const std::string& path) {
  constexpr long kDay = 86400;
  History h(static_cast<long>(std::time(nullptr)));
  const std::string cohort = std::string("model=\"") + kModel + "\",route=\"" + kRoute + "\",vantage=\"server\"";
  const std::string rate_cohort = cohort + ",concurrency_band=\"1\"";  // the infertap_* families carry bands
  const output::MetricsConfig buckets;
  h.bucket_rates("cohort:infertap_tokens_per_second_bucket:rate1h", rate_cohort, buckets.rate_buckets, 40);
  h.bucket_rates("cohort:infertap_ttft_seconds_bucket:rate1h", cohort, buckets.latency_buckets, 0.03);
  for (const long ago : {kDay, 7 * kDay}) {
    h.around("cohort:infertap_tokens_per_second:p50_1d", rate_cohort, 38, ago);
    h.around("cohort:infertap_ttft_seconds:p50_1d", cohort, 0.03, ago);
  }
  h.around("cohort:infertap_tokens_per_second:p50_1h", rate_cohort, 38, kDay);
  h.around("cohort:infertap_ttft_seconds:p50_1h", cohort, 0.03, kDay);
  std::ofstream(path) << h.text();
}

// A query's samples: "{labels} value" each; empty when it returned nothing.
// `finite` is whether one value at least is a number (a quantile of no
// observations is NaN, a share over no streams is NaN or Inf).
struct Answer {
  bool ok = false;
  std::string error, body;
  std::vector<std::string> samples;
  bool finite = false;
};

Answer ask(const PrometheusServer& prom, const std::string& expr) {
  Answer a;
  const json j = prom.query(expr);
  a.body = j.is_discarded() || j.is_null() ? "(no JSON answer)" : j.dump().substr(0, 1500);
  if (!j.is_object() || j.value("status", "") != "success") {
    a.error = j.is_object() ? j.value("errorType", "") + ": " + j.value("error", "") : a.body;
    return a;
  }
  a.ok = true;
  const json& data = j["data"];
  if (data.value("resultType", "") == "scalar") {
    const double v = std::stod(data["result"][1].get<std::string>());
    a.samples.push_back(data["result"][1].get<std::string>());
    a.finite = std::isfinite(v);
    return a;
  }
  for (const json& s : data["result"]) {
    const std::string v = s["value"][1].get<std::string>();
    a.samples.push_back(s["metric"].dump() + " " + v);
    a.finite = a.finite || std::isfinite(std::stod(v));
  }
  return a;
}

// Polls `expr` until it answers with a finite value or `deadline` passes (then asked once).
Answer ask_until_data(const PrometheusServer& prom, const std::string& expr,
                      std::chrono::steady_clock::time_point deadline) {
  Answer a = ask(prom, expr);
  while ((!a.ok || !a.finite) && a.error.find("bad_data") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(250ms);
    a = ask(prom, expr);
  }
  return a;
}

// The value of a one-result `expr`, polled until at least `at_least` or 20 s; NaN when none.
double value_at_least(const PrometheusServer& prom, const std::string& expr, double at_least) {
  double got = NAN;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    const json j = prom.query(expr);
    if (j.is_object() && j.value("status", "") == "success" && !j["data"]["result"].empty()) {
      got = std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
      if (got >= at_least) return got;
    }
    std::this_thread::sleep_for(250ms);
  }
  return got;
}

// The values Prometheus has for a variable's label_values(selector, label)
// query (the selector's own variables already substituted).
std::set<std::string> label_values(const PrometheusServer& prom, const std::string& query) {
  static const std::regex form(R"(^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$)");
  std::smatch m;
  if (!std::regex_match(query, m, form)) {
    ADD_FAILURE() << "not a label_values(selector, label) query: " << query;
    return {};
  }
  const json j = prom.api("/api/v1/label/" + m[2].str() + "/values?match[]=" + testing::url_encode(m[1].str()));
  std::set<std::string> out;
  if (j.is_object() && j.value("status", "") == "success") {
    for (const json& v : j["data"]) out.insert(v.get<std::string>());
  }
  return out;
}

// A sample-client run (`binary`: a copy under another name; in `wrapper`, e.g.
// a network namespace) with its output in scratch/`name`.out.
std::vector<std::string> client_argv(const std::string& binary, const std::string& host, std::uint16_t port,
                                     const std::vector<std::string>& args, std::vector<std::string> wrapper) {
  std::vector<std::string> argv = std::move(wrapper);
  for (const std::string& a : {binary, std::string("--host"), host, std::string("--port"), std::to_string(port)}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

struct Client {
  std::string name;
  std::optional<Process> process;

  Client(const testing::ScratchDir& scratch, std::string log, const std::string& host, std::uint16_t port,
         const std::vector<std::string>& args, std::vector<std::string> wrapper = {},
         const std::string& binary = testing::build_dir() + "/sample-client")
      : name(std::move(log)),
        process(Process::spawn(client_argv(binary, host, port, args, std::move(wrapper)), scratch.file(name + ".out"))) {
    if (!process) ADD_FAILURE() << "cannot spawn " << binary;
  }
  void expect_exits_zero(const testing::ScratchDir& scratch) {
    const auto st = process ? process->wait(60s) : std::nullopt;
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << name << ":\n" << read_file(scratch.file(name + ".out"));
  }
};

std::vector<std::string> with_model(std::vector<std::string> args) {
  args.insert(args.end(), {"--model", kModel});
  return args;
}

// The traffic of the file comment, against the sample server on `port` (all
// interfaces), until every client but the two long streams is done. Returns
// the long streams (still running: killed when dropped).
Client drive_traffic(const testing::ScratchDir& scratch, const testing::NetnsPath& net, std::uint16_t port) {
  Client long_streams(scratch, "long", "127.0.0.1", port, with_model({"--concurrency", "2", "--tokens", "8000"}));
  // One client address (the namespace's veth end on the host) with 6 streams at a time.
  Client heavy(scratch, "heavy", net.host_ip(), port, with_model({"--concurrency", "6", "--requests", "16", "--tokens", "10"}));
  // The remote reader: not a traced process (process_name_patterns), in its own namespace.
  const std::string remote_reader = scratch.file("remote-reader");
  std::filesystem::copy_file(testing::build_dir() + "/sample-client", remote_reader);
  std::filesystem::permissions(remote_reader, std::filesystem::perms::owner_all);
  Client remote(scratch, "remote", net.host_ip(), port, with_model({"--requests", "6", "--tokens", "10"}),
                net.exec_prefix(), remote_reader);
  // About one event per 12 ms read against one per 5 ms sent (docs/metrics.md#delivery-lag).
  Client slow(scratch, "slow", "127.0.0.1", port,
              with_model({"--requests", "2", "--tokens", "120", "--read-size", "300", "--read-delay-ms", "12"}));
  Client local(scratch, "local", "127.0.0.1", port, with_model({"--concurrency", "3", "--tokens", "10"}));
  local.expect_exits_zero(scratch);
  // The label cap keeps the first values it met: the sample model, then 3 of these.
  std::vector<Client> overflow;
  for (int i = 0; i < 6; ++i) {
    overflow.emplace_back(scratch, "overflow" + std::to_string(i), "127.0.0.1", port,
                          std::vector<std::string>{"--tokens", "3", "--model", "overflow-model-" + std::to_string(i)});
  }
  for (Client& c : overflow) c.expect_exits_zero(scratch);
  for (Client* c : {&heavy, &remote, &slow}) c->expect_exits_zero(scratch);
  return long_streams;
}

// What the traffic must have made, seen through Prometheus: streams in
// flight, each vantage, the model's stalls, the path's verdict on the slow
// reader, the abuse signal, the folded labels, the missing capability.
void expect_traffic_in_prometheus(const PrometheusServer& prom) {
  const std::string m = std::string("model=\"") + kModel + "\"";
  EXPECT_GE(value_at_least(prom, "sum(infertap_streams_in_flight)", 2), 2) << "the two long streams";
  EXPECT_GE(value_at_least(prom, "sum(infertap_streams_total{" + m + ",vantage=\"server\"})", 3 + 96 + 6 + 2), 107);
  EXPECT_GE(value_at_least(prom, "sum(infertap_streams_total{" + m + ",vantage=\"client\"})", 3 + 96 + 2), 101);
  EXPECT_GE(value_at_least(prom, "sum(gen_ai_client_operation_time_to_first_chunk_seconds_count{vantage=\"acked\"})", 6), 6)
      << "the namespace's client, seen through its ACKs";
  EXPECT_GE(value_at_least(prom, "sum(infertap_stalls_total{cause=\"model\",vantage=\"server\"})", 100), 100);
  EXPECT_GE(value_at_least(prom, "sum(infertap_path_degraded_streams_total{cause=\"client_read\"})", 1), 1)
      << "the slow reader fell behind";
  EXPECT_GE(value_at_least(prom, "max_over_time(infertap_abuse_signals_active[2m])", 1), 1)
      << "one client address held most of the decode time";
  EXPECT_GE(value_at_least(prom, "sum(infertap_label_overflow_total{label=\"model\"})", 3), 3);
  EXPECT_EQ(value_at_least(prom, "infertap_capability_missing{capability=\"CAP_DAC_READ_SEARCH\"}", 1), 1);
}

using Values = std::map<std::string, std::string>;

// Each variable's label_values query, its own variables set to `selected`,
// lists the value `selected` gives it; with all of them ("All") the vantage
// variable lists the three vantages.
void expect_variables_list_the_traffic(const PrometheusServer& prom, const json& dashboard, const Values& selected,
                                       const Values& every) {
  const auto queries = testing::dashboard_query_variables(dashboard);
  for (const auto& [name, query] : queries) {
    ASSERT_TRUE(selected.count(name)) << "a variable the test does not set: " << name;
    std::set<std::string> unknown;
    const std::set<std::string> values = label_values(prom, testing::substitute_variables(query, selected, &unknown));
    EXPECT_TRUE(unknown.empty()) << name << ": " << query;
    EXPECT_TRUE(values.count(selected.at(name))) << name << " = " << query << " lacks " << selected.at(name);
  }
  ASSERT_TRUE(queries.count("vantage"));
  std::set<std::string> unknown;
  const auto vantages = label_values(prom, testing::substitute_variables(queries.at("vantage"), every, &unknown));
  for (const char* v : {"server", "client", "acked"}) EXPECT_TRUE(vantages.count(v)) << v;
}

// Every target of every panel with the variables set to `vars`, Grafana's
// intervals to fixed values: it parses and returns a number. Returns the
// number of queries.
int expect_every_target_returns_data(const PrometheusServer& prom, const json& dashboard, Values vars,
                                     std::chrono::steady_clock::time_point deadline) {
  vars.insert({{"__rate_interval", "1m"}, {"__interval", "15s"}, {"__range", "1h"}, {"datasource", "prometheus"}});
  int queried = 0;
  for (const testing::DashboardTarget& t : testing::dashboard_targets(dashboard)) {
    std::set<std::string> unknown;
    const std::string expr = testing::substitute_variables(t.expr, vars, &unknown);
    EXPECT_TRUE(unknown.empty()) << t.panel << " " << t.ref_id << " uses undefined variables: " << *unknown.begin();
    const Answer a = ask_until_data(prom, expr, deadline);
    ++queried;
    EXPECT_TRUE(a.ok) << t.panel << " " << t.ref_id << " does not parse: " << a.error << "\n" << expr;
    EXPECT_FALSE(a.samples.empty()) << t.panel << " " << t.ref_id << " returned nothing:\n" << expr;
    EXPECT_TRUE(a.samples.empty() || a.finite) << t.panel << " " << t.ref_id << " returned no number:\n"
                                                << expr << "\n" << a.body;
  }
  return queried;
}

// The agent: without CAP_DAC_READ_SEARCH (nor CAP_DAC_OVERRIDE, which stands
// in for it), so infertap_capability_missing has a series; the plaintext
// capture needs neither.
std::optional<Process> start_agent(const testing::ScratchDir& scratch, std::uint16_t app_port,
                                   std::uint16_t metrics_port) {
  std::ofstream(scratch.file("agent.yaml")) << kAgentConfig;
  return testing::start_metrics_daemon(
      scratch, app_port, metrics_port,
      {.extra = {"--config", scratch.file("agent.yaml")},
       .wrapper = {"/usr/bin/setpriv", "--bounding-set=-dac_read_search,-dac_override", "--inh-caps=-all", "--"},
       .output = scratch.file("records.ndjson")});
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(GrafanaDashboard, EveryPanelReturnsDataForTheTrafficItShows) {
  ASSERT_EQ(geteuid(), 0u) << "this test loads BPF programs and makes a network namespace: run as root";
  const json dashboard = json::parse(testing::repo_file("deploy/grafana/infertap.json"), nullptr, false);
  ASSERT_FALSE(dashboard.is_discarded()) << "deploy/grafana/infertap.json is not JSON";
  ASSERT_EQ(testing::dashboard_shape_problems(dashboard), std::vector<std::string>{});
  // The trend and alert panels read what the repository's rules record.
  const std::string rules = testing::repo_path(kRulesFile);
  ASSERT_FALSE(rules.empty()) << kRulesFile << " is missing: the dashboard's trend and alert panels read its series";
  testing::ScratchDir scratch("infertap-dashboard");
  ASSERT_TRUE(scratch.ok());
  testing::NetnsPath net;
  ASSERT_TRUE(net.ok()) << net.error();
  const std::uint16_t app_port = testing::free_port(), metrics_port = testing::free_port();
  auto agent = start_agent(scratch, app_port, metrics_port);
  ASSERT_TRUE(agent);
  write_history(scratch.file("history.om"));
  PrometheusServer prom(metrics_port, {.rule_files = {rules}, .history = scratch.file("history.om")});
  ASSERT_TRUE(prom.process);
  ASSERT_TRUE(prom.ready(20s)) << "Prometheus did not get ready:\n" << read_file(prom.log);
  // Its first scrape comes seconds after it is ready (targets are applied
  // every 5 s): traffic before it would leave series whose first sample is
  // already their last, with no rate.
  ASSERT_EQ(value_at_least(prom, "up{job=\"infertap\"}", 1), 1) << read_file(prom.log);
  auto server = testing::start_sample_server(
      scratch, app_port, {"--host", "0.0.0.0", "--ttft-ms", "30", "--itl-ms", "5", "--pause-after", "5", "--pause-ms", "150"});
  ASSERT_TRUE(server);

  const auto start = std::chrono::steady_clock::now();
  Client long_streams = drive_traffic(scratch, net, app_port);
  ASSERT_FALSE(HasFailure());
  const double clients_done = seconds_since(start);
  expect_traffic_in_prometheus(prom);
  const double traffic_seen = seconds_since(start);
  const Values selected = {{"node", "127.0.0.1:" + std::to_string(metrics_port)}, {"model", kModel},
                           {"route", kRoute}, {"vantage", "server"}};
  const Values every = {{"node", ".*"}, {"model", ".*"}, {"route", ".*"}, {"vantage", ".*"}};  // "All" (allValue)
  expect_variables_list_the_traffic(prom, dashboard, selected, every);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  const int queried = expect_every_target_returns_data(prom, dashboard, selected, deadline) +
                      expect_every_target_returns_data(prom, dashboard, every, deadline);
  std::printf("dashboard: clients done after %.1f s, their traffic in Prometheus after %.1f s, %d queries answered "
              "after %.1f s\n",
              clients_done, traffic_seen, queried, seconds_since(start));
  if (HasFailure()) {
    scratch.keep();
    std::printf("artifacts kept in %s\n", scratch.path().c_str());
  }
  server->stop(5s);
  const auto exit = agent->stop(15s);
  EXPECT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << read_file(scratch.file("daemon.log"));
}

}  // namespace
}  // namespace infertap
