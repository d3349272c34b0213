// The recorded native-format streams (userspace/tools/native_formats.h, which
// sample-server replays too) under the tests' namespace.
//
//   const RecordedStream s = recorded_stream(Format::ollama_chat, 12, Variant::keepalive);
#pragma once

#include "tools/native_formats.h"

namespace infertap::testing {

using tools::native::Format;
using tools::native::kAcmeFormatYaml;
using tools::native::kAllFormats;
using tools::native::recorded_stream;
using tools::native::RecordedStream;
using tools::native::Variant;
namespace native_detail = tools::native::detail;

}  // namespace infertap::testing
