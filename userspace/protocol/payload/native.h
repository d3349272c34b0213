// The servers' own streaming dialects, read from an event's facts: which one
// an event's shape shows, and what an event of a known one means. Internal to
// payload/ (interpreter.cpp dispatches here).
#pragma once

#include "protocol/payload/facts.h"
#include "protocol/payload/interpreter.h"

namespace infertap::protocol::payload_detail {

// The native dialect an event's shape shows (unknown: none). Shapes are
// distinct keys, never a product or model name: Triton's text_output,
// Gemini's candidates / usageMetadata, SGLang's meta_info, vLLM's text list,
// TGI's token object, Ollama's done flag with created_at / message /
// response, llama.cpp's content string with its stop flag.
Dialect native_shape(const EventFacts& f);

bool is_native(Dialect d);

// Fills m (kind, ids, finish, usage, end of stream) for an event of dialect d.
// `partial`: the event was cut, only what its head proves counts.
void classify_native(Dialect d, const EventFacts& f, bool partial, EventMeaning& m);

}  // namespace infertap::protocol::payload_detail
