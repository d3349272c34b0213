// Alert and abuse records as JSON (NDJSON lines, docs/schema.md "type": "alert"
// and "type": "abuse") and the `alerts` API response (its text for people:
// cli/format.h format_alerts).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "degrade/engine.h"
#include "output/ndjson/records.h"

namespace infertap::degrade {

nlohmann::ordered_json alert_json(const Alert& a, const output::WallClock& clock, const std::string& host);
nlohmann::ordered_json abuse_json(const AbuseSignal& s, const output::WallClock& clock, const std::string& host);

// One NDJSON line, no newline.
std::string render_alert(const Alert& a, const output::WallClock& clock, const std::string& host);
std::string render_abuse(const AbuseSignal& s, const output::WallClock& clock, const std::string& host);
// "type": "baseline_review" (docs/schema.md).
nlohmann::ordered_json review_json(const BaselineReview& r, const output::WallClock& clock, const std::string& host);
std::string render_review(const BaselineReview& r, const output::WallClock& clock, const std::string& host);

// {"active": [...], "recent": [...], "abuse_active": [...], "abuse_recent": [...],
//  "cohorts": [...], "counters": {...}}; recent lists newest first.
nlohmann::json alerts_response(const Engine& engine, const output::WallClock& clock, const std::string& host);

}  // namespace infertap::degrade
