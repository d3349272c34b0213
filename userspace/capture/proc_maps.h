// One line of /proc/PID/maps: the file a mapping comes from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace infertap::capture {

struct MappedFile {
  std::uint64_t start = 0, end = 0;  // the mapping's address range
  bool executable = false;
  std::uint32_t dev_major = 0, dev_minor = 0;  // the file's device
  std::uint64_t inode = 0;
  std::string path;      // as the process sees it (its own root), " (deleted)" removed
  bool deleted = false;  // the file was removed or replaced on disk since it was mapped
};

// nullopt for anonymous mappings, pseudo-files ([heap], [vdso]) and lines that
// do not parse.
std::optional<MappedFile> parse_maps_line(std::string_view line);

// The file name of a path (after the last '/').
std::string_view base_name(std::string_view path);

}  // namespace infertap::capture
