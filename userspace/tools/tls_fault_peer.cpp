// tls-fault-peer: one TLS stream over libssl with the library calls Python's
// ssl module cannot make, for the TLS fault tests.
//
// server: accepts one connection, reads one HTTP request, answers with an
// OpenAI-style SSE stream (chunked), one SSL_write per event, in one of these
// ways:
//   partial       non-blocking socket, small SO_SNDBUF, SSL_MODE_ENABLE_PARTIAL_WRITE
//                 and 512-byte records: SSL_write returns the records that
//                 fitted, the rest is written next
//   want-write    non-blocking socket, small SO_SNDBUF, no partial writes:
//                 SSL_ERROR_WANT_WRITE, the same buffer offered again
//   key-update    TLS 1.3, SSL_key_update every --key-update-every events
//                 (--key-update-requested: the peer must update its keys too)
//   no-renegotiation  TLS 1.2 at most, SSL_OP_NO_RENEGOTIATION (a client's
//                 renegotiation is refused)
// client: TLS 1.2, sends one request, reads the stream; after
// --renegotiate-after content events asks for a renegotiation (SSL_renegotiate)
// and reads on as long as the library lets it.
//
// Output: one JSON line on stdout at the end: what was written / read, how
// many writes were partial, how many were retried, what the library said.
// Only sizes and counts, never payload text.
//
// Build: g++ -std=c++20 -O2 -g -Wall -Wextra userspace/tools/tls_fault_peer.cpp -o tls-fault-peer -lssl -lcrypto

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include "tool_common.h"

namespace it = infertap::tools;

namespace {

const char* kUsage = R"(usage: tls-fault-peer server|client [options]
  --port N                  server: listen on 127.0.0.1:N; client: connect to it
  --cert F --key F          server certificate and key (PEM)
  --mode M                  server: partial|want-write|key-update|no-renegotiation (default partial)
  --events N                content events (default 40)
  --event-bytes B           filler bytes in each event's content text (default 2000)
  --itl-ms MS               pause between events (default 2)
  --sndbuf B                server socket's SO_SNDBUF for partial/want-write (default 4096)
  --key-update-every N      key-update: a key update every N events (default 5)
  --key-update-requested    key-update: ask the peer to update its keys too
  --renegotiate-after N     client: ask for a renegotiation after N content events (default 5)
)";

struct Counts {
  std::int64_t writes = 0;          // SSL_write calls that moved bytes
  std::int64_t partial_writes = 0;  // ... fewer than offered
  std::int64_t want_write = 0;      // SSL_ERROR_WANT_WRITE returns (the same buffer offered again)
  std::int64_t key_updates = 0;
  std::int64_t body_bytes = 0;      // de-chunked response body written or read
  std::int64_t content_events = 0;  // written or read
  std::int64_t renegotiations_asked = 0;    // client: SSL_renegotiate calls the library took
  std::int64_t renegotiation_pending = 0;   // client: 1 when the library still waits for it (refused)
  std::string error;                // the library's reason when the stream ended early
};

std::string ssl_error_text() {
  const unsigned long e = ERR_get_error();
  if (!e) return "";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tls-fault-peer: %s %s\n", what.c_str(), ssl_error_text().c_str());
  std::exit(1);
}

void wait_fd(int fd, short events) {
  pollfd p{fd, events, 0};
  ::poll(&p, 1, 1000);
}

// Writes all of `data`, as the mode asks; false when the connection failed.
bool write_all(SSL* ssl, int fd, std::string_view data, Counts& c) {
  std::size_t done = 0;
  while (done < data.size()) {
    const std::string_view rest = data.substr(done);
    const int n = SSL_write(ssl, rest.data(), static_cast<int>(rest.size()));
    if (n > 0) {
      ++c.writes;
      if (static_cast<std::size_t>(n) < rest.size()) ++c.partial_writes;
      done += static_cast<std::size_t>(n);
      continue;
    }
    const int err = SSL_get_error(ssl, n);
    if (err == SSL_ERROR_WANT_WRITE) {
      ++c.want_write;
      wait_fd(fd, POLLOUT);
    } else if (err == SSL_ERROR_WANT_READ) {
      wait_fd(fd, POLLIN);
    } else {
      c.error = "SSL_write: " + ssl_error_text();
      return false;
    }
  }
  return true;
}

std::string chunk(std::string_view text) {
  char head[32];
  std::snprintf(head, sizeof head, "%zx\r\n", text.size());
  return head + std::string(text) + "\r\n";
}

std::string sse_event(int index, std::string_view delta, std::string_view finish) {
  return "data: {\"id\":\"chatcmpl-fault-" + std::to_string(index) +
         "\",\"object\":\"chat.completion.chunk\",\"created\":" + std::to_string(it::unix_seconds()) +
         ",\"model\":\"tls-fault-peer\",\"choices\":[{\"index\":0,\"delta\":" + std::string(delta) +
         ",\"logprobs\":null,\"finish_reason\":" + std::string(finish) + "}]}\n\n";
}

// Reads one request (head, and a body of Content-Length bytes).
bool read_request(SSL* ssl, int fd) {
  std::string buf;
  char tmp[4096];
  std::size_t body_at = std::string::npos, length = 0;
  while (body_at == std::string::npos || buf.size() < body_at + length) {
    const int n = SSL_read(ssl, tmp, sizeof tmp);
    if (n <= 0) {
      const int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        wait_fd(fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT);
        continue;
      }
      return false;
    }
    buf.append(tmp, static_cast<std::size_t>(n));
    if (body_at == std::string::npos && (body_at = buf.find("\r\n\r\n")) != std::string::npos) {
      body_at += 4;
      const std::size_t cl = buf.find("Content-Length: ");
      if (cl != std::string::npos && cl < body_at) length = std::strtoul(buf.c_str() + cl + 16, nullptr, 10);
    }
  }
  return true;
}

void serve_stream(SSL* ssl, int fd, const it::Args& args, const std::string& mode, Counts& c) {
  const int events = static_cast<int>(args.integer("events", 40));
  const std::string filler(static_cast<std::size_t>(args.integer("event-bytes", 2000)), 'x');
  const std::int64_t itl_ns = static_cast<std::int64_t>(args.number("itl-ms", 2) * 1e6);
  const int update_every = static_cast<int>(args.integer("key-update-every", 5));
  const int update_type = args.has("key-update-requested") ? SSL_KEY_UPDATE_REQUESTED : SSL_KEY_UPDATE_NOT_REQUESTED;
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  if (!write_all(ssl, fd, head, c)) return;
  std::vector<std::string> body = {sse_event(0, R"({"role":"assistant","content":""})", "null")};
  for (int i = 0; i < events; ++i)
    body.push_back(sse_event(i + 1, "{\"content\":\" tok" + std::to_string(i) + filler + "\"}", "null"));
  body.push_back(sse_event(events + 1, "{}", "\"stop\""));
  body.push_back("data: [DONE]\n\n");
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (mode == "key-update" && i > 1 && (i - 1) % static_cast<std::size_t>(update_every) == 0) {
      if (SSL_key_update(ssl, update_type) != 1) die("SSL_key_update");
      ++c.key_updates;  // sent with the next write
    }
    if (!write_all(ssl, fd, chunk(body[i]), c)) return;
    c.body_bytes += static_cast<std::int64_t>(body[i].size());
    if (i >= 1 && i <= static_cast<std::size_t>(events)) ++c.content_events;
    it::sleep_ns(itl_ns);
  }
  write_all(ssl, fd, "0\r\n\r\n", c);
}

SSL_CTX* server_context(const it::Args& args, const std::string& mode) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) die("SSL_CTX_new");
  if (SSL_CTX_use_certificate_chain_file(ctx, args.str("cert", "").c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, args.str("key", "").c_str(), SSL_FILETYPE_PEM) != 1)
    die("loading --cert/--key");
  if (mode == "key-update") SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  if (mode == "no-renegotiation") {
    SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  }
  if (mode == "partial") {
    // A partial write returns whole records written: small records (512 B)
    // let one event's write stop part-way when the socket buffer is full.
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE);
    SSL_CTX_set_max_send_fragment(ctx, 512);
  }
  return ctx;
}

int listen_on(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 4) != 0) die("bind/listen");
  return fd;
}

void print_counts(const Counts& c) {
  const std::pair<const char*, std::int64_t> fields[] = {
      {"writes", c.writes},         {"partial_writes", c.partial_writes}, {"want_write", c.want_write},
      {"key_updates", c.key_updates}, {"body_bytes", c.body_bytes},       {"content_events", c.content_events},
      {"renegotiations_asked", c.renegotiations_asked}, {"renegotiation_pending", c.renegotiation_pending}};
  std::string out = "{";
  for (const auto& [name, value] : fields) {
    out += "\"" + std::string(name) + "\":";
    it::append_int(out, value);
    out += ",";
  }
  out += "\"error\":";
  it::append_json_string(out, c.error);
  std::printf("%s}\n", out.c_str());
  std::fflush(stdout);
}

int run_server(const it::Args& args) {
  const std::string mode = args.choice("mode", "partial", {"partial", "want-write", "key-update", "no-renegotiation"});
  SSL_CTX* ctx = server_context(args, mode);
  const int listener = listen_on(static_cast<int>(args.integer("port", 0)));
  std::printf("listening\n");
  std::fflush(stdout);
  const int fd = ::accept(listener, nullptr, nullptr);
  if (fd < 0) die("accept");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (mode == "partial" || mode == "want-write") {
    const int sndbuf = static_cast<int>(args.integer("sndbuf", 4096));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  Counts c;
  for (int rc; (rc = SSL_accept(ssl)) != 1;) {
    const int err = SSL_get_error(ssl, rc);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) die("SSL_accept");
    wait_fd(fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT);
  }
  if (read_request(ssl, fd)) serve_stream(ssl, fd, args, mode, c);
  else c.error = "no request";
  SSL_shutdown(ssl);
  print_counts(c);
  SSL_free(ssl);
  ::close(fd);
  SSL_CTX_free(ctx);
  return 0;
}

// Counts the content events in what has been read so far (de-chunked body).
int content_events_in(const std::string& body) {
  int n = 0;
  for (std::size_t at = 0; (at = body.find("{\"content\":\" tok", at)) != std::string::npos; ++at) ++n;
  return n;
}

int run_client(const it::Args& args) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);  // renegotiation is TLS 1.2's
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(args.integer("port", 0)));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  if (SSL_connect(ssl) != 1) die("SSL_connect");
  const std::string body = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                              "application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  Counts c;
  if (!write_all(ssl, fd, request, c)) die("sending the request");
  const int renegotiate_after = static_cast<int>(args.integer("renegotiate-after", 5));
  std::string received;  // the raw response (chunk framing left in: only events are counted)
  bool asked = false;
  char buf[16384];
  while (true) {
    const int n = SSL_read(ssl, buf, sizeof buf);
    if (n <= 0) {
      if (SSL_get_error(ssl, n) != SSL_ERROR_ZERO_RETURN) c.error = "SSL_read: " + ssl_error_text();
      break;
    }
    received.append(buf, static_cast<std::size_t>(n));
    c.content_events = content_events_in(received);
    if (!asked && c.content_events >= renegotiate_after) {
      asked = true;
      if (SSL_renegotiate(ssl) != 1) c.error = "SSL_renegotiate: " + ssl_error_text();
    }
  }
  c.renegotiations_asked = SSL_num_renegotiations(ssl);
  c.renegotiation_pending = SSL_renegotiate_pending(ssl);
  print_counts(c);
  SSL_free(ssl);
  ::close(fd);
  SSL_CTX_free(ctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) != "server" && std::string(argv[1]) != "client")) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  it::Args args(kUsage);
  for (const char* o : {"port", "cert", "key", "mode", "events", "event-bytes", "itl-ms", "sndbuf", "key-update-every",
                        "renegotiate-after"})
    args.option(o);
  args.flag("key-update-requested");
  if (!args.parse(argc - 1, argv + 1)) return 2;
  signal(SIGPIPE, SIG_IGN);
  return std::string(argv[1]) == "server" ? run_server(args) : run_client(args);
}
