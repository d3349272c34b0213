// The one spelling of each attach method (flags and configuration files).
#include <gtest/gtest.h>

#include "capture/loader.h"

namespace infertap::capture {
namespace {

TEST(AttachMethodNames, EachMethodParsesBackFromItsName) {
  for (AttachMethod m : kAttachMethods) EXPECT_EQ(parse_attach_method(to_string(m)), m) << to_string(m);
  EXPECT_EQ(to_string(AttachMethod::automatic), "auto");
  EXPECT_EQ(to_string(AttachMethod::socket_tracepoints), "sock");
  EXPECT_EQ(to_string(AttachMethod::tracepoints), "tracepoint");
  EXPECT_EQ(to_string(AttachMethod::raw_tracepoints), "raw_tp");
}

TEST(AttachMethodNames, CaseIsIgnoredAndOtherNamesAreRefused) {
  EXPECT_EQ(parse_attach_method("RAW_TP"), AttachMethod::raw_tracepoints);
  EXPECT_EQ(parse_attach_method("Sock"), AttachMethod::socket_tracepoints);
  EXPECT_EQ(parse_attach_method(""), std::nullopt);
  EXPECT_EQ(parse_attach_method("kprobe"), std::nullopt);
  EXPECT_EQ(parse_attach_method("raw_tp "), std::nullopt);
}

}  // namespace
}  // namespace infertap::capture
