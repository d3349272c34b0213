// Text rendering of query API responses for the `infertap` CLI (docs/cli.md).
// Pure functions: JSON in, text out (UTF-8, no terminal control codes).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace infertap::cli {

struct FormatOptions {
  std::size_t width = 80;  // terminal columns the picture is scaled to
  bool unicode = true;     // block characters; false: ASCII ('#', '<')
};

// Aligned table; `right[i]` right-aligns column i (numbers). Two spaces between columns.
std::string format_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& right);

// One character per value (or per bucket of values, keeping each bucket's
// maximum so a spike stays visible), ▁..█ linear from 0 to the largest value;
// at most max_chars characters.
std::string sparkline(const std::vector<double>& values, std::size_t max_chars, bool unicode = true);

// `infertap show`: header, gap sparkline, per-event timeline with a gap bar per
// event and "◀ stall N ms" on the event that ended each stall.
// `record` is a stream record (docs/schema.md), with or without "timeline".
std::string format_show(const nlohmann::json& record, const FormatOptions& options = {});

// Responses of the API (docs/cli.md) as tables.
std::string format_streams(const nlohmann::json& streams);  // array of records
std::string format_live(const nlohmann::json& live);        // array of live streams
std::string format_stats(const nlohmann::json& response);   // {"by", "groups", "total", ...}
std::string format_top(const nlohmann::json& response);     // {"window_s", "rows", ...}
std::string format_status(const nlohmann::json& response);  // key: value lines
// `infertap alerts`: active alerts, recent alerts, abuse signals (docs/degradation.md).
std::string format_alerts(const nlohmann::json& response);

// Cells of the tables above.
std::string fmt_ms(const nlohmann::json& value, int decimals = 1);  // "12.3" or "-" for null/missing
std::size_t display_width(const std::string& s);                    // UTF-8 code points
std::string ellipsize(const std::string& s, std::size_t max);       // "long-na…"

}  // namespace infertap::cli
