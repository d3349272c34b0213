#include "capture/proc_maps.h"

#include <charconv>

namespace infertap::capture {

namespace {

// Next space-separated field of `line` from `pos`.
std::string_view next_field(std::string_view line, std::size_t& pos) {
  while (pos < line.size() && line[pos] == ' ') ++pos;
  const std::size_t start = pos;
  while (pos < line.size() && line[pos] != ' ') ++pos;
  return line.substr(start, pos - start);
}

bool parse_hex(std::string_view s, std::uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

}  // namespace

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// "7f00-7f10 r-xp 00001000 fe:01 1234   /usr/lib/libssl.so.3 (deleted)"
std::optional<MappedFile> parse_maps_line(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  std::size_t pos = 0;
  const std::string_view range = next_field(line, pos);
  const std::string_view perms = next_field(line, pos);
  next_field(line, pos);  // offset
  const std::string_view device = next_field(line, pos);
  const std::string_view inode = next_field(line, pos);
  while (pos < line.size() && line[pos] == ' ') ++pos;
  std::string_view path = line.substr(pos);
  const auto dash = range.find('-');
  MappedFile m;
  if (dash == std::string_view::npos || !parse_hex(range.substr(0, dash), m.start) ||
      !parse_hex(range.substr(dash + 1), m.end) || perms.size() < 4)
    return std::nullopt;
  const auto colon = device.find(':');
  std::uint64_t major = 0, minor = 0;
  if (colon == std::string_view::npos || !parse_hex(device.substr(0, colon), major) ||
      !parse_hex(device.substr(colon + 1), minor))
    return std::nullopt;
  m.dev_major = static_cast<std::uint32_t>(major);
  m.dev_minor = static_cast<std::uint32_t>(minor);
  auto [p, ec] = std::from_chars(inode.data(), inode.data() + inode.size(), m.inode);
  if (ec != std::errc() || m.inode == 0 || path.empty() || path.front() != '/') return std::nullopt;
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.size() > kDeleted.size() && path.substr(path.size() - kDeleted.size()) == kDeleted) {
    path.remove_suffix(kDeleted.size());
    m.deleted = true;
  }
  m.executable = perms[2] == 'x';
  m.path = std::string(path);
  return m;
}

}  // namespace infertap::capture
