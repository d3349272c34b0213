// Shared helpers for the infertap test tools (sample-server, sample-client,
// send-loop). Header-only, libstdc++/POSIX only: the tools must start fast and
// their own timing must be predictable.
//
// Timing rule for every tool: read CLOCK_MONOTONIC immediately after a
// send/recv syscall returns, then format the log record into memory. No file
// I/O happens on a connection thread; NdjsonLog hands full buffers to a
// background writer thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace infertap::tools {

inline std::int64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return std::int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline std::int64_t mono_ns() { return clock_ns(CLOCK_MONOTONIC); }

// This thread's CPU time. Wall time less it, over a call, is how long the
// thread was off its CPU meanwhile: preempted, or its VM's CPU taken by the
// host (steal time is not run time). A clock read after such a gap is late.
inline std::int64_t thread_cpu_ns() { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

inline std::int64_t unix_seconds() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec;
}

// Sleep until an absolute CLOCK_MONOTONIC deadline (ns). Signals are blocked in
// worker threads, but EINTR is still retried.
inline void sleep_until_ns(std::int64_t deadline) {
  timespec ts;
  ts.tv_sec = deadline / 1'000'000'000;
  ts.tv_nsec = deadline % 1'000'000'000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

inline void sleep_ns(std::int64_t ns) {
  if (ns > 0) sleep_until_ns(mono_ns() + ns);
}

inline int current_tid() { return int(syscall(SYS_gettid)); }

// ---- string building ---------------------------------------------------------

template <typename Int>
inline void append_int(std::string& out, Int v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

inline void append_double(std::string& out, double v, int decimals = 3) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  out.append(buf, std::size_t(std::max(n, 0)));
}

inline void append_json_escaped(std::string& out, std::string_view s) {
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
}

inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  append_json_escaped(out, s);
  out += '"';
}

// ---- tiny JSON scanner (request bodies / SSE payloads we generate ourselves) --

// Position just after `"key"` followed by optional whitespace and ':' (and
// whitespace after it), or npos. First occurrence anywhere in the document: good
// enough for flat request bodies.
inline std::size_t json_find_value(std::string_view doc, std::string_view key) {
  std::string pat;
  pat.reserve(key.size() + 2);
  pat += '"';
  pat += key;
  pat += '"';
  std::size_t pos = 0;
  while ((pos = doc.find(pat, pos)) != std::string_view::npos) {
    std::size_t i = pos + pat.size();
    while (i < doc.size() && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r')) ++i;
    if (i < doc.size() && doc[i] == ':') {
      ++i;
      while (i < doc.size() && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r')) ++i;
      return i;
    }
    pos += 1;
  }
  return std::string_view::npos;
}

inline std::optional<std::string> json_get_string(std::string_view doc, std::string_view key) {
  std::size_t i = json_find_value(doc, key);
  if (i == std::string_view::npos || i >= doc.size() || doc[i] != '"') return std::nullopt;
  std::string out;
  for (++i; i < doc.size(); ++i) {
    char c = doc[i];
    if (c == '"') return out;
    if (c == '\\' && i + 1 < doc.size()) {
      char e = doc[++i];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'u': out += '?'; i += std::min<std::size_t>(4, doc.size() - i - 1); break;
        default: out += e;
      }
    } else {
      out += c;
    }
  }
  return std::nullopt;  // unterminated
}

inline std::optional<bool> json_get_bool(std::string_view doc, std::string_view key) {
  std::size_t i = json_find_value(doc, key);
  if (i == std::string_view::npos) return std::nullopt;
  if (doc.substr(i, 4) == "true") return true;
  if (doc.substr(i, 5) == "false") return false;
  return std::nullopt;
}

inline std::optional<std::int64_t> json_get_int(std::string_view doc, std::string_view key) {
  std::size_t i = json_find_value(doc, key);
  if (i == std::string_view::npos) return std::nullopt;
  std::int64_t v = 0;
  auto r = std::from_chars(doc.data() + i, doc.data() + doc.size(), v);
  if (r.ec != std::errc()) return std::nullopt;
  return v;
}

// ---- NDJSON log: in-memory, written by a background thread -------------------

class NdjsonLog {
 public:
  NdjsonLog() = default;
  NdjsonLog(const NdjsonLog&) = delete;
  NdjsonLog& operator=(const NdjsonLog&) = delete;
  ~NdjsonLog() { close(); }

  // Empty path: logging disabled (append() is a no-op).
  bool open(const std::string& path) {
    if (path.empty()) return true;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      std::fprintf(stderr, "cannot open log %s: %s\n", path.c_str(), std::strerror(errno));
      return false;
    }
    cur_.reserve(kFlushBytes * 2);
    writer_ = std::thread([this] { writer_loop(); });
    return true;
  }

  bool enabled() const { return fd_ >= 0; }

  // Append one complete line (without '\n'). Cheap: a lock and a memcpy.
  void append(std::string_view line) {
    if (fd_ < 0) return;
    std::lock_guard<std::mutex> lk(mu_);
    cur_.append(line);
    cur_ += '\n';
    if (cur_.size() >= kFlushBytes) cv_.notify_one();
  }

  // Write everything buffered so far (callable from any thread, e.g. the
  // signal-handling thread before exiting).
  void flush() {
    if (fd_ < 0) return;
    std::lock_guard<std::mutex> wl(write_mu_);
    std::string out;
    {
      std::lock_guard<std::mutex> lk(mu_);
      out.swap(cur_);
      cur_.reserve(kFlushBytes * 2);
    }
    write_all(out);
    ::fdatasync(fd_);
  }

  void close() {
    if (fd_ < 0) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (writer_.joinable()) writer_.join();
    flush();
    ::close(fd_);
    fd_ = -1;
  }

 private:
  static constexpr std::size_t kFlushBytes = 4 << 20;

  void writer_loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stop_ || cur_.size() >= kFlushBytes; });
      if (cur_.empty()) continue;
      std::string out;
      out.swap(cur_);
      cur_.reserve(kFlushBytes * 2);
      lk.unlock();
      {
        std::lock_guard<std::mutex> wl(write_mu_);
        write_all(out);
      }
      lk.lock();
    }
  }

  void write_all(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::write(fd_, s.data() + off, s.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        std::fprintf(stderr, "log write failed: %s\n", std::strerror(errno));
        return;
      }
      off += std::size_t(n);
    }
  }

  int fd_ = -1;
  std::mutex mu_;        // guards cur_, stop_
  std::mutex write_mu_;  // serialises file writes (keeps line order)
  std::condition_variable cv_;
  std::string cur_;
  bool stop_ = false;
  std::thread writer_;
};

// ---- command line ------------------------------------------------------------

// `--name value`, `--name=value` and boolean `--flag`. Options are declared up
// front so an unknown option or a missing value is an error with usage text.
class Args {
 public:
  explicit Args(std::string usage) : usage_(std::move(usage)) {}

  void option(const std::string& name) { kinds_[name] = true; }
  void flag(const std::string& name) { kinds_[name] = false; }

  bool parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        std::fputs(usage_.c_str(), stdout);
        std::exit(0);
      }
      if (a.rfind("--", 0) != 0) return fail("unexpected argument: " + a);
      std::string name = a.substr(2), value;
      bool has_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      auto it = kinds_.find(name);
      if (it == kinds_.end()) return fail("unknown option: --" + name);
      if (it->second) {
        if (!has_value) {
          if (i + 1 >= argc) return fail("option --" + name + " needs a value");
          value = argv[++i];
        }
        values_[name] = value;
      } else {
        if (has_value && value != "1" && value != "true") {
          if (value == "0" || value == "false") continue;
          return fail("flag --" + name + " takes no value");
        }
        values_[name] = "1";
      }
    }
    return true;
  }

  bool has(const std::string& name) const { return values_.count(name) != 0; }

  std::string str(const std::string& name, const std::string& def) const {
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second;
  }

  std::int64_t integer(const std::string& name, std::int64_t def) const {
    auto it = values_.find(name);
    if (it == values_.end()) return def;
    std::int64_t v = 0;
    const std::string& s = it->second;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size()) die_bad(name, s);
    return v;
  }

  double number(const std::string& name, double def) const {
    auto it = values_.find(name);
    if (it == values_.end()) return def;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0') die_bad(name, it->second);
    return v;
  }

  std::string choice(const std::string& name, const std::string& def,
                     std::initializer_list<const char*> allowed) const {
    std::string v = str(name, def);
    for (const char* a : allowed)
      if (v == a) return v;
    die_bad(name, v);
  }

 private:
  bool fail(const std::string& msg) {
    std::fprintf(stderr, "%s\n%s", msg.c_str(), usage_.c_str());
    return false;
  }
  [[noreturn]] void die_bad(const std::string& name, const std::string& v) const {
    std::fprintf(stderr, "bad value for --%s: '%s'\n%s", name.c_str(), v.c_str(), usage_.c_str());
    std::exit(2);
  }

  std::string usage_;
  std::map<std::string, bool> kinds_;  // name -> takes a value
  std::map<std::string, std::string> values_;
};

// ---- process setup -------------------------------------------------------------

// Raise RLIMIT_NOFILE to the hard limit (1000+ connections need it).
inline void raise_nofile_limit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Block SIGINT/SIGTERM/SIGUSR1/SIGUSR2/SIGHUP in the calling thread (call from
// main before starting any thread so every thread inherits the mask) and ignore
// SIGPIPE. A dedicated thread then consumes the blocked signals with sigwait,
// so no syscall in a worker is ever interrupted.
inline sigset_t block_control_signals() {
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Start a detached thread that calls handler(sig) for each blocked signal.
inline void start_signal_thread(sigset_t set, std::function<void(int)> handler) {
  std::thread([set, handler = std::move(handler)] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) handler(sig);
    }
  }).detach();
}

// Simple xorshift PRNG: per-thread, no locks, deterministic with a seed.
struct FastRng {
  std::uint64_t s;
  // The seed is scrambled with splitmix64 so generators seeded from
  // consecutive outputs of another FastRng are not shifted copies of it.
  explicit FastRng(std::uint64_t seed) {
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
    if (s == 0) s = 0x9e3779b97f4a7c15ull;
  }
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  // Uniform double in [0, 1).
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
};

inline std::uint64_t seed_from_entropy() {
  return std::uint64_t(mono_ns()) ^ (std::uint64_t(getpid()) << 32) ^
         std::uint64_t(reinterpret_cast<std::uintptr_t>(&errno));
}

}  // namespace infertap::tools
