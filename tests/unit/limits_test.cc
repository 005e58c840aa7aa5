// Everything a peer sends is checked against hard limits before it is used:
// frame headers before their bodies, counts and lengths before allocations,
// region tables against their own rules, shm keys and relay channels against
// what is really mapped.  One test per limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/socket.h"
#include "bootstrap/control.h"
#include "bootstrap/store.h"
#include "bootstrap/store_protocol.h"
#include "core/control_protocol.h"
#include "core/registry.h"
#include "transport/shm/mapping.h"
#include "transport/shm/peer.h"
#include "transport/shm/relay.h"

namespace hixl {
namespace {

using ::testing::HasSubstr;

struct Pair {
  net::Fd a, b;
  Pair() {
    int fds[2] = {-1, -1};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a = net::Fd(fds[0]);
    b = net::Fd(fds[1]);
  }
};

std::string Header(uint32_t n) { return std::string(reinterpret_cast<const char*>(&n), 4); }

// ------------------------------------------------------------------ frames

TEST(FrameLimits, HeaderOverTheMaximumIsRefusedBeforeTheBody) {
  Pair p;
  ASSERT_TRUE(net::SendAll(p.a.get(), Header(4097).data(), 4, net::DeadlineIn(1000)).ok());
  auto r = net::RecvFrame(p.b.get(), net::DeadlineIn(1000), 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Errc::kTransport);
  EXPECT_THAT(r.status().message(), HasSubstr("4097"));
  EXPECT_FALSE(net::FrameLengthOk(net::kMaxFrameBytes + 1, UINT32_MAX));
  EXPECT_TRUE(net::FrameLengthOk(4096, 4096));
}

TEST(FrameLimits, ALargeHeaderWithAShortBodyFailsWhenThePeerCloses) {
  // 0x30000000 bytes claimed, 10 sent: the reader fails on the close after
  // holding only what arrived (it grows with the data).
  Pair p;
  std::string bytes = Header(0x30000000) + std::string(10, 'x');
  ASSERT_TRUE(net::SendAll(p.a.get(), bytes.data(), bytes.size(), net::DeadlineIn(1000)).ok());
  p.a.Reset();
  auto r = net::RecvFrame(p.b.get(), net::DeadlineIn(5000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Errc::kPeerFailed);
}

TEST(FrameLimits, FramesLargerThanTheFirstChunkArriveWhole) {
  Pair p;
  const std::string body(300 * 1024 + 7, 'q');
  std::thread sender([&] { EXPECT_TRUE(net::SendFrame(p.a.get(), body, net::DeadlineIn(5000)).ok()); });
  auto r = net::RecvFrame(p.b.get(), net::DeadlineIn(5000));
  sender.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, body);
}

TEST(ControlLimits, AnOversizedRequestEndsOnlyItsConnection) {
  auto server = bootstrap::ControlServer::Start(
      "127.0.0.1", [](int, uint8_t, std::string_view p) -> Result<std::string> { return std::string(p); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  auto raw = net::Connect("127.0.0.1", port, net::DeadlineIn(5000));
  ASSERT_TRUE(raw.ok());
  // Past the handshake (no secret: same-uid only), where the limits apply.
  ASSERT_TRUE(
      auth::ClientHandshake(raw->get(), std::nullopt, auth::Kind::kControl, net::DeadlineIn(5000), "test").ok());
  const std::string h = Header(bootstrap::kMaxControlRequest + 1);
  ASSERT_TRUE(net::SendAll(raw->get(), h.data(), 4, net::DeadlineIn(1000)).ok());
  char c = 0;
  EXPECT_EQ(::recv(raw->get(), &c, 1, 0), 0) << "the server should close the connection";
  // A request shorter than its header also ends the connection.
  auto raw2 = net::Connect("127.0.0.1", port, net::DeadlineIn(5000));
  ASSERT_TRUE(raw2.ok());
  // Past the handshake (no secret: same-uid only), where the limits apply.
  ASSERT_TRUE(
      auth::ClientHandshake(raw2->get(), std::nullopt, auth::Kind::kControl, net::DeadlineIn(5000), "test").ok());
  ASSERT_TRUE(net::SendFrame(raw2->get(), "abc", net::DeadlineIn(1000)).ok());
  EXPECT_EQ(::recv(raw2->get(), &c, 1, 0), 0);
  // Everyone else is still served.
  bootstrap::ControlClient client(0, 1, "127.0.0.1", port);
  auto r = client.Call(7, "hello", 5000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "hello");
}

// ------------------------------------------------------------------- store

TEST(StoreLimits, OversizedFramesEndTheConnectionAndTheStoreGoesOn) {
  auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, 1);
  ASSERT_TRUE(server.ok());
  const uint16_t port = (*server)->port();
  char c = 0;
  // A 1 GiB header from a connection that has not said HELLO.
  auto raw = net::Connect("127.0.0.1", port, net::DeadlineIn(5000));
  ASSERT_TRUE(raw.ok());
  // Past the handshake (no secret: same-uid only), where the limits apply.
  ASSERT_TRUE(auth::ClientHandshake(raw->get(), std::nullopt, auth::Kind::kStore, net::DeadlineIn(5000), "test").ok());
  std::string h = Header(1u << 30);
  ASSERT_TRUE(net::SendAll(raw->get(), h.data(), 4, net::DeadlineIn(1000)).ok());
  EXPECT_EQ(::recv(raw->get(), &c, 1, 0), 0);
  // A GET frame far larger than any GET.
  auto raw2 = net::Connect("127.0.0.1", port, net::DeadlineIn(5000));
  ASSERT_TRUE(raw2.ok());
  // Past the handshake (no secret: same-uid only), where the limits apply.
  ASSERT_TRUE(auth::ClientHandshake(raw2->get(), std::nullopt, auth::Kind::kStore, net::DeadlineIn(5000), "test").ok());
  h = Header(1u << 20) + std::string(1, '\x03');
  ASSERT_TRUE(net::SendAll(raw2->get(), h.data(), h.size(), net::DeadlineIn(1000)).ok());
  EXPECT_EQ(::recv(raw2->get(), &c, 1, 0), 0);
  // A real client still works, and cannot send more than the limits.
  auto client = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, 0, 5000);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  Status big = (*client)->Set("k", std::string(bootstrap::detail::kMaxValue + 1, 'v'));
  EXPECT_EQ(big.code(), Errc::kInvalidArg);
  EXPECT_THAT(big.message(), HasSubstr("too large"));
  EXPECT_EQ((*client)->Set(std::string(bootstrap::detail::kMaxKey + 1, 'k'), "v").code(), Errc::kInvalidArg);
  auto v = (*client)->Get("k", 1000);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "v");
}

TEST(StoreLimits, DecodersRefuseOversizedFields) {
  using namespace bootstrap::detail;
  Request q;
  q.op = Op::kSet;
  q.key = std::string(kMaxKey + 1, 'k');
  Request out;
  EXPECT_EQ(DecodeRequest(EncodeRequest(q), &out), Decoded::kBadKey);
  q.key = "k";
  q.value = std::string(kMaxValue + 1, 'v');
  EXPECT_EQ(DecodeRequest(EncodeRequest(q), &out), Decoded::kBadFields);
  q.value = "v";
  EXPECT_EQ(DecodeRequest(EncodeRequest(q) + "x", &out), Decoded::kBadFields);
  EXPECT_FALSE(DecodeReply(EncodeReply(Err(Errc::kInternal, "{}", std::string(kMaxMessage + 1, 'm')), "")));
  net::Writer w;
  w.Put<int32_t>(5).PutBytes("positive codes are not hixl's");
  EXPECT_FALSE(DecodeReply(w.str()));
  EXPECT_GT(MaxRequestFrame(Op::kSet), MaxRequestFrame(Op::kGet));
  EXPECT_EQ(MaxRequestFrame(Op::kHello), 5u);
}

// ------------------------------------------------------- control protocol

TEST(ControlProtocolLimits, DecodersRefuseOversizedAndTrailingBytes) {
  using namespace core;
  EXPECT_FALSE(DecodeInvalidation(Encode(Invalidation{1, 2, 3}) + "x"));
  EXPECT_FALSE(DecodeInvalidation(std::string(23, '\0')));
  PeerRecord rec{std::string(kMaxNameBytes + 1, 'h'), 1, {}};
  EXPECT_FALSE(DecodePeerRecord(Encode(rec)));
  rec.host = "h";
  rec.addresses.push_back({"shm", std::string(kMaxAddressBytes + 1, 'a')});
  EXPECT_FALSE(DecodePeerRecord(Encode(rec)));
  rec.addresses[0].address = "a";
  EXPECT_TRUE(DecodePeerRecord(Encode(rec)));
  EXPECT_FALSE(DecodePeerRecord(Encode(rec) + "x"));
  NamedNotify n{std::string(10, 'n'), std::string(kMaxNamedNotifyBytes - 10, 'm')};
  EXPECT_TRUE(DecodeNamedNotify(Encode(n)));
  n.msg.push_back('m');
  EXPECT_FALSE(DecodeNamedNotify(Encode(n)));
  Hello h;
  h.name = std::string(kMaxNameBytes + 1, 'e');
  EXPECT_FALSE(DecodeHello(Encode(h)));
  HelloReply hr;
  EXPECT_TRUE(DecodeHelloReply(Encode(hr)));
  EXPECT_FALSE(DecodeHelloReply(Encode(hr) + "x"));
}

// ------------------------------------------------------------ region tables

RegionRecord Rec(uint64_t base, uint64_t len) {
  RegionRecord r;
  r.base = base;
  r.len = len;
  r.keys["shm"] = "key";
  return r;
}

Status ParseOf(std::vector<RegionRecord> regions) {
  RegionTable t;
  t.generation = 3;
  t.regions = std::move(regions);
  return RegionTable::Parse(t.Serialize()).status();
}

TEST(RegionTableLimits, SortedApartNonEmptyNonWrapping) {
  EXPECT_TRUE(ParseOf({Rec(0x1000, 0x1000), Rec(0x2000, 16)}).ok());
  EXPECT_TRUE(ParseOf({Rec(UINT64_MAX - 15, 16)}).ok()) << "a region may end at the top of the address space";
  Status s = ParseOf({Rec(0x1000, 0x1001), Rec(0x2000, 16)});
  EXPECT_THAT(s.message(), HasSubstr("overlaps"));
  EXPECT_FALSE(ParseOf({Rec(0x2000, 16), Rec(0x1000, 16)}).ok()) << "out of order";
  EXPECT_FALSE(ParseOf({Rec(0x1000, 16), Rec(0x1000, 16)}).ok()) << "the same base twice";
  EXPECT_FALSE(ParseOf({Rec(0x1000, 0)}).ok()) << "empty";
  s = ParseOf({Rec(UINT64_MAX - 15, 17)});
  EXPECT_THAT(s.message(), HasSubstr("wraps"));
}

TEST(RegionTableLimits, CountsKeysAndKindsAreBounded) {
  RegionRecord r = Rec(0x1000, 16);
  r.kind = static_cast<transport::MemKind>(7);
  EXPECT_THAT(ParseOf({r}).message(), HasSubstr("memory kind 7"));
  r = Rec(0x1000, 16);
  r.keys["shm"] = std::string(kMaxKeyBlob + 1, 'k');
  EXPECT_FALSE(ParseOf({r}).ok());
  r.keys["shm"] = "k";
  for (uint32_t i = 0; i < kMaxTableKeys; ++i) r.keys[std::to_string(i)] = "k";
  EXPECT_THAT(ParseOf({r}).message(), HasSubstr("keys (at most"));
  // A count over the bound is refused from the header alone.
  std::string bytes(8, '\0');
  const uint32_t n = kMaxTableRegions + 1;
  bytes.append(reinterpret_cast<const char*>(&n), 4);
  EXPECT_THAT(RegionTable::Parse(bytes).status().message(), HasSubstr("regions (at most"));
  // Trailing bytes and repeated key names.
  RegionTable t;
  t.regions = {Rec(0x1000, 16)};
  EXPECT_FALSE(RegionTable::Parse(t.Serialize() + "x").ok());
  std::string dup = t.Serialize();
  // The record's key count (1, after base, len and kind) becomes 2, and the key repeats.
  const size_t count_at = 8 + 4 + 8 + 8 + 1;
  dup[count_at] = 2;
  dup += dup.substr(count_at + 4);
  EXPECT_THAT(RegionTable::Parse(dup).status().message(), HasSubstr("repeats"));
  // Keys in another order than Serialize's (by name), found by the fuzzer.
  RegionRecord two = Rec(0x1000, 16);
  two.keys["ucx"] = "u";
  t.regions = {two};
  std::string swapped = t.Serialize();
  const std::string shm = std::string("\x03\x00\x00\x00shm\x03\x00\x00\x00key", 14);
  const std::string ucx = std::string("\x03\x00\x00\x00ucx\x01\x00\x00\x00u", 12);
  const size_t at = swapped.find(shm);
  ASSERT_NE(at, std::string::npos);
  swapped.replace(at, shm.size() + ucx.size(), ucx + shm);
  EXPECT_THAT(RegionTable::Parse(swapped).status().message(), HasSubstr("out of order"));
}

// -------------------------------------------------------------- shm keys

std::string Key(uint32_t seg, uint64_t off, uint64_t size) {
  return transport::shm::EncodeKey({seg, off, size, 7, 99});
}

TEST(ShmKeyLimits, KeysMustHoldTheirRegion) {
  using transport::shm::ParseKey;
  auto k = ParseKey(Key(1, 4096, 8192), 4096, 3);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->segment, 1u);
  EXPECT_EQ(k->offset, 4096u);
  EXPECT_EQ(k->fd, 7);
  EXPECT_EQ(k->ino, 99u);
  // A 1 TiB region in a 4 KiB segment, an offset past the end, wrapping.
  EXPECT_THAT(ParseKey(Key(1, 0, 4096), uint64_t{1} << 40, 3).status().message(), HasSubstr("rank 3"));
  EXPECT_FALSE(ParseKey(Key(1, 8192, 4096), 0, 3).ok());
  EXPECT_FALSE(ParseKey(Key(1, UINT64_MAX, UINT64_MAX), 2, 3).ok());
  EXPECT_FALSE(ParseKey(Key(1, 0, 4096) + "x", 16, 3).ok());
  EXPECT_FALSE(ParseKey(Key(1, 0, 4096).substr(0, transport::shm::kKeyBytes - 1), 16, 3).ok());
}

TEST(ShmKeyLimits, ARelayChannelSmallerThanItClaimsIsRefused) {
  // The size in the message is right, the memfd is not: refused, no SIGBUS.
  net::Fd fd(::memfd_create("hixl-test-small-relay", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
  ASSERT_TRUE(transport::shm::SealSize(fd.get()).ok());
  auto m = transport::shm::AcceptRelayChannel(fd.get(), transport::shm::RelayChannelBytes());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("4096 bytes"));
}

TEST(ShmKeyLimits, ARelayChannelThatCanShrinkIsRefused) {
  // The right size, but the origin could truncate it later and raise SIGBUS
  // in the relay thread: only a file sealed against shrinking is mapped.
  const uint64_t n = transport::shm::RelayChannelBytes();
  net::Fd fd(::memfd_create("hixl-test-unsealed-relay", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(n)), 0);
  auto m = transport::shm::AcceptRelayChannel(fd.get(), n);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("can shrink"));
  // Sealed, the same file passes the checks of the file (and fails only on
  // its contents: it holds no channel header).
  ASSERT_TRUE(transport::shm::SealSize(fd.get()).ok());
  EXPECT_EQ(::ftruncate(fd.get(), 4096), -1);  // the seal holds
  m = transport::shm::AcceptRelayChannel(fd.get(), n);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("not a relay channel"));
}

}  // namespace
}  // namespace hixl
