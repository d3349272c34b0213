// The kernel/user ABI as seen from C++. Its layout is pinned in
// include/infertap/abi.h itself (checked by g++ here and by clang -target bpf
// for the programs); this is the one place C++ includes it from.
#pragma once

#include <cstddef>

extern "C" {
#include "infertap/abi.h"
}
