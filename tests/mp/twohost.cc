// twohost: the checks of a two-rank world whose ranks are on different
// hosts (twohost_test.sh runs one rank in each of two network namespaces).
//
//   twohost            transfers: the peer is served by ucx (auto choice);
//                      puts and gets of 1 B to 256 MiB both ways, verified
//                      byte by byte with the bytes around them; accesses
//                      outside registered memory fail; remote atomics work;
//                      if HIXL_NET_DEV names
//                      a network interface, the address the control plane
//                      uses (the one that routes to MASTER_ADDR) is on it
//   twohost refused    init must fail (HIXL_TRANSPORT=shm): the peer is on
//                      another host
//
// Prints one line per check; exit status 0 when all passed, 1 otherwise.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hixl/hixl.h>
#include <hixl/hixl.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mp_util.h"

namespace {

using hixl::test::Fill;
using hixl::test::FirstMismatch;
using hixl::test::FirstNot;

int g_rank = -1;
int g_failures = 0;
int g_passed = 0;

bool Check(bool ok, const std::string& what) {
  if (!ok || std::getenv("TWOHOST_VERBOSE")) {
    std::printf("rank %d: %s: %s\n", g_rank, ok ? "ok" : "FAILED", what.c_str());
    std::fflush(stdout);
  }
  ok ? ++g_passed : ++g_failures;
  return ok;
}

std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// The local address that routes to host:port, found as the core finds it
// for the control plane: connect a UDP socket and read its local address.
std::string LocalAddressTowards(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res) return "";
  int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  std::string out;
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char buf[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET) {
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
      } else {
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
      }
      out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

// The addresses of network interface `name`; empty if there is none such.
std::vector<std::string> InterfaceAddresses(const std::string& name) {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || name != i->ifa_name) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
    } else {
      continue;
    }
    out.push_back(buf);
  }
  ::freeifaddrs(list);
  return out;
}

// HIXL_NET_DEV picks UCX's device; the control plane uses the address that
// routes to MASTER_ADDR.  When HIXL_NET_DEV names an interface (not an
// RDMA device such as mlx5_0:1), both should be on it.
void CheckNetDev() {
  const std::string dev = Env("HIXL_NET_DEV");
  if (dev.empty() || dev.find(',') != std::string::npos) return;
  std::vector<std::string> addrs = InterfaceAddresses(dev);
  if (addrs.empty()) return;  // not an interface of this host
  const std::string ctrl = LocalAddressTowards(Env("MASTER_ADDR", "127.0.0.1"), Env("MASTER_PORT", "1"));
  bool on_dev = false;
  for (const auto& a : addrs) on_dev |= a == ctrl;
  Check(on_dev, "the control plane's address " + ctrl + " (towards MASTER_ADDR) is on HIXL_NET_DEV=" + dev);
}

void* MapBytes(size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

constexpr size_t kMax = size_t{256} << 20;
constexpr size_t kGuard = 64;
constexpr size_t kOffset = 4096 + 13;  // an odd place inside the region
constexpr size_t kRegion = kOffset + kMax + kGuard;
constexpr uint8_t kCanary = 0xA5;

uint64_t Seed(int from, size_t size, int op) { return hixl::test::Mix(from * 1000003ull + size * 7 + op); }

int Transfers(hixl::World& world) {
  const int me = world.rank(), peer = 1 - me;
  const std::string forced = Env("HIXL_TRANSPORT", "auto");
  // The public API says which transport serves a peer (hixl_peer_transport).
  auto transport_for = [&](int r) -> std::string {
    hixl::Result<std::string> t = world.PeerTransport(r);
    return t.ok() ? t.value() : "(error: " + t.status().ToString() + ")";
  };
  Check(transport_for(peer) == "ucx", "the peer on the other host is served by " + transport_for(peer) + " (want ucx)");
  if (forced == "auto") {
    Check(transport_for(me) == "shm", "this rank itself is served by " + transport_for(me) + " (want shm)");
  }
  CheckNetDev();

  // Registered memory that the peer writes into / reads from, a source
  // buffer, and a destination buffer for gets.
  auto* region = static_cast<uint8_t*>(MapBytes(kRegion));
  auto* src = static_cast<uint8_t*>(MapBytes(kMax));
  auto* dst = static_cast<uint8_t*>(MapBytes(kMax + 2 * kGuard));
  if (!Check(region && src && dst, "memory")) return 1;
  if (!Check(world.RegisterMemory(region, kRegion).ok(), "register 256 MiB")) return 1;
  auto bases = world.Allgather(reinterpret_cast<uint64_t>(region));
  if (!Check(bases.ok(), "allgather")) return 1;
  const uint64_t remote = (*bases)[static_cast<size_t>(peer)];

  std::vector<size_t> sizes;
  for (size_t s = 1; s <= kMax; s *= 4) sizes.push_back(s);  // 1 B, 4 B, ..., 256 MiB
  for (size_t s : {size_t{3}, size_t{4097}, (size_t{1} << 20) + 1, (size_t{64} << 20) - 1}) sizes.push_back(s);

  for (size_t size : sizes) {
    // Put: each rank writes into the other's region at kOffset.
    std::memset(region + kOffset - kGuard, kCanary, size + 2 * kGuard);
    Fill(src, size, Seed(me, size, 1));
    if (!Check(world.Barrier().ok(), "barrier")) return 1;
    hixl::Status s = world.Put(peer, src, remote + kOffset, size);
    if (s.ok()) s = world.Fence();
    Check(s.ok(), "put of " + std::to_string(size) + " B: " + s.ToString());
    if (!Check(world.Barrier().ok(), "barrier")) return 1;
    Check(FirstMismatch(region + kOffset, size, Seed(peer, size, 1)) == -1,
          "the " + std::to_string(size) + " B put by the peer arrived intact");
    Check(FirstNot(region + kOffset - kGuard, kGuard, kCanary) == -1 &&
              FirstNot(region + kOffset + size, kGuard, kCanary) == -1,
          "the bytes around the " + std::to_string(size) + " B put are untouched");

    // Get: each rank fills its region with a new pattern and reads the
    // peer's.
    Fill(region + kOffset, size, Seed(me, size, 2));
    if (!Check(world.Barrier().ok(), "barrier")) return 1;
    std::memset(dst, kCanary, size + 2 * kGuard);
    s = world.Get(peer, remote + kOffset, dst + kGuard, size);
    if (s.ok()) s = world.Fence();
    Check(s.ok(), "get of " + std::to_string(size) + " B: " + s.ToString());
    Check(FirstMismatch(dst + kGuard, size, Seed(peer, size, 2)) == -1,
          "the " + std::to_string(size) + " B get brought the peer's bytes");
    Check(FirstNot(dst, kGuard, kCanary) == -1 && FirstNot(dst + kGuard + size, kGuard, kCanary) == -1,
          "the bytes around the " + std::to_string(size) + " B get are untouched");
    if (!Check(world.Barrier().ok(), "barrier")) return 1;  // the peer is done reading our region
  }
  if (!Check(world.Barrier().ok(), "barrier")) return 1;

  // Outside registered memory: refused before anything is sent.
  std::memset(region, kCanary, kRegion);
  if (!Check(world.Barrier().ok(), "barrier")) return 1;
  struct Bad {
    uint64_t addr;
    size_t size;
  } bad[] = {{remote - 1, 2}, {remote + kRegion - 1, 2}, {remote + kRegion, 16}, {remote, kRegion + 1}};
  for (const Bad& b : bad) {
    hixl::Status s = world.Put(peer, src, b.addr, b.size);
    Check(s.code() == hixl::Errc::kNotRegistered && s.message().rfind("Remote memory not registered", 0) == 0,
          "a put of " + std::to_string(b.size) + " B outside the peer's region is refused: " + s.ToString());
    s = world.Get(peer, b.addr, dst, b.size);
    Check(s.code() == hixl::Errc::kNotRegistered,
          "a get of " + std::to_string(b.size) + " B outside the peer's region is refused: " + s.ToString());
  }
  Check(world.Fence().ok(), "fence after refused accesses");
  if (!Check(world.Barrier().ok(), "barrier")) return 1;
  Check(FirstNot(region, kRegion, kCanary) == -1, "refused puts wrote nothing");

  // Remote atomics across the hosts: two fetch-adds on the peer's word.
  std::memset(region, 0, 8);
  if (!Check(world.Barrier().ok(), "barrier")) return 1;
  auto old1 = world.AtomicFetchAdd(peer, remote, 5);
  auto old2 = world.AtomicFetchAdd(peer, remote, 5);
  Check(old1.ok() && old2.ok() && old1.value() == 0 && old2.value() == 5,
        "two fetch-adds on the peer's word saw 0 and 5 (" + old1.status().ToString() + ", " + old2.status().ToString() +
            ")");
  if (!Check(world.Barrier().ok(), "barrier")) return 1;
  uint64_t mine = 0;
  std::memcpy(&mine, region, 8);
  Check(mine == 10, "the peer's fetch-adds left 10 in this rank's word (" + std::to_string(mine) + ")");
  std::memset(region, kCanary, 8);
  // Deregistered memory: refused as well.
  if (!Check(world.DeregisterMemory(region).ok(), "deregister")) return 1;
  if (!Check(world.Barrier().ok(), "barrier")) return 1;
  hixl::Status s = world.Put(peer, src, remote + kOffset, 8);
  Check(s.code() == hixl::Errc::kNotRegistered, "a put into deregistered memory is refused: " + s.ToString());
  if (!Check(world.Barrier().ok(), "barrier")) return 1;
  Check(FirstNot(region, kRegion, kCanary) == -1, "nothing was written after deregistration");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "refused") {
    // HIXL_TRANSPORT=shm and the peer is on another host: init must say so.
    auto world = hixl::World::Init();
    g_rank = std::atoi(Env("RANK", "-1").c_str());
    if (world.ok()) {
      Check(false, "init succeeded although HIXL_TRANSPORT=" + Env("HIXL_TRANSPORT") + " cannot reach the peer");
    } else {
      const hixl::Status& s = world.status();
      std::printf("rank %d: init failed as expected: %s\n", g_rank, s.ToString().c_str());
      // Rank 0 hosts the store, so it always learns of the peer; the peer
      // may see rank 0 leave first.
      if (g_rank == 0) {
        Check(s.code() == hixl::Errc::kUnsupported && s.message().find("another host") != std::string::npos,
              "the error says the peer is on another host");
      }
    }
  } else if (mode.empty()) {
    auto world = hixl::World::Init();
    if (!world.ok()) {
      std::fprintf(stderr, "twohost: init failed: %s\n", world.status().ToString().c_str());
      return 1;
    }
    g_rank = world->rank();
    if (world->size() != 2) {
      std::fprintf(stderr, "twohost: run with 2 ranks\n");
      return 2;
    }
    (void)Transfers(world.value());
    hixl::Status s = world->Finalize();
    Check(s.ok(), "finalize: " + s.ToString());
  } else {
    std::fprintf(stderr, "usage: twohost [refused]\n");
    return 2;
  }
  std::printf("rank %d: %d checks passed, %d failed\n", g_rank, g_passed, g_failures);
  return g_failures == 0 ? 0 : 1;
}
