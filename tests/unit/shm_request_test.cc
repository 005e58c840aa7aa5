// The shm socket's decision on one request (transport/shm/shm_request.h):
// from its 24 bytes and whether a descriptor came, what is looked up, kept
// or refused.
#include "transport/shm/shm_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "transport/shm/relay.h"

namespace hixl::transport::shm {
namespace {

std::string Frame(uint32_t type, uint64_t a, uint64_t b = 0) {
  Msg m;
  m.type = type;
  m.a = a;
  m.b = b;
  return std::string(reinterpret_cast<const char*>(&m), sizeof(m));
}

TEST(ShmRequest, ASegmentIsLookedUpByItsId) {
  for (bool fd_came : {false, true}) {  // a descriptor sent with it is not kept
    RequestDecision d = DecideRequest(Frame(kGetSegment, 7, 99), fd_came);
    EXPECT_EQ(d.action, RequestDecision::kGetSegment);
    EXPECT_EQ(d.segment, 7u);
    EXPECT_EQ(d.reply.type, kGetSegment);
    EXPECT_EQ(d.reply.status, 0);
    EXPECT_TRUE(d.why.empty());
  }
  EXPECT_EQ(DecideRequest(Frame(kGetSegment, UINT32_MAX), false).segment, UINT32_MAX);
}

TEST(ShmRequest, ASegmentIdPast32BitsIsRefusedNotCut) {
  // It used to be cut to its low 32 bits: 2^32 + 1 asked for segment 1.
  RequestDecision d = DecideRequest(Frame(kGetSegment, (uint64_t{1} << 32) + 1), false);
  EXPECT_EQ(d.action, RequestDecision::kRefuse);
  EXPECT_EQ(d.reply.type, kGetSegment);
  EXPECT_EQ(d.reply.status, HIXL_ERR_INVALID_ARG);
}

TEST(ShmRequest, ARelayChannelNeedsItsDescriptorAndItsSize) {
  RequestDecision d = DecideRequest(Frame(kOpenRelay, RelayChannelBytes()), true);
  EXPECT_EQ(d.action, RequestDecision::kOpenRelay);
  EXPECT_EQ(d.reply.type, kOpenRelay);
  EXPECT_EQ(d.reply.status, 0);

  d = DecideRequest(Frame(kOpenRelay, RelayChannelBytes()), false);
  EXPECT_EQ(d.action, RequestDecision::kRefuse);
  EXPECT_EQ(d.reply.status, HIXL_ERR_INVALID_ARG);

  for (uint64_t size : {uint64_t{0}, RelayChannelBytes() - 1, RelayChannelBytes() + 1, UINT64_MAX}) {
    d = DecideRequest(Frame(kOpenRelay, size), true);
    EXPECT_EQ(d.action, RequestDecision::kRefuse) << size;
    EXPECT_EQ(d.reply.status, HIXL_ERR_INVALID_ARG) << size;
    EXPECT_FALSE(d.why.empty()) << size;
  }
}

TEST(ShmRequest, UnknownTypesAndWrongSizesAreRefused) {
  for (uint32_t type : {0u, 3u, 0x63u, UINT32_MAX}) {
    RequestDecision d = DecideRequest(Frame(type, 1), true);
    EXPECT_EQ(d.action, RequestDecision::kRefuse) << type;
    EXPECT_EQ(d.reply.type, type);
    EXPECT_EQ(d.reply.status, HIXL_ERR_INVALID_ARG);
    EXPECT_TRUE(d.why.empty());
  }
  const std::string whole = Frame(kGetSegment, 1);
  for (size_t n : {size_t{0}, size_t{1}, sizeof(Msg) - 1}) {
    RequestDecision d = DecideRequest(whole.substr(0, n), false);
    EXPECT_EQ(d.action, RequestDecision::kRefuse) << n;
    EXPECT_EQ(d.reply.status, HIXL_ERR_INVALID_ARG);
  }
  EXPECT_EQ(DecideRequest(whole + "x", false).action, RequestDecision::kRefuse);
}

}  // namespace
}  // namespace hixl::transport::shm
