// sample-client: a streaming HTTP/1.1 client for OpenAI-compatible and
// Anthropic-style SSE endpoints, used as ground truth for infertap tests.
//
// CLOCK_MONOTONIC is read immediately after every read syscall returns; read
// lines, SSE event lines and per-request summaries go to an in-memory NDJSON
// log written by a background thread.
//
// Build: g++ -std=c++20 -O2 -g -Wall -Wextra -pthread userspace/tools/sample_client.cpp -o sample-client

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <zlib.h>

#include <cctype>
#include <cmath>
#include <memory>

#include "tool_common.h"

namespace it = infertap::tools;

namespace {

const char* kUsage = R"(usage: sample-client [options]
  --host ADDR             server address (default 127.0.0.1)
  --port N                server port (default 8000)
  --unix PATH             connect to a unix stream socket instead ("@NAME": an abstract name)
  --path P                request path (default /v1/chat/completions; /v1/messages with --anthropic)
  --model NAME            "model" in the request body (default infertap-sample)
  --tokens N              "max_tokens" in the request body (default: omitted, server decides)
  --concurrency C         parallel connections, one thread each (default 1)
  --requests R            requests per connection, sequential, keep-alive (default 1)
  --connection keep-alive|close|new|half-close  keep-alive (default); close: send "Connection: close"
                          (the server closes first); new: a new connection per request, closed by the
                          client; half-close: a new connection per request whose sending side the client
                          shuts down (shutdown(SHUT_WR)) right after the request, then reads the response
  --rate R                requests per second over all connections, paced on a fixed schedule
                          (default 0: as fast as each connection can go)
  --abort-after N         close the connection after N SSE events of a response (a user pressing stop;
                          0 = read to the end); an aborted response counts as ok
  --reader read|recv|recvmsg|readv|mixed  read syscall (default read; mixed rotates per read)
  --read-size BYTES       bytes asked per read call (default 16384)
  --read-delay-ms MS      sleep after each read (slow reader; default 0)
  --stall-after N         stop reading once N SSE events were parsed (whole stream, any kind) ...
  --stall-ms MS           ... for MS milliseconds, then read on (a reader that stalls mid-stream)
  --accept-encoding ENC   send "Accept-Encoding: ENC" (e.g. gzip); gzip/deflate bodies are inflated
                          before SSE parsing (event end_offset is then the compressed offset of the read)
  --rcvbuf BYTES          SO_RCVBUF set before connect (default: kernel default)
  --anthropic             Anthropic Messages request body (and default path /v1/messages)
  --no-stream             "stream": false
  --usage                 ask for the usage chunk (stream_options.include_usage)
  --prompt-bytes N        pad the prompt to about N bytes (default: short prompt)
  --prompt TEXT           the prompt (default: a short story request)
  --authorization VALUE   the Authorization header's value (default "Bearer sk-test"; x-api-key with --anthropic)
  --expect-status N       HTTP status counted as success (default 200)
  --timeout-ms MS         connect/read timeout (default 60000)
  --log FILE              NDJSON log: one line per read syscall, per SSE event, per request summary
Exit status: 0 ok, 1 connection/protocol errors, 3 unexpected HTTP status.
)";

enum class Reader { read, recv, recvmsg, readv, mixed };
const char* reader_name(Reader r) {
  switch (r) {
    case Reader::read: return "read";
    case Reader::recv: return "recv";
    case Reader::recvmsg: return "recvmsg";
    case Reader::readv: return "readv";
    case Reader::mixed: return "mixed";
  }
  return "?";
}

struct Config {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string path = "/v1/chat/completions";
  std::string model = "infertap-sample";
  std::int64_t tokens = -1;
  std::int64_t concurrency = 1, requests = 1;
  std::string connection = "keep-alive";  // keep-alive | close | new
  std::int64_t abort_after = 0;
  double rate = 0;  // requests/s over all workers; 0 = unpaced
  Reader reader = Reader::read;
  std::int64_t read_size = 16384;
  double read_delay_ms = 0;
  std::int64_t stall_after = 0;
  double stall_ms = 0;
  std::string accept_encoding;
  std::int64_t rcvbuf = 0;
  bool anthropic = false, stream = true, usage = false;
  std::int64_t prompt_bytes = 0;
  std::string prompt = "Write a short story about timestamps.";
  std::string authorization = "Bearer sk-test";
  int expect_status = 200;
  std::int64_t timeout_ms = 60000;
  std::string log_path;
};

Config g_cfg;
it::NdjsonLog g_log;
sockaddr_storage g_addr{};
socklen_t g_addrlen = 0;

// ---- results ---------------------------------------------------------------------

struct ReqResult {
  int status = 0;
  std::int64_t events = 0, content_events = 0, bytes = 0;
  std::int64_t request_sent_ns = 0, first_content_ns = 0, last_event_ns = 0;
  bool aborted = false;  // the client closed before the response ended (--abort-after)
  bool ok = false;
  std::string error;
};

std::mutex g_res_mu;
std::vector<double> g_ttfts;
std::int64_t g_ok = 0, g_errors = 0, g_bad_status = 0, g_events = 0, g_content_events = 0, g_bytes = 0;
std::int64_t g_conn_errors = 0;

// ---- SSE splitter ------------------------------------------------------------

struct SseEvent {
  std::string type;  // "event:" field
  std::string data;  // "data:" fields joined with '\n'
  std::size_t bytes = 0;
};

class SseSplitter {
 public:
  // Feed body bytes; seg_off is the connection-stream offset of data[0].
  // cb(event, end_offset) for each event completed by a blank line.
  template <typename Cb>
  void feed(const char* data, std::size_t len, std::uint64_t seg_off, Cb&& cb) {
    for (std::size_t i = 0; i < len; ++i) {
      char ch = data[i];
      ++ev_bytes_;
      if (ch != '\n') {
        line_ += ch;
        continue;
      }
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (line_.empty()) {
        if (has_field_) {
          cur_.bytes = ev_bytes_;
          cb(cur_, seg_off + i + 1);
        }
        cur_ = SseEvent{};
        has_field_ = false;
        ev_bytes_ = 0;
        data_lines_ = 0;
      } else {
        field(line_);
      }
      line_.clear();
    }
  }
  void reset() {
    line_.clear();
    cur_ = SseEvent{};
    has_field_ = false;
    ev_bytes_ = 0;
    data_lines_ = 0;
  }

 private:
  void field(std::string_view l) {
    if (l.front() == ':') return;  // comment
    std::size_t colon = l.find(':');
    std::string_view name = l.substr(0, colon), value;
    if (colon != std::string_view::npos) {
      value = l.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    }
    if (name == "data") {
      if (data_lines_++ > 0) cur_.data += '\n';
      cur_.data += value;
    } else if (name == "event") {
      cur_.type = value;
    }
    has_field_ = true;
  }

  std::string line_;
  SseEvent cur_;
  bool has_field_ = false;
  std::size_t ev_bytes_ = 0;
  int data_lines_ = 0;
};

std::string classify(const SseEvent& e) {
  if (!e.type.empty()) return "anthropic:" + e.type;
  std::string_view d = e.data;
  if (d == "[DONE]") return "done";
  if (d.find("\"error\"") != std::string_view::npos && d.find("\"choices\"") == std::string_view::npos) return "error";
  if (d.find("\"choices\":[]") != std::string_view::npos) return "usage";
  if (auto p = it::json_find_value(d, "finish_reason"); p != std::string_view::npos && d.substr(p, 4) != "null")
    return "finish";
  if (d.find("\"role\"") != std::string_view::npos) return "role";
  auto content = it::json_get_string(d, "content");
  if (!content) content = it::json_get_string(d, "text");
  if (content) return content->empty() ? "empty" : "content";
  if (auto t = it::json_get_string(d, "type")) return "anthropic:" + *t;  // Anthropic without event: lines
  return "other";
}

bool is_content(const std::string& kind) { return kind == "content" || kind == "anthropic:content_block_delta"; }

// ---- HTTP response parser (incremental) -------------------------------------

class ResponseParser {
 public:
  enum class State { head, body_length, chunk_size, chunk_data, chunk_crlf, trailers, body_close, done, error };

  void reset() {
    state_ = State::head;
    head_.clear();
    status = 0;
    content_length = -1;
    chunked = close_after = false;
    event_stream = false;
    inflater_.reset();
    remaining_ = 0;
    line_.clear();
    sse.reset();
  }

  // Feed bytes read at connection-stream offset `off`; returns bytes consumed
  // (less than len only once the response is complete).
  template <typename Cb>
  std::size_t feed(const char* p, std::size_t len, std::uint64_t off, Cb&& on_event) {
    std::size_t i = 0;
    while (i < len && state_ != State::done && state_ != State::error) {
      switch (state_) {
        case State::head: {
          head_.push_back(p[i++]);
          if (head_.size() >= 4 && head_.compare(head_.size() - 4, 4, "\r\n\r\n") == 0) parse_head();
          else if (head_.size() > 65536) fail("response head too large");
          break;
        }
        case State::body_length: {
          std::size_t n = std::min<std::size_t>(len - i, std::size_t(remaining_));
          body(p + i, n, off + i, on_event);
          i += n;
          remaining_ -= std::int64_t(n);
          if (remaining_ == 0) state_ = State::done;
          break;
        }
        case State::body_close: {
          body(p + i, len - i, off + i, on_event);
          i = len;
          break;
        }
        case State::chunk_size: {
          char ch = p[i++];
          if (ch != '\n') {
            line_ += ch;
            if (line_.size() > 1024) fail("chunk size line too long");
            break;
          }
          std::int64_t sz = 0;
          auto r = std::from_chars(line_.data(), line_.data() + line_.size(), sz, 16);
          if (r.ec != std::errc() || sz < 0) {
            fail("bad chunk size: " + line_);
            break;
          }
          line_.clear();
          remaining_ = sz;
          state_ = sz == 0 ? State::trailers : State::chunk_data;
          break;
        }
        case State::chunk_data: {
          std::size_t n = std::min<std::size_t>(len - i, std::size_t(remaining_));
          body(p + i, n, off + i, on_event);
          i += n;
          remaining_ -= std::int64_t(n);
          if (remaining_ == 0) state_ = State::chunk_crlf;
          break;
        }
        case State::chunk_crlf: {
          char ch = p[i++];
          if (ch == '\n') state_ = State::chunk_size;
          else if (ch != '\r') fail("missing CRLF after chunk");
          break;
        }
        case State::trailers: {
          char ch = p[i++];
          if (ch != '\n') {
            line_ += ch;
            break;
          }
          if (!line_.empty() && line_.back() == '\r') line_.pop_back();
          if (line_.empty()) state_ = State::done;
          line_.clear();
          break;
        }
        default: break;
      }
    }
    return i;
  }

  // EOF from the peer. Returns true when that legitimately ends the response.
  bool eof() {
    if (state_ == State::body_close) {
      state_ = State::done;
      return true;
    }
    return state_ == State::done;
  }

  State state() const { return state_; }
  const std::string& error() const { return error_; }

  int status = 0;
  std::int64_t content_length = -1;
  bool chunked = false, close_after = false, event_stream = false;
  std::string content_encoding;  // lower-case, "" when none
  std::int64_t body_bytes = 0;
  SseSplitter sse;

 private:
  template <typename Cb>
  void body(const char* p, std::size_t n, std::uint64_t off, Cb&& on_event) {
    body_bytes += std::int64_t(n);
    if (!event_stream) return;
    if (!inflater_) {
      sse.feed(p, n, off, on_event);
      return;
    }
    // Compressed body: inflate what this read brought; events completed by it
    // end at the read's compressed offset.
    const std::uint64_t end = off + n;
    auto cb = [&](const SseEvent& e, std::uint64_t) { on_event(e, end); };
    z_stream& z = inflater_->z;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p));
    z.avail_in = uInt(n);
    char out[16384];
    while (z.avail_in > 0 && !inflater_->ended) {
      z.next_out = reinterpret_cast<Bytef*>(out);
      z.avail_out = sizeof out;
      int rc = inflate(&z, Z_SYNC_FLUSH);
      std::size_t got = sizeof out - z.avail_out;
      if (got) sse.feed(out, got, 0, cb);
      if (rc == Z_STREAM_END) inflater_->ended = true;
      else if (rc == Z_BUF_ERROR && got == 0) break;
      else if (rc != Z_OK) return fail(std::string("inflate: ") + (z.msg ? z.msg : "error"));
    }
  }

  void fail(std::string m) {
    state_ = State::error;
    error_ = std::move(m);
  }

  void parse_head() {
    std::string_view h(head_);
    // Interim 1xx responses: skip and keep reading the real head.
    std::size_t eol = h.find("\r\n");
    std::string_view line = h.substr(0, eol);
    if (line.substr(0, 5) != "HTTP/" || line.size() < 12) return fail("bad status line");
    std::from_chars(line.data() + 9, line.data() + 12, status);
    if (status >= 100 && status < 200) {
      head_.clear();
      return;
    }
    bool http10 = line.substr(0, 8) == "HTTP/1.0";
    close_after = http10;
    std::size_t pos = eol + 2;
    while (pos < h.size()) {
      std::size_t e = h.find("\r\n", pos);
      if (e == std::string_view::npos || e == pos) break;
      std::string_view hl = h.substr(pos, e - pos);
      pos = e + 2;
      std::size_t c = hl.find(':');
      if (c == std::string_view::npos) continue;
      std::string name(hl.substr(0, c));
      for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      std::string_view v = hl.substr(c + 1);
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      std::string val(v);
      for (char& ch : val) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      if (name == "content-length") std::from_chars(val.data(), val.data() + val.size(), content_length);
      else if (name == "transfer-encoding" && val.find("chunked") != std::string::npos) chunked = true;
      else if (name == "connection") {
        if (val.find("close") != std::string::npos) close_after = true;
        if (val.find("keep-alive") != std::string::npos) close_after = false;
      } else if (name == "content-type" && val.find("text/event-stream") != std::string::npos)
        event_stream = true;
      else if (name == "content-encoding")
        content_encoding = val;
    }
    if (content_encoding == "gzip" || content_encoding == "x-gzip" || content_encoding == "deflate") {
      inflater_ = std::make_unique<Inflater>();
      // 15+32: zlib or gzip header, detected; "deflate" is zlib-wrapped per RFC 9110.
      if (inflateInit2(&inflater_->z, 15 + 32) != Z_OK) return fail("inflateInit2 failed");
    } else if (!content_encoding.empty() && content_encoding != "identity") {
      return fail("unsupported content-encoding: " + content_encoding);
    }
    if (chunked) state_ = State::chunk_size;
    else if (content_length >= 0) state_ = content_length == 0 ? State::done : State::body_length;
    else if (status == 204 || status == 304) state_ = State::done;
    else {
      state_ = State::body_close;
      close_after = true;
    }
    remaining_ = content_length;
  }

  struct Inflater {
    z_stream z{};
    bool ended = false;
    ~Inflater() { inflateEnd(&z); }
  };
  std::unique_ptr<Inflater> inflater_;
  State state_ = State::head;
  std::string head_;
  std::string line_;
  std::int64_t remaining_ = 0;
  std::string error_;
};

// ---- connection worker ------------------------------------------------------------

std::string build_request() {
  std::string prompt = g_cfg.prompt;
  while (std::int64_t(prompt.size()) < g_cfg.prompt_bytes) prompt += " Please be precise about every timestamp.";
  std::string b = "{\"model\":";
  it::append_json_string(b, g_cfg.model);
  bool completions = !g_cfg.anthropic && g_cfg.path.find("chat") == std::string::npos &&
                     g_cfg.path.find("completions") != std::string::npos;
  if (completions) {
    b += ",\"prompt\":";
    it::append_json_string(b, prompt);
  } else {
    b += ",\"messages\":[{\"role\":\"user\",\"content\":";
    it::append_json_string(b, prompt);
    b += "}]";
  }
  if (g_cfg.tokens >= 0) {
    b += ",\"max_tokens\":";
    it::append_int(b, g_cfg.tokens);
  } else if (g_cfg.anthropic) {
    b += ",\"max_tokens\":16";  // required by the Anthropic API
  }
  b += g_cfg.stream ? ",\"stream\":true" : ",\"stream\":false";
  if (g_cfg.stream && g_cfg.usage && !g_cfg.anthropic) b += ",\"stream_options\":{\"include_usage\":true}";
  b += '}';

  std::string r = "POST " + g_cfg.path + " HTTP/1.1\r\nHost: " + g_cfg.host + ":" + std::to_string(g_cfg.port) +
                  "\r\nUser-Agent: infertap-sample-client/1\r\nContent-Type: application/json\r\n";
  r += g_cfg.stream ? "Accept: text/event-stream\r\n" : "Accept: application/json\r\n";
  if (!g_cfg.accept_encoding.empty()) r += "Accept-Encoding: " + g_cfg.accept_encoding + "\r\n";
  if (g_cfg.anthropic) r += "x-api-key: " + g_cfg.authorization + "\r\nanthropic-version: 2023-06-01\r\n";
  else r += "Authorization: " + g_cfg.authorization + "\r\n";
  r += g_cfg.connection == "close" ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
  r += "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n";
  r += b;
  return r;
}

struct Worker {
  std::int64_t conn = 0;
  int fd = -1;
  int sock = -1;  // socket number within this conn (reconnects on Connection: close)
  int local_port = 0;
  std::uint64_t offset = 0;
  unsigned rot = 0;
  std::string line;
  std::vector<char> buf;
  std::string leftover;
  std::string request;
};

void set_timeouts(int fd) {
  timeval tv{};
  tv.tv_sec = g_cfg.timeout_ms / 1000;
  tv.tv_usec = (g_cfg.timeout_ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool connect_worker(Worker& w, std::string& err) {
  w.fd = ::socket(g_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (w.fd < 0) {
    err = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  if (g_cfg.rcvbuf > 0) {
    int v = int(g_cfg.rcvbuf);
    setsockopt(w.fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
  }
  int one = 1;
  if (g_addr.ss_family != AF_UNIX) setsockopt(w.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_timeouts(w.fd);
  while (::connect(w.fd, reinterpret_cast<sockaddr*>(&g_addr), g_addrlen) != 0) {
    if (errno == EINTR) continue;
    err = std::string("connect: ") + std::strerror(errno);
    ::close(w.fd);
    w.fd = -1;
    return false;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(w.fd, reinterpret_cast<sockaddr*>(&ss), &len);
  w.local_port = ss.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                 : ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                            : 0;
  w.offset = 0;
  ++w.sock;
  w.leftover.clear();
  return true;
}

void common_fields(Worker& w, std::int64_t req) {
  std::string& l = w.line;
  it::append_int(l, w.conn);
  l += ",\"req\":";
  it::append_int(l, req);
}

void log_read(Worker& w, std::int64_t req, std::int64_t ts, ssize_t n, const char* reader, int err) {
  if (!g_log.enabled()) return;
  std::string& l = w.line;
  l = "{\"type\":\"read\",\"conn\":";
  common_fields(w, req);
  l += ",\"mono_ns\":";
  it::append_int(l, ts);
  l += ",\"bytes\":";
  it::append_int(l, n < 0 ? 0 : n);
  l += ",\"offset\":";
  it::append_int(l, w.offset);
  l += ",\"fd\":";
  it::append_int(l, w.fd);
  l += ",\"reader\":\"";
  l += reader;
  l += "\",\"sock\":";
  it::append_int(l, w.sock);
  l += ",\"local_port\":";
  it::append_int(l, w.local_port);
  if (err) {
    l += ",\"error\":";
    it::append_json_string(l, std::strerror(err));
  }
  l += '}';
  g_log.append(l);
}

ssize_t do_read(Worker& w, Reader r) {
  char* b = w.buf.data();
  std::size_t n = w.buf.size();
  switch (r) {
    case Reader::read: return ::read(w.fd, b, n);
    case Reader::recv: return ::recv(w.fd, b, n, 0);
    case Reader::readv:
    case Reader::recvmsg: {
      // Two iovecs (halves of the buffer) to exercise scatter reads.
      iovec iov[2];
      std::size_t h = n > 1 ? n / 2 : n;
      iov[0] = {b, h};
      iov[1] = {b + h, n - h};
      int cnt = n > 1 ? 2 : 1;
      if (r == Reader::readv) return ::readv(w.fd, iov, cnt);
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = std::size_t(cnt);
      return ::recvmsg(w.fd, &mh, 0);
    }
    case Reader::mixed: break;
  }
  return -1;
}

ReqResult run_request(Worker& w, std::int64_t req) {
  ReqResult res;
  std::string err;
  if (w.fd < 0 && !connect_worker(w, err)) {
    res.error = err;
    return res;
  }
  // Send the request in one write().
  ssize_t n;
  do {
    n = ::write(w.fd, w.request.data(), w.request.size());
  } while (n < 0 && errno == EINTR);
  res.request_sent_ns = it::mono_ns();
  if (g_log.enabled()) {
    std::string& l = w.line;
    l = "{\"type\":\"write\",\"conn\":";
    common_fields(w, req);
    l += ",\"mono_ns\":";
    it::append_int(l, res.request_sent_ns);
    l += ",\"bytes\":";
    it::append_int(l, n < 0 ? 0 : n);
    l += ",\"fd\":";
    it::append_int(l, w.fd);
    l += ",\"sock\":";
    it::append_int(l, w.sock);
    l += ",\"local_port\":";
    it::append_int(l, w.local_port);
    l += '}';
    g_log.append(l);
  }
  if (n != ssize_t(w.request.size())) {
    res.error = n < 0 ? std::string("write: ") + std::strerror(errno) : "short request write";
    return res;
  }
  if (g_cfg.connection == "half-close") ::shutdown(w.fd, SHUT_WR);

  ResponseParser p;
  p.reset();
  std::int64_t read_ts = 0;
  auto on_event = [&](const SseEvent& e, std::uint64_t end_off) {
    std::string kind = classify(e);
    bool content = is_content(kind);
    if (content) {
      ++res.content_events;
      if (!res.first_content_ns) res.first_content_ns = read_ts;
    }
    res.last_event_ns = read_ts;
    if (g_log.enabled()) {
      std::string& l = w.line;
      l = "{\"type\":\"event\",\"conn\":";
      common_fields(w, req);
      l += ",\"event_index\":";
      it::append_int(l, res.events);
      l += ",\"mono_ns\":";
      it::append_int(l, read_ts);
      l += ",\"kind\":";
      it::append_json_string(l, kind);
      l += ",\"bytes\":";
      it::append_int(l, e.bytes);
      l += ",\"end_offset\":";
      it::append_int(l, end_off);
      l += ",\"fd\":";
      it::append_int(l, w.fd);
      l += '}';
      g_log.append(l);
    }
    ++res.events;
  };

  // Bytes left over from the previous response (should not happen without pipelining).
  if (!w.leftover.empty()) {
    std::string lo;
    lo.swap(w.leftover);
    read_ts = it::mono_ns();
    std::size_t used = p.feed(lo.data(), lo.size(), w.offset - lo.size(), on_event);
    if (used < lo.size()) w.leftover = lo.substr(used);
  }
  const double delay_ms = g_cfg.read_delay_ms;
  bool stalled = false;
  while (p.state() != ResponseParser::State::done && p.state() != ResponseParser::State::error) {
    Reader r = g_cfg.reader;
    if (r == Reader::mixed) {
      static const Reader kRot[] = {Reader::read, Reader::recv, Reader::recvmsg, Reader::readv};
      r = kRot[w.rot++ % 4];
    }
    n = do_read(w, r);
    read_ts = it::mono_ns();  // immediately after the read returned
    int e = n < 0 ? errno : 0;
    if (n < 0 && e == EINTR) continue;
    if (n > 0) w.offset += std::uint64_t(n);
    log_read(w, req, read_ts, n, reader_name(r), e);
    if (n < 0) {
      res.error = e == EAGAIN || e == EWOULDBLOCK ? "read timeout" : std::string("read: ") + std::strerror(e);
      break;
    }
    if (n == 0) {
      if (!p.eof()) res.error = "connection closed mid-response";
      break;
    }
    std::uint64_t start = w.offset - std::uint64_t(n);
    std::size_t used = p.feed(w.buf.data(), std::size_t(n), start, on_event);
    if (used < std::size_t(n)) w.leftover.assign(w.buf.data() + used, std::size_t(n) - used);
    if (g_cfg.stall_after > 0 && !stalled && res.events >= g_cfg.stall_after &&
        p.state() != ResponseParser::State::done) {
      stalled = true;
      const std::int64_t t0 = it::mono_ns();
      it::sleep_ns(std::int64_t(g_cfg.stall_ms * 1e6));
      if (g_log.enabled()) {  // ground truth for client_read / backpressure tests
        std::string& l = w.line;
        l = "{\"type\":\"stall\",\"conn\":";
        common_fields(w, req);
        l += ",\"after_events\":";
        it::append_int(l, res.events);
        l += ",\"start_ns\":";
        it::append_int(l, t0);
        l += ",\"end_ns\":";
        it::append_int(l, it::mono_ns());
        l += ",\"fd\":";
        it::append_int(l, w.fd);
        l += '}';
        g_log.append(l);
      }
    }
    if (g_cfg.abort_after > 0 && res.events >= g_cfg.abort_after && p.state() != ResponseParser::State::done) {
      res.aborted = true;
      break;
    }
    if (delay_ms > 0 && p.state() != ResponseParser::State::done) it::sleep_ns(std::int64_t(delay_ms * 1e6));
  }
  if (p.state() == ResponseParser::State::error && res.error.empty()) res.error = "protocol: " + p.error();
  res.status = p.status;
  res.bytes = p.body_bytes;
  res.ok = res.error.empty() && (p.state() == ResponseParser::State::done || res.aborted);
  if (!res.ok || res.aborted || p.close_after || g_cfg.connection == "new" || g_cfg.connection == "half-close") {
    ::close(w.fd);
    w.fd = -1;
  }
  return res;
}

void log_summary(Worker& w, std::int64_t req, const ReqResult& r) {
  if (!g_log.enabled()) return;
  std::string& l = w.line;
  l = "{\"type\":\"summary\",\"conn\":";
  common_fields(w, req);
  l += ",\"status\":";
  it::append_int(l, r.status);
  l += ",\"events\":";
  it::append_int(l, r.events);
  l += ",\"content_events\":";
  it::append_int(l, r.content_events);
  l += ",\"ttft_ms\":";
  if (r.first_content_ns) it::append_double(l, double(r.first_content_ns - r.request_sent_ns) / 1e6, 3);
  else l += "null";
  l += ",\"request_sent_ns\":";
  it::append_int(l, r.request_sent_ns);
  l += ",\"first_content_ns\":";
  it::append_int(l, r.first_content_ns);
  l += ",\"last_event_ns\":";
  it::append_int(l, r.last_event_ns);
  l += ",\"body_bytes\":";
  it::append_int(l, r.bytes);
  l += r.aborted ? ",\"aborted\":true" : ",\"aborted\":false";
  l += ",\"ok\":";
  l += r.ok ? "true" : "false";
  if (!r.error.empty()) {
    l += ",\"error\":";
    it::append_json_string(l, r.error);
  }
  l += '}';
  g_log.append(l);
}

void* worker_thread(void* arg) {
  Worker& w = *static_cast<Worker*>(arg);
  w.buf.resize(std::size_t(std::max<std::int64_t>(1, g_cfg.read_size)));
  w.request = build_request();
  // Paced: worker w's request k starts at t0 + (k * concurrency + w) / rate.
  const std::int64_t t0 = it::mono_ns();
  for (std::int64_t req = 0; req < g_cfg.requests; ++req) {
    if (g_cfg.rate > 0)
      it::sleep_until_ns(t0 + std::int64_t(double(req * g_cfg.concurrency + w.conn) * 1e9 / g_cfg.rate));
    ReqResult r = run_request(w, req);
    log_summary(w, req, r);
    std::lock_guard<std::mutex> lk(g_res_mu);
    g_events += r.events;
    g_content_events += r.content_events;
    g_bytes += r.bytes;
    if (!r.ok) {
      ++g_errors;
      if (g_errors <= 5) std::fprintf(stderr, "sample-client: conn %lld req %lld: %s\n", (long long)w.conn,
                                      (long long)req, r.error.c_str());
      if (r.status == 0) {
        ++g_conn_errors;
        break;  // connection-level failure: stop this worker
      }
    } else if (r.status != g_cfg.expect_status) {
      ++g_bad_status;
    } else {
      ++g_ok;
    }
    if (r.first_content_ns) g_ttfts.push_back(double(r.first_content_ns - r.request_sent_ns) / 1e6);
  }
  if (w.fd >= 0) ::close(w.fd);
  return nullptr;
}

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  std::size_t i = std::size_t(std::ceil(q * double(v.size())));
  if (i > 0) --i;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

// The server's address: IPv4 unless the host is an IPv6 literal ("localhost"
// must not become ::1 while the server listens on 127.0.0.1).
bool resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = host.find(':') != std::string::npos ? AF_INET6 : AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0 || !res) {
    std::fprintf(stderr, "sample-client: resolve %s: %s\n", host.c_str(), gai_strerror(rc));
    return false;
  }
  std::memcpy(&g_addr, res->ai_addr, res->ai_addrlen);
  g_addrlen = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

// A unix socket path ("@name": abstract) as the address to connect to.
bool unix_address(const std::string& path) {
  sockaddr_un a{};
  if (path.empty() || path.size() >= sizeof a.sun_path) {
    std::fprintf(stderr, "sample-client: bad --unix path '%s'\n", path.c_str());
    return false;
  }
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  const bool abstract = path.front() == '@';
  if (abstract) a.sun_path[0] = '\0';
  std::memcpy(&g_addr, &a, sizeof a);
  g_addrlen = socklen_t(offsetof(sockaddr_un, sun_path) + path.size() + (abstract ? 0 : 1));
  return true;
}

int main(int argc, char** argv) {
  it::Args a(kUsage);
  for (const char* o : {"host", "port", "unix", "path", "model", "tokens", "concurrency", "requests", "reader", "read-size",
                        "read-delay-ms", "rcvbuf", "connection", "abort-after", "rate", "stall-after", "stall-ms", "accept-encoding", "prompt-bytes", "prompt",
                        "authorization", "expect-status", "timeout-ms", "log"})
    a.option(o);
  for (const char* f : {"anthropic", "no-stream", "usage"}) a.flag(f);
  if (!a.parse(argc, argv)) return 2;
  Config& c = g_cfg;
  c.host = a.str("host", c.host);
  c.port = int(a.integer("port", c.port));
  c.anthropic = a.has("anthropic");
  c.path = a.str("path", c.anthropic ? "/v1/messages" : c.path);
  c.model = a.str("model", c.model);
  c.tokens = a.integer("tokens", -1);
  c.concurrency = std::max<std::int64_t>(1, a.integer("concurrency", 1));
  c.requests = std::max<std::int64_t>(1, a.integer("requests", 1));
  c.connection = a.choice("connection", "keep-alive", {"keep-alive", "close", "new", "half-close"});
  c.abort_after = std::max<std::int64_t>(0, a.integer("abort-after", 0));
  c.rate = std::max(0.0, a.number("rate", 0));
  std::string r = a.choice("reader", "read", {"read", "recv", "recvmsg", "readv", "mixed"});
  c.reader = r == "read"      ? Reader::read
             : r == "recv"    ? Reader::recv
             : r == "recvmsg" ? Reader::recvmsg
             : r == "readv"   ? Reader::readv
                              : Reader::mixed;
  c.read_size = std::max<std::int64_t>(1, a.integer("read-size", c.read_size));
  c.read_delay_ms = a.number("read-delay-ms", 0);
  c.stall_after = a.integer("stall-after", 0);
  c.stall_ms = a.number("stall-ms", 0);
  c.accept_encoding = a.str("accept-encoding", "");
  c.rcvbuf = a.integer("rcvbuf", 0);
  c.stream = !a.has("no-stream");
  c.usage = a.has("usage");
  c.prompt_bytes = a.integer("prompt-bytes", 0);
  c.prompt = a.str("prompt", c.prompt);
  c.authorization = a.str("authorization", c.anthropic ? "sk-ant-test" : c.authorization);
  c.expect_status = int(a.integer("expect-status", 200));
  c.timeout_ms = std::max<std::int64_t>(1, a.integer("timeout-ms", c.timeout_ms));
  c.log_path = a.str("log", "");

  if (a.has("unix")) {
    if (!unix_address(a.str("unix", ""))) return 2;
  } else if (!resolve(c.host, c.port)) {
    return 1;
  }

  it::raise_nofile_limit();

  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // precise --read-delay-ms sleeps
  sigset_t sigs = it::block_control_signals();
  if (!g_log.open(c.log_path)) return 1;
  it::start_signal_thread(sigs, [](int sig) {
    if (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGHUP) return;
    g_log.close();  // flush what we have, then die
    std::fprintf(stderr, "sample-client: interrupted\n");
    _exit(130);
  });

  std::int64_t t0 = it::mono_ns();
  std::vector<Worker> workers(std::size_t(c.concurrency));
  std::vector<pthread_t> threads;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 512 * 1024);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    workers[i].conn = std::int64_t(i);
    pthread_t th;
    if (int e = pthread_create(&th, &attr, worker_thread, &workers[i]); e != 0) {
      std::fprintf(stderr, "sample-client: pthread_create: %s\n", std::strerror(e));
      std::lock_guard<std::mutex> lk(g_res_mu);
      ++g_conn_errors;
      ++g_errors;
      continue;
    }
    threads.push_back(th);
  }
  for (pthread_t th : threads) pthread_join(th, nullptr);
  double elapsed = double(it::mono_ns() - t0) / 1e9;
  g_log.close();

  auto fmt_ms = [](double v) {
    char b[32];
    if (std::isnan(v)) return std::string("-");
    std::snprintf(b, sizeof b, "%.3f", v);
    return std::string(b);
  };
  std::fprintf(stderr,
               "sample-client: conns=%lld requests=%lld ok=%lld errors=%lld bad_status=%lld events=%lld "
               "content_events=%lld body_bytes=%lld ttft_ms_p50=%s ttft_ms_p99=%s elapsed_s=%.3f\n",
               (long long)c.concurrency, (long long)(c.concurrency * c.requests), (long long)g_ok,
               (long long)g_errors, (long long)g_bad_status, (long long)g_events, (long long)g_content_events,
               (long long)g_bytes, fmt_ms(percentile(g_ttfts, 0.5)).c_str(), fmt_ms(percentile(g_ttfts, 0.99)).c_str(),
               elapsed);
  if (g_errors > 0) return 1;
  if (g_bad_status > 0) return 3;
  return 0;
}
