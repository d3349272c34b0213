// The names streams are grouped and labelled by (core/labels.h).
#include <gtest/gtest.h>

#include <sys/socket.h>

#include "core/labels.h"

namespace infertap::core {
namespace {

TEST(Labels, GroupKeys) {
  EXPECT_EQ(container_key(""), "(host)");
  EXPECT_EQ(container_key("/"), "(host)");
  EXPECT_EQ(container_key("/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"),
            "docker:0123456789ab");
  EXPECT_EQ(container_key("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/"
                         "cri-containerd-fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210.scope"),
            "cri-containerd:fedcba987654");
  EXPECT_EQ(container_key("/docker/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), "docker:0123456789ab");
  EXPECT_EQ(container_key("/system.slice/vllm.service"), "vllm.service");
  EXPECT_EQ(container_key("/user.slice/user-1000.slice/session-2.scope"), "session-2");
  EXPECT_EQ(route_of("/v1/chat/completions?stream=1", "(none)"), "/v1/chat/completions");
  EXPECT_EQ(route_of("", "(none)"), "(none)");
  EXPECT_EQ(process_key("python3", 12), "python3[12]");
  EXPECT_EQ(model_key(""), "(unknown)");
}

TEST(Labels, AddressWithoutPortAndModelFallback) {
  Endpoint v4;
  v4.family = AF_INET;
  v4.addr = {10, 0, 0, 7};
  v4.port = 51234;
  EXPECT_EQ(address_of(v4), "10.0.0.7");
  Endpoint v6;
  v6.family = AF_INET6;
  v6.addr[15] = 1;
  v6.port = 8000;
  EXPECT_EQ(address_of(v6), "::1");
  EXPECT_EQ(address_of(Endpoint{}), "");
  StreamRecord r;
  r.request_model = "asked";
  EXPECT_EQ(model_of(r), "asked");
  r.model = "answered";
  EXPECT_EQ(model_of(r), "answered");
}

}  // namespace
}  // namespace infertap::core
