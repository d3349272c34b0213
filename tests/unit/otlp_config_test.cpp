// The OTLP settings: the file's otlp section over the OTEL_* environment,
// every value checked with an error naming the key or the variable, and
// header values never repeated in an error.
#include <gtest/gtest.h>

#include <map>

#include "daemon/config.h"
#include "daemon/otlp_config.h"

namespace infertap::daemon {
namespace {

using output::otlp::Encoding;

struct Env {
  std::map<std::string, std::string> vars;
  Environment fn() const {
    return [vars = vars](const std::string& name) -> std::optional<std::string> {
      const auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

DaemonConfig config_of(const std::string& yaml) {
  std::string error;
  auto c = parse_config(yaml, &error);
  EXPECT_TRUE(c) << error;
  return c ? *c : DaemonConfig{};
}

std::optional<output::otlp::ExporterOptions> resolve(const std::string& yaml, const Env& env, std::string* error) {
  return otlp_options(config_of(yaml), env.fn(), error);
}

std::string attribute(const output::otlp::Attributes& a, const std::string& key) {
  const auto* v = a.find(key);
  return v ? v->text : "<absent>";
}

TEST(OtlpConfig, OffWithoutAnEndpoint) {
  std::string error;
  EXPECT_FALSE(resolve("", {}, &error));
  EXPECT_EQ(error, "");
}

TEST(OtlpConfig, TheStandardVariables) {
  Env env;
  env.vars = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"},
              {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:9090/custom/path"},
              {"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc, x-tenant = t1"},
              {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-only-traces=1"},
              {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
              {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"},
              {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
              {"OTEL_METRIC_EXPORT_INTERVAL", "1500"},
              {"OTEL_SERVICE_NAME", "gpu-pool-a"},
              {"OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.name=ignored"},
              {"NODE_NAME", "node-7"},
              {"POD_NAME", "infertap-x1"}};
  std::string error;
  const auto o = resolve("", env, &error);
  ASSERT_TRUE(o) << error;
  ASSERT_TRUE(o->traces && o->metrics);
  EXPECT_EQ(o->traces->url, "http://collector:4318/v1/traces") << "the base gets the signal's path";
  EXPECT_EQ(o->metrics->url, "http://metrics:9090/custom/path") << "a signal's own endpoint is used as is";
  EXPECT_EQ(o->metrics->encoding, Encoding::json);
  EXPECT_EQ(o->traces->encoding, Encoding::protobuf) << "the signal's variable first";
  const KeyValues general = {{"authorization", "Bearer abc"}, {"x-tenant", "t1"}};
  EXPECT_EQ(o->metrics->headers, general) << "trimmed, percent-decoded";
  EXPECT_EQ(o->traces->headers, (KeyValues{{"x-only-traces", "1"}}));
  EXPECT_EQ(o->metrics->timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(o->export_interval, std::chrono::milliseconds(1500));
  EXPECT_EQ(attribute(o->resource, "service.name"), "gpu-pool-a") << "OTEL_SERVICE_NAME wins";
  EXPECT_EQ(attribute(o->resource, "deployment.environment"), "prod");
  EXPECT_EQ(attribute(o->resource, "k8s.node.name"), "node-7");
  EXPECT_EQ(attribute(o->resource, "k8s.pod.name"), "infertap-x1");
  EXPECT_NE(attribute(o->resource, "service.version"), "<absent>");
}

TEST(OtlpConfig, TheFileWinsOverTheEnvironment) {
  Env env;
  env.vars = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://from-env:4318"},
              {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://env-traces:4318/v1/traces"},
              {"OTEL_EXPORTER_OTLP_HEADERS", "a=1"},
              {"OTEL_SDK_DISABLED", "true"}};
  std::string error;
  const auto o = resolve(R"(
otlp:
  enabled: true
  endpoint: https://from-file:4318
  protocol: http/json
  headers: {authorization: "Bearer x"}
  export_interval_s: 5
  timeout_s: 1.5
  span_events: true
  queue_spans: 10
  service_name: svc
  resource_attributes: {team: infra}
)",
                         env, &error);
  ASSERT_TRUE(o) << error;
  EXPECT_EQ(o->traces->url, "https://from-file:4318/v1/traces") << "the file's endpoint over every variable";
  EXPECT_EQ(o->metrics->url, "https://from-file:4318/v1/metrics");
  EXPECT_EQ(o->traces->encoding, Encoding::json);
  EXPECT_EQ(o->traces->headers, (KeyValues{{"authorization", "Bearer x"}}));
  EXPECT_EQ(o->traces->timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(o->export_interval, std::chrono::milliseconds(5000));
  EXPECT_TRUE(o->spans.timeline_events);
  EXPECT_EQ(o->queue_spans, 10u);
  EXPECT_EQ(attribute(o->resource, "service.name"), "svc");
  EXPECT_EQ(attribute(o->resource, "team"), "infra");

  EXPECT_FALSE(resolve("", env, &error)) << "OTEL_SDK_DISABLED without the file's enabled: true";
  EXPECT_EQ(error, "");
  EXPECT_FALSE(resolve("otlp: {enabled: false}", Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}}}, &error));
  EXPECT_EQ(error, "");
}

TEST(OtlpConfig, OneSignalOff) {
  std::string error;
  const auto o = resolve("", Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_METRICS_EXPORTER", "none"}}},
                         &error);
  ASSERT_TRUE(o) << error;
  EXPECT_TRUE(o->traces);
  EXPECT_FALSE(o->metrics);
}

TEST(OtlpConfig, BadVariablesAreNamedAndSecretsNeverRepeated) {
  std::string error;
  EXPECT_FALSE(resolve("", Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}}},
                       &error));
  EXPECT_NE(error.find("OTEL_EXPORTER_OTLP_PROTOCOL: grpc is not supported"), std::string::npos) << error;
  EXPECT_FALSE(resolve("", Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_EXPORTER_OTLP_TIMEOUT", "10s"}}},
                       &error));
  EXPECT_NE(error.find("OTEL_EXPORTER_OTLP_TIMEOUT: must be a whole number of milliseconds"), std::string::npos) << error;
  EXPECT_FALSE(resolve("", Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}}}, &error));
  EXPECT_NE(error.find("OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL"), std::string::npos) << error;
  EXPECT_FALSE(resolve("", Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                               {"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret,oops"}}},
                       &error));
  EXPECT_NE(error.find("OTEL_EXPORTER_OTLP_HEADERS: item 2 is not key=value"), std::string::npos) << error;
  EXPECT_EQ(error.find("s3cret"), std::string::npos) << "a header value in an error: " << error;
  EXPECT_FALSE(resolve("otlp: {enabled: true}", {}, &error));
  EXPECT_NE(error.find("otlp.enabled: true needs an endpoint"), std::string::npos) << error;
}

TEST(OtlpConfig, FileErrorsNameTheKey) {
  const auto problem = [](const std::string& yaml) {
    std::string error;
    EXPECT_FALSE(parse_config(yaml, &error)) << yaml;
    return error;
  };
  EXPECT_NE(problem("otlp: {endpoint: 'ftp://c:21'}").find("otlp.endpoint: must be an http:// or https:// URL"),
            std::string::npos);
  EXPECT_NE(problem("otlp: {endpoint: 'http://user:pw@c:4318'}").find("otlp.endpoint: must not carry credentials"),
            std::string::npos);
  EXPECT_NE(problem("otlp: {protocol: grpc}").find("otlp.protocol: grpc is not supported"), std::string::npos);
  EXPECT_NE(problem("otlp: {export_interval_s: 0}").find("otlp.export_interval_s: must be 0.1..86400"), std::string::npos);
  EXPECT_NE(problem("otlp: {endpont: 'http://c'}").find("unknown key 'otlp.endpont'"), std::string::npos);
  const std::string bad_header = problem("otlp:\n  headers: {\"bad name\": s3cret}\n");
  EXPECT_NE(bad_header.find("otlp.headers: header name 'bad name' is not an HTTP field name"), std::string::npos)
      << bad_header;
  EXPECT_EQ(bad_header.find("s3cret"), std::string::npos) << bad_header;
}

TEST(OtlpConfig, LoggableUrlDropsTheQuery) {
  EXPECT_EQ(loggable_url("https://c:4318/v1/traces?api_key=s3cret"), "https://c:4318/v1/traces");
}

}  // namespace
}  // namespace infertap::daemon
