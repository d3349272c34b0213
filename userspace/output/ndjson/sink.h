// The output of infertapd's stream records: a bounded queue of NDJSON lines
// drained by the sink's own writer thread to stdout and/or a file with
// size-based rotation.
//
// The pipeline thread must never wait on a log consumer: offer() takes a lock
// held only for a queue push or pop, never across I/O, and refuses (drops and
// counts) a line when the queue is full. The writer writes every line whole and
// in order (one thread, so lines from many producers never interleave); a line
// is never split across a rotation.
//
// stdout that is a pipe, socket or terminal is written in chunks of at most
// PIPE_BUF bytes, each after poll() reports room, so a consumer that stops
// reading stalls only the writer thread, and shutdown can give up on it at a
// deadline instead of hanging in write(). SIGPIPE is blocked in the writer
// thread; a closed stdout (EPIPE) is counted and no longer written.
//
// The file is created 0600 (0640 with output.group, owned by that group),
// and an existing one is set so when it is opened: records name processes,
// models and routes of the host. It is locked (flock) while open, so a
// second agent given the same file refuses to start instead of interleaving.
//
// Every line offered and not written is counted as dropped, with its reason
// (queue full, sink closed, a failed write, abandoned at the shutdown deadline).
//
// Rotation (output.rotate_bytes > 0): before a line that would take the file
// past rotate_bytes (unless the file is empty), the file is closed and renamed
// file -> file.1 -> file.2 ... -> file.N (N = keep_files; the oldest falls off),
// and a new file is opened. keep_files = 0 keeps no history (the file is
// removed and started again). The file is opened O_APPEND, so a restarted agent
// continues it.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/counter.h"

namespace infertap::output {

struct SinkOptions {
  bool to_stdout = true;
  int stdout_fd = STDOUT_FILENO;  // where "stdout" lines go (tests pass a pipe); never closed by the sink
  std::string file;               // "" = no file
  std::string group;              // "" = the file is 0600; else 0640, owned by this group (name or number)
  std::uint64_t rotate_bytes = 100ull << 20;  // 0 = never rotate
  int keep_files = 5;
  std::size_t queue_lines = 65536;              // offer() drops beyond this many queued lines
  std::uint64_t queue_bytes = 64ull << 20;      // ... or bytes (a single line is always accepted into an empty queue)
  std::chrono::milliseconds shutdown_timeout{5000};  // how long the destructor drains
};


// What the sink counts, listed once: X(name, kind, help) makes the field, its
// `infertap status` key (counters.sink.<name>) and its Prometheus series
// infertap_sink_<name>[_total] (docs/prometheus.md).
#define INFERTAP_SINK_COUNTERS(X)                                                                              \
  X(written_lines, total, "output lines written whole to every destination")                                 \
  X(dropped_lines, total, "output lines dropped: queue full, sink closed, a failed write, abandoned at shutdown") \
  X(dropped_queue_full, total, "output lines dropped because the queue was full (the output did not keep up)")  \
  X(dropped_closed, total, "output lines offered after the output closed")                                     \
  X(dropped_write_failed, total, "output lines a failed write, open or rename lost")                          \
  X(dropped_at_shutdown, total, "output lines abandoned at the shutdown deadline (the reader had stopped)")   \
  X(write_errors, total, "failed write, open or rename calls of the output")                                 \
  X(rotations, total, "output file rotations")                                                                \
  X(queued_lines, level, "output lines waiting in the queue now")                                             \
  X(queued_bytes, level, "output bytes waiting in the queue now")

struct SinkCounters {
  INFERTAP_COUNTER_FIELDS(INFERTAP_SINK_COUNTERS)
};

// "16 lines written, 1984 dropped (queue full 0, abandoned at shutdown 1984)": the
// reasons that dropped any, for the log.
std::string describe_output(const SinkCounters& counters);
// What was counted between two readings (the totals; levels are meaningless here).
SinkCounters counted_since(const SinkCounters& now, const SinkCounters& before);

class RecordSink {
 public:
  // Opens the file (created when missing, appended to otherwise; mode 0600, or
  // 0640 with options.group) and starts the writer thread. Returns nullptr and
  // sets *error when the file cannot be opened, is not a regular file or is
  // locked by another agent, the group is unknown, or stdout is requested but
  // closed.
  static std::unique_ptr<RecordSink> open(SinkOptions options, std::string* error);
  // close(options.shutdown_timeout).
  ~RecordSink();
  RecordSink(const RecordSink&) = delete;
  RecordSink& operator=(const RecordSink&) = delete;

  // Queues one line (without its newline; the sink appends '\n'). Never blocks
  // on I/O. Returns false, and counts the line as dropped, when the queue is
  // full or the sink is closed. Thread-safe.
  bool offer(std::string line);

  // Waits until every line accepted before the call has been written (or has
  // failed). Returns false on timeout. Thread-safe.
  bool flush(std::chrono::milliseconds timeout);

  // Stops accepting lines, writes what is queued until the deadline, then
  // stops the writer thread and closes the file. A destination that stays
  // unwritable past the deadline is abandoned and the lines it did not get are
  // counted as dropped. Returns true when everything accepted was written.
  // Idempotent (later calls return the first result).
  bool close(std::chrono::milliseconds timeout);

  std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  SinkCounters counters() const;
  // The last write/open/rename error ("" = none), for the log.
  std::string last_error() const;

 private:
  explicit RecordSink(SinkOptions options);
  void run();
  void write_batch(const std::string& buf, const std::vector<std::size_t>& ends);
  std::size_t write_file(const std::string& buf, const std::vector<std::size_t>& ends);
  std::size_t write_stdout(const std::string& buf, const std::vector<std::size_t>& ends);
  bool write_file_range(const std::string& buf, std::size_t from, std::size_t to);
  bool open_file(std::string* error);
  void rotate();
  bool wait_writable(int fd);
  void set_error(std::string message);

  const SinkOptions options_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // writer: lines queued or stop
  std::condition_variable done_cv_;  // flush(): processed_ advanced
  std::deque<std::string> queue_;
  std::uint64_t queued_bytes_ = 0;
  std::uint64_t accepted_ = 0;   // lines ever queued
  std::uint64_t processed_ = 0;  // lines taken by the writer and finished
  bool writer_waiting_ = false;
  bool closing_ = false;

  std::mutex close_mu_;  // serialises close(); guards the two below
  bool closed_ = false;
  bool close_result_ = false;

  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> deadline_ns_{INT64_MAX};  // steady clock; writer gives up on stalls after it

  std::atomic<std::uint64_t> written_{0}, dropped_{0}, write_errors_{0}, rotations_{0};
  std::atomic<std::uint64_t> dropped_queue_full_{0}, dropped_closed_{0}, dropped_write_failed_{0},
      dropped_at_shutdown_{0};
  std::atomic<std::uint64_t> writer_dropped_{0};  // the part of dropped_ accepted but not written
  int gid_ = -1;                                   // output.group resolved; -1 = none

  mutable std::mutex error_mu_;
  std::string last_error_;

  // Writer thread only.
  int file_fd_ = -1;
  std::uint64_t file_size_ = 0;
  bool stdout_live_ = true;
  bool stdout_regular_ = false;
  bool abandoned_ = false;  // stdout given up at the shutdown deadline

  std::thread writer_;
};

}  // namespace infertap::output
