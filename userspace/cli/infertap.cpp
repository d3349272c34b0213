// infertap: query a running infertapd over its unix socket (docs/cli.md).
//
// Exit codes: 0 ok, 1 request failed, 2 usage, 3 daemon not running,
// 4 permission denied.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "daemon/api.h"
#include "output/format.h"

namespace {

using json = nlohmann::json;
using infertap::daemon::ApiClient;
using infertap::daemon::ApiError;
using infertap::daemon::ApiErrorKind;

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitNotRunning = 3, kExitPermission = 4;

using infertap::output::dump;

// Sends one request; prints the daemon's error and returns nullopt when it failed.
std::optional<json> call(ApiClient& client, const json& request) {
  json response = client.request(request);
  if (!response.value("ok", false)) {
    std::cerr << "infertap: " << response.value("error", std::string("request failed")) << "\n";
    return std::nullopt;
  }
  response.erase("ok");
  return response;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infertap: query a running infertapd (stream timings of LLM inference traffic)"};
  app.require_subcommand(1);
  app.fallthrough();  // --socket also after the subcommand
  std::string socket_path = infertap::daemon::kDefaultSocketPath;
  app.add_option("--socket", socket_path, "infertapd API socket")->capture_default_str();

  std::string output = "table";
  const auto add_output = [&](CLI::App* sub) {
    sub->add_option("-o,--output", output, "table | json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  };

  CLI::App* status = app.add_subcommand("status", "daemon uptime, version, attach notes and counters");
  add_output(status);

  CLI::App* streams = app.add_subcommand("streams", "the last finished streams (newest first), or those in flight");
  bool live = false;
  std::int64_t limit = 50;
  streams->add_flag("--live", live, "streams in flight instead of finished ones");
  streams->add_option("-n,--limit", limit, "how many")->check(CLI::NonNegativeNumber)->capture_default_str();
  add_output(streams);

  CLI::App* show = app.add_subcommand("show", "one finished stream with its per-event timeline");
  std::string id;
  std::size_t width = 80;
  show->add_option("ID", id, "stream_id, e.g. 12-0 (see `infertap streams`)")->required();
  show->add_option("--width", width, "columns the gap picture is scaled to")->check(CLI::Range(40, 1000))->capture_default_str();
  bool ascii = false;
  show->add_flag("--ascii", ascii, "ASCII picture instead of block characters");
  add_output(show);

  CLI::App* top = app.add_subcommand("top", "per process/model/route over the last 60 s, refreshed");
  double interval = 2.0;
  bool once = false;
  double window = 60.0;
  top->add_option("--interval", interval, "seconds between refreshes")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  top->add_flag("--once", once, "print once and exit");
  top->add_option("--window", window, "seconds of finished streams counted")->check(CLI::Range(1.0, 86400.0))->capture_default_str();
  add_output(top);

  CLI::App* stats = app.add_subcommand("stats", "aggregates over the finished streams kept by the daemon");
  std::string by = "model";
  stats->add_option("--by", by, "model | route | process | container")
      ->check(CLI::IsMember({"model", "route", "process", "container"}))
      ->capture_default_str();
  add_output(stats);

  CLI::App* alerts = app.add_subcommand("alerts", "degraded cohorts and abuse signals: active and recent (docs/degradation.md)");
  add_output(alerts);

  CLI::App* watch = app.add_subcommand("watch", "stream records as NDJSON as they finish (until interrupted)");
  bool watch_timeline = false;
  watch->add_flag("--timeline", watch_timeline, "include each record's timeline");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  const bool as_json = output == "json";
  try {
    ApiClient client(socket_path);
    if (status->parsed()) {
      auto r = call(client, {{"cmd", "status"}});
      if (!r) return kExitFailed;
      std::cout << (as_json ? dump(*r) + "\n" : infertap::cli::format_status(*r));
    } else if (streams->parsed()) {
      auto r = call(client, {{"cmd", "streams"}, {"live", live}, {"limit", limit}});
      if (!r) return kExitFailed;
      const json& list = live ? (*r)["live"] : (*r)["streams"];
      if (as_json) {
        for (const json& item : list) std::cout << dump(item) << "\n";
      } else {
        std::cout << (live ? infertap::cli::format_live(list) : infertap::cli::format_streams(list));
      }
    } else if (show->parsed()) {
      auto r = call(client, {{"cmd", "show"}, {"id", id}});
      if (!r) return kExitFailed;
      if (as_json) {
        std::cout << dump((*r)["record"]) << "\n";
      } else {
        infertap::cli::FormatOptions options;
        options.width = width;
        options.unicode = !ascii;
        std::cout << infertap::cli::format_show((*r)["record"], options);
      }
    } else if (top->parsed()) {
      const bool tty = isatty(STDOUT_FILENO);
      for (;;) {
        auto r = call(client, {{"cmd", "top"}, {"window_s", window}});
        if (!r) return kExitFailed;
        if (as_json) {
          std::cout << dump(*r) << "\n";
        } else {
          if (tty && !once) std::cout << "\x1b[H\x1b[2J";
          std::cout << infertap::cli::format_top(*r);
        }
        std::cout.flush();
        if (once) break;
        std::this_thread::sleep_for(std::chrono::duration<double>(interval));
      }
    } else if (stats->parsed()) {
      auto r = call(client, {{"cmd", "stats"}, {"by", by}});
      if (!r) return kExitFailed;
      std::cout << (as_json ? dump(*r) + "\n" : infertap::cli::format_stats(*r));
    } else if (alerts->parsed()) {
      auto r = call(client, {{"cmd", "alerts"}});
      if (!r) return kExitFailed;
      std::cout << (as_json ? dump(*r) + "\n" : infertap::cli::format_alerts(*r));
    } else if (watch->parsed()) {
      client.send_line(dump(json{{"cmd", "watch"}, {"timeline", watch_timeline}}));
      const auto ack = client.read_line();
      if (!ack) {
        std::cerr << "infertap: infertapd closed the connection\n";
        return kExitFailed;
      }
      const json ack_json = json::parse(*ack, nullptr, false);
      if (!ack_json.is_object() || !ack_json.value("ok", false)) {
        std::cerr << "infertap: " << (ack_json.is_object() ? ack_json.value("error", *ack) : *ack) << "\n";
        return kExitFailed;
      }
      while (auto line = client.read_line()) {
        if (line->rfind("{\"type\":\"watch_dropped\"", 0) == 0) {
          const json notice = json::parse(*line, nullptr, false);
          std::cerr << "infertap: watch fell behind, " << (notice.is_object() ? notice.value("records", 0) : 0)
                    << " records dropped\n";
          continue;
        }
        std::cout << *line << "\n";
        std::cout.flush();
        if (!std::cout) return kExitOk;  // stdout closed (e.g. | head)
      }
      std::cerr << "infertap: infertapd ended the watch\n";
      return kExitFailed;
    }
  } catch (const ApiError& e) {
    switch (e.kind) {
      case ApiErrorKind::not_running:
        std::cerr << "infertapd is not running (no socket at " << socket_path << "): start it with `sudo infertapd`\n";
        return kExitNotRunning;
      case ApiErrorKind::permission_denied:
        std::cerr << "permission denied on " << socket_path << ": run as root\n";
        return kExitPermission;
      case ApiErrorKind::protocol:
      case ApiErrorKind::io:
        std::cerr << "infertap: " << e.what() << "\n";
        return kExitFailed;
    }
  }
  return kExitOk;
}
