#include "protocol/http2/hpack.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>

namespace infertap::protocol::http2 {

HpackDecoder::HpackDecoder() { renew(); }

HpackDecoder::~HpackDecoder() {
  if (inflater_) nghttp2_hd_inflate_del(inflater_);
}

void HpackDecoder::renew() {
  if (inflater_) nghttp2_hd_inflate_del(inflater_);
  inflater_ = nullptr;
  if (nghttp2_hd_inflate_new2(&inflater_, nullptr) != 0) {
    inflater_ = nullptr;  // out of memory: blocks are unknown until one can be made
    return;
  }
  nghttp2_hd_inflate_change_table_size(inflater_, max_table_);
}

void HpackDecoder::lose_state() { renew(); }

void HpackDecoder::set_max_table(std::uint32_t bytes) {
  max_table_ = std::min<std::size_t>(bytes, kMaxTableBytes);
  if (inflater_ && nghttp2_hd_inflate_change_table_size(inflater_, max_table_) != 0) renew();
}

bool HpackDecoder::decode(std::span<const std::uint8_t> block, const Field& field) {
  if (!inflater_) renew();
  if (!inflater_) return false;
  const std::uint8_t* in = block.data();
  std::size_t left = block.size();
  for (;;) {
    nghttp2_nv nv;
    int inflate_flags = 0;
    const ssize_t used = nghttp2_hd_inflate_hd2(inflater_, &nv, &inflate_flags, in, left, 1);
    if (used < 0) {
      renew();
      return false;
    }
    in += used;
    left -= static_cast<std::size_t>(used);
    if (inflate_flags & NGHTTP2_HD_INFLATE_EMIT) {
      field({reinterpret_cast<const char*>(nv.name), nv.namelen}, {reinterpret_cast<const char*>(nv.value), nv.valuelen});
    }
    if (inflate_flags & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(inflater_);
      return true;
    }
    if (used == 0 && left == 0 && !(inflate_flags & NGHTTP2_HD_INFLATE_EMIT)) {
      renew();  // no progress: the block ended inside a field
      return false;
    }
  }
}

}  // namespace infertap::protocol::http2
