#include "output/ndjson/sink.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

namespace infertap::output {
namespace {

constexpr std::size_t kBatchLines = 1024;
constexpr std::size_t kBatchBytes = 4u << 20;
constexpr int kPollSliceMs = 100;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Lines [0, n) whose terminating '\n' lies before byte `written`.
std::size_t lines_within(const std::vector<std::size_t>& ends, std::size_t written) {
  return static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), written) - ends.begin());
}

// A write that raised SIGPIPE while it is blocked in this thread leaves it
// pending on the thread: take it so it is never delivered later.
void consume_sigpipe() {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  const timespec zero{};
  while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
}

// A group name or number; -1 when there is none such.
int resolve_group(const std::string& group) {
  if (!group.empty() && group.find_first_not_of("0123456789") == std::string::npos) return std::stoi(group);
  for (std::size_t size = 16384; size <= (1u << 20); size *= 4) {
    std::vector<char> buf(size);
    struct group entry {}, *found = nullptr;
    const int rc = getgrnam_r(group.c_str(), &entry, buf.data(), buf.size(), &found);
    if (rc == ERANGE) continue;
    return rc == 0 && found ? static_cast<int>(found->gr_gid) : -1;
  }
  return -1;
}

}  // namespace

std::string describe_output(const SinkCounters& c) {
  std::string out = std::to_string(c.written_lines) + " lines written, " + std::to_string(c.dropped_lines) + " dropped";
  std::string reasons;
  const auto reason = [&](const char* what, std::uint64_t n) {
    if (n) reasons += (reasons.empty() ? "" : ", ") + std::string(what) + " " + std::to_string(n);
  };
  reason("queue full", c.dropped_queue_full);
  reason("output closed", c.dropped_closed);
  reason("write failed", c.dropped_write_failed);
  reason("abandoned at shutdown", c.dropped_at_shutdown);
  return reasons.empty() ? out : out + " (" + reasons + ")";
}

SinkCounters counted_since(const SinkCounters& now, const SinkCounters& before) {
  SinkCounters d;
#define INFERTAP_SINK_MINUS_(name, kind, help) d.name = now.name - before.name;
  INFERTAP_SINK_COUNTERS(INFERTAP_SINK_MINUS_)
#undef INFERTAP_SINK_MINUS_
  return d;
}

RecordSink::RecordSink(SinkOptions options) : options_(std::move(options)) {}

std::unique_ptr<RecordSink> RecordSink::open(SinkOptions options, std::string* error) {
  if (options.queue_lines == 0) options.queue_lines = 1;
  std::unique_ptr<RecordSink> sink(new RecordSink(std::move(options)));
  const SinkOptions& o = sink->options_;
  if (o.to_stdout) {
    struct stat st {};
    if (fstat(o.stdout_fd, &st) != 0) {
      if (error) *error = "stdout (fd " + std::to_string(o.stdout_fd) + "): " + std::strerror(errno);
      return nullptr;
    }
    sink->stdout_regular_ = S_ISREG(st.st_mode);
  }
  if (!o.group.empty() && (sink->gid_ = resolve_group(o.group)) < 0) {
    if (error) *error = "output.group: no group '" + o.group + "' on this host";
    return nullptr;
  }
  if (!o.file.empty() && !sink->open_file(error)) return nullptr;
  sink->writer_ = std::thread([s = sink.get()] { s->run(); });
  return sink;
}

RecordSink::~RecordSink() { close(options_.shutdown_timeout); }

bool RecordSink::open_file(std::string* error) {
  const mode_t mode = gid_ >= 0 ? 0640 : 0600;
  // O_NONBLOCK: opening a FIFO without a reader fails instead of hanging.
  const int fd = ::open(options_.file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, mode);
  const auto fail = [&](const std::string& why) {
    if (error) *error = options_.file + ": " + why;
    if (fd >= 0) ::close(fd);
    return false;
  };
  if (fd < 0) return fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fail("not a regular file");
  // A file system without locks (ENOLCK, some network ones) is written unlocked.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    return fail("another infertapd writes this file; give each agent an output file of its own");
  }
  // The mode (and group) are set on a file of an earlier run too: umask and old defaults do not widen it.
  if (gid_ >= 0 && fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(gid_)) != 0) {
    return fail("cannot give it to group " + options_.group + ": " + std::strerror(errno));
  }
  if ((st.st_mode & 07777) != mode && fchmod(fd, mode) != 0) return fail(std::string("cannot chmod: ") + std::strerror(errno));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  file_fd_ = fd;
  file_size_ = static_cast<std::uint64_t>(st.st_size);
  return true;
}

bool RecordSink::offer(std::string line) {
  const std::uint64_t bytes = line.size() + 1;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_ || queue_.size() >= options_.queue_lines ||
        (!queue_.empty() && queued_bytes_ + bytes > options_.queue_bytes)) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      (closing_ ? dropped_closed_ : dropped_queue_full_).fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    queue_.push_back(std::move(line));
    queued_bytes_ += bytes;
    ++accepted_;
    wake = writer_waiting_;
    writer_waiting_ = false;  // one notify per sleep is enough
  }
  if (wake) work_cv_.notify_one();
  return true;
}

bool RecordSink::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const std::uint64_t target = accepted_;
  return done_cv_.wait_for(lock, timeout, [&] { return processed_ >= target; });
}

bool RecordSink::close(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> guard(close_mu_);
  if (closed_) return close_result_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    deadline_ns_.store(steady_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count());
    stop_.store(true);
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (file_fd_ >= 0) {
    ::close(file_fd_);
    file_fd_ = -1;
  }
  closed_ = true;
  close_result_ = writer_dropped_.load() == 0;
  return close_result_;
}

SinkCounters RecordSink::counters() const {
  SinkCounters c;
  c.written_lines = written_.load(std::memory_order_relaxed);
  c.dropped_lines = dropped_.load(std::memory_order_relaxed);
  c.write_errors = write_errors_.load(std::memory_order_relaxed);
  c.rotations = rotations_.load(std::memory_order_relaxed);
  c.dropped_queue_full = dropped_queue_full_.load(std::memory_order_relaxed);
  c.dropped_closed = dropped_closed_.load(std::memory_order_relaxed);
  c.dropped_write_failed = dropped_write_failed_.load(std::memory_order_relaxed);
  c.dropped_at_shutdown = dropped_at_shutdown_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  c.queued_lines = queue_.size();
  c.queued_bytes = queued_bytes_;
  return c;
}

std::string RecordSink::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

void RecordSink::set_error(std::string message) {
  write_errors_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(error_mu_);
  last_error_ = std::move(message);
}

void RecordSink::run() {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);

  std::string buf;
  std::vector<std::size_t> ends;
  for (;;) {
    buf.clear();
    ends.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (queue_.empty() && !stop_.load()) {
        writer_waiting_ = true;
        work_cv_.wait(lock);
      }
      writer_waiting_ = false;
      if (queue_.empty()) break;  // stopping and drained
      // Take a bounded batch so the queue's bound also bounds the writer's copy.
      while (!queue_.empty() && ends.size() < kBatchLines && (ends.empty() || buf.size() < kBatchBytes)) {
        std::string& line = queue_.front();
        queued_bytes_ -= line.size() + 1;
        buf += line;
        buf += '\n';
        ends.push_back(buf.size());
        queue_.pop_front();
      }
    }
    write_batch(buf, ends);
    {
      std::lock_guard<std::mutex> lock(mu_);
      processed_ += ends.size();
    }
    done_cv_.notify_all();
  }
}

void RecordSink::write_batch(const std::string& buf, const std::vector<std::size_t>& ends) {
  // A line is written when every destination still open got it whole; a
  // stdout that failed for good (EPIPE) no longer counts as a destination,
  // unless it was the only one.
  std::size_t ok = ends.size();
  bool any = false;
  if (!options_.file.empty()) {
    ok = std::min(ok, write_file(buf, ends));
    any = true;
  }
  if (options_.to_stdout) {
    if (stdout_live_) {
      ok = std::min(ok, write_stdout(buf, ends));
      any = true;
    } else if (!any) {
      ok = 0;
    }
  }
  const std::size_t lost = ends.size() - ok;
  written_.fetch_add(ok, std::memory_order_relaxed);
  dropped_.fetch_add(lost, std::memory_order_relaxed);
  writer_dropped_.fetch_add(lost, std::memory_order_relaxed);
  (abandoned_ ? dropped_at_shutdown_ : dropped_write_failed_).fetch_add(lost, std::memory_order_relaxed);
}

std::size_t RecordSink::write_file(const std::string& buf, const std::vector<std::size_t>& ends) {
  if (file_fd_ < 0) {
    std::string error;
    if (!open_file(&error)) {
      set_error(error);
      return 0;
    }
  }
  // Follow outside changes: a file moved or removed (logrotate) is reopened
  // under its name, a truncated one (copytruncate) restarts the size count.
  struct stat open_st {}, path_st {};
  if (fstat(file_fd_, &open_st) == 0) {
    if (::stat(options_.file.c_str(), &path_st) != 0 || path_st.st_ino != open_st.st_ino ||
        path_st.st_dev != open_st.st_dev) {
      ::close(file_fd_);
      file_fd_ = -1;
      std::string error;
      if (!open_file(&error)) {
        set_error(error);
        return 0;
      }
    } else {
      file_size_ = static_cast<std::uint64_t>(open_st.st_size);
    }
  }

  std::size_t done = 0;   // lines written
  std::size_t start = 0;  // first line of the pending range
  std::size_t pending = 0;
  for (std::size_t i = 0; i < ends.size(); ++i) {
    const std::size_t from = i == 0 ? 0 : ends[i - 1];
    const std::uint64_t len = ends[i] - from;
    if (options_.rotate_bytes > 0 && file_size_ + pending > 0 && file_size_ + pending + len > options_.rotate_bytes) {
      const std::size_t range_from = start == 0 ? 0 : ends[start - 1];
      if (!write_file_range(buf, range_from, from)) return done;
      done = i;
      start = i;
      pending = 0;
      rotate();
      if (file_fd_ < 0) return done;
    }
    pending += len;
  }
  const std::size_t range_from = start == 0 ? 0 : ends[start - 1];
  if (!write_file_range(buf, range_from, ends.empty() ? 0 : ends.back())) return done;
  return ends.size();
}

bool RecordSink::write_file_range(const std::string& buf, std::size_t from, std::size_t to) {
  while (from < to) {
    const ssize_t w = ::write(file_fd_, buf.data() + from, to - from);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      set_error(options_.file + ": write failed: " + std::strerror(w < 0 ? errno : EIO));
      return false;
    }
    from += static_cast<std::size_t>(w);
    file_size_ += static_cast<std::uint64_t>(w);
  }
  return true;
}

void RecordSink::rotate() {
  ::close(file_fd_);
  file_fd_ = -1;
  const std::string& base = options_.file;
  if (options_.keep_files <= 0) {
    if (::unlink(base.c_str()) != 0 && errno != ENOENT) set_error(base + ": unlink failed: " + std::strerror(errno));
  } else {
    for (int i = options_.keep_files - 1; i >= 1; --i) {
      const std::string from = base + "." + std::to_string(i);
      const std::string to = base + "." + std::to_string(i + 1);
      if (::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) {
        set_error(from + ": rename failed: " + std::strerror(errno));
      }
    }
    if (::rename(base.c_str(), (base + ".1").c_str()) != 0) {
      set_error(base + ": rename failed: " + std::strerror(errno));
    }
  }
  rotations_.fetch_add(1, std::memory_order_relaxed);
  std::string error;
  if (!open_file(&error)) set_error(error);
}

bool RecordSink::wait_writable(int fd) {
  for (;;) {
    int slice = kPollSliceMs;
    if (stop_.load()) {
      const std::int64_t left_ms = (deadline_ns_.load() - steady_ns()) / 1'000'000;
      if (left_ms <= 0) return false;
      slice = static_cast<int>(std::min<std::int64_t>(slice, left_ms));
    }
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, slice);
    if (r > 0) return true;  // writable, or an error write() will report
    if (r < 0 && errno != EINTR) return true;
  }
}

std::size_t RecordSink::write_stdout(const std::string& buf, const std::vector<std::size_t>& ends) {
  if (!stdout_live_) return 0;
  const int fd = options_.stdout_fd;
  std::size_t off = 0;
  while (off < buf.size()) {
    if (!stdout_regular_ && !wait_writable(fd)) {
      stdout_live_ = false;
      abandoned_ = true;
      set_error("stdout: the reader stalled past the shutdown deadline; remaining lines dropped");
      break;
    }
    // At most PIPE_BUF after POLLOUT: a pipe with one free slot takes it
    // without blocking.
    const std::size_t chunk = stdout_regular_ ? buf.size() - off : std::min<std::size_t>(PIPE_BUF, buf.size() - off);
    const ssize_t w = ::write(fd, buf.data() + off, chunk);
    if (w > 0) {
      off += static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) {
      if (errno == EAGAIN && stdout_regular_) stdout_regular_ = false;  // poll from now on
      continue;
    }
    const int err = w < 0 ? errno : EIO;
    if (err == EPIPE) consume_sigpipe();
    set_error(std::string("stdout: write failed: ") + std::strerror(err));
    if (err == EPIPE || err == EBADF || err == EINVAL) stdout_live_ = false;  // will not come back
    break;
  }
  return lines_within(ends, off);
}

}  // namespace infertap::output
