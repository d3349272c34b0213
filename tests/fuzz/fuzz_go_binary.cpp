// The Go binary reader on arbitrary bytes: a Go executable on a host can be
// truncated, corrupt, or built by a toolchain whose tables we do not know.
// The first byte picks what the rest is: a whole file (handed over as a
// memory file, as the agent reads /proc/PID/exe), a .gopclntab's bytes, or a
// function's x86-64 / arm64 machine code for the RET finder. Answers are a
// named problem or results inside the input, never a crash.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "capture/go_binary.h"

using namespace infertap::capture;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::span<const std::uint8_t> rest(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      static const int fd = ::memfd_create("go", 0);
      if (fd < 0) return 0;
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, rest.data(), rest.size(), 0) != static_cast<ssize_t>(rest.size()))
        return 0;
      const GoBinary b = inspect_go_binary(fd);
      if (b.problem.empty() && b.is_go && (b.write.returns.empty() || b.read.returns.empty())) __builtin_trap();
      for (const GoFunction* f : {&b.write, &b.read})
        for (std::uint64_t at : f->returns)
          if (at < f->entry || at >= f->entry + f->size || at >= rest.size()) __builtin_trap();
      break;
    }
    case 1: {
      GoTlsRanges ranges;
      (void)tls_functions_in_pclntab(rest, 0x401000, &ranges);
      break;
    }
    default: {
      std::string error;
      const GoArch arch = data[0] % 4 == 2 ? GoArch::amd64 : GoArch::arm64;
      for (std::uint64_t at : find_returns(arch, rest, 0x1000, &error))
        if (at < 0x1000 || at >= 0x1000 + rest.size()) __builtin_trap();
      break;
    }
  }
  return 0;
}
