// /proc/PID/maps lines: the mapped files a TLS library search looks at.
#include "capture/proc_maps.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace infertap::capture {
namespace {

TEST(ProcMaps, ReadsAnExecutableFileMapping) {
  auto m = parse_maps_line("7f1c2a400000-7f1c2a45d000 r-xp 0001f000 fe:01 333427    /usr/lib/x86_64-linux-gnu/libssl.so.3\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->start, 0x7f1c2a400000u);
  EXPECT_EQ(m->end, 0x7f1c2a45d000u);
  EXPECT_TRUE(m->executable);
  EXPECT_EQ(m->dev_major, 0xfeu);
  EXPECT_EQ(m->dev_minor, 1u);
  EXPECT_EQ(m->inode, 333427u);
  EXPECT_EQ(m->path, "/usr/lib/x86_64-linux-gnu/libssl.so.3");
  EXPECT_FALSE(m->deleted);
  EXPECT_EQ(base_name(m->path), "libssl.so.3");
}

TEST(ProcMaps, AFileReplacedOnDiskIsMarkedDeleted) {
  auto m = parse_maps_line("55d0-55e0 r-xp 00000000 08:02 42 /opt/app/lib/libssl.so.1.1 (deleted)");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->deleted);
  EXPECT_EQ(m->path, "/opt/app/lib/libssl.so.1.1");
}

TEST(ProcMaps, PathsWithSpacesKeepThem) {
  auto m = parse_maps_line("1000-2000 r--p 00000000 08:02 7 /srv/my models/lib x.so");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->executable);
  EXPECT_EQ(m->path, "/srv/my models/lib x.so");
}

TEST(ProcMaps, AnonymousPseudoAndMalformedLinesAreNotFiles) {
  for (const char* line : {"7ffd-7ffe rw-p 00000000 00:00 0 [stack]", "7ffd-7ffe r-xp 00000000 00:00 0 [vdso]",
                           "7ffd-7ffe rw-p 00000000 00:00 0", "", "garbage", "1000-zz r-xp 0 08:02 7 /x",
                           "1000-2000 r-xp 0 0802 7 /x", "1000-2000 r 0 08:02 7 /x",
                           "1000-2000 r-xp 0 08:02 notanumber /x"})
    EXPECT_FALSE(parse_maps_line(line)) << line;
}

// Every line of this process's own maps that names a file parses, and the
// test binary itself is among them, executable.
TEST(ProcMaps, ThisProcessMapsItsOwnBinary) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool found_self = false;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  while (std::getline(maps, line)) {
    if (line.find(" /") == std::string::npos) continue;
    auto m = parse_maps_line(line);
    ASSERT_TRUE(m) << line;
    if (m->path == self && m->executable) found_self = true;
  }
  EXPECT_TRUE(found_self) << self;
}

}  // namespace
}  // namespace infertap::capture
