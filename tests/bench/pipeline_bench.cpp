// Userspace pipeline throughput: ring-buffer records -> decode -> connection ->
// HTTP -> SSE -> payload -> stream records, on one core. Input is a recorded-
// style event stream: many concurrent chunked OpenAI streams, interleaved as a
// busy server produces them. Reported as items_per_second = events/s.
// BM_PipelineNativeStreams does the same with each recorded native format
// (tests/support/native_streams.h): the servers' own dialects and a declared
// format side by side in one run, so the per-event cost of a declared
// format's JSON pointers reads against the built-in dialect of the same
// framing (declared_acme against ollama_chat, both NDJSON).
// BM_PipelineHttp2Streams: 100 HTTP/2 streams multiplexed on 4 h2c
// connections, one DATA frame (one event) per send; run it with
// BM_PipelineServerStreams/200 for the HTTP/1 ratio.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "core/pipeline.h"
#include "daemon/config.h"
#include "support/event_builder.h"
#include "support/h2_frames.h"
#include "support/native_streams.h"

namespace {

using infertap::testing::ConnBuilder;
using infertap::testing::chunked;
using infertap::testing::openai_chunk;

// Token texts of varying length, escapes included.
const char* const kTexts[] = {" the", " model", "\\n\\n", " \\\"quoted\\\"", " tokenization", ",", " \\u00e9t\\u00e9"};

struct Recording {
  std::vector<std::vector<std::uint8_t>> records;
  std::size_t events = 0;
};

// `streams` concurrent server-side streams of `tokens` token events each.
// Token texts vary in length and include escapes. With `unique_chunks` every
// chunk also differs outside its text (a new "created" each time), which
// defeats the per-stream memo: the cost of a full JSON parse per event.
Recording make_recording(int streams, int tokens, bool client_side, bool unique_chunks = false) {
  Recording rec;
  std::vector<ConnBuilder> conns;
  for (int s = 0; s < streams; ++s) conns.emplace_back(0x1000 + s, 100, 8000, 30000 + s);
  const std::string body = R"({"model":"llama-test","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  auto event = [&](int i) {
    std::string e = openai_chunk(kTexts[i % 7]);
    if (unique_chunks) e.replace(e.find("1700000000"), 10, std::to_string(1700000000 + i));
    return chunked(e);
  };
  std::uint64_t t = 1'000'000'000;
  auto out = [&](ConnBuilder& c, bool outbound, const std::string& bytes) {
    t += 1000;
    const bool send = outbound != client_side;
    rec.records.push_back(send ? c.send(t, bytes) : c.recv(t, bytes));
    ++rec.events;
  };
  for (auto& c : conns) {
    out(c, false, request);
    out(c, true, head);
  }
  for (int i = 0; i < tokens; ++i) {
    for (auto& c : conns) out(c, true, event(i));
  }
  for (auto& c : conns) {
    out(c, true, chunked("data: [DONE]\n\n"));
    out(c, true, "0\r\n\r\n");
  }
  return rec;
}

// Feeds the recording to a fresh pipeline per iteration: events/s.
void run_recording(benchmark::State& state, const Recording& rec,
                   const infertap::core::PipelineConfig& config = infertap::core::PipelineConfig{}) {
  std::uint64_t records_out = 0;
  for (auto _ : state) {
    infertap::core::Pipeline pipeline(config, [&](infertap::core::StreamRecord&&) { ++records_out; });
    for (const auto& r : rec.records) pipeline.on_record(r);
    benchmark::DoNotOptimize(pipeline.counters().sse_events);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * rec.events));
  state.counters["streams_out"] = static_cast<double>(records_out) / static_cast<double>(state.iterations());
}

void run(benchmark::State& state, bool client_side, bool unique_chunks = false) {
  run_recording(state, make_recording(static_cast<int>(state.range(0)), 200, client_side, unique_chunks));
}

// `streams` concurrent server-side streams of one recorded native format,
// `tokens` token events each. With `unique_events` each event also differs
// outside its text and the memo's holes (its model), which defeats the memo.
Recording make_native_recording(infertap::testing::Format format, int streams, int tokens, bool unique_events) {
  Recording rec;
  const infertap::testing::RecordedStream s = infertap::testing::recorded_stream(format, tokens);
  const std::string request = "POST " + s.path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(s.request_body.size()) + "\r\n\r\n" + s.request_body;
  std::vector<ConnBuilder> conns;
  for (int c = 0; c < streams; ++c) conns.emplace_back(0x2000 + c, 100, 8000, 30000 + c);
  std::uint64_t t = 1'000'000'000;
  auto out = [&](ConnBuilder& c, bool outbound, const std::string& bytes) {
    t += 1000;
    rec.records.push_back(outbound ? c.send(t, bytes) : c.recv(t, bytes));
    ++rec.events;
  };
  for (auto& c : conns) {
    out(c, false, request);
    out(c, true, s.response_head);
  }
  for (std::size_t i = 0; i < s.wire.size(); ++i) {
    std::string e = s.wire[i];
    if (const std::size_t m = e.find("\"model\":\""); unique_events && m != std::string::npos)
      e.insert(m + 9, "m" + std::to_string(i) + "-");
    const std::string bytes = chunked(e);
    for (auto& c : conns) out(c, true, bytes);
  }
  for (auto& c : conns) out(c, true, "0\r\n\r\n");
  return rec;
}

infertap::protocol::DeclaredFormats acme_formats() {
  std::string error;
  const auto config = infertap::daemon::parse_config(infertap::testing::kAcmeFormatYaml, &error);
  return config ? config->pipeline.formats : infertap::protocol::DeclaredFormats{};
}

void run_native(benchmark::State& state, bool unique_events) {
  const auto format = static_cast<infertap::testing::Format>(state.range(0));
  const Recording rec = make_native_recording(format, 200, 200, unique_events);
  infertap::core::PipelineConfig config;
  config.formats = acme_formats();
  if (config.formats.empty()) state.SkipWithError("kAcmeFormatYaml does not parse");
  run_recording(state, rec, config);
  state.SetLabel(infertap::testing::recorded_stream(format, 1).name);
}

void BM_PipelineNativeStreams(benchmark::State& state) { run_native(state, false); }
void BM_PipelineNativeStreamsNoMemo(benchmark::State& state) { run_native(state, true); }

void native_formats(benchmark::internal::Benchmark* b) {
  for (infertap::testing::Format f : infertap::testing::kAllFormats) b->Arg(static_cast<int>(f));
}
void built_in_and_declared(benchmark::internal::Benchmark* b) {
  b->Arg(static_cast<int>(infertap::testing::Format::ollama_chat));
  b->Arg(static_cast<int>(infertap::testing::Format::declared_acme));
}

BENCHMARK(BM_PipelineNativeStreams)->Apply(native_formats)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PipelineNativeStreamsNoMemo)->Apply(built_in_and_declared)->Unit(benchmark::kMillisecond);

// `conns` h2c server connections carrying `per_conn` streams each, `tokens`
// token events per stream, the streams' DATA frames interleaved.
Recording make_h2_recording(int conns, int per_conn, int tokens) {
  using infertap::testing::H2Builder;
  Recording rec;
  std::vector<ConnBuilder> cs;
  std::vector<std::unique_ptr<H2Builder>> client, server;
  for (int c = 0; c < conns; ++c) {
    cs.emplace_back(0x3000 + c, 100, 8000, 31000 + c);
    client.push_back(std::make_unique<H2Builder>());
    server.push_back(std::make_unique<H2Builder>());
  }
  const std::string body = R"({"model":"llama-test","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  std::uint64_t t = 1'000'000'000;
  auto out = [&](ConnBuilder& c, bool send, const std::string& bytes) {
    t += 1000;
    rec.records.push_back(send ? c.send(t, bytes) : c.recv(t, bytes));
    ++rec.events;
  };
  auto id = [](int s) { return static_cast<std::uint32_t>(2 * s + 1); };
  for (int c = 0; c < conns; ++c) {
    std::string in = H2Builder::preface() + H2Builder::settings({});
    for (int s = 0; s < per_conn; ++s) {
      in += client[c]->headers(id(s), {{":method", "POST"}, {":scheme", "http"}, {":path", "/v1/chat/completions"}}, false);
      in += H2Builder::data(id(s), body, true);
    }
    out(cs[c], false, in);
    std::string heads = H2Builder::settings({});
    for (int s = 0; s < per_conn; ++s)
      heads += server[c]->headers(id(s), {{":status", "200"}, {"content-type", "text/event-stream"}}, false);
    out(cs[c], true, heads);
  }
  for (int i = 0; i < tokens; ++i) {
    for (int s = 0; s < per_conn; ++s) {
      for (int c = 0; c < conns; ++c) out(cs[c], true, H2Builder::data(id(s), openai_chunk(kTexts[i % 7]), false));
    }
  }
  for (int c = 0; c < conns; ++c) {
    for (int s = 0; s < per_conn; ++s) out(cs[c], true, H2Builder::data(id(s), "data: [DONE]\n\n", true));
  }
  return rec;
}

void BM_PipelineHttp2Streams(benchmark::State& state) {
  run_recording(state, make_h2_recording(4, static_cast<int>(state.range(0)) / 4, 200));
}
BENCHMARK(BM_PipelineHttp2Streams)->Arg(100)->Unit(benchmark::kMillisecond);

void BM_PipelineServerStreams(benchmark::State& state) { run(state, false); }
void BM_PipelineClientStreams(benchmark::State& state) { run(state, true); }
void BM_PipelineServerStreamsNoMemo(benchmark::State& state) { run(state, false, true); }

BENCHMARK(BM_PipelineServerStreams)->Arg(1)->Arg(200)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PipelineClientStreams)->Arg(200)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PipelineServerStreamsNoMemo)->Arg(200)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  infertap::core::keep_freed_heap_for_reuse();  // as infertapd runs
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
