// The CLI's tables and text with a tenant's hostile names: a process name,
// path or model carrying a newline, ESC[2J or NUL stays in its row and never
// reaches the terminal raw.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "base/escape.h"
#include "cli/format.h"

namespace infertap::cli {
namespace {

using json = nlohmann::json;
using namespace std::string_literals;

const std::string kEvil = "evil\nFORGED ROW\x1b[2J\0nul\xc2\x9b" "9m"s;

std::size_t lines_of(const std::string& text) { return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')); }


bool a_line_starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0 || text.find("\n" + prefix) != std::string::npos;
}

void expect_safe(const std::string& text, std::size_t lines, const char* what) {
  EXPECT_EQ(lines_of(text), lines) << what << ":\n" << text;
  EXPECT_FALSE(base::has_unsafe(text, true)) << what;
  EXPECT_FALSE(a_line_starts_with(text, "FORGED")) << what;
}

json record() {
  return {{"stream_id", "7-0"}, {"role", "server"}, {"comm", kEvil}, {"pid", 42}, {"path", "/v1/" + kEvil},
          {"model", kEvil}, {"method", "POST"}, {"end", "complete"}, {"end_ts", "2026-12-03T10:00:00.000000000Z"},
          {"ttft_ms", 12.5}, {"tokens", 3}, {"stalls", json::array()}, {"request_end_ns", 1000},
          {"timeline", json::array({{{"ts_ns", 2000}, {"kind", "content"}, {"bytes", 10}},
                                    {{"ts_ns", 3000}, {"kind", "content"}, {"bytes", 10}}})}};
}

TEST(CliFormat, StreamsRowWithANewlineEscAndNulStaysOneRow) {
  expect_safe(format_streams(json::array({record()})), 2, "streams");
}

TEST(CliFormat, LiveRowStaysOneRow) {
  const json live = {{"id", "7-0"}, {"role", "server"}, {"comm", kEvil}, {"pid", 42}, {"path", kEvil}, {"model", kEvil}};
  expect_safe(format_live(json::array({live})), 2, "streams --live");
}

TEST(CliFormat, TopAndStatsRowsStayOneRow) {
  const json top = {{"window_s", 60}, {"rows", json::array({{{"process", kEvil}, {"model", kEvil}, {"route", kEvil}}})}};
  expect_safe(format_top(top), 3, "top");
  const json stats = {{"by", "process"}, {"records", 1}, {"groups", json::array({{{"key", kEvil}, {"streams", 1}}})}};
  expect_safe(format_stats(stats), 3, "stats");
}

TEST(CliFormat, ShowKeepsItsLinesAndEscapesTheNames) {
  const std::string text = format_show(record());
  json tame = record();
  tame.merge_patch({{"comm", "srv"}, {"path", "/v1/x"}, {"model", "m"}});
  const std::string plain = format_show(tame);
  EXPECT_EQ(lines_of(text), lines_of(plain)) << text;
  EXPECT_FALSE(base::has_unsafe(text, true));
  EXPECT_FALSE(a_line_starts_with(text, "FORGED"));
  EXPECT_NE(text.find("evil\\nFORGED ROW\\x1b[2J\\x00nul\\u009b9m"), std::string::npos) << text;
}

TEST(CliFormat, StatusEscapesNotesAndKeys) {
  const json status = {{"attach", json::array({"probing " + kEvil, "second note"})}, {"node", kEvil}, {kEvil, 1}};
  expect_safe(format_status(status), 4, "status");
}

TEST(CliFormat, AlertsRowsStayOneRow) {
  const json cohort = {{"model", kEvil}, {"route", kEvil}, {"process", kEvil}, {"vantage", "server"}};
  const json alert = {{"ts", "2026-12-03T10:00:00Z"}, {"state", "firing"}, {"cohort", cohort}, {"layer", kEvil}};
  const json abuse = {{"ts", "t"}, {"state", "active"}, {"process", kEvil}, {"client", kEvil}};
  const json response = {{"active", json::array({alert})}, {"recent", json::array()},
                         {"abuse_recent", json::array({abuse})}};
  const std::string text = format_alerts(response);
  EXPECT_FALSE(base::has_unsafe(text, true)) << text;
  EXPECT_FALSE(a_line_starts_with(text, "FORGED")) << text;
  EXPECT_EQ(lines_of(text), 9u) << text;
}

}  // namespace
}  // namespace infertap::cli
