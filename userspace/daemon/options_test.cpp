// The option table: one declaration per setting, read the same way from the
// file and from the command line; flags override the file.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "support/repo_file.h"

namespace infertap::daemon {
namespace {

const Option& option(const std::string& key) {
  for (const Option& o : options()) {
    if (o.key == key) return o;
  }
  ADD_FAILURE() << "no option " << key;
  return options().front();
}

DaemonConfig with_flags(const std::string& yaml, const std::vector<std::pair<std::string, std::vector<std::string>>>& given,
                        std::string* error = nullptr) {
  std::string e;
  auto config = parse_config(yaml, &e);
  EXPECT_TRUE(config) << e;
  CommandLine flags;
  for (const auto& [key, values] : given) flags.set(option(key), values);
  const bool ok = flags.apply(*config, &e);
  if (error) {
    *error = ok ? "" : e;
  } else {
    EXPECT_TRUE(ok) << e;
  }
  return *config;
}

TEST(Options, FlagsOverrideTheFile) {
  const DaemonConfig c = with_flags("capture: {head_bytes: 64, attach: sock}\ntargeting: {ports: [1, 2]}\n",
                                    {{"capture.head_bytes", {"128"}}, {"targeting.ports", {"3", "4"}}});
  EXPECT_EQ(c.capture.head_bytes, 128u);
  EXPECT_EQ(c.capture.attach, capture::AttachMethod::socket_tracepoints) << "what no flag sets stays the file's";
  EXPECT_EQ(c.targeting.ports, (std::vector<std::uint16_t>{3, 4})) << "a repeated flag replaces the file's list";
  EXPECT_EQ(c.capture.ports, (std::vector<std::uint16_t>{3, 4}));
}

TEST(Options, SwitchesAndTheirOwnForms) {
  DaemonConfig c = with_flags("", {{"output.timeline", {}}, {"capture.delivery_signals", {}}, {"output.file", {"-"}},
                                   {"api.socket", {""}}, {"metrics.listen", {""}}, {"stall.floor_ms", {"50"}},
                                   {"stall.lag_floor_ms", {"500"}}});
  EXPECT_TRUE(c.output.timeline);
  EXPECT_FALSE(c.capture.path_signals);
  EXPECT_TRUE(c.output.to_stdout);
  EXPECT_EQ(c.output.file, "");
  EXPECT_EQ(c.api.socket, "") << "'' on the command line: no API";
  EXPECT_EQ(c.metrics.listen, "") << "'' on the command line: no endpoint";
  EXPECT_EQ(c.pipeline.stall_floor_ns, 50'000'000u);
  EXPECT_EQ(c.pipeline.lag_floor_ns, 500'000'000u);
  // What the endpoints take on the command line beyond the file's rules.
  c = with_flags("", {{"metrics.listen", {"127.0.0.1:0"}}, {"api.socket", {"run/api.sock"}}});
  EXPECT_EQ(c.metrics.listen, "127.0.0.1:0") << "port 0: any free port";
  EXPECT_EQ(c.api.socket, "run/api.sock") << "relative to where infertapd starts";
  std::string e;
  with_flags("", {{"metrics.listen", {"nonsense"}}}, &e);
  EXPECT_NE(e.find("--metrics-listen: bad listen address \"nonsense\": expected host:port"), std::string::npos) << e;
  c = with_flags("", {{"output.file", {"/tmp/records.ndjson"}}, {"capture.attach", {"raw_tp"}}});
  EXPECT_FALSE(c.output.to_stdout) << "-o FILE writes the file instead of stdout";
  EXPECT_EQ(c.output.file, "/tmp/records.ndjson");
  EXPECT_EQ(c.capture.attach, capture::AttachMethod::raw_tracepoints);
}

TEST(Options, FlagErrorsNameTheFlag) {
  std::string e;
  with_flags("", {{"capture.head_bytes", {"5000"}}, {"capture.ringbuf_mb", {"3"}}, {"capture.attach", {"kprobe"}},
                  {"targeting.pids", {"12", "0"}}},
             &e);
  EXPECT_NE(e.find("--attach: must be auto, sock, tracepoint or raw_tp, got 'kprobe'"), std::string::npos) << e;
  EXPECT_NE(e.find("--head-bytes: must be 16..4096, got 5000"), std::string::npos) << e;
  EXPECT_NE(e.find("--ringbuf-mb: must be a power of two"), std::string::npos) << e;
  EXPECT_NE(e.find("--pid[1]: must be 1..4294967295, got 0"), std::string::npos) << e;
  EXPECT_EQ(e.find("(line"), std::string::npos) << "a flag has no line: " << e;
}

// `flag` as a whole word of `doc` (--port, not --port-range).
bool mentions(const std::string& doc, const std::string& flag) {
  for (std::size_t at = doc.find(flag); at != std::string::npos; at = doc.find(flag, at + 1)) {
    const char next = at + flag.size() < doc.size() ? doc[at + flag.size()] : ' ';
    if (!std::isalnum(static_cast<unsigned char>(next)) && next != '-' && next != '_') return true;
  }
  return false;
}

TEST(Options, EachKeyAndFlagIsDeclaredOnceAndDocumented) {
  const std::string doc = testing::repo_file("docs/configuration.md");
  ASSERT_FALSE(doc.empty());
  std::set<std::string> keys, flags;
  for (const Option& o : options()) {
    EXPECT_TRUE(keys.insert(o.key).second) << o.key << " declared twice";
    EXPECT_TRUE(o.read) << o.key;
    const std::string leaf = o.key.substr(o.key.rfind('.') + 1);
    EXPECT_NE(doc.find(leaf + ":"), std::string::npos) << o.key << " is not in docs/configuration.md";
    if (o.flag.empty()) continue;
    EXPECT_TRUE(flags.insert(o.flag_name()).second) << o.flag << " declared twice";
    EXPECT_TRUE(mentions(doc, o.flag_name())) << o.flag << " is not in docs/configuration.md";
  }
}

}  // namespace
}  // namespace infertap::daemon
