// Fuzzes the /proc/PID/maps line reader: any bytes, no crash; what it accepts
// is a file mapping whose range is ordered as parsed and whose path is absolute.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "capture/proc_maps.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  const auto m = infertap::capture::parse_maps_line(line);
  if (!m) return 0;
  if (m->path.empty() || m->path.front() != '/' || m->inode == 0) std::abort();
  if (infertap::capture::base_name(m->path).find('/') != std::string_view::npos) std::abort();
  return 0;
}
