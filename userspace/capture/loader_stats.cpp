// The kernel side's counters (per-CPU arrays summed) and the TLS worker's.
#include <bpf/bpf.h>

#include "capture/loader_internal.h"

namespace infertap::capture {

std::uint64_t Capture::Impl::sum_percpu(bpf_map* map, std::uint32_t key) const {
  std::vector<std::uint64_t> vals(ncpus > 0 ? ncpus : 1);
  if (bpf_map_lookup_elem(bpf_map__fd(map), &key, vals.data()) != 0) return 0;
  std::uint64_t sum = 0;
  for (std::uint64_t v : vals) sum += v;
  return sum;
}

CaptureStats Capture::stats() const {
  CaptureStats s;
  auto* m = impl_->skel->maps.itap_stats;
#define CAPTURE_READ_STAT(NAME, name, help) s.name = impl_->sum_percpu(m, ITAP_STAT_##NAME);
  ITAP_STAT_LIST(CAPTURE_READ_STAT)
#undef CAPTURE_READ_STAT
  auto* d = impl_->skel->maps.itap_drops;
#define CAPTURE_READ_DROP(NAME, name, help) s.drops_##name = impl_->sum_percpu(d, ITAP_DROP_##NAME);
  ITAP_DROP_LIST(CAPTURE_READ_DROP)
#undef CAPTURE_READ_DROP
  s.records_consumed = impl_->consumed;
  if (impl_->tls) {
    const TlsWorker::Stats w = impl_->tls->stats();
    s.tls = w.tls;
    s.go_tls = w.go;
    s.uprobes = w.budget;
  }
  return s;
}

std::string_view Capture::tls_library(std::uint16_t id) const {
  return impl_->tls ? impl_->tls->library_name(id) : std::string_view();
}

}  // namespace infertap::capture
