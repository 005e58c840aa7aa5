// The one parser of the switches every front door shares
// (bootstrap::ParseSharedOption): the world's HIXL_* variables and the
// engine's options mean the same for the same text.  The transports'
// switches are theirs (tests/unit/transport_options_test.cc).
#include <gtest/gtest.h>

#include <string>

#include "bootstrap/env.h"

namespace hixl::bootstrap {
namespace {

TEST(SharedOptions, NumbersTransportsAndDevices) {
  SharedOptions o;
  ASSERT_TRUE(ParseSharedOption("timeout_ms", "timeout_ms", "250", &o).ok());
  EXPECT_EQ(o.timeout_ms, 250);
  EXPECT_FALSE(ParseSharedOption("timeout_ms", "timeout_ms", "", &o).ok());
  EXPECT_FALSE(ParseSharedOption("timeout_ms", "timeout_ms", "0", &o).ok());
  Status bad = ParseSharedOption("notify_queue_depth", "option q", "soon", &o);
  EXPECT_EQ(bad.code(), Errc::kInvalidArg);
  EXPECT_NE(bad.message().find("option q='soon'"), std::string::npos) << bad.message();
  ASSERT_TRUE(ParseSharedOption("notify_queue_depth", "q", "3", &o).ok());
  EXPECT_EQ(o.notify_queue_depth, 3);
  // A transport's name is kept as written; the transports check it.
  ASSERT_TRUE(ParseSharedOption("transport", "t", "shm", &o).ok());
  EXPECT_EQ(o.transport, "shm");
  ASSERT_TRUE(ParseSharedOption("transport", "t", "auto", &o).ok());
  EXPECT_EQ(o.transport, "");
  ASSERT_TRUE(ParseSharedOption("transport", "t", "", &o).ok());
  EXPECT_EQ(o.transport, "");
  ASSERT_TRUE(ParseSharedOption("net_dev", "d", "eth0", &o).ok());
  EXPECT_EQ(o.net_dev, "eth0");
  EXPECT_EQ(ParseSharedOption("no_such", "x", "1", &o).code(), Errc::kInternal);
  EXPECT_EQ(ParseSharedOption("shm_cma", "x", "1", &o).code(), Errc::kInternal);  // shm's, not shared
  // Every switch of the table is one the parser knows.
  for (const SharedSwitch& sw : kSharedSwitches) {
    SharedOptions p;
    EXPECT_NE(ParseSharedOption(sw.option, sw.variable, "1", &p).code(), Errc::kInternal) << sw.option;
  }
}

}  // namespace
}  // namespace hixl::bootstrap
