// Fuzzes the interpreter of vLLM's own /generate (JSON lines of no media type, cumulative text): tests/fuzz/dialect_fuzz.h.
#include "dialect_fuzz.h"

namespace {
using infertap::tools::native::Format;
constexpr Format kFormats[] = {Format::vllm};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return infertap::fuzz::fuzz_dialect(kFormats, false, data, size);
}
