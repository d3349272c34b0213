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

TEST(Labels, QueryStringsAreDroppedUnlessTheirNameIsKept) {
  PathPrivacy none;
  EXPECT_EQ(sanitize_target("/v1/chat/completions?api_key=sk-live-1234&stream=1", none), "/v1/chat/completions");
  EXPECT_EQ(sanitize_target("/v1/chat/completions#frag", none), "/v1/chat/completions");
  PathPrivacy keep;
  keep.keep_query_params = {"api-version", "stream"};
  EXPECT_EQ(sanitize_target("/openai/chat/completions?api-version=2024-02-01&key=s3cr3t&stream", keep),
            "/openai/chat/completions?api-version=2024-02-01&stream");
  EXPECT_EQ(sanitize_target("/v1/chat/completions?key=s3cr3t", keep), "/v1/chat/completions");
  EXPECT_EQ(sanitize_target("/v1/x?api-versionX=1&=2&&", keep), "/v1/x");
  // An absolute-form target (a proxy request) loses scheme, credentials and host.
  EXPECT_EQ(sanitize_target("http://user:hunter2@10.0.0.1:8000/v1/completions?token=abc", none), "/v1/completions");
  EXPECT_EQ(sanitize_target("HTTPS://host", none), "/");
  EXPECT_EQ(sanitize_target("*", none), "*");
  EXPECT_EQ(sanitize_target("", none), "");
}

TEST(Labels, IdAndSecretLikeSegmentsBecomeId) {
  for (const char* secret : {"12345", "0", "3f2b8c1e-7a4d-4e2b-9c1a-5d6e7f8a9b0c", "deadbeef01", "9f86d081884c7d65",
                             "sk-proj-AbCdEfGh1234IjKlMnOp5678", "tok_9fQ2xLm7Rk3pVw8ZbN4cYd6T", "dGhpcyBpcyBhIHNlY3JldA==",
                             "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc", "user@example.com",
                             "01ARZ3NDEKTSV4RRFFQ69G5FAV", "resp_67ccd2bed1ec8190b14f", "aB3dE5gH9k",
                             "file-abc123def456ghi"}) {
    EXPECT_TRUE(id_like_segment(secret)) << secret;
    EXPECT_EQ(normalize_route(std::string("/v1/x/") + secret + "/y"), "/v1/x/{id}/y") << secret;
  }
  for (const char* word : {"v1", "v1beta", "chat", "completions", "streamGenerateContent", "gpt-4o-2024-08-06",
                           "Meta-Llama-3.1-70B-Instruct", "text-embedding-3-large", "deadbeef", "{id}", "messages",
                           "api-version", "2024-02-01", "models", "gemini-1.5-pro:streamGenerateContent", ""}) {
    EXPECT_FALSE(id_like_segment(word)) << word;
  }
  EXPECT_EQ(normalize_route("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(normalize_route("/"), "/");
  EXPECT_EQ(normalize_route("/v1/users/42/"), "/v1/users/{id}/");
  PathPrivacy raw;
  raw.normalize_routes = false;
  EXPECT_EQ(sanitize_target("/v1/users/42?x=1", raw), "/v1/users/42");
  EXPECT_EQ(sanitize_target("/v1/users/42?x=1", PathPrivacy{}), "/v1/users/{id}");
  // The route of a sanitized path is the path without its kept query.
  PathPrivacy keep;
  keep.keep_query_params = {"api-version"};
  EXPECT_EQ(route_of(sanitize_target("/d/1234/chat?api-version=1", keep)), "/d/{id}/chat");
}

}  // namespace
}  // namespace infertap::core
