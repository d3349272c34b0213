// docs/schema.json (what the integration tests validate records against) and
// docs/schema.md (what people read) list the same fields, and the renderer
// writes exactly the schema's top-level fields.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/metrics.h"
#include "output/ndjson/records.h"
#include "support/repo_file.h"

namespace infertap {
namespace {

using json = nlohmann::json;
using testing::repo_file;

// Backticked names in the first column of the table rows between `from` and
// the next "## " / "### " heading.
std::set<std::string> table_fields(const std::string& md, const std::string& from) {
  std::set<std::string> names;
  std::size_t at = md.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "docs/schema.md has no section " << from;
    return names;
  }
  std::istringstream lines(md.substr(at + from.size()));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("## ", 0) == 0 || line.rfind("### ", 0) == 0) break;
    if (line.rfind("| `", 0) != 0) continue;
    const std::string cell = line.substr(1, line.find('|', 1) - 1);
    for (std::size_t a = cell.find('`'); a != std::string::npos; a = cell.find('`', a + 1)) {
      const std::size_t b = cell.find('`', a + 1);
      if (b == std::string::npos) break;
      names.insert(cell.substr(a + 1, b - a - 1));
      a = b;
    }
  }
  return names;
}

std::set<std::string> keys(const json& object) {
  std::set<std::string> out;
  for (const auto& [k, v] : object.items()) out.insert(k);
  return out;
}

json load_schema() {
  const std::string text = repo_file("docs/schema.json");
  const json schema = json::parse(text, nullptr, false);
  EXPECT_TRUE(schema.is_object()) << "docs/schema.json is not JSON";
  return schema;
}

TEST(Schema, JsonSchemaAndDocumentListTheSameRecordFields) {
  const json schema = load_schema();
  ASSERT_TRUE(schema.contains("properties"));
  const std::set<std::string> documented = table_fields(repo_file("docs/schema.md"), "## `\"type\": \"stream\"`");
  EXPECT_GE(documented.size(), 40u) << "the table parser found too few fields";
  EXPECT_EQ(keys(schema["properties"]), documented) << "docs/schema.json and docs/schema.md disagree";
  EXPECT_EQ(schema.value("additionalProperties", true), false) << "unknown fields must fail validation";
}

TEST(Schema, JsonSchemaAndDocumentListTheSameTimelineFields) {
  const json schema = load_schema();
  const json items = schema["properties"]["timeline"]["items"];
  ASSERT_TRUE(items.contains("properties"));
  EXPECT_EQ(keys(items["properties"]), table_fields(repo_file("docs/schema.md"), "### Timeline entries"));
}

TEST(Schema, JsonSchemaAndDocumentListTheSameLoadFields) {
  const json schema = load_schema();
  const json load = schema["properties"]["load"];
  ASSERT_TRUE(load.contains("properties"));
  EXPECT_EQ(keys(load["properties"]), table_fields(repo_file("docs/schema.md"), "### `load`"));
  std::set<std::string> required;
  for (const auto& k : load["required"]) required.insert(k.get<std::string>());
  EXPECT_EQ(required, keys(load["properties"]));
}

// The renderer writes every required field and nothing the schema lacks.
TEST(Schema, RenderedRecordHasExactlyTheSchemaFields) {
  const json schema = load_schema();
  core::StreamRecord r;
  r.role = core::Role::server;
  r.request_start_ns = 1'000'000;
  core::TimelineEvent e;
  e.ts_ns = 2'000'000;
  e.kind = protocol::EventKind::content;
  r.timeline.push_back(e);
  r.metrics = core::record_metrics(r, std::nullopt, core::PipelineConfig{});
  output::RenderOptions options;
  options.timeline = true;
  const json line = json::parse(output::render_stream(r, output::WallClock{}, options));
  EXPECT_EQ(keys(line), keys(schema["properties"]));
  std::set<std::string> required;
  for (const auto& k : schema["required"]) required.insert(k.get<std::string>());
  std::set<std::string> without_timeline = keys(line);
  without_timeline.erase("timeline");
  EXPECT_EQ(required, without_timeline) << "every field but the optional timeline is required";
  EXPECT_EQ(keys(line["timeline"][0]), keys(schema["properties"]["timeline"]["items"]["properties"]));
  EXPECT_EQ(keys(line["load"]), keys(schema["properties"]["load"]["properties"]));
}

// Every load field is null when nothing was observed, never 0; observed
// values and pressure objects are written as measured.
TEST(Schema, LoadIsNullWhenNotObservedAndNumbersWhenItWas) {
  core::StreamRecord r;
  r.role = core::Role::server;
  json line = json::parse(output::render_stream(r, output::WallClock{}, output::RenderOptions{}));
  for (const auto& [k, v] : line["load"].items()) EXPECT_TRUE(v.is_null()) << k << " = " << v.dump();
  r.load.scope = "process";
  r.load.concurrency = 3;
  r.load.concurrency_mean = 2.5;
  r.load.concurrency_max = 4;
  r.load.waiting = 0;
  r.load.input_tokens = 812;
  r.load.request_bytes = 3301;
  r.load.include_usage = true;
  r.load.system_fingerprint = "fp_1";
  core::Pressure p;
  p.cpu_some = 12.5;
  r.load.host_pressure = p;
  r.load.cpu_ms_per_token = 0.25;
  line = json::parse(output::render_stream(r, output::WallClock{}, output::RenderOptions{}));
  const json& l = line["load"];
  EXPECT_EQ(l["scope"], "process");
  EXPECT_EQ(l["concurrency"], 3);
  EXPECT_EQ(l["concurrency_mean"], 2.5);
  EXPECT_EQ(l["concurrency_max"], 4);
  EXPECT_EQ(l["waiting"], 0) << "a count of 0 observed is 0";
  EXPECT_TRUE(l["waiting_at_request"].is_null());
  EXPECT_EQ(l["input_tokens"], 812);
  EXPECT_EQ(l["request_bytes"], 3301);
  EXPECT_EQ(l["include_usage"], true);
  EXPECT_EQ(l["system_fingerprint"], "fp_1");
  EXPECT_EQ(l["host_psi"]["cpu_some"], 12.5);
  EXPECT_TRUE(l["host_psi"]["io_full"].is_null());
  EXPECT_TRUE(l["cgroup_psi"].is_null());
  EXPECT_EQ(l["cpu_ms_per_token"], 0.25);
}

}  // namespace
}  // namespace infertap
