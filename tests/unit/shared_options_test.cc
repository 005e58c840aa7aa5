// The one parser of the switches every front door shares
// (bootstrap::ParseSharedOption): the world's HIXL_* variables and the
// engine's options mean the same for the same text.
#include <gtest/gtest.h>

#include <string>

#include "bootstrap/env.h"

namespace hixl::bootstrap {
namespace {

TEST(SharedOptions, EverySwitchHasOneMeaningAndEmptyMeansOn) {
  for (const char* sw : {"shm_cma", "shm_thp"}) {
    for (const char* off : {"0", "false", "no", "off"}) {
      SharedOptions o;
      ASSERT_TRUE(ParseSharedOption(sw, sw, off, &o).ok()) << sw << "=" << off;
      EXPECT_FALSE(std::string(sw) == "shm_cma" ? o.shm_cma : o.shm_thp) << sw << "=" << off;
    }
    for (const char* on : {"1", "true", "yes", "on", ""}) {
      SharedOptions o;
      o.shm_cma = o.shm_thp = false;
      ASSERT_TRUE(ParseSharedOption(sw, sw, on, &o).ok()) << sw << "=" << on;
      EXPECT_TRUE(std::string(sw) == "shm_cma" ? o.shm_cma : o.shm_thp) << sw << "=" << on;
    }
    SharedOptions o;
    Status s = ParseSharedOption(sw, "option shm_x", "maybe", &o);
    EXPECT_EQ(s.code(), Errc::kInvalidArg);
    EXPECT_NE(s.message().find("option shm_x='maybe'"), std::string::npos) << s.message();
    EXPECT_TRUE(o.shm_cma && o.shm_thp);  // unchanged
  }
}

TEST(SharedOptions, NumbersTransportsAndDevices) {
  SharedOptions o;
  ASSERT_TRUE(ParseSharedOption("timeout_ms", "timeout_ms", "250", &o).ok());
  EXPECT_EQ(o.timeout_ms, 250);
  EXPECT_FALSE(ParseSharedOption("timeout_ms", "timeout_ms", "", &o).ok());
  EXPECT_FALSE(ParseSharedOption("timeout_ms", "timeout_ms", "0", &o).ok());
  EXPECT_FALSE(ParseSharedOption("notify_queue_depth", "q", "soon", &o).ok());
  ASSERT_TRUE(ParseSharedOption("notify_queue_depth", "q", "3", &o).ok());
  EXPECT_EQ(o.notify_queue_depth, 3);
  ASSERT_TRUE(ParseSharedOption("transport", "t", "shm", &o).ok());
  EXPECT_EQ(o.transport, TransportChoice::kShm);
  ASSERT_TRUE(ParseSharedOption("transport", "t", "", &o).ok());
  EXPECT_EQ(o.transport, TransportChoice::kAuto);
  EXPECT_FALSE(ParseSharedOption("transport", "t", "SHM", &o).ok());
  ASSERT_TRUE(ParseSharedOption("net_dev", "d", "eth0", &o).ok());
  EXPECT_EQ(o.net_dev, "eth0");
  EXPECT_EQ(ParseSharedOption("no_such", "x", "1", &o).code(), Errc::kInternal);
  EXPECT_EQ(TransportChoiceName(TransportChoice::kUcx), "ucx");
  // Every switch of the table is one the parser knows.
  for (const SharedSwitch& sw : kSharedSwitches) {
    SharedOptions p;
    EXPECT_NE(ParseSharedOption(sw.option, sw.variable, "1", &p).code(), Errc::kInternal) << sw.option;
  }
}

}  // namespace
}  // namespace hixl::bootstrap
