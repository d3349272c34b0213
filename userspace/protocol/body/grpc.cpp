#include "protocol/body/grpc.h"

#include <algorithm>

namespace infertap::protocol {

void GrpcMessages::feed(std::span<const std::uint8_t> bytes, TimestampNs ts) {
  std::size_t i = 0;
  while (i < bytes.size() && !lost_) {
    if (!in_message_) {
      if (prefix_have_ == 0) {
        current_ = {};
        kept_.clear();
        current_.stream_offset = offset_ + i;
        current_.first_byte_ts = ts;
      }
      prefix_[prefix_have_++] = bytes[i++];
      if (prefix_have_ < 5) continue;
      prefix_have_ = 0;
      const std::uint32_t length = (std::uint32_t{prefix_[1]} << 24) | (std::uint32_t{prefix_[2]} << 16) |
                                   (std::uint32_t{prefix_[3]} << 8) | prefix_[4];
      if (prefix_[0] > 1 || length > kMaxMessage) {
        lost_ = true;  // not a message prefix: the body is not what its type says
        break;
      }
      current_.compressed = prefix_[0] == 1;
      current_.wire_bytes = 5 + length;
      remaining_ = length;
      in_message_ = true;
      if (remaining_ == 0) finish_message(ts);
      continue;
    }
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, bytes.size() - i));
    const std::size_t keep = std::min(take, kMaxKept - std::min(kMaxKept, kept_.size()));
    kept_.append(reinterpret_cast<const char*>(bytes.data() + i), keep);
    i += take;
    remaining_ -= take;
    if (remaining_ == 0) finish_message(ts);
  }
  offset_ += bytes.size();
}

void GrpcMessages::finish_message(TimestampNs ts) {
  in_message_ = false;
  current_.ts = ts;
  current_.data = kept_;
  on_message_(current_);
}

void GrpcMessages::gap(std::uint64_t n, TimestampNs ts) {
  offset_ += n;
  if (lost_) return;
  if (in_message_ && n <= remaining_) {
    remaining_ -= n;
    current_.truncated = true;
    if (remaining_ == 0) finish_message(ts);
    return;
  }
  lost_ = true;  // the hole reached a prefix
}

}  // namespace infertap::protocol
