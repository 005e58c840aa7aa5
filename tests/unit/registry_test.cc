// Unit tests of the region registries (src/core/registry.h): RangeInside,
// LocalRegistry, RegionTable's wire format and PeerTable.
//
// The concurrency test uses bounded iteration counts and no sleeps; it is
// meant to be run under the sanitizers (HIXL_SANITIZE=ON) as well.
#include "core/registry.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace hixl {
// Lets GoogleTest print "HIXL_ERR_INVALID_ARG" instead of the enum's bytes.
inline void PrintTo(Errc code, std::ostream* os) { *os << ErrcName(static_cast<int>(code)); }
}  // namespace hixl

namespace hixl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// ------------------------------------------------------------ RangeInside

TEST(RangeInsideTest, Basics) {
  EXPECT_TRUE(RangeInside(100, 10, 100, 10));   // exactly the region
  EXPECT_TRUE(RangeInside(100, 1, 100, 10));    // first byte
  EXPECT_TRUE(RangeInside(109, 1, 100, 10));    // last byte
  EXPECT_TRUE(RangeInside(103, 4, 100, 10));    // the middle
  EXPECT_FALSE(RangeInside(99, 1, 100, 10));    // just before
  EXPECT_FALSE(RangeInside(99, 2, 100, 10));    // straddles the start
  EXPECT_FALSE(RangeInside(110, 1, 100, 10));   // just after
  EXPECT_FALSE(RangeInside(109, 2, 100, 10));   // straddles the end
  EXPECT_FALSE(RangeInside(100, 11, 100, 10));  // longer than the region
  EXPECT_FALSE(RangeInside(99, 12, 100, 10));   // covers it and more
  EXPECT_FALSE(RangeInside(0, 1, 100, 10));
}

TEST(RangeInsideTest, ZeroLengths) {
  EXPECT_TRUE(RangeInside(105, 0, 100, 10));
  EXPECT_TRUE(RangeInside(100, 0, 100, 10));
  EXPECT_FALSE(RangeInside(99, 0, 100, 10));
  EXPECT_FALSE(RangeInside(100, 1, 100, 0));  // an empty region holds nothing
  EXPECT_FALSE(RangeInside(111, 0, 100, 10));
}

TEST(RangeInsideTest, NoOverflowNearTheTop) {
  // A region that ends exactly at the top of the address space.
  const uint64_t base = kMax - 99;  // [base, base + 100) ends at 2^64
  EXPECT_TRUE(RangeInside(base, 100, base, 100));
  EXPECT_TRUE(RangeInside(kMax, 1, base, 100));
  EXPECT_FALSE(RangeInside(kMax, 2, base, 100));  // addr + len wraps to 1
  EXPECT_FALSE(RangeInside(base, 101, base, 100));
  EXPECT_FALSE(RangeInside(kMax - 10, kMax, base, 100));
  // addr + len wraps around to a small number that a naive check would accept.
  EXPECT_FALSE(RangeInside(kMax - 5, 10, 0, 100));
  EXPECT_FALSE(RangeInside(kMax, kMax, 0, 100));
  EXPECT_FALSE(RangeInside(kMax, 1, 0, 100));
  // A region whose base + size would wrap: the check must not wrap either.
  EXPECT_TRUE(RangeInside(kMax - 1, 1, kMax - 1, 10));
  EXPECT_FALSE(RangeInside(5, 1, kMax - 1, 10));
  // The whole address space.
  EXPECT_TRUE(RangeInside(0, kMax, 0, kMax));
  EXPECT_TRUE(RangeInside(12345, 67890, 0, kMax));
  EXPECT_FALSE(RangeInside(1, kMax, 0, kMax));
}

// --------------------------------------------------------- LocalRegistry

LocalRegistry::Region MakeRegion(uint64_t base, uint64_t len, bool heap = false) {
  LocalRegistry::Region r;
  r.desc.base = base;
  r.desc.len = len;
  r.heap = heap;
  return r;
}

// Adds a region and returns whether it was new (fails the test on error).
bool AddOk(LocalRegistry& reg, const LocalRegistry::Region& r) {
  bool added = false;
  Status s = reg.Add(r, &added);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return added;
}

TEST(LocalRegistryTest, AddContainsRemove) {
  LocalRegistry reg;
  EXPECT_FALSE(reg.Contains(0x1000, 1));
  EXPECT_TRUE(AddOk(reg, MakeRegion(0x1000, 0x100)));
  EXPECT_TRUE(reg.Contains(0x1000, 0x100));
  EXPECT_TRUE(reg.Contains(0x1080, 0x10));
  EXPECT_TRUE(reg.Contains(0x10ff, 1));
  EXPECT_FALSE(reg.Contains(0x10ff, 2));
  EXPECT_FALSE(reg.Contains(0xfff, 2));
  EXPECT_FALSE(reg.Contains(0x1100, 1));
  EXPECT_FALSE(reg.Contains(kMax, 1));
  EXPECT_FALSE(reg.Contains(0x1000, kMax));

  std::optional<LocalRegistry::Region> removed;
  ASSERT_TRUE(reg.Remove(0x1000, false, &removed).ok());
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->desc.base, 0x1000u);
  EXPECT_EQ(removed->desc.len, 0x100u);
  EXPECT_FALSE(reg.Contains(0x1000, 1));
  EXPECT_TRUE(reg.Table().regions.empty());
}

TEST(LocalRegistryTest, ExactDuplicateCountsReferences) {
  LocalRegistry reg;
  EXPECT_TRUE(AddOk(reg, MakeRegion(0x2000, 64)));
  const uint64_t gen = reg.generation();
  EXPECT_FALSE(AddOk(reg, MakeRegion(0x2000, 64)));
  EXPECT_FALSE(AddOk(reg, MakeRegion(0x2000, 64)));
  EXPECT_EQ(reg.generation(), gen) << "a new reference is not a change of the table";
  ASSERT_EQ(reg.Table().regions.size(), 1u);

  for (int i = 0; i < 2; ++i) {
    std::optional<LocalRegistry::Region> removed;
    ASSERT_TRUE(reg.Remove(0x2000, false, &removed).ok());
    EXPECT_FALSE(removed.has_value()) << "references remain after Remove #" << i;
    EXPECT_TRUE(reg.Contains(0x2000, 64));
    EXPECT_EQ(reg.generation(), gen);
  }
  std::optional<LocalRegistry::Region> removed;
  ASSERT_TRUE(reg.Remove(0x2000, false, &removed).ok());
  EXPECT_TRUE(removed.has_value());
  EXPECT_FALSE(reg.Contains(0x2000, 64));
  EXPECT_GT(reg.generation(), gen);
  // One Remove too many.
  Status s = reg.Remove(0x2000, false, &removed);
  EXPECT_EQ(s.code(), Errc::kInvalidArg);
}

TEST(LocalRegistryTest, PartialOverlapRefusedNamingTheOtherRegion) {
  LocalRegistry reg;
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x10000, 0x1000)));
  const uint64_t gen = reg.generation();
  struct Case {
    uint64_t base, len;
  };
  const Case cases[] = {
      {0xff00, 0x200},    // straddles the start
      {0x10f00, 0x200},   // straddles the end
      {0x10100, 0x100},   // inside
      {0xf000, 0x3000},   // covers it
      {0x10000, 0x800},   // same start, shorter
      {0x10000, 0x2000},  // same start, longer
      {0x10fff, 1},       // the last byte
  };
  for (const Case& c : cases) {
    bool added = true;
    Status s = reg.Add(MakeRegion(c.base, c.len), &added);
    EXPECT_EQ(s.code(), Errc::kInvalidArg) << std::hex << c.base << "+" << c.len;
    EXPECT_THAT(s.message(), HasSubstr("registered region [0x10000, +4096)")) << "names the region it overlaps";
    EXPECT_THAT(s.message(), HasSubstr("overlaps"));
  }
  EXPECT_EQ(reg.generation(), gen);
  ASSERT_EQ(reg.Table().regions.size(), 1u);
  EXPECT_EQ(reg.Table().regions[0].len, 0x1000u);
}

TEST(LocalRegistryTest, OverlapWithTheHeapSaysSo) {
  LocalRegistry reg;
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x40000, 0x100, /*heap=*/true)));
  bool added = true;
  // The exact range of a heap block cannot be registered as ordinary memory.
  Status s = reg.Add(MakeRegion(0x40000, 0x100, /*heap=*/false), &added);
  EXPECT_EQ(s.code(), Errc::kInvalidArg);
  EXPECT_THAT(s.message(), HasSubstr("0x40000"));
  EXPECT_THAT(s.message(), HasSubstr("symmetric heap"));
}

TEST(LocalRegistryTest, AdjacentRegionsAreFine) {
  LocalRegistry reg;
  EXPECT_TRUE(AddOk(reg, MakeRegion(0x3000, 0x100)));
  EXPECT_TRUE(AddOk(reg, MakeRegion(0x3100, 0x100)));  // right after
  EXPECT_TRUE(AddOk(reg, MakeRegion(0x2f00, 0x100)));  // right before
  EXPECT_TRUE(AddOk(reg, MakeRegion(0x2000, 1)));      // well before
  EXPECT_TRUE(reg.Contains(0x3000, 0x100));
  EXPECT_TRUE(reg.Contains(0x3100, 0x100));
  EXPECT_TRUE(reg.Contains(0x2f00, 0x100));
  // A range spanning two adjacent regions lies in neither.
  EXPECT_FALSE(reg.Contains(0x30f0, 0x20));
  EXPECT_FALSE(reg.Contains(0x2f00, 0x200));
  // A region filling the gap between two is fine too.
  EXPECT_TRUE(AddOk(reg, MakeRegion(0x2001, 0xeff)));
  EXPECT_EQ(reg.Table().regions.size(), 5u);
}

TEST(LocalRegistryTest, RemoveUnknownBase) {
  LocalRegistry reg;
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x5000, 0x100)));
  std::optional<LocalRegistry::Region> removed;
  Status s = reg.Remove(0x5010, false, &removed);  // inside, but not the start
  EXPECT_EQ(s.code(), Errc::kInvalidArg);
  EXPECT_THAT(s.message(), HasSubstr("0x5010"));
  EXPECT_THAT(s.message(), HasSubstr("not the start of a registered region"));
  EXPECT_FALSE(removed.has_value());

  s = reg.Remove(0x9000, true, &removed);
  EXPECT_EQ(s.code(), Errc::kInvalidArg);
  EXPECT_THAT(s.message(), HasSubstr("0x9000"));
  EXPECT_THAT(s.message(), HasSubstr("hixl_alloc"));
  EXPECT_TRUE(reg.Contains(0x5000, 0x100));
}

TEST(LocalRegistryTest, RemoveOfTheWrongKind) {
  LocalRegistry reg;
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x6000, 0x100, /*heap=*/true)));
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x7000, 0x100, /*heap=*/false)));
  const uint64_t gen = reg.generation();
  std::optional<LocalRegistry::Region> removed;

  Status s = reg.Remove(0x6000, /*heap=*/false, &removed);
  EXPECT_EQ(s.code(), Errc::kInvalidArg);
  EXPECT_THAT(s.message(), HasSubstr("0x6000"));
  EXPECT_THAT(s.message(), HasSubstr("hixl_free"));

  s = reg.Remove(0x7000, /*heap=*/true, &removed);
  EXPECT_EQ(s.code(), Errc::kInvalidArg);
  EXPECT_THAT(s.message(), HasSubstr("0x7000"));
  EXPECT_THAT(s.message(), HasSubstr("hixl_deregister_memory"));

  EXPECT_FALSE(removed.has_value());
  EXPECT_EQ(reg.generation(), gen);
  EXPECT_TRUE(reg.Contains(0x6000, 0x100));
  EXPECT_TRUE(reg.Contains(0x7000, 0x100));

  ASSERT_TRUE(reg.Remove(0x6000, true, &removed).ok());
  EXPECT_TRUE(removed.has_value() && removed->heap);
  removed.reset();
  ASSERT_TRUE(reg.Remove(0x7000, false, &removed).ok());
  EXPECT_TRUE(removed.has_value() && !removed->heap);
}

TEST(LocalRegistryTest, GenerationGrowsOnRealChangesOnly) {
  LocalRegistry reg;
  uint64_t gen = reg.generation();
  bool added = false;

  ASSERT_TRUE(AddOk(reg, MakeRegion(0x1000, 0x10)));
  EXPECT_GT(reg.generation(), gen);
  gen = reg.generation();

  ASSERT_FALSE(AddOk(reg, MakeRegion(0x1000, 0x10)));  // a reference
  EXPECT_EQ(reg.generation(), gen);

  EXPECT_FALSE(reg.Add(MakeRegion(0x1008, 0x10), &added).ok());  // refused
  EXPECT_EQ(reg.generation(), gen);

  std::optional<LocalRegistry::Region> removed;
  ASSERT_TRUE(reg.Remove(0x1000, false, &removed).ok());  // a reference
  EXPECT_EQ(reg.generation(), gen);
  EXPECT_FALSE(reg.Remove(0x1234, false, &removed).ok());  // refused
  EXPECT_EQ(reg.generation(), gen);

  ASSERT_TRUE(reg.Remove(0x1000, false, &removed).ok());  // the last one
  EXPECT_GT(reg.generation(), gen);
  gen = reg.generation();

  ASSERT_TRUE(AddOk(reg, MakeRegion(0x1000, 0x10)));  // the same range again
  EXPECT_GT(reg.generation(), gen);
  EXPECT_EQ(reg.Table().generation, reg.generation());
}

TEST(LocalRegistryTest, AccessRunsOnlyInsideOneRegion) {
  LocalRegistry reg;
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x8000, 0x100)));
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x8100, 0x100)));
  int runs = 0;
  auto count = [&] { ++runs; };
  EXPECT_TRUE(reg.Access(0x8000, 0x100, count));
  EXPECT_TRUE(reg.Access(0x81ff, 1, count));
  EXPECT_EQ(runs, 2);
  EXPECT_FALSE(reg.Access(0x80ff, 2, count));  // spans both
  EXPECT_FALSE(reg.Access(0x7fff, 1, count));
  EXPECT_FALSE(reg.Access(0x8200, 1, count));
  EXPECT_FALSE(reg.Access(kMax - 1, 4, count));
  EXPECT_EQ(runs, 2);
}

TEST(LocalRegistryTest, TableListsRegionsInOrderWithKeys) {
  LocalRegistry reg;
  LocalRegistry::Region a = MakeRegion(0x9000, 0x40);
  a.keys["shm"] = "key-a";
  a.keys["ucx"] = std::string("\0\1\2", 3);
  LocalRegistry::Region b = MakeRegion(0x1000, 0x80, /*heap=*/true);
  b.desc.kind = transport::MemKind::kDevice;
  b.keys["shm"] = "key-b";
  ASSERT_TRUE(AddOk(reg, a));
  ASSERT_TRUE(AddOk(reg, b));

  RegionTable t = reg.Table();
  EXPECT_EQ(t.generation, reg.generation());
  ASSERT_EQ(t.regions.size(), 2u);
  EXPECT_EQ(t.regions[0].base, 0x1000u);
  EXPECT_EQ(t.regions[0].len, 0x80u);
  EXPECT_EQ(t.regions[0].kind, transport::MemKind::kDevice);
  EXPECT_EQ(t.regions[0].keys, b.keys);
  EXPECT_EQ(t.regions[1].base, 0x9000u);
  EXPECT_EQ(t.regions[1].len, 0x40u);
  EXPECT_EQ(t.regions[1].kind, transport::MemKind::kHost);
  EXPECT_EQ(t.regions[1].keys, a.keys);
}

// ------------------------------------------------------------ RegionTable

RegionTable SampleTable() {
  RegionTable t;
  t.generation = 0x0102030405060708ull;
  RegionRecord a;
  a.base = 0x200000001000ull;
  a.len = 4096;
  a.kind = transport::MemKind::kHost;
  a.keys["shm"] = std::string("\x01\x00\x00\x00 segment", 12);
  a.keys["ucx"] = std::string(300, 'k');
  RegionRecord b;
  b.base = kMax - 15;
  b.len = 16;
  b.kind = transport::MemKind::kDevice;
  RegionRecord c;
  c.base = 0x7fff0000;
  c.len = 1;
  c.keys[""] = "";        // empty name and blob
  t.regions = {c, a, b};  // sorted by base, as Parse requires
  return t;
}

void ExpectSameTable(const RegionTable& x, const RegionTable& y) {
  EXPECT_EQ(x.generation, y.generation);
  ASSERT_EQ(x.regions.size(), y.regions.size());
  for (size_t i = 0; i < x.regions.size(); ++i) {
    EXPECT_EQ(x.regions[i].base, y.regions[i].base) << i;
    EXPECT_EQ(x.regions[i].len, y.regions[i].len) << i;
    EXPECT_EQ(x.regions[i].kind, y.regions[i].kind) << i;
    EXPECT_EQ(x.regions[i].keys, y.regions[i].keys) << i;
  }
}

TEST(RegionTableTest, RoundTrip) {
  const RegionTable t = SampleTable();
  Result<RegionTable> back = RegionTable::Parse(t.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameTable(back.value(), t);
}

TEST(RegionTableTest, EmptyRoundTrip) {
  RegionTable t;
  t.generation = 7;
  Result<RegionTable> back = RegionTable::Parse(t.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameTable(back.value(), t);
}

TEST(RegionTableTest, RoundTripOfARegistrysTable) {
  LocalRegistry reg;
  LocalRegistry::Region r = MakeRegion(0xabc000, 0x1000);
  r.keys["shm"] = "blob";
  ASSERT_TRUE(AddOk(reg, r));
  ASSERT_TRUE(AddOk(reg, MakeRegion(0x1000, 8, true)));
  const RegionTable t = reg.Table();
  Result<RegionTable> back = RegionTable::Parse(t.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameTable(back.value(), t);
}

TEST(RegionTableTest, EveryTruncationIsAnError) {
  const std::string bytes = SampleTable().Serialize();
  ASSERT_GT(bytes.size(), 12u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<RegionTable> r = RegionTable::Parse(std::string_view(bytes.data(), n));
    EXPECT_FALSE(r.ok()) << "a table cut to " << n << " of " << bytes.size() << " bytes parsed";
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), HasSubstr("malformed region table"));
    }
  }
}

TEST(RegionTableTest, HugeCountWithoutDataIsAnError) {
  // A header that claims 4 billion regions but carries none must be refused,
  // not allocated for.
  std::string bytes(8, '\0');  // generation
  bytes.append(4, '\xff');     // region count 0xffffffff
  Result<RegionTable> r = RegionTable::Parse(bytes);
  EXPECT_FALSE(r.ok());
  // The same with a huge key count in an otherwise valid record.
  std::string one(8, '\0');
  one.append("\x01\x00\x00\x00", 4);  // one region
  one.append(16, '\0');               // base, len
  one.push_back('\0');                // kind
  one.append(4, '\xff');              // key count 0xffffffff
  r = RegionTable::Parse(one);
  EXPECT_FALSE(r.ok());
}

// A scan visits what Parse builds, in order, with views into the bytes.
TEST(RegionTableTest, ScanVisitsEachRegionAndKeyInPlace) {
  RegionTable t;
  t.generation = 9;
  RegionRecord a;
  a.base = 0x1000;
  a.len = 0x100;
  a.keys = {{"shm", "sk"}, {"ucx", "uk"}};
  RegionRecord b;
  b.base = 0x2000;
  b.len = 0x10;
  b.kind = transport::MemKind::kDevice;
  t.regions = {a, b};
  const std::string bytes = t.Serialize();
  struct Seen final : RegionTableVisitor {
    std::vector<std::string> log;
    std::string_view bytes;
    void Region(uint64_t base, uint64_t len, transport::MemKind kind) override {
      log.push_back(fmt::format("region {:#x} {:#x} {}", base, len, static_cast<int>(kind)));
    }
    void Key(std::string_view name, std::string_view blob) override {
      // Views into the scanned bytes: nothing was copied.
      EXPECT_GE(blob.data(), bytes.data());
      EXPECT_LE(blob.data() + blob.size(), bytes.data() + bytes.size());
      log.push_back(fmt::format("key {} {}", name, blob));
    }
  } seen;
  seen.bytes = bytes;
  auto g = ScanRegionTable(bytes, seen);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g.value(), 9u);
  EXPECT_EQ(seen.log,
            (std::vector<std::string>{"region 0x1000 0x100 0", "key shm sk", "key ucx uk", "region 0x2000 0x10 1"}));
  // What a scan refuses, Parse refuses with the same words: every prefix.
  for (size_t n = 0; n < bytes.size(); ++n) {
    Seen cut;
    cut.bytes = std::string_view(bytes).substr(0, n);
    auto s = ScanRegionTable(cut.bytes, cut);
    auto p = RegionTable::Parse(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(s.ok()) << n;
    ASSERT_FALSE(p.ok()) << n;
    EXPECT_EQ(s.status().message(), p.status().message()) << n;
  }
}

// -------------------------------------------------------------- PeerTable

// A key that remembers which region it was made for.
struct TestKey final : transport::RemoteKey {
  explicit TestKey(uint64_t b) : base(b) {}
  uint64_t base;
};

PeerTable::Entry MakeEntry(uint64_t base, uint64_t len) {
  return PeerTable::Entry{base, len, std::make_shared<TestKey>(base), ""};
}

uint64_t KeyBase(const PeerTable::Entry* e) { return static_cast<const TestKey&>(*e->key).base; }

TEST(PeerTableTest, EmptyFindsNothing) {
  PeerTable t;
  EXPECT_EQ(t.generation(), 0u);
  EXPECT_EQ(t.Find(0, 0), nullptr);
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  EXPECT_EQ(t.Find(kMax, 1), nullptr);
}

TEST(PeerTableTest, InstallThenFind) {
  PeerTable t;
  // Installed out of order: the table sorts them.
  ASSERT_TRUE(t.Install(5, {MakeEntry(0x3000, 0x100), MakeEntry(0x1000, 0x100), MakeEntry(0x2000, 0x800)}));
  EXPECT_EQ(t.generation(), 5u);

  const PeerTable::Entry* e = t.Find(0x1000, 0x100);  // exactly
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->base, 0x1000u);
  EXPECT_EQ(e->len, 0x100u);
  EXPECT_EQ(KeyBase(e), 0x1000u);

  e = t.Find(0x2400, 0x10);  // inside
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->base, 0x2000u);
  EXPECT_EQ(KeyBase(e), 0x2000u);

  e = t.Find(0x30ff, 1);  // the last byte
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->base, 0x3000u);
}

TEST(PeerTableTest, StraddlingAndOutside) {
  PeerTable t;
  ASSERT_TRUE(t.Install(1, {MakeEntry(0x1000, 0x100), MakeEntry(0x1100, 0x100)}));
  EXPECT_EQ(t.Find(0x10ff, 2), nullptr);  // spans two adjacent regions
  EXPECT_EQ(t.Find(0xfff, 2), nullptr);   // straddles the first start
  EXPECT_EQ(t.Find(0x11ff, 2), nullptr);  // straddles the last end
  EXPECT_EQ(t.Find(0xfff, 1), nullptr);   // just before
  EXPECT_EQ(t.Find(0x1200, 1), nullptr);  // just after
  EXPECT_EQ(t.Find(0x0, 1), nullptr);
  EXPECT_EQ(t.Find(0x1000, 0x200), nullptr);
  EXPECT_EQ(t.Find(0x1050, kMax), nullptr);  // addr + len wraps
  EXPECT_EQ(t.Find(kMax, 1), nullptr);
  ASSERT_NE(t.Find(0x1100, 0x100), nullptr);
  EXPECT_EQ(t.Find(0x1100, 0x100)->base, 0x1100u);
}

TEST(PeerTableTest, InstallReplacesTheWholeTable) {
  PeerTable t;
  ASSERT_TRUE(t.Install(1, {MakeEntry(0x1000, 0x100)}));
  ASSERT_TRUE(t.Install(2, {MakeEntry(0x5000, 0x100)}));
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  EXPECT_NE(t.Find(0x5000, 1), nullptr);
  EXPECT_EQ(t.generation(), 2u);
}

TEST(PeerTableTest, InstallOlderThanAnInvalidationIsRefused) {
  PeerTable t;
  ASSERT_TRUE(t.Install(3, {MakeEntry(0x1000, 0x100), MakeEntry(0x2000, 0x100)}));
  t.Invalidate(6, 0x1000, 0x100);
  EXPECT_EQ(t.generation(), 6u);
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);

  // A table fetched before the invalidation must not bring the region back.
  EXPECT_FALSE(t.Install(5, {MakeEntry(0x1000, 0x100), MakeEntry(0x2000, 0x100)}));
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  EXPECT_NE(t.Find(0x2000, 1), nullptr);
  EXPECT_EQ(t.generation(), 6u);

  // One fetched at or after it is fine.
  EXPECT_TRUE(t.Install(6, {MakeEntry(0x2000, 0x100)}));
  EXPECT_TRUE(t.Install(9, {MakeEntry(0x2000, 0x100), MakeEntry(0x3000, 0x10)}));
  EXPECT_NE(t.Find(0x3000, 0x10), nullptr);
  EXPECT_EQ(t.generation(), 9u);
  // And older installs are refused from then on.
  EXPECT_FALSE(t.Install(8, {}));
  EXPECT_NE(t.Find(0x3000, 0x10), nullptr);
}

TEST(PeerTableTest, InvalidationBeforeAnyInstall) {
  PeerTable t;
  t.Invalidate(4, 0x1000, 0x10);
  EXPECT_EQ(t.generation(), 4u);
  EXPECT_FALSE(t.Install(3, {MakeEntry(0x1000, 0x10)}));
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
}

TEST(PeerTableTest, InvalidateRemovesOnlyOverlappingEntries) {
  PeerTable t;
  ASSERT_TRUE(t.Install(
      1, {MakeEntry(0x1000, 0x100), MakeEntry(0x1100, 0x100), MakeEntry(0x1200, 0x100), MakeEntry(0x2000, 0x100)}));
  // Overlaps the end of 0x1000 and the start of 0x1100, touches nothing else.
  t.Invalidate(2, 0x10f0, 0x20);
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  EXPECT_EQ(t.Find(0x1100, 1), nullptr);
  ASSERT_NE(t.Find(0x1200, 0x100), nullptr);
  EXPECT_EQ(KeyBase(t.Find(0x1200, 0x100)), 0x1200u);
  EXPECT_NE(t.Find(0x2000, 0x100), nullptr);

  // A range that ends exactly where an entry starts does not overlap it.
  t.Invalidate(3, 0x1f00, 0x100);
  EXPECT_NE(t.Find(0x2000, 0x100), nullptr);
  // Nor one that starts exactly where it ends.
  t.Invalidate(4, 0x1300, 0x10);
  EXPECT_NE(t.Find(0x1200, 0x100), nullptr);
  // A range inside an entry removes it.
  t.Invalidate(5, 0x2080, 1);
  EXPECT_EQ(t.Find(0x2000, 1), nullptr);
  EXPECT_NE(t.Find(0x1200, 1), nullptr);
  EXPECT_EQ(t.generation(), 5u);
}

TEST(PeerTableTest, OldInvalidationDoesNotLowerTheGeneration) {
  PeerTable t;
  ASSERT_TRUE(t.Install(10, {MakeEntry(0x1000, 0x100), MakeEntry(0x2000, 0x100)}));
  t.Invalidate(4, 0x1000, 0x100);  // late, but the region is gone either way
  EXPECT_EQ(t.generation(), 10u);
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  EXPECT_NE(t.Find(0x2000, 1), nullptr);
  EXPECT_TRUE(t.Install(10, {MakeEntry(0x2000, 0x100)}));
}

TEST(PeerTableTest, FoundEntriesOutliveReplacement) {
  PeerTable t;
  ASSERT_TRUE(t.Install(1, {MakeEntry(0x1000, 0x100)}));
  PeerTable::Pin pin = t.Hold();
  const PeerTable::Entry* e = t.Find(0x1000, 1);
  ASSERT_NE(e, nullptr);
  t.Invalidate(2, 0x1000, 0x100);
  // Many more replacements than kReclaimAfter: the pinned snapshot stays.
  for (uint64_t g = 3; g < 3 + 3 * PeerTable::kReclaimAfter; ++g) {
    ASSERT_TRUE(t.Install(g, {MakeEntry(0x4000, 0x100)}));
  }
  EXPECT_GT(t.snapshots(), 3 * PeerTable::kReclaimAfter);
  // The entry a reader holds stays valid (AddressSanitizer would say otherwise).
  EXPECT_EQ(e->base, 0x1000u);
  EXPECT_EQ(KeyBase(e), 0x1000u);
  // Released: the next replacement frees every replaced snapshot.
  pin.Release();
  ASSERT_TRUE(t.Install(1000, {MakeEntry(0x5000, 0x100)}));
  EXPECT_EQ(t.snapshots(), 1u);
  EXPECT_NE(t.Find(0x5000, 1), nullptr);
}

// Before, every replaced snapshot was kept until the table went: a program
// that registers and frees for a long time grew without bound.
TEST(PeerTableTest, ReplacedSnapshotsDoNotPileUp) {
  PeerTable t;
  for (uint64_t g = 1; g <= 10000; ++g) {
    PeerTable::Pin pin = t.Hold();  // a reader between the changes
    (void)t.Find(0x1000, 1);
    pin.Release();
    if (g % 2 != 0) {
      ASSERT_EQ(t.Add(g, MakeEntry(0x1000 + (g % 64) * 0x1000, 0x100)), PeerTable::Added::kYes);
    } else {
      t.Invalidate(g, 0, UINT64_MAX);
    }
    ASSERT_LE(t.snapshots(), PeerTable::kReclaimAfter);
  }
}

TEST(PeerTableTest, AddLearnsOneRegionAndKeepsTheOthers) {
  PeerTable t;
  EXPECT_EQ(t.Add(3, MakeEntry(0x2000, 0x100)), PeerTable::Added::kYes);
  EXPECT_EQ(t.generation(), 3u);
  const PeerTable::Entry* first = t.Find(0x2000, 0x100);
  ASSERT_NE(first, nullptr);
  // Below, above and between: each lands in order, the others stay.
  EXPECT_EQ(t.Add(4, MakeEntry(0x5000, 0x100)), PeerTable::Added::kYes);
  EXPECT_EQ(t.Add(4, MakeEntry(0x1000, 0x100)), PeerTable::Added::kYes);
  EXPECT_EQ(t.Add(5, MakeEntry(0x3000, 0x100)), PeerTable::Added::kYes);
  for (uint64_t b : {0x1000u, 0x2000u, 0x3000u, 0x5000u}) {
    const PeerTable::Entry* e = t.Find(b + 0x10, 0x10);
    ASSERT_NE(e, nullptr) << std::hex << b;
    EXPECT_EQ(KeyBase(e), b);
  }
  EXPECT_EQ(t.generation(), 5u);
  // The entry found before is still valid (snapshots are kept).
  EXPECT_EQ(KeyBase(first), 0x2000u);
}

TEST(PeerTableTest, AddOlderThanAnInvalidationOrOverlappingIsRefused) {
  PeerTable t;
  ASSERT_EQ(t.Add(2, MakeEntry(0x1000, 0x100)), PeerTable::Added::kYes);
  t.Invalidate(6, 0x1000, 0x100);
  // Read before the removal was taken: read again.
  EXPECT_EQ(t.Add(5, MakeEntry(0x1000, 0x100)), PeerTable::Added::kStale);
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  ASSERT_EQ(t.Add(6, MakeEntry(0x1000, 0x100)), PeerTable::Added::kYes);
  // Overlapping an entry held (its removal not taken yet), from either side
  // or inside: the whole table is needed, and nothing changes.
  for (auto [base, len] :
       {std::pair<uint64_t, uint64_t>{0x10f0, 0x100}, {0xf00, 0x101}, {0x1010, 0x10}, {0x800, 0x1000}}) {
    EXPECT_EQ(t.Add(7, MakeEntry(base, len)), PeerTable::Added::kOverlaps) << std::hex << base;
  }
  EXPECT_EQ(t.generation(), 6u);
  EXPECT_EQ(KeyBase(t.Find(0x1000, 0x100)), 0x1000u);
  // Touching is not overlapping; nor is a region that ends at the top of
  // the address space (its end is not computed).
  EXPECT_EQ(t.Add(7, MakeEntry(0x1100, 0x100)), PeerTable::Added::kYes);
  EXPECT_EQ(t.Add(7, MakeEntry(UINT64_MAX - 0xfff, 0x1000)), PeerTable::Added::kYes);
  EXPECT_EQ(t.Add(7, MakeEntry(UINT64_MAX - 0x1fff, 0x1000)), PeerTable::Added::kYes);
  EXPECT_EQ(t.Add(7, MakeEntry(UINT64_MAX - 0x17ff, 0x10)), PeerTable::Added::kOverlaps);
  EXPECT_NE(t.Find(UINT64_MAX - 0xf, 0x10), nullptr);
  // A closed table accepts and ignores.
  t.Close();
  EXPECT_EQ(t.Add(9, MakeEntry(0x9000, 0x10)), PeerTable::Added::kYes);
  EXPECT_EQ(t.Find(0x9000, 1), nullptr);
}

// One writer replaces the table over and over while two readers look up
// ranges.  Readers check that every hit really holds the range, that its
// key belongs to it, and that the generation never goes backwards.  Meant to
// be run under AddressSanitizer (a use of a freed snapshot is an error).
TEST(PeerTableTest, ConcurrentInstallInvalidateFind) {
  PeerTable t;
  constexpr int kRounds = 4000;
  constexpr int kMinReads = 20000;
  constexpr uint64_t kRegions = 8;
  constexpr uint64_t kStride = 0x1000, kLen = 0x800;
  auto all = [&] {
    std::vector<PeerTable::Entry> v;
    for (uint64_t i = 0; i < kRegions; ++i) v.push_back(MakeEntry(0x100000 + i * kStride, kLen));
    return v;
  };
  ASSERT_TRUE(t.Install(1, all()));

  std::atomic<bool> writer_done{false};
  std::atomic<int> ready{0};
  std::atomic<uint64_t> bad{0}, hits{0}, misses{0};
  auto reader = [&](uint64_t seed) {
    ready.fetch_add(1);
    uint64_t last_gen = 0;
    uint64_t x = seed;
    // At least kMinReads lookups, and keep going while the writer runs
    // (bounded: the writer does a fixed number of rounds).
    for (int i = 0; i < kMinReads || !writer_done.load(std::memory_order_acquire); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t region = (x >> 33) % kRegions;
      const uint64_t off = (x >> 17) % kLen;
      const uint64_t len = 1 + (x >> 45) % (kLen - off);  // stays inside the region
      const uint64_t addr = 0x100000 + region * kStride + off;
      const uint64_t gen = t.generation();
      if (gen < last_gen) bad.fetch_add(1);
      last_gen = gen;
      PeerTable::Pin pin = t.Hold();  // what Find returns is valid while it is held
      if (const PeerTable::Entry* e = t.Find(addr, len)) {
        hits.fetch_add(1, std::memory_order_relaxed);
        if (!RangeInside(addr, len, e->base, e->len) || KeyBase(e) != e->base ||
            e->base != 0x100000 + region * kStride) {
          bad.fetch_add(1);
        }
      } else {
        misses.fetch_add(1, std::memory_order_relaxed);
      }
      // A range that straddles two regions is never found.
      if (t.Find(0x100000 + region * kStride + kLen - 1, 2) != nullptr) bad.fetch_add(1);
    }
  };
  std::thread r1(reader, 1), r2(reader, 2);
  std::thread writer([&] {
    // Wait (bounded) for both readers to start, so that the rounds overlap them.
    for (int spin = 0; ready.load() < 2 && spin < 10000000; ++spin) std::this_thread::yield();
    uint64_t gen = 1;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t victim = static_cast<uint64_t>(round) % kRegions;
      t.Invalidate(++gen, 0x100000 + victim * kStride, kLen);
      if (round % 3 == 0) {
        // A stale fetch loses against the invalidation.
        if (t.Install(gen - 1, all())) bad.fetch_add(1);
      }
      if (!t.Install(++gen, all())) bad.fetch_add(1);
    }
    writer_done.store(true, std::memory_order_release);
  });
  writer.join();
  r1.join();
  r2.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_EQ(t.generation(), 1u + 2u * kRounds);
  for (uint64_t i = 0; i < kRegions; ++i) EXPECT_NE(t.Find(0x100000 + i * kStride, kLen), nullptr);
}

}  // namespace
}  // namespace hixl
