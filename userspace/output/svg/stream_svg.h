// One stream as a picture (SVG): `infertap show ID --svg FILE` and the query
// API's `show` with "format":"svg" (docs/cli.md#the-picture-of-a-stream).
//
// On one time axis, a lane per place the stream's events were seen on their
// path (server emit, the gateway's read and write, the client's read or the
// last hop's ACK), a tick per event in each, and a line joining one token
// event's places: its lag. Under the lanes, the gaps between tokens as bars
// per lane. Stalls are shaded with their cause, bursts (tokens within 1 ms of
// each other) boxed, TTFT bracketed from the request's end.
//
// Bounded: marks are drawn per pixel column (a column's ticks count its
// events, its gap bar shows its largest gap, its lag line the event with the
// largest lag), so a 32 768-event timeline costs no more elements than the
// picture has columns.
//
// Pure: a stream record (docs/schema.md, with its timeline) in, SVG text out.
// Names from the record (process, route, model, the gateway's process) are
// made printable and XML-escaped; a record holds no payload text or header
// value, and none is drawn.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace infertap::output {

struct SvgOptions {
  int width_px = 960;  // the picture's width; its height follows from the lanes
};

std::string render_stream_svg(const nlohmann::json& record, const SvgOptions& options = {});

// `text` for an XML attribute value or text node: printable (base::printable:
// controls and bytes that are not UTF-8 become visible escapes, which XML
// could not carry at all), then & < > " ' as entities.
std::string xml_text(std::string_view text);

}  // namespace infertap::output
