// The maps userspace writes: the pid, port and cgroup filters (after load),
// and the per-socket verdicts it mutes or forgets.
#include <bpf/bpf.h>

#include <cerrno>

#include "base/clock.h"
#include "capture/loader_internal.h"

namespace infertap::capture {
namespace loading {

// Filter maps exist only after load.
std::string fill_filters(const CaptureConfig& config, infertap_bpf* skel) {
  const auto fill = [](bpf_map* map, const auto& keys, const char* what, const char* many) -> std::string {
    const std::uint8_t one = 1;
    for (const auto& key : keys) {
      if (int e = bpf_map__update_elem(map, &key, sizeof(key), &one, sizeof(one), BPF_ANY))
        return std::string("filling the ") + what + " filter failed (more than " +
               std::to_string(bpf_map__max_entries(map)) + " " + many + "?): " + errstr(e);
    }
    return "";
  };
  std::string err = fill(skel->maps.itap_pid_filter, config.pids, "pid", "pids");
  if (err.empty()) err = fill(skel->maps.itap_port_filter, config.ports, "port", "ports");
  if (err.empty()) err = fill(skel->maps.itap_cgroup_filter, config.cgroup_ids, "cgroup", "cgroups");
  return err;
}

}  // namespace loading

namespace {

// A unix entry made for another socket than the one userspace means (its close
// unseen, the address reused meanwhile). TCP entries (inode 0) always match.
bool another_unix_socket(const itap_conn& entry, std::uint32_t inode) {
  return inode != 0 && entry.transport == ITAP_TRANSPORT_UNIX && entry.ino != inode;
}

}  // namespace

void Capture::mute(std::uint64_t sock_id, std::uint32_t inode) {
  auto* conns = impl_->skel->maps.itap_conns;
  // Keep the entry's follow-hint mark, so the close still uncounts it. The
  // kernel may update other fields meanwhile; a muted socket's are unused.
  // BPF_EXIST: a close that deleted the entry since the lookup wins, and the
  // entry is not brought back for the next socket at that address.
  itap_conn old{};
  if (bpf_map__lookup_elem(conns, &sock_id, sizeof(sock_id), &old, sizeof(old), 0) != 0) return;
  if (another_unix_socket(old, inode)) return;
  itap_conn c{};
  c.verdict = ITAP_VERDICT_MUTED;
  c.hinted = old.hinted;
  c.first_seen_ns = base::monotonic_ns();
  // A unix entry keeps what tells its socket from the next one at this address.
  c.transport = old.transport;
  c.ino = old.ino;
  (void)bpf_map__update_elem(conns, &sock_id, sizeof(sock_id), &c, sizeof(c), BPF_EXIST);
}

bool Capture::knows(std::uint64_t sock_id) const {
  itap_conn entry{};
  return bpf_map__lookup_elem(impl_->skel->maps.itap_conns, &sock_id, sizeof(sock_id), &entry, sizeof(entry), 0) == 0;
}

std::uint64_t Capture::followed_hint_total() const {
  auto* hint = impl_->skel->maps.itap_follow_hint;
  std::vector<std::uint32_t> keys(ITAP_HINT_SLOTS), values(ITAP_HINT_SLOTS);
  std::uint32_t out_batch = 0;
  std::uint32_t count = ITAP_HINT_SLOTS;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  std::uint64_t total = 0;
  if (bpf_map_lookup_batch(bpf_map__fd(hint), nullptr, &out_batch, keys.data(), values.data(), &count, &opts) == 0 ||
      errno == ENOENT) {
    for (std::uint32_t i = 0; i < count; ++i) total += values[i];
    return total;
  }
  for (std::uint32_t slot = 0; slot < ITAP_HINT_SLOTS; ++slot) {  // kernels without batch ops on arrays
    std::uint32_t v = 0;
    if (bpf_map__lookup_elem(hint, &slot, sizeof(slot), &v, sizeof(v), 0) == 0) total += v;
  }
  return total;
}

void Capture::forget(std::uint64_t sock_id, std::uint32_t inode) {
  auto* conns = impl_->skel->maps.itap_conns;
  if (inode != 0) {
    itap_conn entry{};
    if (bpf_map__lookup_elem(conns, &sock_id, sizeof(sock_id), &entry, sizeof(entry), 0) != 0) return;
    // Between this lookup and the delete a newer socket could still take the
    // address: microseconds, against the agent's lag behind the kernel.
    if (another_unix_socket(entry, inode)) return;
  }
  (void)bpf_map__delete_elem(conns, &sock_id, sizeof(sock_id), 0);
}

}  // namespace infertap::capture
