// MetricsRegistry (Prometheus exposition) and HttpServer, from synthetic
// StreamRecords: no BPF, no root.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/escape.h"
#include "core/labels.h"
#include "daemon/http_server.h"
#include "output/prometheus/metrics.h"

// Specs below name only the fields they set (the Makefile also builds with
// -Wno-missing-field-initializers).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace infertap::output {
namespace {

using core::Role;
using core::StreamEnd;
using core::StreamRecord;
using core::TimelineEvent;
using protocol::EventKind;
using daemon::HttpServer;
using daemon::parse_listen_address;

constexpr std::uint64_t kMs = 1'000'000;

struct Spec {
  Role role = Role::server;
  std::string model = "sample";
  std::string request_model;
  std::string path = "/v1/chat/completions";
  std::string comm = "sample-server";
  std::uint16_t port = 8000;  // the server's: local for a server record, remote for a client's
  std::optional<std::uint64_t> ttft_ns;
  std::optional<std::uint64_t> e2e_ns;
  std::vector<std::uint64_t> gaps_ns;  // between content events
  std::uint64_t tokens = 0;
  std::optional<double> tokens_per_s;
  std::vector<core::StallCause> stalls;
  StreamEnd end = StreamEnd::complete;
  int status = 200;
  protocol::Dialect dialect = protocol::Dialect::openai;
};

StreamRecord make_record(const Spec& s) {
  StreamRecord r;
  r.role = s.role;
  r.model = s.model;
  r.request_model = s.request_model;
  r.path = s.path;
  r.conn.comm = s.comm;
  (s.role == Role::client ? r.conn.remote : r.conn.local).port = s.port;
  r.end = s.end;
  r.status = s.status;
  r.dialect = s.dialect;
  r.metrics.ttft_ns = s.ttft_ns;
  r.metrics.e2e_ns = s.e2e_ns;
  r.metrics.tokens = s.tokens;
  r.metrics.tokens_per_s = s.tokens_per_s;
  auto view = std::make_shared<core::PathView>();  // the causes are the path stage's
  for (core::StallCause c : s.stalls) {
    r.metrics.stalls.push_back(core::Stall{});
    view->stall_causes.push_back({.cause = c});
  }
  r.path_view = std::move(view);
  // A role-only event first, a control event between every content event: only
  // content events make gaps.
  std::uint64_t t = 1'000 * kMs;
  r.timeline.push_back(TimelineEvent{.ts_ns = t - 1, .kind = EventKind::role_only});
  r.timeline.push_back(TimelineEvent{.ts_ns = t, .kind = EventKind::content});
  for (std::uint64_t g : s.gaps_ns) {
    r.timeline.push_back(TimelineEvent{.ts_ns = t + g / 2, .kind = EventKind::control});
    t += g;
    r.timeline.push_back(TimelineEvent{.ts_ns = t, .kind = EventKind::content});
  }
  r.timeline.push_back(TimelineEvent{.ts_ns = t + 1, .kind = EventKind::done});
  if (s.gaps_ns.empty()) r.timeline.clear();
  return r;
}

// ---- a small parser of the text format ---------------------------------------

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

const std::regex& sample_regex() {
  // Prometheus text format 0.0.4: name{label="value",...} value [timestamp]
  static const std::regex re(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*,?\})? )"
      R"(([-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|[-+]?Inf|NaN)( -?[0-9]+)?$)");
  return re;
}

// Parses one sample line (already checked against the regex), unescaping values.
Sample parse_sample(const std::string& line) {
  Sample s;
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') s.name += line[i++];
  if (line[i] == '{') {
    ++i;
    while (line[i] != '}') {
      std::string key;
      while (line[i] != '=') key += line[i++];
      i += 2;  // ="
      std::string value;
      while (line[i] != '"') {
        if (line[i] == '\\') {
          ++i;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
        ++i;
      }
      ++i;  // closing quote
      if (line[i] == ',') ++i;
      s.labels[key] = value;
    }
    ++i;
  }
  s.value = line.substr(i + 1);
  return s;
}

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family -> type
};

std::string family_of(const std::string& name, const std::map<std::string, std::string>& types) {
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string sfx(suffix);
    if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      const std::string base = name.substr(0, name.size() - sfx.size());
      const auto it = types.find(base);
      if (it != types.end() && it->second == "histogram") return base;
    }
  }
  return "";
}

// Checks the format line by line (ADD_FAILURE on each violation) and returns the samples.
Exposition parse_exposition(const std::string& text) {
  Exposition e;
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "exposition must end with a newline";
  std::istringstream in(text);
  std::string line;
  std::set<std::string> helped, finished;
  std::string current;  // family whose samples are being read
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("# HELP ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name;
      f >> name;
      EXPECT_TRUE(helped.insert(name).second) << "line " << n << ": second HELP for " << name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name, type;
      f >> name >> type;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram" || type == "summary" ||
                  type == "untyped")
          << "line " << n << ": " << line;
      EXPECT_TRUE(helped.count(name)) << "line " << n << ": TYPE before HELP for " << name;
      EXPECT_FALSE(e.types.count(name)) << "line " << n << ": second TYPE for " << name;
      if (!current.empty()) finished.insert(current);
      current = name;
      e.types[name] = type;
      continue;
    }
    EXPECT_FALSE(line.empty()) << "line " << n << ": empty line";
    EXPECT_NE(line[0], '#') << "line " << n << ": unknown comment: " << line;
    if (line.empty() || line[0] == '#') continue;
    if (!std::regex_match(line, sample_regex())) {
      ADD_FAILURE() << "line " << n << " is not a Prometheus sample: " << line;
      continue;
    }
    Sample s = parse_sample(line);
    const std::string fam = family_of(s.name, e.types);
    EXPECT_FALSE(fam.empty()) << "line " << n << ": sample before its HELP/TYPE: " << line;
    EXPECT_EQ(fam, current) << "line " << n << ": family " << fam << " is not contiguous";
    EXPECT_FALSE(finished.count(fam)) << "line " << n;
    e.samples.push_back(std::move(s));
  }
  return e;
}

// The sample with this name and exactly these labels, or nullptr.
const Sample* find(const Exposition& e, const std::string& name, const std::map<std::string, std::string>& labels) {
  for (const Sample& s : e.samples) {
    if (s.name == name && s.labels == labels) return &s;
  }
  return nullptr;
}

double value_of(const Exposition& e, const std::string& name, const std::map<std::string, std::string>& labels) {
  const Sample* s = find(e, name, labels);
  if (!s) {
    ADD_FAILURE() << "no sample " << name;
    return NAN;
  }
  return s->value == "+Inf" ? INFINITY : std::stod(s->value);
}

std::map<std::string, std::string> with(std::map<std::string, std::string> base, const std::string& k,
                                        const std::string& v) {
  base[k] = v;
  return base;
}

// Labels of the infertap_* families and of the gen_ai_* families for make_record({}).
const std::map<std::string, std::string> kSample = {
    {"vantage", "server"}, {"model", "sample"}, {"route", "/v1/chat/completions"}, {"process", "sample-server"}};
const std::map<std::string, std::string> kSampleGenAi = {{"vantage", "server"},
                                                         {"gen_ai_operation_name", "chat"},
                                                         {"gen_ai_provider_name", "openai"},
                                                         {"gen_ai_request_model", "unknown"},
                                                         {"gen_ai_response_model", "sample"},
                                                         {"server_port", "8000"},
                                                         {"route", "/v1/chat/completions"},
                                                         {"process", "sample-server"}};

// Every histogram series: cumulative buckets, _count == +Inf bucket.
void check_histograms(const Exposition& e) {
  std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;  // key: name+labels
  for (const Sample& s : e.samples) {
    if (s.name.size() < 7 || s.name.compare(s.name.size() - 7, 7, "_bucket") != 0) continue;
    auto labels = s.labels;
    const std::string le = labels["le"];
    labels.erase("le");
    labels["__name__"] = s.name.substr(0, s.name.size() - 7);
    buckets[labels].emplace_back(le == "+Inf" ? INFINITY : std::stod(le), std::stod(s.value));
  }
  for (auto& [key, bs] : buckets) {
    ASSERT_FALSE(bs.empty());
    EXPECT_TRUE(std::isinf(bs.back().first)) << "last bucket must be +Inf";
    for (std::size_t i = 1; i < bs.size(); ++i) {
      EXPECT_LT(bs[i - 1].first, bs[i].first) << "le not increasing";
      EXPECT_LE(bs[i - 1].second, bs[i].second) << "buckets not cumulative";
    }
    auto labels = key;
    const std::string name = labels["__name__"];
    labels.erase("__name__");
    EXPECT_EQ(value_of(e, name + "_count", labels), bs.back().second) << name;
    EXPECT_NE(find(e, name + "_sum", labels), nullptr) << name;
  }
}

// ---- registry ------------------------------------------------------------------

TEST(MetricsRegistry, TtftBucketsAreCumulative) {
  MetricsRegistry reg;
  for (std::uint64_t ns : {4 * kMs, 5 * kMs, 200 * kMs, 20'000 * kMs}) {
    reg.observe(make_record({.ttft_ns = ns}));
  }
  const Exposition e = parse_exposition(reg.render());
  const std::string b = "gen_ai_server_time_to_first_token_seconds_bucket";
  const std::vector<std::pair<std::string, double>> want = {
      {"0.001", 0}, {"0.0025", 0}, {"0.005", 2}, {"0.0075", 2}, {"0.01", 2}, {"0.015", 2}, {"0.02", 2},
      {"0.03", 2},  {"0.05", 2},   {"0.075", 2}, {"0.1", 2},    {"0.15", 2}, {"0.25", 3}, {"0.5", 3},
      {"1", 3},     {"2.5", 3},    {"5", 3},     {"10", 3},     {"+Inf", 4}};
  for (const auto& [le, count] : want) EXPECT_EQ(value_of(e, b, with(kSampleGenAi, "le", le)), count) << "le=" << le;
  EXPECT_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_count", kSampleGenAi), 4);
  EXPECT_DOUBLE_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_sum", kSampleGenAi), 20.209);
  check_histograms(e);
}

TEST(MetricsRegistry, ItlOneObservationPerContentGap) {
  MetricsRegistry reg;
  reg.observe(make_record({.gaps_ns = {5 * kMs, 5 * kMs, 5 * kMs, 100 * kMs}}));
  reg.observe(make_record({.gaps_ns = {3 * kMs}}));
  reg.observe(make_record({}));  // no timeline: no ITL observation
  const Exposition e = parse_exposition(reg.render());
  const std::string b = "infertap_inter_token_latency_seconds_bucket";
  EXPECT_EQ(value_of(e, b, with(kSample, "le", "0.0025")), 0);
  EXPECT_EQ(value_of(e, b, with(kSample, "le", "0.005")), 4);
  EXPECT_EQ(value_of(e, b, with(kSample, "le", "0.075")), 4);
  EXPECT_EQ(value_of(e, b, with(kSample, "le", "0.1")), 5);
  EXPECT_EQ(value_of(e, b, with(kSample, "le", "+Inf")), 5);
  EXPECT_NEAR(value_of(e, "infertap_inter_token_latency_seconds_sum", kSample), 0.118, 1e-12);
  EXPECT_EQ(value_of(e, "infertap_streams_total", with(kSample, "end", "complete")), 3);
  // A server's gaps are not a client's chunk gaps.
  for (const Sample& s : e.samples) EXPECT_NE(s.name, "gen_ai_client_operation_time_per_output_chunk_seconds_count");
  check_histograms(e);
}

// OTel's gen_ai.server.time_per_output_token: one value per request,
// (duration - TTFT) / (tokens - 1), for successful streams whose count is exact.
TEST(MetricsRegistry, TimePerOutputTokenIsOnePerRequest) {
  MetricsRegistry reg;
  reg.observe(make_record({.ttft_ns = 100 * kMs, .e2e_ns = 1100 * kMs, .gaps_ns = {kMs, 2 * kMs}, .tokens = 11}));
  reg.observe(make_record({.ttft_ns = 100 * kMs, .e2e_ns = 300 * kMs, .tokens = 1}));  // one token: no TPOT
  StreamRecord holes = make_record({.ttft_ns = 100 * kMs, .e2e_ns = 900 * kMs, .tokens = 5, .tokens_per_s = 9.0});
  holes.metrics.counts_lower_bound = true;  // a capture hole: 5 is a lower bound
  holes.metrics.tokens_per_s.reset();       // as core::record_metrics leaves it
  reg.observe(holes);
  StreamRecord usage = holes;
  usage.metrics.token_source = core::TokenSource::usage;  // the stream's own count: exact
  reg.observe(usage);
  reg.observe(make_record({.ttft_ns = 100 * kMs, .e2e_ns = 1100 * kMs, .tokens = 11, .status = 500}));
  const Exposition e = parse_exposition(reg.render());
  const std::string tpot = "gen_ai_server_time_per_output_token_seconds";
  EXPECT_EQ(value_of(e, tpot + "_count", kSampleGenAi), 2);
  EXPECT_NEAR(value_of(e, tpot + "_sum", kSampleGenAi), 0.1 + 0.2, 1e-12);
  EXPECT_EQ(value_of(e, tpot + "_bucket", with(kSampleGenAi, "le", "0.1")), 1);
  EXPECT_EQ(value_of(e, tpot + "_bucket", with(kSampleGenAi, "le", "0.25")), 2);
  // Not successful: no TTFT either, but the duration counts.
  EXPECT_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_count", kSampleGenAi), 4);
  EXPECT_EQ(value_of(e, "gen_ai_server_request_duration_seconds_count", kSampleGenAi), 5);
  EXPECT_EQ(find(e, "infertap_tokens_per_second_count", kSample), nullptr) << "a lower-bound count has no rate";
  EXPECT_EQ(value_of(e, "infertap_inter_token_latency_seconds_count", kSample), 2);
  check_histograms(e);
}

TEST(MetricsRegistry, E2eRateTokensStreamsStalls) {
  MetricsRegistry reg;
  reg.observe(make_record({.e2e_ns = 1500 * kMs,
                           .tokens = 40,
                           .tokens_per_s = 42.0,
                           .stalls = {core::StallCause::model, core::StallCause::backpressure, core::StallCause::model}}));
  reg.observe(make_record({.e2e_ns = 90'000 * kMs, .tokens = 2, .stalls = {core::StallCause::none},
                           .end = StreamEnd::connection_closed}));
  const Exposition e = parse_exposition(reg.render());
  const std::string duration = "gen_ai_server_request_duration_seconds_bucket";
  EXPECT_EQ(value_of(e, duration, with(kSampleGenAi, "le", "1")), 0);
  EXPECT_EQ(value_of(e, duration, with(kSampleGenAi, "le", "2.5")), 1);
  EXPECT_EQ(value_of(e, duration, with(kSampleGenAi, "le", "120")), 2);
  EXPECT_EQ(value_of(e, "infertap_tokens_per_second_bucket", with(kSample, "le", "40")), 0);
  EXPECT_EQ(value_of(e, "infertap_tokens_per_second_bucket", with(kSample, "le", "50")), 1);
  EXPECT_EQ(value_of(e, "infertap_tokens_per_second_count", kSample), 1);
  EXPECT_EQ(value_of(e, "infertap_stream_tokens_total", kSample), 42);
  EXPECT_EQ(value_of(e, "infertap_streams_total", with(kSample, "end", "complete")), 1);
  EXPECT_EQ(value_of(e, "infertap_streams_total", with(kSample, "end", "connection_closed")), 1);
  EXPECT_EQ(value_of(e, "infertap_stalls_total", with(kSample, "cause", "model")), 2);
  EXPECT_EQ(value_of(e, "infertap_stalls_total", with(kSample, "cause", "backpressure")), 1);
  EXPECT_EQ(value_of(e, "infertap_stalls_total", with(kSample, "cause", "none")), 1);
  EXPECT_EQ(find(e, "infertap_stalls_total", with(kSample, "cause", "unclassified")), nullptr);
  EXPECT_EQ(e.types.at("infertap_streams_total"), "counter");
  EXPECT_EQ(e.types.at("gen_ai_server_request_duration_seconds"), "histogram");
  check_histograms(e);
}

TEST(MetricsRegistry, Labels) {
  MetricsRegistry reg;
  reg.observe(make_record({.role = Role::client,
                           .model = "",
                           .request_model = "llama-3",
                           .path = "/v1/completions?stream=true#x",
                           .comm = "curl",
                           .port = 8080,
                           .ttft_ns = 1 * kMs}));
  reg.observe(make_record({.role = Role::unknown, .model = "", .path = "", .comm = "", .ttft_ns = 1 * kMs}));
  const Exposition e = parse_exposition(reg.render());
  const std::map<std::string, std::string> client = {{"vantage", "client"},
                                                     {"gen_ai_operation_name", "text_completion"},
                                                     {"gen_ai_provider_name", "openai"},
                                                     {"gen_ai_request_model", "llama-3"},
                                                     {"gen_ai_response_model", "unknown"},
                                                     {"server_port", "8080"},
                                                     {"route", "/v1/completions"},
                                                     {"process", "curl"}};
  EXPECT_EQ(value_of(e, "gen_ai_client_operation_time_to_first_chunk_seconds_count", client), 1);
  EXPECT_EQ(value_of(e, "infertap_streams_total", {{"vantage", "client"}, {"model", "llama-3"},
                                                   {"route", "/v1/completions"}, {"process", "curl"},
                                                   {"end", "complete"}}),
            1);
  const std::map<std::string, std::string> unknown = {
      {"vantage", "unknown"}, {"model", "unknown"}, {"route", "unknown"}, {"process", "unknown"}};
  EXPECT_EQ(value_of(e, "infertap_streams_total", with(unknown, "end", "complete")), 1);
  // A client's view is never a gen_ai server metric, a record of unknown role is neither.
  for (const Sample& s : e.samples) {
    if (s.name.rfind("gen_ai_server_", 0) == 0) ADD_FAILURE() << "server series from a client or unknown record: " << s.name;
    if (s.name.rfind("gen_ai_", 0) == 0) EXPECT_NE(s.labels.at("vantage"), "unknown") << s.name;
  }
  EXPECT_EQ(core::route_of("/a/b?c=d"), "/a/b");
  EXPECT_EQ(core::route_of("/a/b"), "/a/b");
}

TEST(MetricsRegistry, OperationNamesAreTheGenAiOnes) {
  EXPECT_EQ(genai_operation_of("/v1/chat/completions"), "chat");
  EXPECT_EQ(genai_operation_of("/openai/deployments/gpt/chat/completions/"), "chat");
  EXPECT_EQ(genai_operation_of("/v1/messages"), "chat");
  EXPECT_EQ(genai_operation_of("/v1/responses"), "chat");
  EXPECT_EQ(genai_operation_of("/v1/completions"), "text_completion");
  EXPECT_EQ(genai_operation_of("/v1/embeddings"), "unknown");
  EXPECT_EQ(genai_operation_of(""), "unknown");
}

// The servers' own APIs: the provider and the operation come from the stream's dialect.
TEST(MetricsRegistry, ProviderAndOperationComeFromTheDialect) {
  using protocol::Dialect;
  const auto record = [](Dialect d, std::string path) {
    StreamRecord r;
    r.dialect = d;
    r.path = std::move(path);
    return r;
  };
  struct Case {
    Dialect dialect;
    std::string path, provider, operation;
  };
  for (const Case& c : std::vector<Case>{{Dialect::ollama, "/api/chat", "ollama", "chat"},
                                         {Dialect::ollama, "/api/generate", "ollama", "text_completion"},
                                         {Dialect::tgi, "/generate_stream", "tgi", "text_completion"},
                                         {Dialect::llamacpp, "/completion", "llama.cpp", "text_completion"},
                                         {Dialect::sglang, "/generate", "sglang", "text_completion"},
                                         {Dialect::vllm, "/generate", "vllm", "text_completion"},
                                         {Dialect::triton, "/v2/models/m/generate_stream", "triton", "text_completion"},
                                         {Dialect::gemini, "/v1beta/models/g:streamGenerateContent?alt=sse",
                                          "gcp.gemini", "generate_content"},
                                         {Dialect::openai_responses, "/v1/responses", "openai", "chat"},
                                         {Dialect::openai, "/v1/completions", "openai", "text_completion"},
                                         {Dialect::unknown, "/x", "unknown", "unknown"}}) {
    const StreamRecord r = record(c.dialect, c.path);
    EXPECT_EQ(genai_provider_of(r), c.provider) << c.path;
    EXPECT_EQ(genai_operation_of(r), c.operation) << c.path;
  }
  auto acme = std::make_shared<protocol::DeclaredFormat>();
  acme->name = "acme";
  StreamRecord declared = record(Dialect::declared, "/acme/v1/chat");
  declared.declared = acme;
  EXPECT_EQ(genai_provider_of(declared), "acme") << "a declared format's name stands in for its provider";
  EXPECT_EQ(genai_operation_of(declared), "unknown");
  acme->provider = "acme-cloud";
  acme->operation = "chat";
  EXPECT_EQ(genai_provider_of(declared), "acme-cloud");
  EXPECT_EQ(genai_operation_of(declared), "chat");
  // On the exposition, beside the model labels.
  MetricsRegistry reg;
  reg.observe(make_record({.path = "/api/chat", .ttft_ns = kMs, .dialect = Dialect::ollama}));
  const Exposition e = parse_exposition(reg.render());
  std::map<std::string, std::string> labels = kSampleGenAi;
  labels["gen_ai_provider_name"] = "ollama";
  labels["route"] = "/api/chat";
  EXPECT_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_count", labels), 1);
}

TEST(MetricsRegistry, CardinalityCapFoldsToOther) {
  MetricsConfig config;
  config.max_label_values = 3;
  MetricsRegistry reg(config);
  for (int i = 0; i < 5; ++i) reg.observe(make_record({.model = "m" + std::to_string(i), .ttft_ns = kMs}));
  reg.observe(make_record({.model = "m1", .ttft_ns = kMs}));  // already seen: kept
  const Exposition e = parse_exposition(reg.render());
  for (const char* m : {"m0", "m2"}) {
    EXPECT_EQ(value_of(e, "infertap_streams_total", {{"vantage", "server"}, {"model", m},
                                                     {"route", "/v1/chat/completions"}, {"process", "sample-server"},
                                                     {"end", "complete"}}),
              1);
  }
  EXPECT_EQ(value_of(e, "infertap_streams_total", with(with(kSample, "model", "m1"), "end", "complete")), 2);
  EXPECT_EQ(find(e, "infertap_streams_total", with(with(kSample, "model", "m3"), "end", "complete")), nullptr);
  EXPECT_EQ(value_of(e, "infertap_streams_total", with(with(kSample, "model", "other"), "end", "complete")), 2);
  EXPECT_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_count",
                     with(kSampleGenAi, "gen_ai_response_model", "other")),
            2);
  EXPECT_EQ(value_of(e, "infertap_label_overflow_total", {{"label", "model"}}), 2);
  EXPECT_EQ(value_of(e, "infertap_label_overflow_total", {{"label", "gen_ai_response_model"}}), 2);
  EXPECT_EQ(value_of(e, "infertap_label_overflow_total", {{"label", "route"}}), 0);
  std::set<std::string> models;
  for (const Sample& s : e.samples) {
    if (s.labels.count("model")) models.insert(s.labels.at("model"));
  }
  EXPECT_EQ(models, (std::set<std::string>{"m0", "m1", "m2", "other"}));
}

TEST(MetricsRegistry, EscapingRoundTrips) {
  MetricsRegistry reg;
  const std::string model = "a\"b\\c\nd";
  reg.observe(make_record({.model = model, .path = "/x\xff\xfe/y", .ttft_ns = kMs}));
  const std::string text = reg.render();
  EXPECT_NE(text.find(R"(model="a\"b\\c\nd")"), std::string::npos) << text;
  const Exposition e = parse_exposition(text);
  EXPECT_EQ(value_of(e, "infertap_streams_total",
                     with(with(with(kSample, "model", model), "route", "/x?" "?/y"), "end", "complete")),
            1);
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
}


// A model and a process name carrying ESC[2J, NUL, a newline, a C1 CSI and a
// byte that is not UTF-8: the scrape still parses, no raw control character
// is in it, and the values read as printable escapes.
TEST(MetricsRegistry, ControlCharactersInLabelValuesNeverReachAScrape) {
  EXPECT_EQ(escape_label_value("a\x1b[2Jb"), "a\\\\x1b[2Jb");
  EXPECT_EQ(escape_label_value(std::string("n\0l", 3)), "n\\\\x00l");
  EXPECT_EQ(escape_label_value("c\xc2\x9b"), "c\\\\u009b");
  EXPECT_EQ(escape_label_value("bad\xff"), "bad\\\\xff");
  EXPECT_EQ(escape_label_value("x\ny\"z"), "x\\ny\\\"z") << "the exposition's own escapes stay";
  MetricsRegistry reg;
  const std::string evil("m\x1b[2J\0\n\xc2\x9b\xff", 10);
  reg.observe(make_record({.model = evil, .comm = evil, .ttft_ns = kMs}));
  reg.set_load({{evil, 1, 0}});
  const std::string text = reg.render();
  EXPECT_FALSE(base::has_unsafe(text, true)) << text;
  const Exposition e = parse_exposition(text);
  const std::string read_back = "m\\x1b[2J\\x00\n\\u009b?";  // the invalid byte was '?' already
  EXPECT_EQ(value_of(e, "infertap_streams_total",
                     with(with(with(kSample, "model", read_back), "process", read_back), "end", "complete")),
            1)
      << text;
}

TEST(MetricsRegistry, MissingCapabilitiesAreASeriesEach) {
  MetricsRegistry reg;
  reg.set_self({}, {}, {}, SelfExtra{.missing_capabilities = {"CAP_SYS_ADMIN", "CAP_SYS_PTRACE"}});
  const Exposition e = parse_exposition(reg.render());
  EXPECT_EQ(value_of(e, "infertap_capability_missing", {{"capability", "CAP_SYS_ADMIN"}}), 1);
  EXPECT_EQ(value_of(e, "infertap_capability_missing", {{"capability", "CAP_SYS_PTRACE"}}), 1);
  EXPECT_EQ(e.types.at("infertap_capability_missing"), "gauge");
  MetricsRegistry none;
  none.set_self({}, {}, {}, {});
  EXPECT_EQ(none.render().find("infertap_capability_missing{"), std::string::npos);
}

TEST(MetricsRegistry, LongLabelValuesAreCut) {
  MetricsConfig config;
  config.max_label_bytes = 8;
  MetricsRegistry reg(config);
  reg.observe(make_record({.model = "0123456789abcdef", .ttft_ns = kMs}));
  const Exposition e = parse_exposition(reg.render());
  EXPECT_EQ(value_of(e, "infertap_streams_total",
                     {{"vantage", "server"}, {"model", "01234567"}, {"route", "/v1/chat"}, {"process", "sample-s"},
                      {"end", "complete"}}),
            1);
}

// A server record whose every event reached the final client `lag_ns` after
// its emit, at `vantage` (core/path/delivery.cpp fills the real one).
StreamRecord with_delivery(StreamRecord r, core::Vantage vantage, std::uint64_t lag_ns,
                           const std::function<void(core::Delivery&)>& edit = {}) {
  core::PathView view = core::path_view_of(r);
  core::Delivery d;
  d.vantage = vantage;
  d.metrics = r.metrics;
  d.stall_causes = view.stall_causes;
  if (d.metrics.ttft_ns) *d.metrics.ttft_ns += lag_ns;
  if (d.metrics.e2e_ns) *d.metrics.e2e_ns += lag_ns;
  d.lag_last_ns = lag_ns;
  view.times.resize(r.timeline.size());
  for (std::size_t i = 0; i < r.timeline.size(); ++i) view.times[i].delivered_ns = r.timeline[i].ts_ns + lag_ns;
  if (edit) edit(d);
  view.delivery = std::move(d);
  r.path_view = std::make_shared<const core::PathView>(std::move(view));
  return r;
}

// Delivered stalls with the causes the path gave them.
void set_delivered_stalls(core::Delivery& d, std::initializer_list<core::StallCause> causes) {
  d.metrics.stalls.assign(causes.size(), core::Stall{});
  d.stall_causes.clear();
  for (core::StallCause c : causes) d.stall_causes.push_back({.cause = c});
}

std::map<std::string, std::string> at_vantage(std::map<std::string, std::string> labels, const std::string& v) {
  return with(std::move(labels), "vantage", v);
}

// The client-observed view is counted once, where it is closest to the
// client: a local client's own record, else the ACKs seen by the last sender.
TEST(MetricsRegistry, ClientFamiliesTakeEachClientViewOnce) {
  const Spec stream{.ttft_ns = 10 * kMs, .e2e_ns = 100 * kMs, .gaps_ns = {5 * kMs, 5 * kMs}, .tokens = 3};
  const std::string ttfc = "gen_ai_client_operation_time_to_first_chunk_seconds";
  const std::string tpoc = "gen_ai_client_operation_time_per_output_chunk_seconds";
  {
    MetricsRegistry reg;  // remote client: the server's socket is the last hop
    reg.observe(with_delivery(make_record(stream), core::Vantage::acked, 2 * kMs));
    const Exposition e = parse_exposition(reg.render());
    const auto acked = at_vantage(kSampleGenAi, "acked");
    EXPECT_EQ(value_of(e, ttfc + "_count", acked), 1);
    EXPECT_NEAR(value_of(e, ttfc + "_sum", acked), 0.012, 1e-12);
    EXPECT_EQ(value_of(e, tpoc + "_count", acked), 2);
    EXPECT_EQ(value_of(e, "gen_ai_client_operation_duration_seconds_count", acked), 1);
    EXPECT_EQ(value_of(e, "infertap_inter_token_latency_seconds_count", at_vantage(kSample, "acked")), 2);
    EXPECT_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_count", kSampleGenAi), 1);
    EXPECT_NEAR(value_of(e, "infertap_delivery_lag_seconds_sum", at_vantage(kSample, "acked")), 0.002, 1e-12);
    EXPECT_EQ(find(e, "infertap_streams_total", with(at_vantage(kSample, "acked"), "end", "complete")), nullptr)
        << "a record is one stream, counted at its own vantage";
  }
  {
    MetricsRegistry reg;  // the next hop is traced (a gateway, a local client): its record is the view
    StreamRecord r = with_delivery(make_record(stream), core::Vantage::acked, 2 * kMs);
    core::PathView view = core::path_view_of(r);
    view.peer_stream_id = "7-0";
    r.path_view = std::make_shared<const core::PathView>(std::move(view));
    reg.observe(r);
    reg.observe(with_delivery(make_record(stream), core::Vantage::read, 3 * kMs));
    const Exposition e = parse_exposition(reg.render());
    for (const Sample& s : e.samples) {
      EXPECT_EQ(s.name.rfind("gen_ai_client_", 0), std::string::npos) << "counted twice: " << s.name;
    }
    EXPECT_EQ(value_of(e, "infertap_delivery_lag_seconds_count", at_vantage(kSample, "acked")), 1);
    EXPECT_EQ(value_of(e, "infertap_delivery_lag_seconds_count", at_vantage(kSample, "client")), 1);
    EXPECT_EQ(value_of(e, "infertap_delivery_lag_seconds_bucket", with(at_vantage(kSample, "client"), "le", "0.0025")), 0);
    EXPECT_EQ(value_of(e, "infertap_delivery_lag_seconds_bucket", with(at_vantage(kSample, "client"), "le", "0.005")), 1);
  }
}

TEST(MetricsRegistry, StallsByCauseAtEachVantage) {
  MetricsRegistry reg;
  reg.observe(with_delivery(make_record({.gaps_ns = {kMs}, .stalls = {core::StallCause::model}}), core::Vantage::acked,
                            kMs, [](core::Delivery& d) {
                              set_delivered_stalls(d, {core::StallCause::network, core::StallCause::model});
                            }));
  reg.observe(make_record({.role = Role::client, .comm = "curl", .stalls = {core::StallCause::client_read}}));
  const Exposition e = parse_exposition(reg.render());
  EXPECT_EQ(value_of(e, "infertap_stalls_total", with(kSample, "cause", "model")), 1);
  EXPECT_EQ(value_of(e, "infertap_stalls_total", with(at_vantage(kSample, "acked"), "cause", "network")), 1);
  EXPECT_EQ(value_of(e, "infertap_stalls_total", with(at_vantage(kSample, "acked"), "cause", "model")), 1);
  EXPECT_EQ(value_of(e, "infertap_stalls_total",
                     with(with(at_vantage(kSample, "client"), "process", "curl"), "cause", "client_read")),
            1);
}

// One increment per cause found on a stream the path degraded.
TEST(MetricsRegistry, PathDegradedStreamsByCause) {
  MetricsRegistry reg;
  reg.observe(with_delivery(make_record({.gaps_ns = {kMs}}), core::Vantage::read, 400 * kMs, [](core::Delivery& d) {
    d.degraded_by_path = true;
    d.ttft_cause = core::StallCause::gateway_buffering;
    d.lag_cause = core::StallCause::client_read;
    set_delivered_stalls(d, {core::StallCause::model, core::StallCause::network, core::StallCause::network});
  }));
  reg.observe(with_delivery(make_record({.gaps_ns = {kMs}}), core::Vantage::read, 400 * kMs, [](core::Delivery& d) {
    d.degraded_by_path = true;
    d.lag_cause = core::StallCause::client_read;
  }));
  reg.observe(with_delivery(make_record({.gaps_ns = {kMs}}), core::Vantage::acked, kMs,
                            [](core::Delivery& d) { d.degraded_by_path = true; }));
  reg.observe(with_delivery(make_record({.gaps_ns = {kMs}}), core::Vantage::read, kMs));  // not degraded
  const Exposition e = parse_exposition(reg.render());
  const std::string name = "infertap_path_degraded_streams_total";
  const auto client = at_vantage(kSample, "client");
  EXPECT_EQ(value_of(e, name, with(client, "cause", "gateway_buffering")), 1);
  EXPECT_EQ(value_of(e, name, with(client, "cause", "client_read")), 2);
  EXPECT_EQ(value_of(e, name, with(client, "cause", "network")), 1) << "one per stream, not per stall";
  EXPECT_EQ(find(e, name, with(client, "cause", "model")), nullptr);
  EXPECT_EQ(value_of(e, name, with(at_vantage(kSample, "acked"), "cause", "none")), 1);
  double total = 0;
  for (const Sample& s : e.samples) total += s.name == name ? std::stod(s.value) : 0;
  EXPECT_EQ(total, 5);
}

// An adversarial mix of label values, 50 models x 50 routes (a 40 MB scrape once). Every family stays
// within its series budget, the rest is folded into "other" and counted.
TEST(MetricsRegistry, SeriesBudgetBoundsTheScrape) {
  const auto feed = [](MetricsRegistry& reg) {
    for (int m = 0; m < 50; ++m) {
      for (int r = 0; r < 50; ++r) {
        reg.observe(make_record({.model = "model-" + std::to_string(m),
                                 .path = "/v1/tenant-" + std::to_string(r) + "/chat/completions",
                                 .ttft_ns = 20 * kMs, .e2e_ns = 500 * kMs, .gaps_ns = {5 * kMs, 6 * kMs},
                                 .tokens = 3, .tokens_per_s = 50.0, .stalls = {core::StallCause::model}}));
      }
    }
  };
  MetricsConfig unbounded;
  unbounded.max_series_per_family = 1'000'000;
  MetricsRegistry before(unbounded), reg;
  feed(before);
  feed(reg);
  const std::string big = before.render(), text = reg.render();
  const Exposition e = parse_exposition(text);
  std::map<std::string, std::set<std::map<std::string, std::string>>> series;
  for (const Sample& s : e.samples) {
    auto labels = s.labels;
    labels.erase("le");
    series[family_of(s.name, e.types)].insert(labels);
  }
  const std::size_t budget = MetricsConfig{}.max_series_per_family;
  for (const auto& [family, sets] : series) EXPECT_LE(sets.size(), budget + 2) << family;  // + the overflow series
  EXPECT_EQ(series["gen_ai_server_time_to_first_token_seconds"].size(), budget + 1);
  EXPECT_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_count",
                     {{"vantage", "server"}, {"gen_ai_operation_name", "other"}, {"gen_ai_provider_name", "other"},
                      {"gen_ai_request_model", "other"},
                      {"gen_ai_response_model", "other"}, {"server_port", "other"}, {"route", "other"},
                      {"process", "other"}}),
            2500 - budget);
  EXPECT_EQ(value_of(e, "infertap_series_overflow_total", {{"family", "gen_ai_server_time_to_first_token_seconds"}}),
            2500 - budget);
  EXPECT_EQ(value_of(e, "infertap_series_overflow_total", {{"family", "infertap_stalls_total"}}), 2500 - budget);
  std::cout << "adversarial mix: " << big.size() << " bytes unbounded, " << text.size() << " bytes with the budget, "
            << e.samples.size() << " samples\n";
  EXPECT_LT(text.size(), 3u << 20);
  EXPECT_GT(big.size(), 8 * text.size());
  check_histograms(e);
}

// While nothing changed, a scrape is served the last rendering; any change
// (a record, the self counters) makes the next scrape render anew.
TEST(MetricsRegistry, AnUnchangedStateIsRenderedOnce) {
  MetricsRegistry reg;
  reg.observe(make_record({.ttft_ns = kMs}));
  const auto first = reg.scrape();
  EXPECT_EQ(reg.scrape(), first) << "the same buffer";
  EXPECT_EQ(reg.renders(), 1u);
  reg.observe(make_record({.ttft_ns = kMs}));
  const auto second = reg.scrape();
  EXPECT_NE(second, first);
  EXPECT_EQ(value_of(parse_exposition(*second), "gen_ai_server_time_to_first_token_seconds_count", kSampleGenAi), 2);
  reg.set_self({}, {});
  EXPECT_NE(reg.scrape(), second);
  EXPECT_EQ(reg.renders(), 3u);
  EXPECT_EQ(value_of(parse_exposition(reg.render()), "infertap_scrape_renderings_total", {}), 3);
}

// Concurrent scrapes share a rendering instead of making one each.
TEST(MetricsRegistry, ConcurrentScrapesShareOneRendering) {
  MetricsRegistry reg;
  for (int m = 0; m < 200; ++m) {
    reg.observe(make_record({.model = "m" + std::to_string(m % 50), .path = "/v1/r" + std::to_string(m / 50),
                             .ttft_ns = kMs, .gaps_ns = {kMs, kMs}}));
  }
  constexpr int kScrapers = 32;
  std::atomic<int> ready{0};
  std::vector<std::shared_ptr<const std::string>> got(kScrapers);
  std::vector<std::thread> scrapers;
  const std::uint64_t before = reg.renders();
  for (int i = 0; i < kScrapers; ++i) {
    scrapers.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kScrapers) std::this_thread::yield();
      got[i] = reg.scrape();
    });
  }
  for (auto& t : scrapers) t.join();
  const std::uint64_t renders = reg.renders() - before;
  std::set<const std::string*> buffers;
  for (const auto& g : got) {
    ASSERT_TRUE(g);
    buffers.insert(g.get());
  }
  EXPECT_EQ(buffers.size(), renders);
  EXPECT_LT(renders, static_cast<std::uint64_t>(kScrapers) / 2);
}

TEST(MetricsRegistry, SelfMetrics) {
  MetricsRegistry reg;
  capture::CaptureStats cs;
  cs.events = 1234;
  cs.drops_ringbuf_full = 1;
  cs.drops_args_map_full = 2;
  cs.drops_conn_map_full = 3;
  cs.drops_no_scratch = 4;
  core::PipelineCounters pc;
  pc.http_parse_errors = 5;
  pc.decode_errors = 6;
  reg.set_self(cs, pc, SinkCounters{.dropped_lines = 8}, SelfExtra{.tracked_connections = 7});
  StreamRecord r = make_record({});
  r.parse_errors = 9;
  reg.observe(r);
  const Exposition e = parse_exposition(reg.render());
  EXPECT_EQ(value_of(e, "infertap_kernel_events_total", {}), 1234);
  EXPECT_EQ(value_of(e, "infertap_drops_total", {{"reason", "ringbuf_full"}}), 1);
  EXPECT_EQ(value_of(e, "infertap_drops_total", {{"reason", "args_map_full"}}), 2);
  EXPECT_EQ(value_of(e, "infertap_drops_total", {{"reason", "conn_map_full"}}), 3);
  EXPECT_EQ(value_of(e, "infertap_drops_total", {{"reason", "no_scratch"}}), 4);
  EXPECT_EQ(value_of(e, "infertap_parse_errors_total", {{"stage", "http"}}), 5);
  EXPECT_EQ(value_of(e, "infertap_parse_errors_total", {{"stage", "decode"}}), 6);
  EXPECT_EQ(value_of(e, "infertap_parse_errors_total", {{"stage", "sse"}}), 9);
  EXPECT_EQ(value_of(e, "infertap_tracked_connections", {}), 7);
  EXPECT_EQ(value_of(e, "infertap_sink_dropped_lines_total", {}), 8);
  EXPECT_GT(value_of(e, "infertap_process_resident_memory_bytes", {}), 1 << 20);
  EXPECT_GE(value_of(e, "infertap_process_cpu_seconds_total", {}), 0);
  EXPECT_EQ(e.types.at("infertap_tracked_connections"), "gauge");
  EXPECT_EQ(e.types.at("infertap_process_cpu_seconds_total"), "counter");
}

TEST(MetricsRegistry, EmptyRegistryIsValid) {
  MetricsRegistry reg;
  const Exposition e = parse_exposition(reg.render());
  EXPECT_EQ(e.types.at("gen_ai_server_time_to_first_token_seconds"), "histogram");
  EXPECT_EQ(value_of(e, "infertap_kernel_events_total", {}), 0);
}

TEST(MetricsRegistry, FormatDouble) {
  EXPECT_EQ(format_double(0.001), "0.001");
  EXPECT_EQ(format_double(0.0075), "0.0075");
  EXPECT_EQ(format_double(10), "10");
  EXPECT_EQ(format_double(INFINITY), "+Inf");
  EXPECT_EQ(format_double(-INFINITY), "-Inf");
  EXPECT_EQ(format_double(NAN), "NaN");
}

// Run under -fsanitize=thread to check the locking.
TEST(MetricsRegistry, ConcurrentObserveAndRender) {
  MetricsRegistry reg;
  constexpr int kThreads = 3, kPerThread = 300;
  std::atomic<bool> done{false};
  std::thread renderer([&] {
    while (!done.load()) {
      const std::string text = reg.render();
      ASSERT_FALSE(text.empty());
      reg.set_self({}, {}, {});
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&reg, t] {
      for (int i = 0; i < kPerThread; ++i) {
        reg.observe(make_record({.model = "m" + std::to_string((t * kPerThread + i) % 7),
                                 .ttft_ns = kMs * static_cast<std::uint64_t>(i % 50),
                                 .gaps_ns = {kMs, 2 * kMs}}));
      }
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  renderer.join();
  const Exposition e = parse_exposition(reg.render());
  double ttft = 0, itl = 0;
  for (const Sample& s : e.samples) {
    if (s.name == "gen_ai_server_time_to_first_token_seconds_count") ttft += std::stod(s.value);
    if (s.name == "infertap_inter_token_latency_seconds_count") itl += std::stod(s.value);
  }
  EXPECT_EQ(ttft, kThreads * kPerThread);
  EXPECT_EQ(itl, 2 * kThreads * kPerThread);
  check_histograms(e);
}

// ---- HTTP server -------------------------------------------------------------------

struct HttpReply {
  int status = 0;
  std::string headers;  // lower-cased
  std::string body;
};

// Minimal HTTP/1.1 GET over a plain socket (Connection: close).
HttpReply http_get(std::uint16_t port, const std::string& path) {
  HttpReply reply;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return reply;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return reply;
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return reply;
  }
  std::string raw;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<std::size_t>(n));
  close(fd);
  const auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return reply;
  reply.status = std::stoi(raw.substr(9, 3));
  reply.headers = raw.substr(0, head_end);
  for (char& c : reply.headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  reply.body = raw.substr(head_end + 4);
  return reply;
}

// ---- the fleet rules' inputs: longest pause, objectives, serving identity ----------

TEST(MetricsRegistry, LongestPauseIsOneObservationPerStreamAtEachVantage) {
  MetricsRegistry reg;
  StreamRecord r = make_record({.gaps_ns = {5 * kMs, 300 * kMs, 5 * kMs}});
  r.metrics.itl_max_ns = 300 * kMs;
  r = with_delivery(r, core::Vantage::acked, 2 * kMs, [](core::Delivery& d) { d.metrics.itl_max_ns = 700 * kMs; });
  reg.observe(r);
  reg.observe(make_record({.gaps_ns = {kMs}}));  // no itl_max: no observation
  const Exposition e = parse_exposition(reg.render());
  const std::string name = "infertap_longest_pause_seconds";
  EXPECT_EQ(value_of(e, name + "_count", kSample), 1);
  EXPECT_NEAR(value_of(e, name + "_sum", kSample), 0.3, 1e-12);
  EXPECT_EQ(value_of(e, name + "_bucket", with(kSample, "le", "0.25")), 0);
  EXPECT_EQ(value_of(e, name + "_bucket", with(kSample, "le", "0.5")), 1);
  EXPECT_NEAR(value_of(e, name + "_sum", at_vantage(kSample, "acked")), 0.7, 1e-12) << "the delivered view's own";
  check_histograms(e);
}

TEST(MetricsRegistry, LengthClassJoinsTheBandsOnTheInfertapHistograms) {
  MetricsConfig config;
  config.band_labels = true;
  config.band_of = [](const StreamRecord& r) {
    return std::array<std::string, 3>{r.metrics.tokens < 64 ? "short" : "long", "2-8", "<512"};
  };
  MetricsRegistry reg(config);
  StreamRecord r = make_record({.gaps_ns = {kMs}, .tokens = 2, .tokens_per_s = 40.0});
  r.metrics.itl_max_ns = kMs;
  reg.observe(r);
  const Exposition e = parse_exposition(reg.render());
  auto banded = kSample;
  banded.insert({{"length_class", "short"}, {"concurrency_band", "2-8"}, {"input_band", "<512"}});
  for (const char* family : {"infertap_tokens_per_second", "infertap_inter_token_latency_seconds",
                             "infertap_longest_pause_seconds"}) {
    EXPECT_EQ(value_of(e, std::string(family) + "_count", banded), 1) << family;
  }
  for (const Sample& s : e.samples) {
    if (s.name.rfind("gen_ai_", 0) == 0) EXPECT_EQ(s.labels.count("length_class"), 0u) << "attributes only: " << s.name;
  }
}

Objective objective(std::string name, std::vector<std::string> models, double ttft_s, double rate) {
  Objective o;
  o.name = std::move(name);
  o.models = std::move(models);
  o.ttft_seconds = ttft_s;
  o.min_tokens_per_second = rate;
  return o;
}

// Each finished stream with a TTFT and a rate counts against every objective
// it matches, at each of its views: met when TTFT <= X and rate >= Y; an
// errored stream misses; a stream with neither is not counted.
TEST(MetricsRegistry, StreamsCountAgainstEveryObjectiveTheyMatch) {
  MetricsConfig config;
  config.objectives = {objective("chat", {"sample"}, 0.5, 20), objective("everything", {"*"}, 2, 5),
                       objective("other-models", {"llama-*"}, 0.1, 100)};
  MetricsRegistry reg(config);
  reg.observe(make_record({.ttft_ns = 100 * kMs, .gaps_ns = {kMs}, .tokens_per_s = 30.0}));   // meets both
  reg.observe(make_record({.ttft_ns = 900 * kMs, .gaps_ns = {kMs}, .tokens_per_s = 30.0}));   // TTFT misses chat
  reg.observe(make_record({.ttft_ns = 100 * kMs, .gaps_ns = {kMs}, .tokens_per_s = 10.0}));   // rate misses chat
  reg.observe(make_record({.ttft_ns = 100 * kMs, .gaps_ns = {kMs}, .tokens_per_s = 30.0, .status = 500}));  // error
  reg.observe(make_record({.gaps_ns = {kMs}}));  // no TTFT, no rate: not counted
  reg.observe(with_delivery(make_record({.ttft_ns = 100 * kMs, .gaps_ns = {kMs}, .tokens_per_s = 30.0}),
                            core::Vantage::acked, 600 * kMs));  // the server met it, the remote client did not
  const Exposition e = parse_exposition(reg.render());
  const std::string name = "infertap_objective_streams_total";
  const std::map<std::string, std::string> server = {
      {"vantage", "server"}, {"model", "sample"}, {"route", "/v1/chat/completions"}};
  const auto of = [&](std::map<std::string, std::string> labels, const std::string& o, const std::string& met) {
    return value_of(e, name, with(with(std::move(labels), "objective", o), "met", met));
  };
  EXPECT_EQ(of(server, "chat", "true"), 2);
  EXPECT_EQ(of(server, "chat", "false"), 3);
  EXPECT_EQ(of(server, "everything", "true"), 4);
  EXPECT_EQ(of(server, "everything", "false"), 1) << "only the errored stream misses the loose objective";
  EXPECT_EQ(of(at_vantage(server, "acked"), "chat", "false"), 1) << "700 ms to the first chunk at the client";
  EXPECT_EQ(of(at_vantage(server, "acked"), "everything", "true"), 1);
  for (const Sample& s : e.samples) {
    if (s.name == name) EXPECT_NE(s.labels.at("objective"), "other-models") << "matches no stream";
  }
  EXPECT_EQ(value_of(e, "infertap_objective", {{"objective", "chat"}, {"setting", "ttft_seconds"}}), 0.5);
  EXPECT_EQ(value_of(e, "infertap_objective", {{"objective", "chat"}, {"setting", "min_tokens_per_second"}}), 20);
  EXPECT_EQ(value_of(e, "infertap_objective", {{"objective", "chat"}, {"setting", "target"}}), 0.99);
  EXPECT_EQ(value_of(e, "infertap_objective", {{"objective", "chat"}, {"setting", "min_streams"}}), 20);
  EXPECT_EQ(value_of(e, "infertap_objective", {{"objective", "chat"}, {"setting", "order"}}), 0);
  EXPECT_EQ(value_of(e, "infertap_objective", {{"objective", "other-models"}, {"setting", "order"}}), 2);
  std::set<std::string> settings;
  for (const Sample& s : e.samples) {
    if (s.name == "infertap_objective" && s.labels.at("objective") == "chat") settings.insert(s.labels.at("setting"));
  }
  EXPECT_EQ(settings, (std::set<std::string>{"ttft_seconds", "min_tokens_per_second", "target", "objective_ratio",
                                             "baseline_ratio", "ttft_floor_seconds", "rate_floor_tokens_per_second",
                                             "min_streams", "delivery_lag_seconds", "lag_floor_seconds",
                                             "max_path_degraded_share", "order"}));
}

TEST(MetricsRegistry, ObjectiveStreamsStayWithinTheCapsAndTheBudget) {
  MetricsConfig config;
  config.objectives = {objective("all", {"*"}, 1, 1)};
  config.max_label_values = 5;
  config.max_series_per_family = 8;
  MetricsRegistry reg(config);
  for (int m = 0; m < 20; ++m) {
    reg.observe(make_record({.model = "model-" + std::to_string(m), .ttft_ns = kMs, .gaps_ns = {kMs}, .tokens_per_s = 9.0}));
  }
  const Exposition e = parse_exposition(reg.render());
  std::size_t series = 0;
  double counted = 0;
  for (const Sample& s : e.samples) {
    if (s.name != "infertap_objective_streams_total") continue;
    ++series;
    counted += std::stod(s.value);
  }
  EXPECT_LE(series, 6u) << "5 models, then \"other\"";
  EXPECT_EQ(counted, 20) << "every stream counted, none lost to the caps";
}

TEST(MetricsRegistry, ServingIdentitiesAreSeriesWhileSeenRecently) {
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(100);
  MetricsConfig config;
  config.clock = [&] { return now; };
  config.identity_ttl = std::chrono::minutes(60);
  MetricsRegistry reg(config);
  StreamRecord r = make_record({.gaps_ns = {kMs}});
  r.load.system_fingerprint = "fp_aaa";
  reg.observe(r);
  reg.observe(make_record({.model = "", .gaps_ns = {kMs}}));  // names nothing that served it: no identity
  now += std::chrono::minutes(30);
  r.load.system_fingerprint = "fp_bbb";  // a new build behind the same model
  reg.observe(r);
  const std::string name = "infertap_serving_identity";
  const std::map<std::string, std::string> identity = {
      {"model", "sample"}, {"route", "/v1/chat/completions"}, {"response_model", "sample"}};
  {
    const Exposition e = parse_exposition(reg.render());
    EXPECT_EQ(value_of(e, name, with(identity, "system_fingerprint", "fp_aaa")), 1);
    EXPECT_EQ(value_of(e, name, with(identity, "system_fingerprint", "fp_bbb")), 1);
    std::size_t n = 0;
    for (const Sample& s : e.samples) n += s.name == name;
    EXPECT_EQ(n, 2u);
  }
  now += std::chrono::minutes(45);  // fp_aaa last seen 75 min ago, fp_bbb 45 min ago
  reg.observe(make_record({.model = "second", .gaps_ns = {kMs}}));
  const Exposition e = parse_exposition(reg.render());
  EXPECT_EQ(find(e, name, with(identity, "system_fingerprint", "fp_aaa")), nullptr) << "expired";
  EXPECT_EQ(value_of(e, name, with(identity, "system_fingerprint", "fp_bbb")), 1);
  EXPECT_EQ(value_of(e, name,
                     {{"model", "second"}, {"route", "/v1/chat/completions"}, {"response_model", "second"},
                      {"system_fingerprint", "unknown"}}),
            1);
}

TEST(MetricsRegistry, ServingIdentitiesStayWithinTheBudget) {
  MetricsConfig config;
  config.max_series_per_family = 4;
  MetricsRegistry reg(config);
  for (int i = 0; i < 10; ++i) {
    StreamRecord r = make_record({.gaps_ns = {kMs}});
    r.load.system_fingerprint = "fp_" + std::to_string(i);
    reg.observe(r);
  }
  const Exposition e = parse_exposition(reg.render());
  std::size_t n = 0;
  for (const Sample& s : e.samples) n += s.name == "infertap_serving_identity";
  EXPECT_EQ(n, 5u) << "4 identities and the overflow series";
  EXPECT_EQ(value_of(e, "infertap_serving_identity",
                     {{"model", "other"}, {"route", "other"}, {"response_model", "other"}, {"system_fingerprint", "other"}}),
            1);
  EXPECT_EQ(value_of(e, "infertap_series_overflow_total", {{"family", "infertap_serving_identity"}}), 6);
}

TEST(HttpServer, ServesMetricsHealthReady) {
  MetricsRegistry reg;
  reg.observe(make_record({.ttft_ns = 3 * kMs}));
  std::string error;
  auto server = HttpServer::start("127.0.0.1:0", reg, &error);
  ASSERT_NE(server, nullptr) << error;
  ASSERT_NE(server->port(), 0);

  const HttpReply metrics = http_get(server->port(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.headers.find("content-type: text/plain; version=0.0.4"), std::string::npos) << metrics.headers;
  const Exposition e = parse_exposition(metrics.body);
  EXPECT_EQ(value_of(e, "gen_ai_server_time_to_first_token_seconds_bucket", with(kSampleGenAi, "le", "0.005")), 1);

  EXPECT_EQ(http_get(server->port(), "/healthz").status, 200);
  EXPECT_EQ(http_get(server->port(), "/readyz").status, 503);
  server->set_ready(true);
  EXPECT_EQ(http_get(server->port(), "/readyz").status, 200);
  EXPECT_EQ(http_get(server->port(), "/nope").status, 404);

  const std::uint16_t port = server->port();
  server->stop();
  server->stop();  // idempotent
  EXPECT_EQ(http_get(port, "/healthz").status, 0) << "still answering after stop()";
}

TEST(HttpServer, PortTakenIsAClearError) {
  std::string error;
  auto first = HttpServer::start("127.0.0.1:0", [] { return std::string(); }, &error);
  ASSERT_NE(first, nullptr) << error;
  const std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = HttpServer::start(address, [] { return std::string(); }, &error);
  EXPECT_EQ(second, nullptr);
  EXPECT_NE(error.find(address), std::string::npos) << error;
  EXPECT_NE(error.find("in use"), std::string::npos) << error;
}

TEST(HttpServer, StartStopRepeatedly) {
  for (int i = 0; i < 20; ++i) {
    std::string error;
    auto s = HttpServer::start("127.0.0.1:0", [] { return std::string("x 1\n"); }, &error);
    ASSERT_NE(s, nullptr) << error;
  }
}

TEST(HttpServer, ParseListenAddress) {
  std::string host, error;
  std::uint16_t port = 1;
  ASSERT_TRUE(parse_listen_address("127.0.0.1:9464", &host, &port, &error)) << error;
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9464);
  ASSERT_TRUE(parse_listen_address(":0", &host, &port, &error)) << error;
  EXPECT_EQ(host, "0.0.0.0");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(parse_listen_address("[::1]:80", &host, &port, &error)) << error;
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 80);
  for (const char* bad : {"", "9464", "host:", "host:65536", "host:12x", "::1:80", "[::1]80", "[::1"}) {
    EXPECT_FALSE(parse_listen_address(bad, &host, &port, &error)) << bad;
    EXPECT_NE(error.find("bad listen address"), std::string::npos) << bad;
  }
  EXPECT_EQ(HttpServer::start("nonsense", [] { return std::string(); }, &error), nullptr);
}

}  // namespace
}  // namespace infertap::output
