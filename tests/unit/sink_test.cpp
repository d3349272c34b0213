#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon/config.h"
#include "output/ndjson/sink.h"

namespace infertap::output {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/infertap-sink-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> split_lines(const std::string& text, bool* ends_with_newline = nullptr) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      out.push_back(text.substr(pos));
      if (ends_with_newline) *ends_with_newline = false;
      return out;
    }
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  if (ends_with_newline) *ends_with_newline = true;
  return out;
}

// "seq=<n> " padded with 'x' to a length that varies with n.
std::string numbered_line(int n, std::size_t min_len = 20, std::size_t spread = 180) {
  std::string s = "seq=" + std::to_string(n) + " ";
  s.append(min_len + static_cast<std::size_t>(n * 37) % spread, 'x');
  return s;
}

int seq_of(const std::string& line) { return std::stoi(line.substr(4)); }

SinkOptions file_only(const std::string& path) {
  SinkOptions o;
  o.to_stdout = false;
  o.file = path;
  return o;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    if (r >= 0) close(r);
    if (w >= 0) close(w);
  }
  std::string read_all() {  // until EOF (caller closed w)
    std::string out;
    char buf[65536];
    ssize_t n;
    while ((n = read(r, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    return out;
  }
};

// Reads a pipe on its own thread from construction to EOF.
class PipeReader {
 public:
  explicit PipeReader(int fd) : thread_([this, fd] {
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) data_.append(buf, static_cast<std::size_t>(n));
  }) {}
  std::string finish() {
    thread_.join();
    return data_;
  }

 private:
  std::string data_;
  std::thread thread_;
};

TEST(RecordSink, RotationNeverSplitsOrLosesALine) {
  TempDir dir;
  const std::string path = dir.file("streams.ndjson");
  SinkOptions o = file_only(path);
  o.rotate_bytes = 1000;
  o.keep_files = 100;
  constexpr int kLines = 300;
  std::uint64_t rotations = 0;
  {
    std::string error;
    auto sink = RecordSink::open(o, &error);
    ASSERT_TRUE(sink) << error;
    for (int i = 0; i < kLines; ++i) ASSERT_TRUE(sink->offer(numbered_line(i)));
    ASSERT_TRUE(sink->close(5s));
    const SinkCounters c = sink->counters();
    EXPECT_EQ(c.written_lines, static_cast<std::uint64_t>(kLines));
    EXPECT_EQ(c.dropped_lines, 0u);
    EXPECT_EQ(c.write_errors, 0u);
    rotations = c.rotations;
  }
  ASSERT_GT(rotations, 10u);
  EXPECT_FALSE(fs::exists(path + "." + std::to_string(rotations + 1)));
  // Oldest first: file.R ... file.1, file.
  int next = 0;
  for (std::uint64_t i = rotations + 1; i-- > 0;) {
    const std::string name = i == 0 ? path : path + "." + std::to_string(i);
    ASSERT_TRUE(fs::exists(name)) << name;
    const std::string text = slurp(name);
    EXPECT_LE(text.size(), 1000u) << name;
    bool whole = false;
    const auto lines = split_lines(text, &whole);
    EXPECT_TRUE(whole) << name << " ends mid-line";
    ASSERT_FALSE(lines.empty()) << name;
    for (const std::string& line : lines) {
      EXPECT_EQ(line, numbered_line(next)) << name;
      ++next;
    }
    if (i > 0) {  // rotated only because the next line did not fit
      EXPECT_GT(text.size() + numbered_line(next).size() + 1, 1000u) << name;
    }
  }
  EXPECT_EQ(next, kLines);
}

TEST(RecordSink, RotationKeepsOnlyKeepFiles) {
  for (int keep : {0, 2}) {
    TempDir dir;
    const std::string path = dir.file("out.ndjson");
    SinkOptions o = file_only(path);
    o.rotate_bytes = 500;
    o.keep_files = keep;
    {
      auto sink = RecordSink::open(o, nullptr);
      ASSERT_TRUE(sink);
      for (int i = 0; i < 200; ++i) sink->offer(numbered_line(i));
      ASSERT_TRUE(sink->close(5s));
      EXPECT_GT(sink->counters().rotations, 5u);
    }
    for (int i = 1; i <= keep; ++i) EXPECT_TRUE(fs::exists(path + "." + std::to_string(i))) << keep;
    EXPECT_FALSE(fs::exists(path + "." + std::to_string(keep + 1))) << keep;
    // The kept files hold the newest lines, consecutive, ending with the last.
    std::vector<std::string> lines;
    for (int i = keep; i >= 0; --i) {
      for (auto& l : split_lines(slurp(i == 0 ? path : path + "." + std::to_string(i)))) lines.push_back(l);
    }
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(seq_of(lines.back()), 199);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i], numbered_line(199 - static_cast<int>(lines.size() - 1 - i)));
    }
  }
}

TEST(RecordSink, AppendsToAnExistingFileAndRotatesItWhenFull) {
  TempDir dir;
  const std::string path = dir.file("out.ndjson");
  std::ofstream(path) << std::string(979, 'o') << "\n";  // 980 bytes from an earlier run
  SinkOptions o = file_only(path);
  o.rotate_bytes = 1000;
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);
  sink->offer("short");                  // 986 bytes: fits
  sink->offer(std::string(100, 'l'));    // would pass 1000: rotate first
  sink->offer(std::string(2000, 'b'));   // larger than rotate_bytes: alone in its file
  sink->offer("after");
  ASSERT_TRUE(sink->close(5s));
  EXPECT_EQ(sink->counters().rotations, 3u);
  EXPECT_EQ(slurp(path + ".3"), std::string(979, 'o') + "\nshort\n");
  EXPECT_EQ(slurp(path + ".2"), std::string(100, 'l') + "\n");
  EXPECT_EQ(slurp(path + ".1"), std::string(2000, 'b') + "\n");
  EXPECT_EQ(slurp(path), "after\n");
}

TEST(RecordSink, FlushesOnDestruction) {
  TempDir dir;
  const std::string path = dir.file("out.ndjson");
  {
    auto sink = RecordSink::open(file_only(path), nullptr);
    ASSERT_TRUE(sink);
    for (int i = 0; i < 2000; ++i) ASSERT_TRUE(sink->offer(numbered_line(i)));
  }  // destructor drains
  const auto lines = split_lines(slurp(path));
  ASSERT_EQ(lines.size(), 2000u);
  for (int i = 0; i < 2000; ++i) EXPECT_EQ(lines[static_cast<std::size_t>(i)], numbered_line(i));
}

TEST(RecordSink, DropsAndCountsWhenTheReaderStalls) {
  Pipe p;
  ASSERT_GE(fcntl(p.w, F_SETPIPE_SZ, 4096), 4096);  // one page: fills after 4 lines
  SinkOptions o;
  o.stdout_fd = p.w;
  o.queue_lines = 8;
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);

  constexpr int kLines = 500;
  int refused = 0;
  std::vector<bool> accepted(kLines);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kLines; ++i) {
    accepted[static_cast<std::size_t>(i)] = sink->offer(numbered_line(i, 980, 40));
    if (!accepted[static_cast<std::size_t>(i)]) ++refused;
  }
  // An offer() that waited on the writer would wait forever here (nobody reads
  // the pipe yet); the bound only has to be far above scheduling noise.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "offer() waited on the stalled writer";
  // At most one pipe page (4 lines of ~1 KiB), the writer's batch and the
  // queue (8 each) were accepted; the first 8 lines alone overflow the pipe.
  EXPECT_GE(refused, kLines - 4 - 8 - 8);
  EXPECT_EQ(sink->dropped(), static_cast<std::uint64_t>(refused));
  EXPECT_FALSE(sink->flush(50ms)) << "nothing can be written while the reader stalls";

  // The reader comes back: everything accepted arrives whole and in order.
  PipeReader reader(p.r);
  ASSERT_TRUE(sink->flush(5s));
  ASSERT_TRUE(sink->close(5s));
  const SinkCounters c = sink->counters();
  EXPECT_EQ(c.written_lines, static_cast<std::uint64_t>(kLines - refused));
  EXPECT_EQ(c.dropped_lines, static_cast<std::uint64_t>(refused));
  EXPECT_EQ(c.dropped_queue_full, static_cast<std::uint64_t>(refused));
  EXPECT_EQ(c.dropped_queue_full + c.dropped_closed + c.dropped_write_failed + c.dropped_at_shutdown, c.dropped_lines);
  close(p.w);
  p.w = -1;
  bool whole = false;
  const auto lines = split_lines(reader.finish(), &whole);
  EXPECT_TRUE(whole);
  std::vector<std::string> expected;
  for (int i = 0; i < kLines; ++i) {
    if (accepted[static_cast<std::size_t>(i)]) expected.push_back(numbered_line(i, 980, 40));
  }
  EXPECT_EQ(lines, expected);
}

TEST(RecordSink, ShutdownGivesUpOnAReaderThatNeverComesBack) {
  Pipe p;
  ASSERT_GE(fcntl(p.w, F_SETPIPE_SZ, 4096), 4096);
  SinkOptions o;
  o.stdout_fd = p.w;
  o.shutdown_timeout = 100ms;
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(sink->offer(numbered_line(i)));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(sink->close(150ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  const SinkCounters c = sink->counters();
  EXPECT_EQ(c.written_lines + c.dropped_lines, 100u);
  EXPECT_GT(c.dropped_lines, 0u);
  EXPECT_NE(sink->last_error().find("stalled"), std::string::npos) << sink->last_error();
  EXPECT_EQ(c.dropped_at_shutdown, c.dropped_lines) << "every line the stalled reader did not take is said as such";
  EXPECT_FALSE(sink->offer("late")) << "closed sinks refuse lines";
  EXPECT_EQ(sink->dropped(), c.dropped_lines + 1);
  EXPECT_EQ(sink->counters().dropped_closed, 1u);
  EXPECT_FALSE(sink->close(1s)) << "idempotent";
  const std::string said = describe_output(sink->counters());
  EXPECT_NE(said.find(std::to_string(c.written_lines) + " lines written, " + std::to_string(c.dropped_lines + 1) +
                      " dropped (output closed 1, abandoned at shutdown " + std::to_string(c.dropped_lines) + ")"),
            std::string::npos)
      << said;
}

TEST(RecordSink, DestructorIsBoundedByShutdownTimeout) {
  Pipe p;
  ASSERT_GE(fcntl(p.w, F_SETPIPE_SZ, 4096), 4096);
  SinkOptions o;
  o.stdout_fd = p.w;
  o.shutdown_timeout = 100ms;
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto sink = RecordSink::open(o, nullptr);
    ASSERT_TRUE(sink);
    for (int i = 0; i < 100; ++i) sink->offer(numbered_line(i));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
}

TEST(RecordSink, ClosedStdoutIsCountedAndTheFileStillGetsEveryLine) {
  TempDir dir;
  Pipe p;
  close(p.r);  // nobody will ever read: write() fails with EPIPE (and raises SIGPIPE)
  p.r = -1;
  SinkOptions o;
  o.stdout_fd = p.w;
  o.file = dir.file("out.ndjson");
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);
  for (int i = 0; i < 10; ++i) sink->offer(numbered_line(i));
  ASSERT_TRUE(sink->flush(5s));
  for (int i = 10; i < 20; ++i) sink->offer(numbered_line(i));
  sink->close(5s);
  const SinkCounters c = sink->counters();
  EXPECT_GE(c.write_errors, 1u);
  EXPECT_NE(sink->last_error().find("Broken pipe"), std::string::npos) << sink->last_error();
  EXPECT_EQ(c.written_lines + c.dropped_lines, 20u);
  EXPECT_GE(c.written_lines, 10u) << "after stdout is gone, lines the file got count as written";
  EXPECT_EQ(split_lines(slurp(o.file)).size(), 20u);
}

TEST(RecordSink, OnlyDestinationGoneCountsAsDropped) {
  Pipe p;
  close(p.r);
  p.r = -1;
  SinkOptions o;
  o.stdout_fd = p.w;
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);
  for (int i = 0; i < 5; ++i) sink->offer("x");
  ASSERT_TRUE(sink->flush(5s));
  sink->offer("y");
  EXPECT_FALSE(sink->close(5s));
  EXPECT_EQ(sink->counters().written_lines, 0u);
  EXPECT_EQ(sink->counters().dropped_lines, 6u);
  EXPECT_EQ(sink->counters().dropped_write_failed, 6u);
  EXPECT_EQ(describe_output(sink->counters()), "0 lines written, 6 dropped (write failed 6)");
}

TEST(RecordSink, LinesFromManyProducersNeverInterleave) {
  TempDir dir;
  Pipe p;
  SinkOptions o;
  o.stdout_fd = p.w;
  o.file = dir.file("out.ndjson");
  o.rotate_bytes = 0;
  PipeReader reader(p.r);
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 250;
  {
    auto sink = RecordSink::open(o, nullptr);
    ASSERT_TRUE(sink);
    std::vector<std::thread> producers;
    for (int t = 0; t < kProducers; ++t) {
      producers.emplace_back([&sink, t] {
        for (int i = 0; i < kPerProducer; ++i) {
          // Longer than PIPE_BUF: the pipe sees several writes per line.
          std::string line = "p" + std::to_string(t) + " " + std::to_string(i) + " ";
          line.append(3000 + static_cast<std::size_t>(i % 7) * 211, static_cast<char>('a' + t));
          EXPECT_TRUE(sink->offer(std::move(line)));
        }
      });
    }
    for (auto& th : producers) th.join();
    ASSERT_TRUE(sink->close(5s));
    EXPECT_EQ(sink->counters().written_lines, static_cast<std::uint64_t>(kProducers * kPerProducer));
  }
  close(p.w);
  p.w = -1;
  const std::string piped = reader.finish();
  const std::string filed = slurp(o.file);
  EXPECT_EQ(piped, filed);
  const auto lines = split_lines(filed);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kProducers * kPerProducer));
  int next[kProducers] = {};
  for (const std::string& line : lines) {
    ASSERT_EQ(line[0], 'p');
    const int t = line[1] - '0';
    ASSERT_TRUE(t >= 0 && t < kProducers) << line.substr(0, 20);
    const std::size_t sp = line.find(' ', 3);
    const int i = std::stoi(line.substr(3, sp - 3));
    EXPECT_EQ(i, next[t]++) << "producer order kept";
    const std::size_t pad = line.size() - sp - 1;
    EXPECT_EQ(pad, 3000 + static_cast<std::size_t>(i % 7) * 211);
    EXPECT_EQ(line.find_first_not_of(static_cast<char>('a' + t), sp + 1), std::string::npos) << "interleaved";
  }
}

TEST(RecordSink, QueueBytesBoundDrops) {
  Pipe p;
  ASSERT_GE(fcntl(p.w, F_SETPIPE_SZ, 4096), 4096);
  SinkOptions o;
  o.stdout_fd = p.w;
  o.queue_bytes = 64 << 10;
  o.shutdown_timeout = 50ms;
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);
  int accepted = 0;
  for (int i = 0; i < 200; ++i) accepted += sink->offer(std::string(10'000, 'q')) ? 1 : 0;
  EXPECT_LE(accepted, 6 + 6) << "the queue (64 KiB) and the writer's batch";
  EXPECT_GE(sink->dropped(), 188u);
}

TEST(RecordSink, OpenFailuresNameThePath) {
  TempDir dir;
  std::string error;
  EXPECT_FALSE(RecordSink::open(file_only(dir.file("no/such/dir/out.ndjson")), &error));
  EXPECT_NE(error.find("no/such/dir/out.ndjson: cannot open"), std::string::npos) << error;
  fs::create_directory(dir.file("adir"));
  EXPECT_FALSE(RecordSink::open(file_only(dir.file("adir")), &error));
  EXPECT_NE(error.find("adir"), std::string::npos) << error;
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_FALSE(RecordSink::open(file_only(dir.file("fifo")), &error)) << "a FIFO without a reader must not hang";
  SinkOptions o;
  o.stdout_fd = 1000;  // not open
  EXPECT_FALSE(RecordSink::open(o, &error));
  EXPECT_NE(error.find("stdout"), std::string::npos) << error;
}

TEST(RecordSink, FollowsAFileMovedAway) {
  TempDir dir;
  const std::string path = dir.file("out.ndjson");
  SinkOptions o = file_only(path);
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);
  sink->offer("one");
  ASSERT_TRUE(sink->flush(5s));
  fs::rename(path, path + ".moved");  // an outside logrotate
  sink->offer("two");
  ASSERT_TRUE(sink->close(5s));
  EXPECT_EQ(slurp(path + ".moved"), "one\n");
  EXPECT_EQ(slurp(path), "two\n");
}

// Records name processes, models and routes: the file is the agent's alone
// (0600), or its group's to read (0640), rotated files too, and an earlier
// run's wider file is narrowed. A second sink on the same file is refused.
TEST(RecordSink, FilesAreCreatedPrivateAndLockedAgainstASecondAgent) {
  TempDir dir;
  const std::string path = dir.file("out.ndjson");
  const auto mode_of = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0u;
  };
  const mode_t old_umask = umask(0);  // the mode is the sink's, not the umask's
  SinkOptions o = file_only(path);
  o.rotate_bytes = 4096;
  auto sink = RecordSink::open(o, nullptr);
  ASSERT_TRUE(sink);
  EXPECT_EQ(mode_of(path), 0600u);
  std::string error;
  EXPECT_FALSE(RecordSink::open(o, &error)) << "two agents appending to one file";
  EXPECT_NE(error.find("another infertapd writes this file"), std::string::npos) << error;
  for (int i = 0; i < 40; ++i) sink->offer(numbered_line(i, 200, 1));
  ASSERT_TRUE(sink->close(5s));
  EXPECT_GE(sink->counters().rotations, 1u);
  EXPECT_EQ(mode_of(path + ".1"), 0600u);
  EXPECT_EQ(mode_of(path), 0600u);

  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  o.group = std::to_string(getgid());
  auto grouped = RecordSink::open(o, &error);
  ASSERT_TRUE(grouped) << error;
  EXPECT_EQ(mode_of(path), 0640u) << "an existing world-readable file is narrowed";
  grouped->close(1s);
  o.group = "no-such-group-infertap";
  EXPECT_FALSE(RecordSink::open(o, &error));
  EXPECT_NE(error.find("output.group"), std::string::npos) << error;
  umask(old_umask);
}

TEST(RecordSink, OptionsFromConfig) {
  daemon::DaemonConfig c;
  c.output.to_stdout = false;
  c.output.file = "/x";
  c.output.rotate_bytes = 4096;
  c.output.keep_files = 2;
  c.limits.sink_queue_lines = 3;
  c.limits.sink_queue_bytes = 1 << 20;
  c.output.group = "adm";
  const SinkOptions o = daemon::sink_options(c);
  EXPECT_EQ(o.group, "adm");
  EXPECT_FALSE(o.to_stdout);
  EXPECT_EQ(o.file, "/x");
  EXPECT_EQ(o.rotate_bytes, 4096u);
  EXPECT_EQ(o.keep_files, 2);
  EXPECT_EQ(o.queue_lines, 3u);
  EXPECT_EQ(o.queue_bytes, 1u << 20);
}

}  // namespace
}  // namespace infertap::output
