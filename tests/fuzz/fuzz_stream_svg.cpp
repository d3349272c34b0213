// Fuzzes the stream picture (output/svg) with record JSON as the CLI and the
// API hand it over: any shape, any types, hostile names and times. Checks
// what a browser relies on: no crash, and a document that is well-formed XML
// (expat) whose only control character is the line end, with no element
// the record's text could have opened.
#include <expat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "output/svg/stream_svg.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const nlohmann::json record = nlohmann::json::parse(data, data + size, nullptr, false);
  if (record.is_discarded()) return 0;
  const std::string svg = infertap::output::render_stream_svg(record);
  for (const char c : svg) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') std::abort();
  }
  if (svg.find("<script") != std::string::npos || svg.find("<foreignObject") != std::string::npos) std::abort();
  XML_Parser parser = XML_ParserCreate("UTF-8");
  const bool well_formed = XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), 1) != XML_STATUS_ERROR;
  XML_ParserFree(parser);
  if (!well_formed) std::abort();
  return 0;
}
