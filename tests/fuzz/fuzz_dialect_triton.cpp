// Fuzzes the interpreter of Triton generate_stream (SSE): tests/fuzz/dialect_fuzz.h.
#include "dialect_fuzz.h"

namespace {
using infertap::tools::native::Format;
constexpr Format kFormats[] = {Format::triton};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return infertap::fuzz::fuzz_dialect(kFormats, false, data, size);
}
