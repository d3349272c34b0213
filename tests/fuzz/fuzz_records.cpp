// Fuzzes the pipeline with kernel records as the ring buffer delivers them:
// data events of plaintext and TLS connections (bound, unbound, rebound to
// other sockets), TLS binds, state changes, code signals and raw garbage, on a
// few sockets and TLS sessions so that they collide. Checks what the agent
// relies on: no crash, every record it emits ended, and after a flush no
// connection or held write is left and every started stream has its record.
//
// Input: a sequence of ops. Op: [kind][flags lo][flags hi][socket][session]
// [direction][length][ts step] then `length` payload bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/pipeline.h"

using namespace infertap;

namespace {

constexpr std::size_t kOpHeader = 8;

std::vector<std::uint8_t> record_of(const std::uint8_t* op, const std::uint8_t* payload, std::size_t len,
                                    std::uint64_t ts) {
  std::vector<std::uint8_t> rec(sizeof(itap_event) + len, 0);
  auto* h = reinterpret_cast<itap_event*>(rec.data());
  h->kind = static_cast<std::uint16_t>(op[0] % 8);
  h->flags = static_cast<std::uint16_t>(op[1] | (op[2] << 8));
  h->sock_id = op[3] % 4;  // 0: unbound
  h->tls_ssl = op[4] % 3;  // 0: not TLS
  h->tls_lib = op[4] % 2;
  h->direction = op[5] & 1;
  h->ret = (op[5] & 2) ? -11 : static_cast<std::int64_t>(len) + (op[5] >> 4);  // holes between head and tail
  h->head_len = static_cast<std::uint16_t>(len / 2);
  h->tail_len = static_cast<std::uint16_t>(len - len / 2);
  h->seq_end = static_cast<std::uint32_t>(op[6] * 97u + ts);
  h->tls_seq = op[7] & 1 ? static_cast<std::uint32_t>(ts) : 0;
  h->ts_ns = ts;
  h->enter_ns = ts - 1000;
  h->family = 2;
  h->local_port = static_cast<std::uint16_t>(op[3] & 4 ? 0 : 8000);
  h->remote_port = 40000;
  h->new_state = op[6] % 12;
  h->pid = 1;
  std::memcpy(rec.data() + sizeof(itap_event), payload, len);
  return rec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t started_records = 0;
  core::PipelineConfig config;
  core::Pipeline pipeline(config, [&](core::StreamRecord&& r) {
    if (r.end_ns == 0 && r.first_event_ns != 0) std::abort();  // a record leaves ended
    ++started_records;
  });
  pipeline.set_tls_library_names([](std::uint16_t id) { return id ? std::string("openssl-3") : std::string(); });
  std::uint64_t ts = 1'000'000'000;
  std::size_t pos = 0;
  while (pos + kOpHeader <= size) {
    const std::uint8_t* op = data + pos;
    pos += kOpHeader;
    std::size_t len = op[6] & 0x80 ? 0 : op[6];
    if (len > size - pos) len = size - pos;
    ts += 1000 + op[7] * 100000ull;
    if (op[0] == 0xff) {
      const std::vector<std::uint8_t> raw(data + pos, data + pos + len);  // any size, as the ring aligns it
      pipeline.on_record(raw);
    } else {
      const std::vector<std::uint8_t> rec = record_of(op, data + pos, len, ts);
      pipeline.on_record(rec);
    }
    pos += len;
    if (op[0] == 0xfe) pipeline.expire(ts + 20'000'000'000ull);
  }
  pipeline.flush(ts + 1);
  if (pipeline.connection_count() != 0) std::abort();
  if (started_records != pipeline.counters().records) std::abort();
  return 0;
}
