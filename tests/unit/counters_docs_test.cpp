// Every counter of the agent's counter tables is documented: each Prometheus
// family in docs/prometheus.md, each `infertap status` key in docs/cli.md.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "capture/loader.h"
#include "core/counters.h"
#include "daemon/http_server.h"
#include "output/prometheus/metrics.h"
#include "output/ndjson/sink.h"
#include "output/otlp/counters.h"
#include "support/repo_file.h"

namespace infertap::daemon {
namespace {

TEST(CounterTables, EveryPrometheusFamilyIsDocumented) {
  const std::string doc = testing::repo_file("docs/prometheus.md");
  ASSERT_FALSE(doc.empty());
  MetricsRegistry registry;
  std::istringstream lines(registry.render());
  std::size_t families = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    ++families;
    EXPECT_TRUE(doc.find("`" + name + "`") != std::string::npos || doc.find("`" + name + "{") != std::string::npos)
        << name << " is exported but not in docs/prometheus.md";
  }
  EXPECT_GT(families, 40u);
}

TEST(CounterTables, EveryStatusCounterIsDocumented) {
  const std::string doc = testing::repo_file("docs/cli.md");
  ASSERT_FALSE(doc.empty());
  const auto documented = [&](const base::Counter& c) {
    EXPECT_NE(doc.find("`" + std::string(c.name) + "`"), std::string::npos)
        << c.name << " is in `infertap status` but not in docs/cli.md";
  };
  capture::CaptureStats{}.for_each_stat(documented);
  capture::CaptureStats{}.for_each_drop(documented);
  core::PipelineCounters{}.for_each(documented);
  output::SinkCounters{}.for_each(documented);
  output::otlp::Counters{}.for_each(documented);
  HttpCounters{}.for_each(documented);
}

}  // namespace
}  // namespace infertap::daemon
