// sample-server: an OpenAI-compatible / Anthropic-style streaming HTTP/1.1
// server used as ground truth for infertap integration tests and benchmarks.
//
// Every send syscall is logged (NDJSON, in memory, written by a background
// thread) with CLOCK_MONOTONIC read immediately after the syscall returned.
// Thread per connection, keep-alive, chunked or close-delimited framing,
// write/send/sendmsg/writev senders, configurable TTFT/ITL/jitter/pauses.
//
// Build: g++ -std=c++20 -O2 -g -Wall -Wextra -pthread userspace/tools/sample_server.cpp -o sample-server

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <brotli/encode.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <cctype>
#include <memory>

#include "native_formats.h"
#include "tool_common.h"

namespace it = infertap::tools;
namespace nf = infertap::tools::native;

namespace {

const char* kUsage = R"(usage: sample-server [options]
  --host ADDR            listen address (default 127.0.0.1)
  --port N               listen port; 0 = ephemeral (default 8000). First stdout line: "listening <port>"
  --unix PATH            listen on a unix stream socket at PATH instead (an existing socket file is
                         replaced; "@NAME": the abstract name NAME). First stdout line: "listening unix:PATH"
  --model NAME           model name when the request has none (default infertap-sample)
  --framing chunked|close  streaming response framing (default chunked; an HTTP/1.0 request, e.g.
                         from nginx's default proxy_http_version 1.0, always gets close-delimited)
  --accel-buffering yes|no  send "X-Accel-Buffering: yes|no" on streams (default: no such header;
                         "no" switches nginx proxy buffering off for the response)
  --sender write|send|sendmsg|writev|mixed  send syscall (default write; mixed rotates per syscall)
  --ttft-ms MS           delay before the first content event (default 20)
  --itl-ms MS            gap between content events (default 10)
  --jitter-ms MS         uniform +/- jitter added to ttft and every gap (default 0)
  --tokens N             content events per response unless the request sets max_tokens (default 16)
  --pause-after K        inject one pause after the K-th content event (1-based; default off)
  --pause-ms MS          length of that pause (default 0). A request body's "pause_after" and
                         "pause_ms" set them for that stream alone (one stalled stream among many)
  --events-per-write K   coalesce K SSE events into one send syscall (default 1)
  --slow-factor F        itl multiplier while slow mode is on (SIGUSR1 toggles; default 2.0)
  --load-itl-ms MS       added to every gap per other stream in flight (a server that slows with
                         concurrency, as a batching one does; default 0)
  --fingerprint FP       "system_fingerprint" of OpenAI chunks (default fp_infertap)
  --fingerprint-after N  streams started after N completed ones say --next-fingerprint (an upgrade)
  --next-fingerprint FP  the fingerprint after the switch (default fp_infertap_next)
  --next-itl-ms MS       the gap between content events after the switch (default: --itl-ms)
  --usage                always send the usage chunk (else only with stream_options.include_usage)
  --log FILE             NDJSON log, one line per send syscall (+ request lines); mono_ns is read
                         right after the syscall returned, call_ns is the time spent inside it,
                         off_cpu_ns the part of it the thread was off its CPU
  --exit-after N         exit after N streaming responses completed
  --max-conns N          concurrent connections before answering 503 (default 4096)
  --grace-ms MS          on SIGTERM/SIGINT wait up to MS for open streams to finish (default 0)
  --no-nodelay           do not set TCP_NODELAY on accepted sockets
  --nonblocking          send as an event loop does (uvicorn, nginx): every send with MSG_DONTWAIT;
                         a send refused with EAGAIN is logged ("error") and retried once poll says
                         the socket is writable
  --sndbuf BYTES         SO_SNDBUF on accepted sockets (the kernel doubles it and stops autotuning);
                         with a slow reader a small one makes sends block (default: kernel autotuning)
  --text TEXT            every content token carries this text (default: a canned sentence)
  --seed N               PRNG seed for ids and jitter (default: random)
  --encoding gzip|deflate|br|zstd  compress event streams with this coding when the request's
                         Accept-Encoding lists it ("Content-Encoding" set; each event flushed)
  --encoding-hold K      flush the compressor every K events only (a buffering compressor; default 1)
  --split-sends          every send's bytes go out in two syscalls, split mid-way (events cut across
                         sends; with --events-per-write, coalesced and cut); not with --encoding
  --split-gap-ms MS      time between the two halves (default 1)
  --generate-api sglang|vllm  whose stream POST /generate answers (default sglang)
  --native-variant plain|keepalive|error  native streams as recorded, with keep-alive lines
                         between events, or with an error object mid-stream (default plain)
Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/messages, GET /health, GET /v1/models.
Native routes (the servers' own streams, userspace/tools/native_formats.h; a stream unless the
request says "stream":false; tokens from max_tokens, num_predict, max_new_tokens, n_predict,
max_output_tokens or maxOutputTokens): POST /api/chat, /api/generate (Ollama, NDJSON),
/generate_stream (TGI), /completion (llama.cpp), /generate (SGLang or vLLM), /v2/models/M/generate_stream
(Triton), /v1beta/models/M:streamGenerateContent?alt=sse (Gemini; without alt=sse: a JSON array),
/v1/responses (OpenAI Responses), /acme/v1/generate (the declared format of docs/configuration.md).
Signals: SIGUSR1 toggles slow mode; SIGTERM/SIGINT flush the log and exit 0.
)";

enum class Framing { chunked, close };
enum class Sender { write, send, sendmsg, writev, mixed };
const char* sender_name(Sender s) {
  switch (s) {
    case Sender::write: return "write";
    case Sender::send: return "send";
    case Sender::sendmsg: return "sendmsg";
    case Sender::writev: return "writev";
    case Sender::mixed: return "mixed";
  }
  return "?";
}

struct Config {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string unix_path;  // "" = TCP; "@name" = abstract
  std::string model = "infertap-sample";
  Framing framing = Framing::chunked;
  Sender sender = Sender::write;
  double ttft_ms = 20, itl_ms = 10, jitter_ms = 0;
  std::int64_t tokens = 16;
  std::int64_t pause_after = 0;
  double pause_ms = 0;
  std::int64_t events_per_write = 1;
  double slow_factor = 2.0;
  double load_itl_ms = 0;
  std::string fingerprint = "fp_infertap", next_fingerprint = "fp_infertap_next";
  std::int64_t fingerprint_after = 0;
  double next_itl_ms = -1;
  bool usage = false;
  std::string accel_buffering;  // "", "yes" or "no": X-Accel-Buffering response header
  std::string log_path;
  std::int64_t exit_after = 0;
  std::int64_t max_conns = 4096;
  double grace_ms = 0;
  bool nodelay = true;
  bool nonblocking = false;
  std::int64_t sndbuf = 0;
  std::uint64_t seed = 0;
  std::string encoding;           // "" = never compress
  std::int64_t encoding_hold = 1;  // events per compressor flush
  bool split_sends = false;        // each send in two halves
  double split_gap_ms = 1;
  nf::Format generate_api = nf::Format::sglang;  // POST /generate
  nf::Variant native_variant = nf::Variant::plain;
};

Config g_cfg;
it::NdjsonLog g_log;
std::atomic<bool> g_slow{false};
std::atomic<bool> g_switched{false};  // --fingerprint-after reached
std::atomic<bool> g_stopping{false};
std::atomic<std::int64_t> g_streams_done{0};
std::atomic<std::int64_t> g_streams_active{0};
std::atomic<std::int64_t> g_conns_active{0};
std::atomic<std::uint64_t> g_conn_seq{0};
std::atomic<std::uint64_t> g_requests{0};
std::atomic<std::uint64_t> g_send_errors{0};
int g_listen_fd = -1;
std::mutex g_exit_mu;
std::condition_variable g_exit_cv;

// Raw token texts (JSON-escaped when emitted): includes a newline and quotes so
// parsers see escapes.
const std::array<const char*, 32> kTokens = {
    " The",     " quick",   " brown",  " fox",       " jumps",  " over",    " the",     " lazy",
    " dog",     ".",        " Stream", "ing",        " tokens", " arrive",  " one",     " by",
    " one",     ",",        " each",   " in",        " its",    " own",     " server",  "-sent",
    " event",   ".\n",      " \"",     "Quoted",     "\"",      " words",   " and",     " more"};

std::string g_text;  // --text: every token says this instead

// JSON-escaped text of token i.
std::string token_text(std::int64_t i) {
  std::string s;
  it::append_json_escaped(s, g_text.empty() ? kTokens[std::size_t(i) % kTokens.size()] : g_text.c_str());
  return s;
}
// JSON-escaped text of the whole completion (non-streaming responses).
std::string completion_text(std::int64_t n) {
  std::string raw;
  for (std::int64_t i = 0; i < n; ++i) raw += kTokens[std::size_t(i) % kTokens.size()];
  std::string s;
  it::append_json_escaped(s, raw);
  return s;
}

struct Request {
  std::string method, path, version;
  std::string body;
  bool keep_alive = true;
  bool expect_continue = false;
  std::int64_t content_length = 0;
  bool chunked_body = false;
  std::string accept_encoding;  // lower-cased
};

// A streaming compressor: each call compresses `in` and, when `flush`, ends
// with everything needed to decode it so far (SYNC_FLUSH, FLUSH, e_flush).
class Encoder {
 public:
  static std::unique_ptr<Encoder> create(const std::string& coding);
  virtual ~Encoder() = default;
  virtual std::string encode(std::string_view in, bool flush) = 0;
  virtual std::string finish() = 0;
};

class ZlibEncoder final : public Encoder {
 public:
  explicit ZlibEncoder(bool gzip) { deflateInit2(&z_, 6, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY); }
  ~ZlibEncoder() override { deflateEnd(&z_); }
  std::string encode(std::string_view in, bool flush) override { return run(in, flush ? Z_SYNC_FLUSH : Z_NO_FLUSH); }
  std::string finish() override { return run({}, Z_FINISH); }

 private:
  std::string run(std::string_view in, int mode) {
    std::string out;
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z_.avail_in = static_cast<uInt>(in.size());
    char buf[16384];
    do {
      z_.next_out = reinterpret_cast<Bytef*>(buf);
      z_.avail_out = sizeof buf;
      deflate(&z_, mode);
      out.append(buf, sizeof buf - z_.avail_out);
    } while (z_.avail_out == 0);
    return out;
  }
  z_stream z_{};
};

class BrotliEncoder final : public Encoder {
 public:
  BrotliEncoder() : s_(BrotliEncoderCreateInstance(nullptr, nullptr, nullptr)) {
    BrotliEncoderSetParameter(s_, BROTLI_PARAM_QUALITY, 5);
  }
  ~BrotliEncoder() override { BrotliEncoderDestroyInstance(s_); }
  std::string encode(std::string_view in, bool flush) override {
    return run(in, flush ? BROTLI_OPERATION_FLUSH : BROTLI_OPERATION_PROCESS);
  }
  std::string finish() override { return run({}, BROTLI_OPERATION_FINISH); }

 private:
  std::string run(std::string_view in, BrotliEncoderOperation op) {
    std::string out;
    std::size_t avail_in = in.size();
    const auto* next_in = reinterpret_cast<const std::uint8_t*>(in.data());
    do {
      std::uint8_t buf[16384];
      std::size_t avail_out = sizeof buf;
      std::uint8_t* next_out = buf;
      BrotliEncoderCompressStream(s_, op, &avail_in, &next_in, &avail_out, &next_out, nullptr);
      out.append(reinterpret_cast<char*>(buf), sizeof buf - avail_out);
    } while (avail_in > 0 || BrotliEncoderHasMoreOutput(s_));
    return out;
  }
  BrotliEncoderState* s_;
};

class ZstdEncoder final : public Encoder {
 public:
  ZstdEncoder() : c_(ZSTD_createCCtx()) { ZSTD_CCtx_setParameter(c_, ZSTD_c_compressionLevel, 3); }
  ~ZstdEncoder() override { ZSTD_freeCCtx(c_); }
  std::string encode(std::string_view in, bool flush) override { return run(in, flush ? ZSTD_e_flush : ZSTD_e_continue); }
  std::string finish() override { return run({}, ZSTD_e_end); }

 private:
  std::string run(std::string_view in, ZSTD_EndDirective mode) {
    std::string out;
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    std::size_t left;
    do {
      char buf[16384];
      ZSTD_outBuffer output{buf, sizeof buf, 0};
      left = ZSTD_compressStream2(c_, &output, &input, mode);
      out.append(buf, output.pos);
    } while (mode == ZSTD_e_continue ? input.pos < input.size : left != 0);
    return out;
  }
  ZSTD_CCtx* c_;
};

std::unique_ptr<Encoder> Encoder::create(const std::string& coding) {
  if (coding == "gzip") return std::make_unique<ZlibEncoder>(true);
  if (coding == "deflate") return std::make_unique<ZlibEncoder>(false);
  if (coding == "br") return std::make_unique<BrotliEncoder>();
  if (coding == "zstd") return std::make_unique<ZstdEncoder>();
  return nullptr;
}

struct Conn {
  int fd = -1;
  std::uint64_t id = 0;
  int peer_port = 0;
  int tid = 0;
  std::uint64_t offset = 0;  // bytes sent on this connection so far
  std::uint64_t req = 0;     // request number on this connection (0-based)
  unsigned rot = 0;          // mixed-sender rotation
  it::FastRng rng{1};
  std::string line;  // log line scratch
  std::string inbuf;
  double itl_ms = 10;       // of the stream being served (--itl-ms, --next-itl-ms after the switch)
  std::string fingerprint;  // likewise
};

std::string random_id(it::FastRng& rng, std::size_t n) {
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  s.reserve(n);
  for (std::size_t i = 0; i < n; ++i) s += kAlnum[rng.next() % 62];
  return s;
}

// A wire buffer plus its iovec segmentation (offsets into the buffer).
struct Wire {
  std::string data;
  std::vector<std::pair<std::size_t, std::size_t>> segs;  // (offset, len)
  void add(std::string_view s) {
    if (s.empty()) return;
    segs.emplace_back(data.size(), s.size());
    data.append(s);
  }
  void clear() {
    data.clear();
    segs.clear();
  }
};

struct SendInfo {
  std::int64_t event_index = -1;
  std::int64_t first_event_index = -1;
  std::int64_t events = 0;
  std::string_view kind;
};

// The clocks around one send syscall (the thread's CPU time only when logging).
struct SendClock {
  std::int64_t enter_ns, return_ns, cpu_enter_ns, cpu_return_ns;
  // Time spent inside the send (enter to return): a send that blocked on a
  // full send buffer (slow reader) shows here.
  std::int64_t call_ns() const { return return_ns - enter_ns; }
  // Of it, the time this thread was off its CPU (blocked, preempted, or its
  // CPU stolen by the host): the return clock may be late by up to it.
  std::int64_t off_cpu_ns() const { return std::max<std::int64_t>(0, call_ns() - (cpu_return_ns - cpu_enter_ns)); }
};

void log_send(Conn& c, const SendInfo& si, const SendClock& clock, std::size_t bytes, const char* sender, int err) {
  if (!g_log.enabled()) return;
  std::string& l = c.line;
  l.clear();
  l += "{\"type\":\"send\",\"conn\":";
  it::append_int(l, c.id);
  l += ",\"req\":";
  it::append_int(l, c.req);
  l += ",\"event_index\":";
  it::append_int(l, si.event_index);
  l += ",\"kind\":\"";
  l += si.kind;
  l += "\",\"mono_ns\":";
  it::append_int(l, clock.return_ns);
  l += ",\"bytes\":";
  it::append_int(l, bytes);
  l += ",\"offset\":";
  it::append_int(l, c.offset);
  l += ",\"fd\":";
  it::append_int(l, c.fd);
  if (si.events > 1) {
    l += ",\"events\":";
    it::append_int(l, si.events);
    l += ",\"first_event_index\":";
    it::append_int(l, si.first_event_index);
  }
  l += ",\"call_ns\":";
  it::append_int(l, clock.call_ns());
  l += ",\"off_cpu_ns\":";
  it::append_int(l, clock.off_cpu_ns());
  l += ",\"sender\":\"";
  l += sender;
  l += "\",\"peer_port\":";
  it::append_int(l, c.peer_port);
  l += ",\"tid\":";
  it::append_int(l, c.tid);
  if (err) {
    l += ",\"error\":";
    it::append_json_string(l, std::strerror(err));
  }
  l += '}';
  g_log.append(l);
}

// Send the whole wire buffer; one log line per syscall (partial sends continue
// with the remaining iovecs). Returns the monotonic time after the last
// syscall, or -1 on error.
std::int64_t send_wire(Conn& c, const Wire& w, const SendInfo& si) {
  Sender s = g_cfg.sender;
  if (s == Sender::mixed) {
    static const Sender kRot[] = {Sender::write, Sender::send, Sender::sendmsg, Sender::writev};
    s = kRot[c.rot++ % 4];
  }
  const char* sname = sender_name(s);
  std::size_t done = 0, total = w.data.size();
  std::int64_t ts = -1;
  iovec iov[IOV_MAX > 1024 ? 1024 : IOV_MAX];
  while (done < total) {
    ssize_t n;
    const std::int64_t cpu_enter = g_log.enabled() ? it::thread_cpu_ns() : 0;
    const std::int64_t t_enter = it::mono_ns();
    const int dontwait = g_cfg.nonblocking ? MSG_DONTWAIT : 0;
    if (s == Sender::write && !dontwait) {
      n = ::write(c.fd, w.data.data() + done, total - done);
    } else if (s == Sender::write || s == Sender::send) {
      n = ::send(c.fd, w.data.data() + done, total - done, MSG_NOSIGNAL | dontwait);
    } else {
      // Build iovecs for the remaining segments.
      int cnt = 0;
      for (auto [off, len] : w.segs) {
        if (off + len <= done) continue;
        std::size_t skip = done > off ? done - off : 0;
        iov[cnt].iov_base = const_cast<char*>(w.data.data() + off + skip);
        iov[cnt].iov_len = len - skip;
        if (++cnt == int(sizeof iov / sizeof iov[0])) break;
      }
      if (s == Sender::writev && !dontwait) {  // writev takes no flags: --nonblocking sends it with sendmsg
        n = ::writev(c.fd, iov, cnt);
      } else {
        msghdr mh{};
        mh.msg_iov = iov;
        mh.msg_iovlen = std::size_t(cnt);
        n = ::sendmsg(c.fd, &mh, MSG_NOSIGNAL | dontwait);
      }
    }
    ts = it::mono_ns();  // immediately after the syscall returned
    const SendClock clock{t_enter, ts, cpu_enter, g_log.enabled() ? it::thread_cpu_ns() : 0};
    if (n < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (dontwait && (e == EAGAIN || e == EWOULDBLOCK)) {
        // An event loop's way: the refusal is logged, the send waits for POLLOUT.
        log_send(c, si, clock, 0, sname, e);
        pollfd pfd{c.fd, POLLOUT, 0};
        while (::poll(&pfd, 1, -1) < 0 && errno == EINTR) {
        }
        continue;
      }
      log_send(c, si, clock, 0, sname, e);
      g_send_errors.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
    done += std::size_t(n);
    c.offset += std::uint64_t(n);
    log_send(c, si, clock, std::size_t(n), sname, 0);
  }
  return ts;
}

std::int64_t ms_to_ns(double ms) { return ms <= 0 ? 0 : std::int64_t(ms * 1e6); }

std::int64_t jittered_ns(Conn& c, double base_ms) {
  double ms = base_ms;
  if (g_cfg.jitter_ms > 0) ms += (c.rng.uniform() * 2.0 - 1.0) * g_cfg.jitter_ms;
  return ms_to_ns(ms);
}

std::int64_t itl_ns(Conn& c) {
  double base = c.itl_ms;
  if (g_cfg.load_itl_ms > 0) base += g_cfg.load_itl_ms * double(std::max<std::int64_t>(0, g_streams_active.load() - 1));
  if (g_slow.load(std::memory_order_relaxed)) base *= g_cfg.slow_factor;
  return jittered_ns(c, base);
}

// What serves the next stream: the configured fingerprint and gap, or the
// next ones once --fingerprint-after streams completed.
void choose_identity(Conn& c) {
  if (g_cfg.fingerprint_after > 0 && !g_switched.load() && g_streams_done.load() >= g_cfg.fingerprint_after &&
      !g_switched.exchange(true)) {
    std::fprintf(stderr, "sample-server: system_fingerprint %s -> %s\n", g_cfg.fingerprint.c_str(),
                 g_cfg.next_fingerprint.c_str());
  }
  const bool next = g_switched.load();
  c.fingerprint = next ? g_cfg.next_fingerprint : g_cfg.fingerprint;
  c.itl_ms = next && g_cfg.next_itl_ms >= 0 ? g_cfg.next_itl_ms : g_cfg.itl_ms;
}

// Paces and frames events (SSE events, NDJSON lines), coalescing
// events_per_write of them per syscall; with --split-sends each syscall's
// bytes go out as two, --split-gap-ms apart. A send's log line names the
// events whose last byte it carried (an SSE event ended by CRLF CRLF is
// complete at its last CR): their ground-truth time.
class Emitter {
 public:
  Emitter(Conn& c, bool chunked, Encoder* encoder) : c_(c), chunked_(chunked), encoder_(encoder) {}

  // Emit one event (complete text incl. its terminator) after waiting
  // gap_ns since the previous event was produced.
  bool emit(std::string_view kind, const std::string& event, std::int64_t gap_ns) {
    std::int64_t produced;
    if (gap_ns > 0) {
      // Pace on the ideal schedule (no drift from wake-up latency) unless we
      // are far behind it (e.g. a send blocked on a slow reader).
      std::int64_t target = last_ + gap_ns;
      it::sleep_until_ns(target);
      std::int64_t now = it::mono_ns();
      produced = now - target < kLateNs ? target : now;
    } else {
      produced = it::mono_ns();
    }
    if (pending_ == 0) {
      first_index_ = index_;
      wire_.clear();
      ends_.clear();
      kinds_.clear();
    }
    std::size_t end;
    if (encoder_) {
      const bool flush = (index_ + 1) % std::max<std::int64_t>(1, g_cfg.encoding_hold) == 0;
      add_body(encoder_->encode(event, flush));
      end = wire_.data.size();
    } else if (chunked_) {
      add_body(event);
      end = wire_.data.size() - 2;  // the chunk's CRLF is no part of the event
    } else {
      // Close-delimited: split the terminating blank line into its own iovec.
      std::size_t body = event.size() >= 2 ? event.size() - 2 : event.size();
      wire_.add(std::string_view(event).substr(0, body));
      wire_.add(std::string_view(event).substr(body));
      end = wire_.data.size();
    }
    if (!encoder_ && std::string_view(event).ends_with("\r\n\r\n")) --end;
    ends_.push_back(end);
    kinds_.emplace_back(kind);
    ++pending_;
    ++index_;
    last_ = produced;
    if (pending_ >= g_cfg.events_per_write) return flush();
    return true;
  }

  bool flush() {
    if (pending_ == 0) return true;
    pending_ = 0;
    std::int64_t ts;
    if (g_cfg.split_sends && !encoder_ && wire_.data.size() >= 2) {
      const std::size_t half = wire_.data.size() / 2;
      Wire a, b;
      slice(0, half, a);
      slice(half, wire_.data.size(), b);
      std::size_t in_a = 0;
      while (in_a < ends_.size() && ends_[in_a] <= half) ++in_a;
      if (send_wire(c_, a, info(0, in_a)) < 0) return false;
      it::sleep_ns(ms_to_ns(g_cfg.split_gap_ms));
      ts = send_wire(c_, b, info(in_a, ends_.size()));
    } else {
      ts = send_wire(c_, wire_, info(0, ends_.size()));
    }
    if (ts < 0) return false;
    if (ts - last_ >= kLateNs) last_ = ts;  // the send blocked: restart the schedule from now
    return true;
  }

  void set_last(std::int64_t ts) { last_ = ts; }

  // The compressor's last bytes (after the last event), framed.
  bool finish_encoding() {
    if (!encoder_) return true;
    const std::string tail = encoder_->finish();
    if (tail.empty()) return true;
    wire_.clear();
    add_body(tail);
    SendInfo si;
    si.kind = "encoding_end";
    return send_wire(c_, wire_, si) >= 0;
  }

 private:
  static constexpr std::int64_t kLateNs = 2'000'000;

  // The log line of a send that completes pending events [from, to).
  SendInfo info(std::size_t from, std::size_t to) const {
    SendInfo si;
    si.kind = "split";  // a piece that completes no event
    if (from == to) return si;
    si.first_event_index = first_index_ + std::int64_t(from);
    si.event_index = first_index_ + std::int64_t(to) - 1;
    si.events = std::int64_t(to - from);
    si.kind = kinds_[to - 1];
    return si;
  }

  // Bytes [from, to) of wire_, with its iovec segmentation.
  void slice(std::size_t from, std::size_t to, Wire& out) const {
    for (auto [off, len] : wire_.segs) {
      const std::size_t lo = std::max(off, from), hi = std::min(off + len, to);
      if (lo < hi) out.add(std::string_view(wire_.data).substr(lo, hi - lo));
    }
  }

  // Body bytes in the response's framing (a chunk each when chunked; a
  // compressor that held everything adds nothing).
  void add_body(std::string_view body) {
    if (body.empty()) return;
    if (!chunked_) {
      wire_.add(body);
      return;
    }
    char hdr[32];
    int n = std::snprintf(hdr, sizeof hdr, "%zx\r\n", body.size());
    wire_.add(std::string_view(hdr, std::size_t(n)));
    wire_.add(body);
    wire_.add("\r\n");
  }

  Conn& c_;
  bool chunked_;
  Encoder* encoder_;
  Wire wire_;
  std::vector<std::size_t> ends_;  // per pending event: one past its completing byte in wire_
  std::vector<std::string> kinds_;
  std::int64_t pending_ = 0, index_ = 0, first_index_ = 0;
  std::int64_t last_ = 0;
};

enum class Api { chat, completions, anthropic };

struct StreamParams {
  Api api;
  std::string model;
  std::int64_t n_tokens;
  bool include_usage;
  bool http10 = false;  // the request was HTTP/1.0: no chunked framing, close after the response
  std::int64_t prompt_tokens;
  std::string encoding;  // "" = identity
  const nf::RecordedStream* native = nullptr;  // a native route's stream
  std::int64_t pause_after = g_cfg.pause_after;  // this stream's pause (the request may set its own)
  double pause_ms = g_cfg.pause_ms;
};

std::string openai_chunk_prefix(const std::string& id, const char* object, std::int64_t created,
                                const std::string& model, const std::string& fingerprint) {
  std::string s = "data: {\"id\":\"";
  s += id;
  s += "\",\"object\":\"";
  s += object;
  s += "\",\"created\":";
  it::append_int(s, created);
  s += ",\"model\":";
  it::append_json_string(s, model);
  s += ",\"system_fingerprint\":";
  it::append_json_string(s, fingerprint);
  s += ",\"choices\":";
  return s;
}

bool stream_openai(Conn& c, Emitter& em, const StreamParams& p) {
  const bool chat = p.api == Api::chat;
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + random_id(c.rng, 29);
  const std::string prefix =
      openai_chunk_prefix(id, chat ? "chat.completion.chunk" : "text_completion", it::unix_seconds(), p.model,
                          c.fingerprint);
  std::string ev;
  auto choice = [&](std::string_view inner, std::string_view finish) {
    ev = prefix;
    ev += "[{\"index\":0,";
    ev += inner;
    ev += ",\"logprobs\":null,\"finish_reason\":";
    ev += finish;
    ev += "}]}\n\n";
  };
  if (chat) {
    choice("\"delta\":{\"role\":\"assistant\",\"content\":\"\"}", "null");
    if (!em.emit("role", ev, 0)) return false;
  }
  for (std::int64_t i = 0; i < p.n_tokens; ++i) {
    std::string inner = chat ? "\"delta\":{\"content\":\"" : "\"text\":\"";
    inner += token_text(i);
    inner += chat ? "\"}" : "\"";
    choice(inner, "null");
    std::int64_t gap = i == 0 ? jittered_ns(c, g_cfg.ttft_ms) : itl_ns(c);
    if (p.pause_after > 0 && i == p.pause_after) gap += ms_to_ns(p.pause_ms);
    if (!em.emit("content", ev, gap)) return false;
  }
  std::int64_t fin_gap =
      (p.pause_after > 0 && p.pause_after >= p.n_tokens) ? ms_to_ns(p.pause_ms) : 0;
  choice(chat ? "\"delta\":{}" : "\"text\":\"\"", "\"stop\"");
  if (!em.emit("finish", ev, fin_gap)) return false;
  if (p.include_usage) {
    ev = prefix;
    ev += "[],\"usage\":{\"prompt_tokens\":";
    it::append_int(ev, p.prompt_tokens);
    ev += ",\"completion_tokens\":";
    it::append_int(ev, p.n_tokens);
    ev += ",\"total_tokens\":";
    it::append_int(ev, p.prompt_tokens + p.n_tokens);
    ev += "}}\n\n";
    if (!em.emit("usage", ev, 0)) return false;
  }
  return em.emit("done", "data: [DONE]\n\n", 0);
}

std::string anthropic_event(std::string_view type, std::string_view data_json) {
  std::string s = "event: ";
  s += type;
  s += "\ndata: ";
  s += data_json;
  s += "\n\n";
  return s;
}

bool stream_anthropic(Conn& c, Emitter& em, const StreamParams& p) {
  const std::string id = "msg_" + random_id(c.rng, 24);
  std::string d = "{\"type\":\"message_start\",\"message\":{\"id\":\"" + id +
                  "\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":";
  it::append_json_string(d, p.model);
  d += ",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":";
  it::append_int(d, p.prompt_tokens);
  d += ",\"output_tokens\":1}}}";
  if (!em.emit("anthropic:message_start", anthropic_event("message_start", d), 0)) return false;
  if (!em.emit("anthropic:content_block_start",
               anthropic_event("content_block_start",
                               "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\","
                               "\"text\":\"\"}}"),
               0))
    return false;
  if (!em.emit("anthropic:ping", anthropic_event("ping", "{\"type\": \"ping\"}"), 0)) return false;
  for (std::int64_t i = 0; i < p.n_tokens; ++i) {
    d = "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"";
    d += token_text(i);
    d += "\"}}";
    std::int64_t gap = i == 0 ? jittered_ns(c, g_cfg.ttft_ms) : itl_ns(c);
    if (p.pause_after > 0 && i == p.pause_after) gap += ms_to_ns(p.pause_ms);
    if (!em.emit("anthropic:content_block_delta", anthropic_event("content_block_delta", d), gap)) return false;
  }
  std::int64_t fin_gap =
      (p.pause_after > 0 && p.pause_after >= p.n_tokens) ? ms_to_ns(p.pause_ms) : 0;
  if (!em.emit("anthropic:content_block_stop",
               anthropic_event("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}"), fin_gap))
    return false;
  d = "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{"
      "\"output_tokens\":";
  it::append_int(d, p.n_tokens);
  d += "}}";
  if (!em.emit("anthropic:message_delta", anthropic_event("message_delta", d), 0)) return false;
  return em.emit("anthropic:message_stop", anthropic_event("message_stop", "{\"type\":\"message_stop\"}"), 0);
}

// A native route's recorded stream: token events paced by ttft/itl, the
// others (keep-alive lines, final and error objects) right after.
bool stream_native(Conn& c, Emitter& em, const StreamParams& p) {
  const nf::RecordedStream& s = *p.native;
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < s.wire.size(); ++i) {
    const bool error = s.error && i + 1 == s.wire.size();
    const std::string_view kind = s.token[i] ? "content" : !s.event[i] ? "keepalive" : error ? "error" : "event";
    std::int64_t gap = 0;
    if (s.token[i]) {
      gap = tokens == 0 ? jittered_ns(c, g_cfg.ttft_ms) : itl_ns(c);
      if (p.pause_after > 0 && tokens == p.pause_after) gap += ms_to_ns(p.pause_ms);
      ++tokens;
    }
    if (!em.emit(kind, s.wire[i], gap)) return false;
  }
  return true;
}

// Which native stream a route asks for.
std::optional<nf::Format> native_route(std::string_view path) {
  const auto ends = [&](std::string_view tail) { return path.ends_with(tail); };
  if (ends("/api/chat")) return nf::Format::ollama_chat;
  if (ends("/api/generate")) return nf::Format::ollama_generate;
  if (ends("/generate_stream")) return path.starts_with("/v2/models/") ? nf::Format::triton : nf::Format::tgi;
  if (ends("/completion")) return nf::Format::llamacpp;
  if (ends("/acme/v1/generate")) return nf::Format::declared_acme;
  if (ends("/generate")) return g_cfg.generate_api;
  if (ends(":streamGenerateContent")) return nf::Format::gemini;
  if (ends("/responses")) return nf::Format::responses;
  return std::nullopt;
}

// Gemini's streamGenerateContent without alt=sse: one JSON array, its
// elements (the SSE events' data) sent as they come, ",\r\n" between them.
nf::RecordedStream as_json_array(nf::RecordedStream s) {
  s.content_type = "application/json";
  s.framing = "json_array";
  for (std::size_t i = 0; i < s.wire.size(); ++i) {
    std::string& w = s.wire[i];
    if (w.starts_with("data: ")) w.erase(0, 6);
    while (!w.empty() && (w.back() == '\n' || w.back() == '\r')) w.pop_back();
    w.insert(0, i == 0 ? "[" : ",\r\n");
  }
  if (!s.wire.empty()) s.wire.back() += "]";
  return s;
}

// Plain (Content-Length) response in one send syscall.
bool send_plain(Conn& c, int status, const char* reason, const std::string& body, bool keep_alive,
                std::string_view kind = "response") {
  std::string h = "HTTP/1.1 ";
  it::append_int(h, status);
  h += ' ';
  h += reason;
  h += "\r\nContent-Type: application/json\r\nContent-Length: ";
  it::append_int(h, body.size());
  h += keep_alive ? "\r\nConnection: keep-alive\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  Wire w;
  w.add(h);
  w.add(body);
  SendInfo si;
  si.kind = kind;
  return send_wire(c, w, si) >= 0;
}

bool serve_nonstream(Conn& c, const StreamParams& p, bool keep_alive) {
  choose_identity(c);
  // Simulate generation time, then answer at once.
  std::int64_t wait = p.n_tokens > 0 ? jittered_ns(c, g_cfg.ttft_ms) : 0;
  for (std::int64_t i = 1; i < p.n_tokens; ++i) wait += itl_ns(c);
  it::sleep_ns(wait);
  std::string text = completion_text(p.n_tokens);  // escaped already
  std::string b;
  std::int64_t created = it::unix_seconds();
  if (p.api == Api::anthropic) {
    b = "{\"id\":\"msg_" + random_id(c.rng, 24) + "\",\"type\":\"message\",\"role\":\"assistant\",\"model\":";
    it::append_json_string(b, p.model);
    b += ",\"content\":[{\"type\":\"text\",\"text\":\"" + text +
         "\"}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":";
    it::append_int(b, p.prompt_tokens);
    b += ",\"output_tokens\":";
    it::append_int(b, p.n_tokens);
    b += "}}";
  } else {
    const bool chat = p.api == Api::chat;
    b = std::string("{\"id\":\"") + (chat ? "chatcmpl-" : "cmpl-") + random_id(c.rng, 29) + "\",\"object\":\"" +
        (chat ? "chat.completion" : "text_completion") + "\",\"created\":";
    it::append_int(b, created);
    b += ",\"model\":";
    it::append_json_string(b, p.model);
    b += ",\"system_fingerprint\":";
    it::append_json_string(b, c.fingerprint);
    b += ",\"choices\":[{\"index\":0,";
    if (chat)
      b += "\"message\":{\"role\":\"assistant\",\"content\":\"" + text + "\"}";
    else
      b += "\"text\":\"" + text + "\"";
    b += ",\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":";
    it::append_int(b, p.prompt_tokens);
    b += ",\"completion_tokens\":";
    it::append_int(b, p.n_tokens);
    b += ",\"total_tokens\":";
    it::append_int(b, p.prompt_tokens + p.n_tokens);
    b += "}}";
  }
  return send_plain(c, 200, "OK", b, keep_alive);
}

// Returns false when the connection must be closed afterwards.
bool serve_stream(Conn& c, const StreamParams& p, bool keep_alive, bool& ok) {
  // HTTP/1.0 peers cannot parse chunked framing: close-delimited for them.
  const bool chunked = g_cfg.framing == Framing::chunked && !p.http10;
  if (!chunked) keep_alive = false;
  choose_identity(c);
  g_streams_active.fetch_add(1);
  std::string h = "HTTP/1.1 200 OK\r\n";
  if (!p.native) h += "Content-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n";
  else if (!p.native->content_type.empty()) h += "Content-Type: " + p.native->content_type + "\r\n";
  if (!g_cfg.accel_buffering.empty()) h += "X-Accel-Buffering: " + g_cfg.accel_buffering + "\r\n";
  if (p.api == Api::anthropic) h += "request-id: req_" + random_id(c.rng, 24) + "\r\n";
  else h += "x-request-id: " + random_id(c.rng, 32) + "\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  if (chunked) h += "Transfer-Encoding: chunked\r\n";
  std::unique_ptr<Encoder> encoder = Encoder::create(p.encoding);
  if (encoder) h += "Content-Encoding: " + p.encoding + "\r\nVary: Accept-Encoding\r\n";
  h += "\r\n";
  Wire w;
  w.add(h);
  SendInfo si;
  si.kind = "head";
  std::int64_t ts = send_wire(c, w, si);
  ok = ts >= 0;
  if (ok) {
    Emitter em(c, chunked, encoder.get());
    em.set_last(ts);
    ok = p.native                  ? stream_native(c, em, p)
         : p.api == Api::anthropic ? stream_anthropic(c, em, p)
                                   : stream_openai(c, em, p);
    if (ok) ok = em.flush();
    if (ok) ok = em.finish_encoding();
    if (ok && chunked) {
      Wire end;
      end.add("0\r\n\r\n");
      SendInfo esi;
      esi.kind = "end";
      ok = send_wire(c, end, esi) >= 0;
    }
  }
  if (ok && !keep_alive) ::shutdown(c.fd, SHUT_WR);
  g_streams_active.fetch_sub(1);
  if (ok) {
    std::int64_t n = g_streams_done.fetch_add(1) + 1;
    if (g_cfg.exit_after > 0 && n >= g_cfg.exit_after) {
      std::lock_guard<std::mutex> lk(g_exit_mu);
      g_exit_cv.notify_all();
    }
  }
  return ok && keep_alive;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& ch : r) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

// Does an Accept-Encoding value list `coding` (or "*") without q=0?
bool accepts(std::string_view accept, std::string_view coding) {
  while (!accept.empty()) {
    const std::size_t comma = accept.find(',');
    std::string_view item = accept.substr(0, comma);
    accept.remove_prefix(comma == std::string_view::npos ? accept.size() : comma + 1);
    const std::size_t semi = item.find(';');
    std::string_view name = item.substr(0, semi);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    const bool refused = semi != std::string_view::npos && item.find("q=0", semi) != std::string_view::npos &&
                         item.find("q=0.", semi) == std::string_view::npos;
    if ((name == coding || name == "*") && !refused) return true;
  }
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Read one request (head + Content-Length body). Returns 0 ok, 1 clean EOF,
// -1 error, 400/413/501 for a bad request.
int read_request(Conn& c, Request& r, std::int64_t& ts_done) {
  char buf[65536];
  std::size_t head_end;
  for (;;) {
    head_end = c.inbuf.find("\r\n\r\n");
    if (head_end != std::string::npos) break;
    if (c.inbuf.size() > 65536) return 413;
    ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return (n == 0 && c.inbuf.empty()) ? 1 : -1;
    c.inbuf.append(buf, std::size_t(n));
  }
  std::string_view head(c.inbuf.data(), head_end);
  std::size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  std::size_t sp1 = line.find(' ');
  std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return 400;
  r.method = line.substr(0, sp1);
  r.path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.version = line.substr(sp2 + 1);
  r.keep_alive = r.version != "HTTP/1.0";
  std::size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    std::size_t e = head.find("\r\n", pos);
    if (e == std::string_view::npos) e = head.size();
    std::string_view h = head.substr(pos, e - pos);
    pos = e + 2;
    std::size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = lower(trim(h.substr(0, colon)));
    std::string_view value = trim(h.substr(colon + 1));
    if (name == "content-length") {
      auto res = std::from_chars(value.data(), value.data() + value.size(), r.content_length);
      if (res.ec != std::errc() || r.content_length < 0) return 400;
    } else if (name == "connection") {
      std::string v = lower(value);
      if (v.find("close") != std::string::npos) r.keep_alive = false;
      if (v.find("keep-alive") != std::string::npos) r.keep_alive = true;
    } else if (name == "expect") {
      r.expect_continue = lower(value) == "100-continue";
    } else if (name == "transfer-encoding") {
      if (lower(value).find("chunked") != std::string::npos) r.chunked_body = true;
    } else if (name == "accept-encoding") {
      r.accept_encoding = lower(value);
    }
  }
  if (r.chunked_body) return 501;
  if (r.content_length > (64 << 20)) return 413;
  std::size_t need = head_end + 4 + std::size_t(r.content_length);
  if (r.expect_continue && c.inbuf.size() < need) {
    Wire w;
    w.add("HTTP/1.1 100 Continue\r\n\r\n");
    SendInfo si;
    si.kind = "continue";
    if (send_wire(c, w, si) < 0) return -1;
  }
  while (c.inbuf.size() < need) {
    ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    c.inbuf.append(buf, std::size_t(n));
  }
  ts_done = it::mono_ns();
  r.body = c.inbuf.substr(head_end + 4, std::size_t(r.content_length));
  c.inbuf.erase(0, need);
  return 0;
}

void log_request(Conn& c, const Request& r, std::int64_t ts, const StreamParams* p, bool stream) {
  if (!g_log.enabled()) return;
  std::string& l = c.line;
  l = "{\"type\":\"request\",\"conn\":";
  it::append_int(l, c.id);
  l += ",\"req\":";
  it::append_int(l, c.req);
  l += ",\"mono_ns\":";
  it::append_int(l, ts);
  l += ",\"method\":";
  it::append_json_string(l, r.method);
  l += ",\"path\":";
  it::append_json_string(l, r.path);
  l += ",\"body_bytes\":";
  it::append_int(l, r.body.size());
  if (p) {
    l += ",\"model\":";
    it::append_json_string(l, p->model);
    l += ",\"stream\":";
    l += stream ? "true" : "false";
    l += ",\"tokens\":";
    it::append_int(l, p->n_tokens);
  }
  l += ",\"fd\":";
  it::append_int(l, c.fd);
  l += ",\"peer_port\":";
  it::append_int(l, c.peer_port);
  l += '}';
  g_log.append(l);
}

void serve_connection(Conn& c) {
  for (;;) {
    Request r;
    std::int64_t ts = 0;
    int rc = read_request(c, r, ts);
    if (rc == 1 || rc == -1) return;
    if (rc != 0) {
      const char* reason = rc == 400 ? "Bad Request" : rc == 413 ? "Payload Too Large" : "Not Implemented";
      send_plain(c, rc, reason, "{\"error\":{\"message\":\"bad request\",\"type\":\"invalid_request_error\"}}", false,
                 "error");
      return;
    }
    g_requests.fetch_add(1, std::memory_order_relaxed);
    std::string path = r.path.substr(0, r.path.find('?'));
    bool keep_alive = r.keep_alive && !g_stopping.load();
    bool stay = keep_alive;
    Api api;
    bool known = true;
    // By the end of the path: a gateway or deployment prefix (/openai/deployments/x/...) is served too.
    const auto ends = [&](std::string_view tail) { return path.ends_with(tail); };
    const std::optional<nf::Format> native = r.method == "POST" ? native_route(path) : std::nullopt;
    if (native) {
      StreamParams p;
      p.api = Api::completions;
      p.http10 = r.version == "HTTP/1.0";
      p.model = it::json_get_string(r.body, "model").value_or(g_cfg.model);
      std::optional<std::int64_t> mt;
      for (const char* key : {"max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict",
                              "max_new_tokens", "n_predict", "maxOutputTokens"})
        if (!mt) mt = it::json_get_int(r.body, key);
      p.n_tokens = std::clamp<std::int64_t>(mt.value_or(g_cfg.tokens), 1, 100'000);
      p.prompt_tokens = std::max<std::int64_t>(1, std::int64_t(r.body.size() / 4));
      const bool stream = it::json_get_bool(r.body, "stream").value_or(true);
      log_request(c, r, ts, &p, stream);
      if (stream) {
        nf::RecordedStream s = nf::recorded_stream(*native, int(p.n_tokens), g_cfg.native_variant);
        if (*native == nf::Format::gemini && r.path.find("alt=sse") == std::string::npos) s = as_json_array(std::move(s));
        p.native = &s;
        bool ok = false;
        stay = serve_stream(c, p, keep_alive, ok);
      } else {
        std::string b = "{\"model\":";
        it::append_json_string(b, p.model);
        b += ",\"done\":true}";
        stay = send_plain(c, 200, "OK", b, keep_alive) && keep_alive;
      }
      ++c.req;
      if (!stay) return;
      continue;
    }
    if (ends("/chat/completions")) api = Api::chat;
    else if (ends("/completions")) api = Api::completions;
    else if (ends("/v1/messages")) api = Api::anthropic;
    else known = false;

    if (known && r.method == "POST") {
      StreamParams p;
      p.http10 = r.version == "HTTP/1.0";
      if (!g_cfg.encoding.empty() && accepts(r.accept_encoding, g_cfg.encoding)) p.encoding = g_cfg.encoding;
      p.api = api;
      p.model = it::json_get_string(r.body, "model").value_or(g_cfg.model);
      if (p.model.empty()) p.model = g_cfg.model;
      bool stream = it::json_get_bool(r.body, "stream").value_or(false);
      auto mt = it::json_get_int(r.body, "max_tokens");
      if (!mt) mt = it::json_get_int(r.body, "max_completion_tokens");
      p.n_tokens = std::clamp<std::int64_t>(mt.value_or(g_cfg.tokens), 0, 10'000'000);
      p.include_usage = g_cfg.usage || it::json_get_bool(r.body, "include_usage").value_or(false);
      p.pause_after = it::json_get_int(r.body, "pause_after").value_or(p.pause_after);
      if (auto ms = it::json_get_int(r.body, "pause_ms")) p.pause_ms = double(*ms);
      p.prompt_tokens = std::max<std::int64_t>(1, std::int64_t(r.body.size() / 4));
      log_request(c, r, ts, &p, stream);
      if (stream) {
        bool ok = false;
        stay = serve_stream(c, p, keep_alive, ok);
      } else {
        stay = serve_nonstream(c, p, keep_alive) && keep_alive;
      }
    } else {
      log_request(c, r, ts, nullptr, false);
      if (r.method == "GET" && (path == "/health" || path == "/healthz")) {
        stay = send_plain(c, 200, "OK", "{\"status\":\"ok\"}", keep_alive) && keep_alive;
      } else if (r.method == "GET" && path == "/v1/models") {
        std::string b = "{\"object\":\"list\",\"data\":[{\"id\":";
        it::append_json_string(b, g_cfg.model);
        b += ",\"object\":\"model\",\"created\":0,\"owned_by\":\"infertap\"}]}";
        stay = send_plain(c, 200, "OK", b, keep_alive) && keep_alive;
      } else if (known) {
        stay = send_plain(c, 405, "Method Not Allowed",
                          "{\"error\":{\"message\":\"method not allowed\",\"type\":\"invalid_request_error\"}}",
                          keep_alive) &&
               keep_alive;
      } else {
        stay = send_plain(c, 404, "Not Found",
                          "{\"error\":{\"message\":\"not found\",\"type\":\"invalid_request_error\"}}", keep_alive) &&
               keep_alive;
      }
    }
    ++c.req;
    if (!stay) return;
  }
}

// Lingering close: after our FIN, wait briefly for the peer's so unread
// request bytes never turn the close into an RST that truncates the response.
void linger_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  std::int64_t deadline = it::mono_ns() + 1'000'000'000;
  for (;;) {
    std::int64_t left_ms = (deadline - it::mono_ns()) / 1'000'000;
    if (left_ms <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, int(left_ms)) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
  }
  ::close(fd);
}

void* conn_thread(void* arg) {
  Conn* c = static_cast<Conn*>(arg);
  c->tid = it::current_tid();
  serve_connection(*c);
  linger_close(c->fd);
  delete c;
  g_conns_active.fetch_sub(1);
  return nullptr;
}

int open_listener(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_s = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
  if (rc != 0) {
    std::fprintf(stderr, "getaddrinfo %s: %s\n", host.c_str(), gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) break;
    ::close(fd);
    fd = -1;
  }
  if (fd < 0) std::fprintf(stderr, "cannot listen on %s:%d: %s\n", host.c_str(), port, std::strerror(errno));
  freeaddrinfo(res);
  return fd;
}

// A unix stream listener at `path` ("@name": abstract). Returns the fd or -1.
int open_unix_listener(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path) {
    std::fprintf(stderr, "bad --unix path '%s'\n", path.c_str());
    return -1;
  }
  const bool abstract = path.front() == '@';
  std::memcpy(a.sun_path, path.data(), path.size());
  if (abstract) a.sun_path[0] = '\0';
  else ::unlink(path.c_str());  // a socket file left by an earlier run
  const socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 0 : 1));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd, 4096) == 0) return fd;
  std::fprintf(stderr, "cannot listen on unix:%s: %s\n", path.c_str(), std::strerror(errno));
  if (fd >= 0) ::close(fd);
  return -1;
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

int port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

[[noreturn]] void finish_and_exit(int code, const char* why) {
  g_log.close();
  if (!g_cfg.unix_path.empty() && g_cfg.unix_path.front() != '@') ::unlink(g_cfg.unix_path.c_str());
  std::fprintf(stderr, "sample-server: %s: conns=%llu requests=%llu streams=%lld send_errors=%llu\n", why,
               (unsigned long long)g_conn_seq.load(), (unsigned long long)g_requests.load(),
               (long long)g_streams_done.load(), (unsigned long long)g_send_errors.load());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  it::Args a(kUsage);
  for (const char* o : {"host", "port", "unix", "model", "framing", "sender", "ttft-ms", "itl-ms", "jitter-ms", "tokens",
                        "pause-after", "pause-ms", "events-per-write", "slow-factor", "load-itl-ms", "fingerprint",
                        "fingerprint-after", "next-fingerprint", "next-itl-ms", "log", "exit-after",
                        "max-conns", "grace-ms", "seed", "accel-buffering", "sndbuf", "encoding", "encoding-hold",
                        "text", "split-gap-ms", "generate-api", "native-variant"})
    a.option(o);
  a.flag("usage");
  a.flag("no-nodelay");
  a.flag("split-sends");
  a.flag("nonblocking");
  if (!a.parse(argc, argv)) return 2;
  Config& c = g_cfg;
  c.host = a.str("host", c.host);
  c.port = int(a.integer("port", c.port));
  c.unix_path = a.str("unix", "");
  c.model = a.str("model", c.model);
  c.framing = a.choice("framing", "chunked", {"chunked", "close"}) == "close" ? Framing::close : Framing::chunked;
  c.encoding = a.has("encoding") ? a.choice("encoding", "gzip", {"gzip", "deflate", "br", "zstd"}) : "";
  c.encoding_hold = std::max<std::int64_t>(1, a.integer("encoding-hold", 1));
  c.split_sends = a.has("split-sends");
  c.split_gap_ms = a.number("split-gap-ms", c.split_gap_ms);
  c.generate_api = a.choice("generate-api", "sglang", {"sglang", "vllm"}) == "vllm" ? nf::Format::vllm : nf::Format::sglang;
  const std::string variant = a.choice("native-variant", "plain", {"plain", "keepalive", "error"});
  c.native_variant = variant == "keepalive" ? nf::Variant::keepalive
                     : variant == "error"   ? nf::Variant::error_mid
                                            : nf::Variant::plain;
  if (c.split_sends && !c.encoding.empty()) {
    std::fprintf(stderr, "--split-sends cuts plain bytes: not with --encoding\n");
    return 2;
  }
  std::string s = a.choice("sender", "write", {"write", "send", "sendmsg", "writev", "mixed"});
  c.sender = s == "write"     ? Sender::write
             : s == "send"    ? Sender::send
             : s == "sendmsg" ? Sender::sendmsg
             : s == "writev"  ? Sender::writev
                              : Sender::mixed;
  c.ttft_ms = a.number("ttft-ms", c.ttft_ms);
  c.itl_ms = a.number("itl-ms", c.itl_ms);
  c.jitter_ms = a.number("jitter-ms", c.jitter_ms);
  c.tokens = a.integer("tokens", c.tokens);
  c.pause_after = a.integer("pause-after", c.pause_after);
  c.pause_ms = a.number("pause-ms", c.pause_ms);
  c.events_per_write = std::max<std::int64_t>(1, a.integer("events-per-write", c.events_per_write));
  c.slow_factor = a.number("slow-factor", c.slow_factor);
  c.load_itl_ms = a.number("load-itl-ms", c.load_itl_ms);
  c.fingerprint = a.str("fingerprint", c.fingerprint);
  c.fingerprint_after = a.integer("fingerprint-after", 0);
  c.next_fingerprint = a.str("next-fingerprint", c.next_fingerprint);
  c.next_itl_ms = a.number("next-itl-ms", -1);
  c.usage = a.has("usage");
  if (a.has("accel-buffering")) c.accel_buffering = a.choice("accel-buffering", "", {"yes", "no"});
  c.log_path = a.str("log", "");
  g_text = a.str("text", "");
  c.exit_after = a.integer("exit-after", 0);
  c.max_conns = a.integer("max-conns", c.max_conns);
  c.grace_ms = a.number("grace-ms", 0);
  c.nodelay = !a.has("no-nodelay");
  c.nonblocking = a.has("nonblocking");
  c.sndbuf = a.integer("sndbuf", 0);
  c.seed = a.has("seed") ? std::uint64_t(a.integer("seed", 0)) : it::seed_from_entropy();
  if (c.port < 0 || c.port > 65535) {
    std::fprintf(stderr, "bad --port\n");
    return 2;
  }

  it::raise_nofile_limit();
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // precise sleeps for ttft/itl pacing
  sigset_t sigs = it::block_control_signals();
  if (!g_log.open(c.log_path)) return 1;
  g_listen_fd = c.unix_path.empty() ? open_listener(c.host, c.port) : open_unix_listener(c.unix_path);
  if (g_listen_fd < 0) return 1;
  if (c.unix_path.empty()) std::printf("listening %d\n", local_port(g_listen_fd));
  else std::printf("listening unix:%s\n", c.unix_path.c_str());
  std::fflush(stdout);

  it::start_signal_thread(sigs, [](int sig) {
    if (sig == SIGUSR1) {
      bool now = !g_slow.load();
      g_slow.store(now);
      std::fprintf(stderr, "sample-server: slow mode %s (itl x%.2f)\n", now ? "on" : "off", g_cfg.slow_factor);
      return;
    }
    if (sig == SIGUSR2 || sig == SIGHUP) {  // flush the log without exiting
      g_log.flush();
      return;
    }
    g_stopping.store(true);
    ::shutdown(g_listen_fd, SHUT_RDWR);  // wakes accept()
    std::lock_guard<std::mutex> lk(g_exit_mu);
    g_exit_cv.notify_all();
  });

  if (c.exit_after > 0) {
    std::thread([] {
      std::unique_lock<std::mutex> lk(g_exit_mu);
      g_exit_cv.wait(lk, [] { return g_streams_done.load() >= g_cfg.exit_after || g_stopping.load(); });
      if (g_stopping.load()) return;  // SIGTERM path handles exit
      lk.unlock();
      finish_and_exit(0, "exit-after reached");
    }).detach();
  }

  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 512 * 1024);
  it::FastRng seeder(c.seed);

  for (;;) {
    sockaddr_storage peer{};
    socklen_t plen = sizeof peer;
    int fd = ::accept4(g_listen_fd, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
    if (fd < 0) {
      if (g_stopping.load()) break;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        it::sleep_ns(10'000'000);
        continue;
      }
      std::fprintf(stderr, "accept: %s\n", std::strerror(errno));
      break;
    }
    if (c.sndbuf > 0) {
      int v = int(c.sndbuf);
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    }
    if (c.nodelay && c.unix_path.empty()) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    auto* conn = new Conn;
    conn->fd = fd;
    conn->id = g_conn_seq.fetch_add(1);
    conn->peer_port = port_of(peer);
    conn->rng = it::FastRng(seeder.next());
    if (g_conns_active.load() >= c.max_conns) {
      conn->tid = it::current_tid();
      send_plain(*conn, 503, "Service Unavailable", "{\"error\":{\"message\":\"too many connections\"}}", false,
                 "error");
      linger_close(fd);
      delete conn;
      continue;
    }
    g_conns_active.fetch_add(1);
    pthread_t th;
    if (int e = pthread_create(&th, &attr, conn_thread, conn); e != 0) {
      std::fprintf(stderr, "pthread_create: %s\n", std::strerror(e));
      g_conns_active.fetch_sub(1);
      ::close(fd);
      delete conn;
    }
  }

  // Stopping (SIGTERM/SIGINT): optionally let open streams finish.
  if (c.grace_ms > 0) {
    std::int64_t deadline = it::mono_ns() + ms_to_ns(c.grace_ms);
    while (g_streams_active.load() > 0 && it::mono_ns() < deadline) it::sleep_ns(5'000'000);
  }
  finish_and_exit(0, "stopped");
}
