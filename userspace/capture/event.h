// Decoded view of one ring-buffer record (no copy: spans point into the ring).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "capture/abi_check.h"

namespace infertap::capture {

struct IoEvent {
  const itap_event* header = nullptr;
  std::span<const std::uint8_t> head;  // first head_len bytes moved by the syscall
  std::span<const std::uint8_t> tail;  // last tail_len bytes moved by the syscall

  const itap_event& h() const { return *header; }
  // Bytes moved by the syscall (0 for errors and state events).
  std::uint64_t bytes() const { return header->ret > 0 ? static_cast<std::uint64_t>(header->ret) : 0; }
  // Bytes moved but not captured (between head and tail).
  std::uint64_t hole() const {
    const std::uint64_t captured = head.size() + tail.size();
    return bytes() > captured ? bytes() - captured : 0;
  }
  std::string_view comm() const { return {header->comm, strnlen(header->comm, ITAP_COMM_LEN)}; }
};

// A delivery signal of a followed socket (ACK, arrival, retransmission, memory limit).
struct PathSignal {
  const itap_path_event* header = nullptr;
  const itap_path_event& h() const { return *header; }
};

enum class DecodeError : std::uint8_t { too_short, bad_kind, bad_lengths };
std::string_view to_string(DecodeError e);

struct DecodeResult {
  std::optional<IoEvent> event;     // ITAP_EV_DATA / ITAP_EV_STATE
  std::optional<PathSignal> path;   // ITAP_EV_PATH
  DecodeError error{};
};

// Validates a raw record: size covers header and both captured spans, kind is
// known (data/state events or delivery signals), head/tail lengths do not exceed what the syscall moved.
DecodeResult decode(std::span<const std::uint8_t> record);

}  // namespace infertap::capture
