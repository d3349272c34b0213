// infertap: query a running infertapd over its unix socket (docs/cli.md).
//
// Exit codes: 0 ok, 1 request failed, 2 usage, 3 daemon not running,
// 4 permission denied.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/escape.h"
#include "cli/format.h"
#include "daemon/api.h"
#include "output/format.h"
#include "output/svg/stream_svg.h"

namespace {

using json = nlohmann::json;
using infertap::daemon::ApiClient;
using infertap::daemon::ApiError;
using infertap::daemon::ApiErrorKind;
using infertap::base::EscapeForm;
using infertap::base::printable;
using infertap::output::dump;
namespace cli = infertap::cli;

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitNotRunning = 3, kExitPermission = 4;

// Every option of every command; `output` is shared by those that print tables.
struct Options {
  std::string socket_path = infertap::daemon::kDefaultSocketPath;
  std::string output = "table";
  bool live = false;           // streams
  std::int64_t limit = 50;     // streams
  std::string id;              // show
  std::size_t width = 80;      // show
  bool ascii = false;          // show
  std::string svg_file;        // show: write the stream's picture here ("-": stdout)
  double interval = 2.0;       // top
  bool once = false;           // top
  double window = 60.0;        // top
  std::string by = "model";    // stats
  bool watch_timeline = false;  // watch

  bool as_json() const { return output == "json"; }
};

struct Commands {
  CLI::App *status, *streams, *show, *top, *stats, *alerts, *watch;
};

Commands add_commands(CLI::App& app, Options& o) {
  app.require_subcommand(1);
  app.fallthrough();  // --socket also after the subcommand
  app.add_option("--socket", o.socket_path, "infertapd API socket")->capture_default_str();
  const auto add_output = [&](CLI::App* sub) {
    sub->add_option("-o,--output", o.output, "table | json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
    return sub;
  };
  Commands c{};
  c.status = add_output(app.add_subcommand("status", "daemon uptime, version, attach notes and counters"));
  c.streams = app.add_subcommand("streams", "the last finished streams (newest first), or those in flight");
  c.streams->add_flag("--live", o.live, "streams in flight instead of finished ones");
  c.streams->add_option("-n,--limit", o.limit, "how many")->check(CLI::NonNegativeNumber)->capture_default_str();
  add_output(c.streams);
  c.show = app.add_subcommand("show", "one finished stream with its per-event timeline");
  c.show->add_option("ID", o.id, "stream_id, e.g. 12-0 (see `infertap streams`)")->required();
  c.show->add_option("--width", o.width, "columns the gap picture is scaled to")->check(CLI::Range(40, 1000))->capture_default_str();
  c.show->add_flag("--ascii", o.ascii, "ASCII picture instead of block characters");
  c.show->add_option("--svg", o.svg_file, "write the stream as an SVG picture to FILE (- for stdout)")
      ->type_name("FILE");
  add_output(c.show);
  c.top = app.add_subcommand("top", "per process/model/route over the last 60 s, refreshed");
  c.top->add_option("--interval", o.interval, "seconds between refreshes")->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  c.top->add_flag("--once", o.once, "print once and exit");
  c.top->add_option("--window", o.window, "seconds of finished streams counted")->check(CLI::Range(1.0, 86400.0))->capture_default_str();
  add_output(c.top);
  c.stats = app.add_subcommand("stats", "aggregates over the finished streams kept by the daemon");
  c.stats->add_option("--by", o.by, "model | route | process | container")
      ->check(CLI::IsMember({"model", "route", "process", "container"}))
      ->capture_default_str();
  add_output(c.stats);
  c.alerts = add_output(
      app.add_subcommand("alerts", "degraded cohorts and abuse signals: active and recent (docs/degradation.md)"));
  c.watch = app.add_subcommand("watch", "stream records as NDJSON as they finish (until interrupted)");
  c.watch->add_flag("--timeline", o.watch_timeline, "include each record's timeline");
  return c;
}

// -o json and watch: JSON escapes C0 controls itself, C1 controls and DEL it leaves raw.
std::string json_text(const json& j) { return printable(dump(j), EscapeForm::json); }

// Sends one request; prints the daemon's error and returns nullopt when it failed.
std::optional<json> call(ApiClient& client, const json& request) {
  json response = client.request(request);
  if (!response.value("ok", false)) {
    std::cerr << "infertap: " << printable(response.value("error", std::string("request failed"))) << "\n";
    return std::nullopt;
  }
  response.erase("ok");
  return response;
}

// status, stats, alerts: one request, its response as JSON or as text.
int print_response(ApiClient& client, const json& request, const Options& o, std::string (*text)(const json&)) {
  const auto r = call(client, request);
  if (!r) return kExitFailed;
  std::cout << (o.as_json() ? json_text(*r) + "\n" : text(*r));
  return kExitOk;
}

int run_streams(ApiClient& client, const Options& o) {
  auto r = call(client, {{"cmd", "streams"}, {"live", o.live}, {"limit", o.limit}});
  if (!r) return kExitFailed;
  const json& list = o.live ? (*r)["live"] : (*r)["streams"];
  if (o.as_json()) {
    for (const json& item : list) std::cout << json_text(item) << "\n";
  } else {
    std::cout << (o.live ? cli::format_live(list) : cli::format_streams(list));
  }
  return kExitOk;
}

// The picture is drawn here, from the record the daemon sends, rather than
// by the daemon: the agent's CPU is for capture.
int write_svg(const json& response, const Options& o) {
  if (!response.value("timeline_kept", false)) {
    std::cerr << "infertap: stream " << printable(o.id)
              << " has no timeline kept (infertapd releases the oldest timelines past its 64 MiB budget): "
                 "nothing to draw\n";
    return kExitFailed;
  }
  const std::string svg = infertap::output::render_stream_svg(response["record"]);
  if (o.svg_file == "-") {
    std::cout << svg;
    return std::cout.flush() ? kExitOk : kExitFailed;
  }
  std::ofstream out(o.svg_file, std::ios::binary | std::ios::trunc);
  out << svg;
  out.close();
  if (!out) {
    std::cerr << "infertap: cannot write " << printable(o.svg_file) << ": " << std::strerror(errno) << "\n";
    return kExitFailed;
  }
  std::cerr << "infertap: stream " << printable(o.id) << " drawn to " << printable(o.svg_file) << "\n";
  return kExitOk;
}

int run_show(ApiClient& client, const Options& o) {
  auto r = call(client, {{"cmd", "show"}, {"id", o.id}});
  if (!r) return kExitFailed;
  if (!o.svg_file.empty()) return write_svg(*r, o);
  if (o.as_json()) {
    std::cout << json_text((*r)["record"]) << "\n";
    return kExitOk;
  }
  cli::FormatOptions format;
  format.width = o.width;
  format.unicode = !o.ascii;
  std::cout << cli::format_show((*r)["record"], format);
  return kExitOk;
}

// A connection per refresh: one held across a long --interval would be closed
// by the daemon as idle.
int run_top(const Options& o) {
  const bool tty = isatty(STDOUT_FILENO);
  for (;;) {
    ApiClient client(o.socket_path);
    auto r = call(client, {{"cmd", "top"}, {"window_s", o.window}});
    if (!r) return kExitFailed;
    if (o.as_json()) {
      std::cout << json_text(*r) << "\n";
    } else {
      if (tty && !o.once) std::cout << "\x1b[H\x1b[2J";
      std::cout << cli::format_top(*r);
    }
    std::cout.flush();
    if (o.once) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval));
  }
}

// Record lines as the daemon sends them, until it ends the watch or stdout closes.
int run_watch(ApiClient& client, const Options& o) {
  client.send_line(dump(json{{"cmd", "watch"}, {"timeline", o.watch_timeline}}));
  const auto ack = client.read_line();
  if (!ack) {
    std::cerr << "infertap: infertapd closed the connection\n";
    return kExitFailed;
  }
  const json ack_json = json::parse(*ack, nullptr, false);
  if (!ack_json.is_object() || !ack_json.value("ok", false)) {
    std::cerr << "infertap: " << printable(ack_json.is_object() ? ack_json.value("error", *ack) : *ack) << "\n";
    return kExitFailed;
  }
  while (auto line = client.read_line()) {
    if (line->rfind("{\"type\":\"watch_dropped\"", 0) == 0) {
      const json notice = json::parse(*line, nullptr, false);
      std::cerr << "infertap: watch fell behind, " << (notice.is_object() ? notice.value("records", 0) : 0)
                << " records dropped\n";
      continue;
    }
    std::cout << printable(*line, EscapeForm::json) << "\n";  // as json_text()
    std::cout.flush();
    if (!std::cout) return kExitOk;  // stdout closed (e.g. | head)
  }
  std::cerr << "infertap: infertapd ended the watch\n";
  return kExitFailed;
}

int run(const Commands& c, const Options& o) {
  if (c.top->parsed()) return run_top(o);
  ApiClient client(o.socket_path);
  if (c.status->parsed()) return print_response(client, {{"cmd", "status"}}, o, cli::format_status);
  if (c.streams->parsed()) return run_streams(client, o);
  if (c.show->parsed()) return run_show(client, o);
  if (c.stats->parsed()) return print_response(client, {{"cmd", "stats"}, {"by", o.by}}, o, cli::format_stats);
  if (c.alerts->parsed()) return print_response(client, {{"cmd", "alerts"}}, o, cli::format_alerts);
  if (c.watch->parsed()) return run_watch(client, o);
  return kExitOk;
}

int exit_code_of(const ApiError& e, const std::string& socket_path) {
  switch (e.kind) {
    case ApiErrorKind::not_running:
      std::cerr << "infertapd is not running (no socket at " << socket_path << "): start it with `sudo infertapd`\n";
      return kExitNotRunning;
    case ApiErrorKind::permission_denied:
      std::cerr << "permission denied on " << socket_path << ": run as root\n";
      return kExitPermission;
    case ApiErrorKind::protocol:
    case ApiErrorKind::io:
      break;
  }
  std::cerr << "infertap: " << printable(e.what()) << "\n";
  return kExitFailed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infertap: query a running infertapd (stream timings of LLM inference traffic)"};
  Options options;
  const Commands commands = add_commands(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  try {
    return run(commands, options);
  } catch (const ApiError& e) {
    return exit_code_of(e, options.socket_path);
  }
}
