// The request heads the metrics endpoint reads (daemon/http_request.h).
#include <gtest/gtest.h>

#include "daemon/http_request.h"

namespace infertap::daemon {
namespace {

TEST(RequestHead, ReadsTheLineAndTheHeadersItNeeds) {
  RequestHead h;
  const std::string raw = "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Basic dTpw\r\n\r\nrest";
  ASSERT_EQ(parse_request_head(raw, 8192, &h), HeadParse::complete);
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/metrics?x=1");
  EXPECT_EQ(h.path, "/metrics");
  EXPECT_EQ(h.authorization, "Basic dTpw");
  EXPECT_FALSE(h.has_body);
  EXPECT_EQ(h.head_bytes, raw.size() - 4);
  // Bare newlines, as some hand-written probes send.
  ASSERT_EQ(parse_request_head("GET /healthz HTTP/1.0\n\n", 8192, &h), HeadParse::complete);
  EXPECT_EQ(h.path, "/healthz");
}

TEST(RequestHead, BodiesAreNoticed) {
  RequestHead h;
  ASSERT_EQ(parse_request_head("POST /metrics HTTP/1.1\r\ncontent-length: 1000000000\r\n\r\n", 8192, &h),
            HeadParse::complete);
  EXPECT_TRUE(h.has_body);
  ASSERT_EQ(parse_request_head("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 8192, &h), HeadParse::complete);
  EXPECT_FALSE(h.has_body);
  ASSERT_EQ(parse_request_head("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 8192, &h), HeadParse::complete);
  EXPECT_TRUE(h.has_body);
}

TEST(RequestHead, IncompleteTooLargeAndMalformed) {
  RequestHead h;
  EXPECT_EQ(parse_request_head("GET /metrics HTTP/1.1\r\nHost: a\r\n", 8192, &h), HeadParse::incomplete);
  EXPECT_EQ(parse_request_head("", 8192, &h), HeadParse::incomplete);
  const std::string big = "GET / HTTP/1.1\r\nX: " + std::string(2000, 'a');
  EXPECT_EQ(parse_request_head(big, 1024, &h), HeadParse::too_large);
  EXPECT_EQ(parse_request_head(big + "\r\n\r\n", 1024, &h), HeadParse::too_large);
  EXPECT_EQ(parse_request_head(big + "\r\n\r\n", 4096, &h), HeadParse::complete);
  for (const char* bad : {"\r\n\r\n", "GET\r\n\r\n", "GET /\r\n\r\n", "get / HTTP/1.1\r\n\r\n", "GET / HTTP/2.0\r\n\r\n",
                          "GET / HTTP/1.1\r\nno colon\r\n\r\n", "GET / HTTP/1.1\r\n: empty name\r\n\r\n",
                          "\x16\x03\x01\x02\x05\x01\x05\x01\xfc\x03\x03\n\n"}) {
    EXPECT_EQ(parse_request_head(bad, 8192, &h), HeadParse::malformed) << bad;
  }
}

TEST(RequestHead, AnswerHeads) {
  EXPECT_EQ(response_head(503, "text/plain", 5),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\n");
  EXPECT_NE(response_head(405, "text/plain", 0, "Allow: GET, HEAD\r\n").find("\r\nAllow: GET, HEAD\r\n\r\n"),
            std::string::npos);
  EXPECT_EQ(reason_phrase(431), "Request Header Fields Too Large");
}

}  // namespace
}  // namespace infertap::daemon
