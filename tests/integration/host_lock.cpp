// The integration tests load BPF programs, bind fixed loopback ports and start
// nginx, HAProxy and Prometheus: two runs on one host would see each other's
// traffic. Each run holds one host-wide lock for its lifetime, taken before any
// test starts. A caller that already holds it (scripts/test.sh) says so with
// INFERTAP_HOST_LOCK_HELD=1.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

constexpr const char* kLockPath = "/tmp/infertap-integration.lock";

struct HostLock {
  int fd = -1;
  HostLock() {
    if (std::getenv("INFERTAP_HOST_LOCK_HELD") != nullptr) return;
    fd = ::open(kLockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return;
    std::fprintf(stderr, "integration tests: waiting for %s (another run on this host)\n", kLockPath);
    ::flock(fd, LOCK_EX);
  }
  ~HostLock() {
    if (fd >= 0) ::close(fd);
  }
};

const HostLock host_lock;

}  // namespace
