// Fuzzes the interpreter of declared formats (an NDJSON one and a cumulative SSE one, read by JSON pointers): tests/fuzz/dialect_fuzz.h.
#include "dialect_fuzz.h"

namespace {
using infertap::tools::native::Format;
constexpr Format kFormats[] = {Format::declared_acme};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return infertap::fuzz::fuzz_dialect(kFormats, true, data, size);
}
