// Query API of infertapd: a unix stream socket, one JSON request per line,
// one JSON response per line (docs/cli.md). Served on its own threads from a
// RecordStore; the `infertap` CLI is its client.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon/store.h"

namespace infertap::daemon {

inline constexpr const char* kDefaultSocketPath = "/run/infertap/infertap.sock";
inline constexpr int kApiVersion = 1;

struct ApiOptions {
  std::string socket_path = kDefaultSocketPath;
  std::size_t max_request_bytes = 64 * 1024;  // longer request lines are refused
  std::size_t max_clients = 32;               // concurrent connections (watchers included); more are
                                              // answered "infertapd is busy: N connections; try again"
  // A new connection that sends no complete request for this long is
  // answered an error and closed: the CLI sends its request at once, so
  // max_clients idle connections lock it out for this long at most. 0 = never.
  std::chrono::milliseconds first_request_timeout{2'000};
  // The same between the requests of a connection that has sent one, and a
  // send that cannot progress for this long (a watcher that stopped reading)
  // ends its connection. 0 = never.
  std::chrono::milliseconds idle_timeout{30'000};
  // `streams --live` and `top` wait up to this long for a view of the streams
  // in flight newer than the request (the pipeline thread publishes one on its
  // next drain tick when asked: RecordStore::ask_live). 0 = answer with the
  // view as it is.
  std::chrono::milliseconds live_wait{0};
  // Fields merged into the `status` response (version, attach notes, counters,
  // ...). Called on an API thread: it must be thread-safe. May be empty.
  std::function<nlohmann::json()> status;
  // The `alerts` response (degradation alerts and abuse signals); empty = the
  // command answers that detection is off. Called on an API thread: thread-safe.
  std::function<nlohmann::json()> alerts;
};

// Listens on the socket (mode 0600, parent directory created 0755; a stale
// socket is replaced; refuses to start if a server answers on it).
// One thread accepts; each connection has its own thread. Stops on stop() or
// destruction: every connection (watchers included) is closed and joined.
class ApiServer {
 public:
  ApiServer(RecordStore& store, ApiOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  void start();  // throws std::runtime_error with a message for the operator
  void stop();
  const std::string& socket_path() const { return options_.socket_path; }

  // One request line -> one JSON response line (no newline). `watch` is only served on a
  // connection (answers an error here). Public for tests and embedding.
  std::string handle(std::string_view request_line) const;

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void accept_loop();
  void serve(Connection& conn);
  void watch(int fd, const nlohmann::json& request);
  void reap(bool all);

  RecordStore& store_;
  ApiOptions options_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex conns_mu_;
  std::list<std::unique_ptr<Connection>> conns_;
  std::uint64_t started_ns_ = 0;
  std::uint64_t socket_ino_ = 0, socket_dev_ = 0;  // the socket file we placed (removed at stop if still ours)
};

// ------------------------------------------------------------------ client

enum class ApiErrorKind { not_running, permission_denied, protocol, io };

struct ApiError : std::runtime_error {
  ApiError(ApiErrorKind k, const std::string& message) : std::runtime_error(message), kind(k) {}
  ApiErrorKind kind;
};

// Connection to a running infertapd. Throws ApiError.
class ApiClient {
 public:
  // not_running: no socket / nothing listening; permission_denied: EACCES/EPERM.
  explicit ApiClient(const std::string& socket_path);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // Sends one request and reads its one-line response. A daemon that refused
  // the connection (busy, idle) has said why before closing it: that answer
  // is returned, not "send: Broken pipe".
  nlohmann::json request(const nlohmann::json& req);
  void send_line(std::string_view line);
  // Next line (no newline); nullopt at end of stream.
  std::optional<std::string> read_line();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace infertap::daemon
