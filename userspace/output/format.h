// JSON as the agent writes its own lines and responses (alert records, query
// API answers, the CLI's -o json), for every layer above the stream records.
// output/ndjson/records.cpp renders the stream records themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace infertap::output {

// One line, compact; bytes that are not UTF-8 are replaced (U+FFFD) rather
// than refused: a process name or path from traffic never stops an answer.
std::string dump(const nlohmann::json& j);
std::string dump(const nlohmann::ordered_json& j);

// The value, or null when there is none.
template <class Json = nlohmann::json, class T>
Json or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// Nanoseconds as milliseconds (ns / 1e6, full precision); none stays none.
std::optional<double> ms_of(const std::optional<std::uint64_t>& ns);

}  // namespace infertap::output
