// The ring buffer: its consumer, made before attach so nothing is lost, and
// the poll and drain that hand each record to the pipeline.
#include <cerrno>

#include "capture/loader_internal.h"

namespace infertap::capture {

int Capture::Impl::on_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Impl*>(ctx);
  self->consumed++;
  if (self->tls && size >= sizeof(itap_event)) {  // signals for the TLS library finder, not for the pipeline
    const auto* e = static_cast<const itap_event*>(data);
    if (e->kind == ITAP_EV_EXEC || e->kind == ITAP_EV_DLOPEN) {
      if (e->kind == ITAP_EV_EXEC) self->tls->on_exec(e->pid);
      else self->tls->on_dlopen(e->pid);
      return 0;
    }
  }
  if (self->handler && *self->handler)
    (*self->handler)(std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(data), size));
  return 0;
}

namespace loading {

// Before attach: nothing is lost.
std::string open_ring_buffer(Capture::Impl& impl) {
  impl.rb = ring_buffer__new(bpf_map__fd(impl.skel->maps.itap_rb), &Capture::Impl::on_record, &impl, nullptr);
  if (!impl.rb) return "creating the ring-buffer consumer failed: " + errstr(errno);
  return "";
}

}  // namespace loading

int Capture::poll(int timeout_ms, const RecordHandler& handler) {
  impl_->handler = &handler;
  int total = 0;
  int n = ring_buffer__poll(impl_->rb, timeout_ms);
  if (n < 0 && n != -EINTR) {
    impl_->handler = nullptr;
    return n;
  }
  if (n > 0) total += n;
  // Producers submit with BPF_RB_NO_WAKEUP below the wake-up threshold: the
  // epoll wait may time out with records pending, so always drain.
  int m = ring_buffer__consume(impl_->rb);
  impl_->handler = nullptr;
  if (impl_->tls)
    for (LoadNote& n : impl_->tls->take_notes()) impl_->notes.push_back(std::move(n));
  if (m < 0) return m == -EINTR ? total : m;
  return total + m;
}

int Capture::drain(const RecordHandler& handler) {
  impl_->handler = &handler;
  int m = ring_buffer__consume(impl_->rb);
  impl_->handler = nullptr;
  return m == -EINTR ? 0 : m;
}

}  // namespace infertap::capture
