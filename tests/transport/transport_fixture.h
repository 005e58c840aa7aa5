// The fixture of the transport conformance tests (transport_test.cc,
// transport_lifecycle_test.cc, transport_forged_test.cc, all one binary):
// the Host and the memory a test side runs with, the transport
// configurations the parameterised suite TransportTest runs over (defined,
// and instantiated once, in transport_fixture.cc), and the fixture itself.
//
// Two transports of the same kind live in this one process, each with its
// own Host (rank 0 and rank 1), and talk to each other as two processes
// would: through their published addresses, over their own sockets,
// channels and endpoints.  Nothing synchronises by sleeping; every wait
// inside a transport is bounded by the Host's timeout, and ctest bounds the
// whole test.
#ifndef HIXL_TESTS_TRANSPORT_TRANSPORT_FIXTURE_H_
#define HIXL_TESTS_TRANSPORT_TRANSPORT_FIXTURE_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

// A named namespace (not an anonymous one): the fixture is one type in
// every file of the binary, as gtest requires of a suite's TEST_Ps.
namespace hixl::transport::test {

inline constexpr int64_t kTimeoutMs = 30000;
inline constexpr uint64_t kRegionBytes = uint64_t{16} << 20;  // > the shm relay ring (8 x 1 MiB)
inline constexpr uint64_t kGuard = 64;                        // bytes around each transfer that must not change

// The Host a transport runs under: a rank, a timeout and the ranges this
// "process" has registered, for transports that serve requests themselves
// (the shm relay).
class TestHost final : public Host {
 public:
  explicit TestHost(int rank, int64_t timeout_ms = kTimeoutMs) : rank_(rank), timeout_ms_(timeout_ms) {}
  int rank() const override { return rank_; }
  int64_t timeout_ms() const override { return timeout_ms_; }
  bool AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const override {
    std::lock_guard lock(mu_);
    for (const auto& [base, n] : ranges_) {
      if (addr >= base && len <= n && addr - base <= n - len) {
        fn();
        return true;
      }
    }
    return false;
  }
  void Add(uint64_t base, uint64_t len) {
    std::lock_guard lock(mu_);
    ranges_.emplace_back(base, len);
  }
  void Remove(uint64_t base) {
    std::lock_guard lock(mu_);
    std::erase_if(ranges_, [&](const auto& r) { return r.first == base; });
  }

 private:
  const int rank_;
  const int64_t timeout_ms_;
  mutable std::mutex mu_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;
};

// How a region's memory is backed: private memory (malloc-like), or a
// shared-memory segment, as the symmetric heap hands regions over.
enum class Backing { kPrivate, kSegment };

inline constexpr char kSegmentName[] = "hixl-transport-test-seg";

// Memory of one side: mapped here, registered with that side's host and
// transport on request.
class Memory {
 public:
  Memory(Backing backing, uint64_t len, uint32_t segment_id) : backing_(backing), len_(len) {
    if (backing == Backing::kSegment) {
      fd_ = ::memfd_create(kSegmentName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
      EXPECT_GE(fd_, 0);
      EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(len + kSegmentOffset)), 0);
      EXPECT_EQ(::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);  // as the heap does: peers refuse others
      map_len_ = len + kSegmentOffset;
      void* p = ::mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      EXPECT_NE(p, MAP_FAILED);
      map_ = static_cast<uint8_t*>(p);
      region_.backing_fd = fd_;
      region_.segment_id = segment_id;
      region_.segment_offset = kSegmentOffset;
      region_.segment_size = map_len_;
      region_.base = reinterpret_cast<uint64_t>(map_ + kSegmentOffset);
    } else {
      map_len_ = len;
      void* p = ::mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      EXPECT_NE(p, MAP_FAILED);
      map_ = static_cast<uint8_t*>(p);
      region_.base = reinterpret_cast<uint64_t>(map_);
    }
    region_.len = len;
    region_.kind = MemKind::kHost;
  }
  ~Memory() {
    if (map_ && map_ != MAP_FAILED) ::munmap(map_, map_len_);
    if (fd_ >= 0) ::close(fd_);
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  uint8_t* data() const { return reinterpret_cast<uint8_t*>(region_.base); }
  uint64_t addr() const { return region_.base; }
  uint64_t len() const { return len_; }
  const LocalRegion& region() const { return region_; }
  Backing backing() const { return backing_; }

 private:
  static constexpr uint64_t kSegmentOffset = 4096;  // a region need not start its segment
  Backing backing_;
  uint64_t len_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  uint64_t map_len_ = 0;
  LocalRegion region_;
};

// Bytes that differ from place to place and from seed to seed.
void Fill(uint8_t* p, size_t n, uint32_t seed);

// The first offset where a and b differ, or n.
size_t FirstDifference(const uint8_t* a, const uint8_t* b, size_t n);

// How many mappings of this process map the test's segments.
int SegmentMappings();

// One transport configuration under test.
struct Config {
  std::string name;  // for the test's name
  std::string transport;
  bool shm_cma = true;
  // What Connect is told of where the peer is: ucx then connects through
  // the peer's listener (ucx/listener.h), as engines do.
  std::string reached_at;
};

// Every configuration built in: the shm transport with and without
// cross-memory attach, and ucx reached by worker address or by listener.
std::vector<Config> Configs();
std::string ConfigName(const ::testing::TestParamInfo<Config>& info);
void PrintTo(const Config& c, std::ostream* os);

class TransportTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    hosts_[0] = std::make_unique<TestHost>(0);
    hosts_[1] = std::make_unique<TestHost>(1);
    for (int r = 0; r < 2; ++r) {
      Options options;
      options.only = GetParam().transport;
      options.settings["shm_cma"] = GetParam().shm_cma ? "1" : "0";
      auto ts = CreateTransports(hosts_[r].get(), options);
      ASSERT_TRUE(ts.ok()) << ts.status().message();
      ASSERT_EQ(ts.value().size(), 1u);
      t_[r] = std::move(ts.value()[0]);
      ASSERT_EQ(t_[r]->name(), GetParam().transport);
    }
  }

  void TearDown() override {
    for (auto& t : t_) {
      if (t) t->Shutdown();
    }
  }

  // Publishes both addresses and connects each side to the other.
  void ConnectBoth() {
    const std::string a0 = t_[0]->LocalAddress(), a1 = t_[1]->LocalAddress();
    ASSERT_TRUE(t_[0]->CanReach(a1));
    ASSERT_TRUE(t_[1]->CanReach(a0));
    ASSERT_TRUE(t_[0]->Connect(1, a1, GetParam().reached_at).ok());
    ASSERT_TRUE(t_[1]->Connect(0, a0, GetParam().reached_at).ok());
  }

  // Registers `m` on rank `owner` and returns the key rank `user` unpacks for it.
  std::shared_ptr<RemoteKey> Expose(int owner, const Memory& m, int user) {
    auto blob = t_[owner]->RegisterRegion(m.region());
    EXPECT_TRUE(blob.ok()) << blob.status().message();
    if (!blob.ok()) return nullptr;
    hosts_[owner]->Add(m.addr(), m.len());
    auto key = t_[user]->UnpackKey(owner, m.addr(), m.len(), blob.value());
    EXPECT_TRUE(key.ok()) << key.status().message();
    return key.ok() ? key.value() : nullptr;
  }

  void Unexpose(int owner, const Memory& m) {
    hosts_[owner]->Remove(m.addr());
    t_[owner]->DeregisterRegion(m.region());
  }

  const Capabilities& caps() const { return t_[0]->caps(); }

  // Puts n bytes from rank 0 into rank 1's `m` at offset `at`, then gets
  // them back, checking every byte and that the bytes around are untouched.
  void PutGetRoundTrip(const RemoteKey& key, Memory& m, uint64_t at, size_t n, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "n=" << n << " at=" << at);
    ASSERT_GE(at, kGuard);
    ASSERT_LE(at + n + kGuard, m.len());
    std::memset(m.data() + at - kGuard, 0xEE, n + 2 * kGuard);
    std::vector<uint8_t> src(n), back(n + 2 * kGuard, 0x11);
    Fill(src.data(), n, seed);
    ASSERT_TRUE(t_[0]->Put(1, key, src.data(), m.addr() + at, n).ok());
    Status f = t_[0]->Flush();
    ASSERT_TRUE(f.ok()) << f.message();
    ASSERT_EQ(FirstDifference(m.data() + at, src.data(), n), n);
    for (uint64_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(m.data()[at - kGuard + i], 0xEE) << "written before the range";
      ASSERT_EQ(m.data()[at + n + i], 0xEE) << "written after the range";
    }
    // Get into the middle of a guarded buffer, after changing the target.
    Fill(m.data() + at, n, seed + 1);
    ASSERT_TRUE(t_[0]->Get(1, key, m.addr() + at, back.data() + kGuard, n).ok());
    f = t_[0]->Flush();
    ASSERT_TRUE(f.ok()) << f.message();
    ASSERT_EQ(FirstDifference(back.data() + kGuard, m.data() + at, n), n);
    for (uint64_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(back[i], 0x11);
      ASSERT_EQ(back[kGuard + n + i], 0x11);
    }
  }

  std::unique_ptr<TestHost> hosts_[2];
  std::unique_ptr<Transport> t_[2];
};

#ifdef HIXL_TEST_HAVE_UCX
// Rank 1 over UCX in a child process of its own: it registers kPeerBytes
// and waits, its transport's progress thread serving whatever comes, until
// the parent kills it (at the latest when this goes).  Start() returns
// false, with a failure recorded, where the child could not be started;
// its settings go to the child's transport options (Options::settings).
class UcxPeerProcess {
 public:
  static constexpr uint64_t kPeerBytes = uint64_t{1} << 16;
  UcxPeerProcess() = default;
  UcxPeerProcess(const UcxPeerProcess&) = delete;
  UcxPeerProcess& operator=(const UcxPeerProcess&) = delete;
  ~UcxPeerProcess() { Kill(); }
  bool Start(const std::map<std::string, std::string>& settings = {});
  pid_t pid() const { return pid_; }
  // Kills the child and waits for it (again: nothing).
  void Kill();

  uint64_t addr = 0;    // the region's address in the child
  std::string address;  // its transport's address
  std::string blob;     // the region's key blob

 private:
  pid_t pid_ = -1;
  int fd_ = -1;  // the parent's end of the socket pair
};
#endif

}  // namespace hixl::transport::test

#endif  // HIXL_TESTS_TRANSPORT_TRANSPORT_FIXTURE_H_
