#include "daemon/api.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/clock.h"
#include "output/format.h"
#include "output/svg/stream_svg.h"

namespace infertap::daemon {
namespace {

using json = nlohmann::json;

std::string errno_text(int err) { return std::strerror(err); }

bool fill_addr(const std::string& path, sockaddr_un& addr) {
  addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return true;
}

// Connected fd, or -errno.
int connect_unix(const std::string& path) {
  sockaddr_un addr;
  if (!fill_addr(path, addr)) return -ENAMETOOLONG;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool send_line(int fd, std::string line) {
  line.push_back('\n');
  return send_all(fd, line);
}

using output::dump;

std::string error_response(const std::string& message) { return dump(json{{"ok", false}, {"error", message}}); }

enum class ReadResult { line, eof, too_long, timeout };

// Reads one '\n'-terminated line into `line` (without it), buffering the rest.
// `timeout` (0 = none) bounds the wait for the line to complete, counted from
// the call: a client trickling a byte at a time cannot hold the connection.
ReadResult read_line(int fd, std::string& buffer, std::string& line, std::size_t max,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const std::size_t nl = buffer.find('\n');
    if (nl != std::string::npos) {
      if (nl > max) return ReadResult::too_long;
      line.assign(buffer, 0, nl);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      buffer.erase(0, nl + 1);
      return ReadResult::line;
    }
    if (buffer.size() > max) return ReadResult::too_long;
    if (timeout.count() > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return ReadResult::timeout;
      pollfd p{fd, POLLIN, 0};
      const int ready = poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, INT32_MAX)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) return ReadResult::timeout;
    }
    char chunk[4096];
    const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!buffer.empty() && n == 0) {  // last line without newline
        line = std::move(buffer);
        buffer.clear();
        return ReadResult::line;
      }
      return ReadResult::eof;
    }
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

// `show`: one kept record, as JSON (the record with its timeline when kept)
// or, with "format":"svg", as its picture (docs/cli.md).
std::string show(const RecordStore& store, const json& request) {
  const json id = request.value("id", json());
  if (!id.is_string()) return error_response("\"show\" needs \"id\" (a stream_id such as \"12-0\")");
  const json format = request.value("format", json("json"));
  if (format != "json" && format != "svg") return error_response("\"format\" must be \"json\" or \"svg\"");
  const auto found = store.find(id.get<std::string>());
  if (!found) {
    return error_response("no stream " + id.get<std::string>() + " among the last " + std::to_string(store.size()) +
                          " finished streams kept");
  }
  if (format == "json") {
    return std::string("{\"ok\":true,\"timeline_kept\":") + (found->timeline_kept ? "true" : "false") +
           ",\"record\":" + found->line + "}";
  }
  if (!found->timeline_kept) {
    return error_response("stream " + id.get<std::string>() +
                          " has no timeline kept (the oldest timelines are released past the store's budget): "
                          "nothing to draw");
  }
  const json record = json::parse(found->line, nullptr, false);
  if (!record.is_object()) return error_response("the kept record of stream " + id.get<std::string>() + " is not JSON");
  return dump(json{{"ok", true}, {"timeline_kept", true}, {"svg", output::render_stream_svg(record)}});
}

}  // namespace

// ------------------------------------------------------------------ server

ApiServer::ApiServer(RecordStore& store, ApiOptions options) : store_(store), options_(std::move(options)) {}

ApiServer::~ApiServer() { stop(); }

void ApiServer::start() {
  if (listen_fd_ >= 0) return;
  const std::string& path = options_.socket_path;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  sockaddr_un addr;
  if (!fill_addr(tmp, addr)) {
    throw std::runtime_error("socket path too long (max " + std::to_string(sizeof addr.sun_path - 16) + " bytes): " + path);
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) throw std::runtime_error("cannot create " + parent.string() + ": " + ec.message());
  }
  struct stat st{};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) throw std::runtime_error(path + " exists and is not a socket: refusing to replace it");
    const int fd = connect_unix(path);
    if (fd >= 0) {
      close(fd);
      throw std::runtime_error("another infertapd is already serving " + path);
    }
    // Nothing answers: a stale socket, replaced below by rename().
  }
  // Bind under a temporary name, restrict it, then move it into place: the
  // socket is never reachable with a wider mode.
  unlink(tmp.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket: " + errno_text(errno));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || chmod(tmp.c_str(), 0600) != 0 ||
      listen(fd, 64) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    throw std::runtime_error("cannot listen on " + path + ": " + errno_text(err));
  }
  if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    close(fd);
    unlink(path.c_str());
    throw std::runtime_error("pipe: " + errno_text(err));
  }
  struct stat placed{};
  if (lstat(path.c_str(), &placed) == 0) {
    socket_ino_ = placed.st_ino;
    socket_dev_ = placed.st_dev;
  }
  listen_fd_ = fd;
  stopping_ = false;
  started_ns_ = base::monotonic_ns();
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void ApiServer::stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  const char byte = 0;
  [[maybe_unused]] const ssize_t n = write(wake_pipe_[1], &byte, 1);
  if (accept_thread_.joinable()) accept_thread_.join();
  reap(true);
  // Remove the socket only if it is still ours.
  struct stat on_disk{};
  if (lstat(options_.socket_path.c_str(), &on_disk) == 0 && on_disk.st_ino == socket_ino_ && on_disk.st_dev == socket_dev_) {
    unlink(options_.socket_path.c_str());
  }
  close(listen_fd_);
  listen_fd_ = -1;
  close(wake_pipe_[0]);
  close(wake_pipe_[1]);
  wake_pipe_[0] = wake_pipe_[1] = -1;
}

void ApiServer::reap(bool all) {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard lock(conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all) shutdown((*it)->fd, SHUT_RDWR);  // wakes reads and writes
      if (all || (*it)->done) {
        finished.splice(finished.end(), conns_, it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& conn : finished) {
    if (conn->thread.joinable()) conn->thread.join();
    close(conn->fd);
  }
}

void ApiServer::accept_loop() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    const int ready = poll(fds, 2, 1000);
    if (stopping_) break;
    reap(false);
    if (ready <= 0 || !(fds[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(conns_mu_);
    if (conns_.size() >= options_.max_clients) {
      send_line(fd, error_response("infertapd is busy: " + std::to_string(conns_.size()) + " connections; try again"));
      close(fd);
      continue;
    }
    if (options_.idle_timeout.count() > 0) {
      // Sends to a client that stopped reading fail after the timeout (EAGAIN).
      const auto ms = options_.idle_timeout.count();
      timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    Connection& ref = *conn;
    conns_.push_back(std::move(conn));
    ref.thread = std::thread([this, &ref] {
      serve(ref);
      shutdown(ref.fd, SHUT_RDWR);  // the peer sees EOF now; the fd is closed when reaped
      ref.done = true;
    });
  }
}

void ApiServer::serve(Connection& conn) {
  std::string buffer, line;
  bool first = true;
  while (!stopping_) {
    const std::chrono::milliseconds timeout = first ? options_.first_request_timeout : options_.idle_timeout;
    const ReadResult r = read_line(conn.fd, buffer, line, options_.max_request_bytes, timeout);
    first = false;
    if (r == ReadResult::eof) return;
    if (r == ReadResult::timeout) {
      send_line(conn.fd, error_response("idle for " + std::to_string(timeout.count()) +
                                        " ms without a complete request: closing"));
      return;
    }
    if (r == ReadResult::too_long) {
      send_line(conn.fd, error_response("request too large (max " + std::to_string(options_.max_request_bytes) + " bytes)"));
      return;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const json request = json::parse(line, nullptr, false);
    if (request.is_object() && request.value("cmd", json()).is_string() && request["cmd"] == "watch") {
      watch(conn.fd, request);
      return;
    }
    if (!send_line(conn.fd, handle(line))) return;
  }
}

void ApiServer::watch(int fd, const json& request) {
  const json timeline = request.value("timeline", json(false));
  if (!timeline.is_boolean()) {
    send_line(fd, error_response("\"timeline\" must be a boolean"));
    return;
  }
  SubscriptionPtr sub = store_.subscribe(timeline.get<bool>());
  if (!send_line(fd, dump(json{{"ok", true}, {"watch", true}, {"timeline", timeline}}))) return;
  while (!stopping_) {
    // The client ends a watch by closing its end; anything it sends is ignored.
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0) {
      if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) break;
      char scratch[512];
      const ssize_t n = recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    Subscription::Line line = sub->pop(std::chrono::milliseconds(200));
    if (const std::uint64_t dropped = sub->take_dropped()) {
      if (!send_line(fd, dump(json{{"type", "watch_dropped"}, {"records", dropped}}))) break;
    }
    if (line && !send_line(fd, *line)) break;
  }
  sub->close();
}

std::string ApiServer::handle(std::string_view request_line) const {
  const json request = json::parse(request_line, nullptr, false);
  if (request.is_discarded()) return error_response("malformed request: not JSON");
  if (!request.is_object()) return error_response("malformed request: expected a JSON object");
  const json cmd_value = request.value("cmd", json());
  if (!cmd_value.is_string()) return error_response("malformed request: missing \"cmd\"");
  const std::string cmd = cmd_value.get<std::string>();

  if (cmd == "status") {
    json out = json::object();
    if (options_.status) {
      json extra = options_.status();
      if (extra.is_object()) out.update(extra);
    }
    if (!out.contains("uptime_s")) out["uptime_s"] = static_cast<double>(base::monotonic_ns() - started_ns_) / 1e9;
    out["api_version"] = kApiVersion;
    out["schema_version"] = output::kSchemaVersion;
    out["socket"] = options_.socket_path;
    out["store"] = store_.counters_json();
    out["ok"] = true;
    return dump(out);
  }
  if (cmd == "streams") {
    const json live = request.value("live", json(false));
    const json limit = request.value("limit", json(50));
    if (!live.is_boolean()) return error_response("\"live\" must be a boolean");
    if (!limit.is_number_integer() || limit.get<std::int64_t>() < 0) return error_response("\"limit\" must be an integer >= 0");
    if (live.get<bool>()) {
      if (options_.live_wait.count() > 0) store_.wait_live(store_.ask_live(), options_.live_wait);
      const core::TimestampNs now = base::monotonic_ns();
      json live_streams = store_.live_json(now);
      const auto n = static_cast<std::size_t>(limit.get<std::int64_t>());
      if (live_streams.size() > n) live_streams.erase(live_streams.begin() + static_cast<std::ptrdiff_t>(n), live_streams.end());
      return dump(json{{"ok", true}, {"now_ns", now}, {"live", std::move(live_streams)}});
    }
    return "{\"ok\":true,\"streams\":" + store_.recent_json(static_cast<std::size_t>(limit.get<std::int64_t>())) + "}";
  }
  if (cmd == "show") return show(store_, request);
  if (cmd == "stats") {
    const json by = request.value("by", json("model"));
    const auto group = by.is_string() ? parse_group_by(by.get<std::string>()) : std::nullopt;
    if (!group) return error_response("\"by\" must be one of model, route, process, container");
    json out = store_.stats(*group);
    out["ok"] = true;
    return dump(out);
  }
  if (cmd == "top") {
    const json window = request.value("window_s", json(60));
    if (!window.is_number() || window.get<double>() <= 0 || window.get<double>() > 86400) {
      return error_response("\"window_s\" must be a number in (0, 86400]");
    }
    if (options_.live_wait.count() > 0) store_.wait_live(store_.ask_live(), options_.live_wait);
    json out = store_.top(base::monotonic_ns(), static_cast<std::uint64_t>(window.get<double>() * 1e9));
    out["ok"] = true;
    return dump(out);
  }
  if (cmd == "alerts") {
    if (!options_.alerts) return error_response("degradation detection is not running in this infertapd");
    json out = options_.alerts();
    out["ok"] = true;
    return dump(out);
  }
  if (cmd == "watch") return error_response("\"watch\" is served on a connection of its own");
  return error_response("unknown command \"" + cmd + "\" (status, streams, show, stats, top, alerts, watch)");
}

// ------------------------------------------------------------------ client

ApiClient::ApiClient(const std::string& socket_path) {
  const int fd = connect_unix(socket_path);
  if (fd >= 0) {
    fd_ = fd;
    return;
  }
  const int err = -fd;
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      throw ApiError(ApiErrorKind::not_running, "no socket at " + socket_path);
    case ECONNREFUSED:
      throw ApiError(ApiErrorKind::not_running, "nothing listening on " + socket_path);
    case EACCES:
    case EPERM:
      throw ApiError(ApiErrorKind::permission_denied, "permission denied on " + socket_path);
    default:
      throw ApiError(ApiErrorKind::io, "cannot connect to " + socket_path + ": " + errno_text(err));
  }
}

ApiClient::~ApiClient() {
  if (fd_ >= 0) close(fd_);
}

void ApiClient::send_line(std::string_view line) {
  std::string out(line);
  out.push_back('\n');
  if (!send_all(fd_, out)) throw ApiError(ApiErrorKind::io, "send: " + errno_text(errno));
}

std::optional<std::string> ApiClient::read_line() {
  std::string line;
  switch (daemon::read_line(fd_, buffer_, line, std::size_t{1} << 30)) {
    case ReadResult::line: return line;
    case ReadResult::eof: return std::nullopt;
    case ReadResult::too_long: break;
    case ReadResult::timeout: break;  // not asked for: the client waits as long as the daemon takes
  }
  throw ApiError(ApiErrorKind::protocol, "response line too long");
}

json ApiClient::request(const json& req) {
  try {
    send_line(dump(req));
  } catch (const ApiError&) {
    // Refused before the request went out: the reason is already in our receive queue.
    const int err = errno;
    std::optional<std::string> why;
    try {
      why = read_line();
    } catch (const ApiError&) {
    }
    const json answer = why ? json::parse(*why, nullptr, false) : json();
    if (answer.is_object()) return answer;
    throw ApiError(ApiErrorKind::io, "infertapd closed the connection (" + errno_text(err) + ")");
  }
  const auto line = read_line();
  if (!line) throw ApiError(ApiErrorKind::protocol, "infertapd closed the connection without answering");
  json response = json::parse(*line, nullptr, false);
  if (!response.is_object()) throw ApiError(ApiErrorKind::protocol, "malformed response from infertapd");
  return response;
}

}  // namespace infertap::daemon
