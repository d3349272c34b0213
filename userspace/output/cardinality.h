// Bounds on what traffic can make an exporter hold: each label keeps at most
// a number of distinct values (later ones become "other"), each family at most
// a number of series (later label sets fold into its overflow series). The
// Prometheus registry and the OTLP exporter bound their series the same way
// with these, so a tenant that invents models, routes or process names grows
// neither.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace infertap::output {

inline constexpr std::string_view kOtherLabel = "other";

using LabelValues = std::vector<std::string>;

// Distinct values per label name, each capped. Not thread-safe: the owner's lock.
class LabelCaps {
 public:
  explicit LabelCaps(std::size_t max_values) : max_values_(max_values) {}
  // `value` when label `name` already has it or has fewer than max_values
  // values; else "other", counted in (*overflow)[name] when overflow is given.
  std::string cap(std::string_view name, std::string value, std::map<std::string, std::uint64_t>* overflow) {
    auto it = seen_.find(name);
    if (it == seen_.end()) it = seen_.emplace(std::string(name), std::set<std::string>{}).first;
    std::set<std::string>& seen = it->second;
    if (seen.count(value) != 0) return value;
    if (seen.size() < max_values_) {
      seen.insert(value);
      return value;
    }
    if (overflow) (*overflow)[std::string(name)] += 1;
    return std::string(kOtherLabel);
  }

 private:
  std::size_t max_values_;
  std::map<std::string, std::set<std::string>, std::less<>> seen_;
};

// The series of one family, bounded.
template <class V>
struct Family {
  std::map<LabelValues, V> series;
  std::uint64_t folded = 0;  // updates that went to the overflow series
};

// The series of `family` for `labels`, or its overflow series when the
// family holds max_series already: labels 1 .. stream_labels-1 become
// "other"; label 0 (the vantage, never mixed) and labels from stream_labels
// on (the family's own, such as `end` or `cause`) are kept.
template <class V>
V& series_of(Family<V>& family, LabelValues labels, std::size_t stream_labels, std::size_t max_series) {
  if (const auto it = family.series.find(labels); it != family.series.end()) return it->second;
  if (family.series.size() >= max_series) {
    for (std::size_t i = 1; i < stream_labels && i < labels.size(); ++i) labels[i] = kOtherLabel;
    family.folded += 1;
  }
  return family.series[std::move(labels)];
}

}  // namespace infertap::output
