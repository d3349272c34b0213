// One counter as the agent's counter tables hand it to the views that list
// every counter: `infertap status`, Prometheus, the documentation's checks.
// The tables are X-macro lists, one line per counter (ITAP_STAT_LIST and
// ITAP_DROP_LIST in include/infertap/abi.h, core/counters.h, output/ndjson/sink.h):
// a counter added there reaches every view without another edit.
#pragma once

#include <cstdint>
#include <string_view>

namespace infertap::base {

// total: counted since the start (a Prometheus counter); level: a value now (a gauge).
enum class CounterKind : std::uint8_t { total, level };

struct Counter {
  std::string_view name;  // snake_case: the field, the status key, the stem of the Prometheus name
  std::string_view help;  // what is counted, for the HELP line and the docs
  CounterKind kind = CounterKind::total;
  std::uint64_t value = 0;
};

}  // namespace infertap::base

// The body of a counter struct made from a list X(name, kind, help): one
// std::uint64_t field per counter and for_each(f), which calls
// f(base::Counter) for every counter in list order.
//   struct PipelineCounters { INFERTAP_COUNTER_FIELDS(INFERTAP_PIPELINE_COUNTERS) };
#define INFERTAP_COUNTER_FIELDS(LIST)    \
  LIST(INFERTAP_COUNTER_FIELD_)          \
  template <class F>                     \
  void for_each(F&& f) const {           \
    LIST(INFERTAP_COUNTER_VISIT_)        \
  }
#define INFERTAP_COUNTER_FIELD_(name, kind, help) std::uint64_t name = 0;
#define INFERTAP_COUNTER_VISIT_(name, kind, help) \
  f(::infertap::base::Counter{#name, help, ::infertap::base::CounterKind::kind, name});
