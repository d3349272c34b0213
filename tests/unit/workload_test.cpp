// Container / pod identity from synthetic cgroup paths and a fake pod log
// directory; process name globs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/labels.h"
#include "daemon/workload.h"

namespace infertap::daemon {
namespace {

const std::string kId = "4e1c9a7b2d3f4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d";
const std::string kUid = "8d5e3f0a-1b2c-4d3e-9f8a-7b6c5d4e3f2a";

std::string underscored(std::string uid) {
  for (char& c : uid) {
    if (c == '-') c = '_';
  }
  return uid;
}

TEST(ParseCgroupPath, SystemdDriverKubernetes) {
  for (const std::string runtime : {"cri-containerd-", "crio-", "docker-"}) {
    const std::string path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscored(kUid) +
                             ".slice/" + runtime + kId + ".scope";
    const CgroupWorkload w = parse_cgroup_path(path);
    EXPECT_EQ(w.container_id, kId) << path;
    EXPECT_EQ(w.pod_uid, kUid) << path;
  }
  // Guaranteed QoS: no qos slice.
  const CgroupWorkload g =
      parse_cgroup_path("/kubepods.slice/kubepods-pod" + underscored(kUid) + ".slice/cri-containerd-" + kId + ".scope");
  EXPECT_EQ(g.pod_uid, kUid);
  EXPECT_EQ(g.container_id, kId);
}

TEST(ParseCgroupPath, CgroupfsDriver) {
  CgroupWorkload w = parse_cgroup_path("/kubepods/besteffort/pod" + kUid + "/" + kId);
  EXPECT_EQ(w.pod_uid, kUid);
  EXPECT_EQ(w.container_id, kId);
  w = parse_cgroup_path("/docker/" + kId);
  EXPECT_EQ(w.container_id, kId);
  EXPECT_EQ(w.pod_uid, "");
}

TEST(ParseCgroupPath, PlainDockerAndNested) {
  CgroupWorkload w = parse_cgroup_path("/system.slice/docker-" + kId + ".scope");
  EXPECT_EQ(w.container_id, kId);
  EXPECT_EQ(w.pod_uid, "");
  // systemd inside the container: the container's scope is still the id.
  w = parse_cgroup_path("/system.slice/docker-" + kId + ".scope/init.scope");
  EXPECT_EQ(w.container_id, kId);
}

TEST(ParseCgroupPath, NotContainers) {
  for (const std::string& path : std::vector<std::string>{std::string(""), std::string("/"), std::string("/system.slice/vllm.service"), std::string("/user.slice/user-0.slice/session-3.scope"),
        std::string("/kubepods.slice/kubepods-burstable.slice"),
        // crio's monitor process, not the container
        "/kubepods.slice/kubepods-pod" + underscored(kUid) + ".slice/crio-conmon-" + kId + ".scope",
        // too short to be an id, not a uid
        std::string("/docker/4e1c9a7b2d3f"), std::string("/kubepods/pod1234")}) {
    const CgroupWorkload w = parse_cgroup_path(path);
    EXPECT_EQ(w.container_id, "") << path;
    if (path.find("conmon") == std::string::npos) {
      EXPECT_EQ(w.pod_uid, "") << path;
    }
  }
}

class FakeNode : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/infertap-workload-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ + "/pods/inference_vllm-0_" + kUid + "/vllm");
    std::ofstream(root_ + "/pods/inference_vllm-0_" + kUid + "/vllm/0.log") << "";
    // A two-container pod: names only through the container log symlinks.
    std::filesystem::create_directories(root_ + "/pods/gw_router-7_" + kUid2 + "/envoy");
    std::filesystem::create_directories(root_ + "/pods/gw_router-7_" + kUid2 + "/router");
    std::filesystem::create_directories(root_ + "/containers");
    std::filesystem::create_symlink(root_ + "/pods/gw_router-7_" + kUid2 + "/router/0.log",
                                    root_ + "/containers/router-7_gw_router-" + kId2 + ".log");
    sources_.pods_dir = root_ + "/pods";
    sources_.containers_dir = root_ + "/containers";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  const std::string kUid2 = "11111111-2222-4333-8444-555555555555";
  const std::string kId2 = std::string(64, 'b');
  std::string root_;
  KubernetesSources sources_;
};

TEST_F(FakeNode, NamesFromThePodDirectory) {
  const PodNames n = find_pod_names(sources_, kUid, kId);
  EXPECT_EQ(n.k8s_namespace, "inference");
  EXPECT_EQ(n.pod, "vllm-0");
  EXPECT_EQ(n.container, "vllm");  // the pod's only container
}

TEST_F(FakeNode, ContainerNameOfAMultiContainerPodNeedsTheContainerLog) {
  PodNames n = find_pod_names(sources_, kUid2, kId2);
  EXPECT_EQ(n.k8s_namespace, "gw");
  EXPECT_EQ(n.pod, "router-7");
  EXPECT_EQ(n.container, "router");
  // Another container of the same pod, no log symlink: pod known, container not guessed.
  n = find_pod_names(sources_, kUid2, std::string(64, 'c'));
  EXPECT_EQ(n.pod, "router-7");
  EXPECT_EQ(n.container, "");
}

TEST_F(FakeNode, UnknownPodAndDownwardApi) {
  const std::string other = "99999999-2222-4333-8444-555555555555";
  PodNames n = find_pod_names(sources_, other, kId);
  EXPECT_EQ(n.pod, "");
  EXPECT_EQ(n.k8s_namespace, "");
  sources_.self_pod_uid = other;
  sources_.self_namespace = "infertap";
  sources_.self_pod = "infertap-abcde";
  n = find_pod_names(sources_, other, kId);
  EXPECT_EQ(n.k8s_namespace, "infertap");
  EXPECT_EQ(n.pod, "infertap-abcde");
}

TEST_F(FakeNode, ResolverFillsIdentityAndRetriesMissingNames) {
  WorkloadResolver resolver(sources_, /*retry_ns=*/1000);
  core::ConnIdentity id;
  const std::string late = "22222222-2222-4333-8444-555555555555";
  id.cgroup_path = "/kubepods.slice/kubepods-pod" + underscored(late) + ".slice/cri-containerd-" + kId + ".scope";
  resolver.fill(id, 1);
  EXPECT_EQ(id.pod_uid, late);
  EXPECT_EQ(id.container_id, kId);
  EXPECT_EQ(id.k8s_pod, "");  // kubelet has not made the directory yet
  std::filesystem::create_directories(root_ + "/pods/ns1_late-pod_" + late + "/app");
  resolver.fill(id, 500);  // cached: not looked up again before retry_ns
  EXPECT_EQ(id.k8s_pod, "");
  resolver.fill(id, 2000);
  EXPECT_EQ(id.k8s_namespace, "ns1");
  EXPECT_EQ(id.k8s_pod, "late-pod");
  EXPECT_EQ(id.k8s_container, "app");
  EXPECT_EQ(core::container_key(id), "ns1/late-pod/app");

  core::ConnIdentity host;
  host.cgroup_path = "/system.slice/vllm.service";
  resolver.fill(host, 1);
  EXPECT_EQ(host.container_id, "");
  EXPECT_EQ(host.pod_uid, "");
  EXPECT_EQ(core::container_key(host), "vllm.service");
}

TEST(CommMatches, Globs) {
  EXPECT_TRUE(comm_matches({}, "anything"));
  EXPECT_TRUE(comm_matches({"vllm*", "python3"}, "vllm-server"));
  EXPECT_TRUE(comm_matches({"vllm*", "python3"}, "python3"));
  EXPECT_FALSE(comm_matches({"vllm*", "python3"}, "python3.11"));
  EXPECT_FALSE(comm_matches({"vllm*"}, "my-vllm"));
  EXPECT_TRUE(comm_matches({"python?"}, "python3"));
  EXPECT_FALSE(comm_matches({"vllm*"}, ""));
}

}  // namespace
}  // namespace infertap::daemon
