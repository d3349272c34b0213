#include "output/format.h"

namespace infertap::output {

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::optional<double> ms_of(const std::optional<std::uint64_t>& ns) {
  if (!ns) return std::nullopt;
  return static_cast<double>(*ns) / 1e6;
}

}  // namespace infertap::output
