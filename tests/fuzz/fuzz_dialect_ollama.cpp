// Fuzzes the interpreter of Ollama /api/chat and /api/generate (NDJSON): tests/fuzz/dialect_fuzz.h.
#include "dialect_fuzz.h"

namespace {
using infertap::tools::native::Format;
constexpr Format kFormats[] = {Format::ollama_chat, Format::ollama_generate};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return infertap::fuzz::fuzz_dialect(kFormats, false, data, size);
}
