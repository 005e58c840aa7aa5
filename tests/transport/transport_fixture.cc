// The fixture's helpers, the transport configurations and the one
// instantiation of TransportTest over them (for the TEST_Ps of every file
// of this binary).
#include "transport_fixture.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "base/socket.h"

namespace hixl::transport::test {

// Bytes that differ from place to place and from seed to seed.
void Fill(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<uint8_t>(x >> 24);
  }
}

// The first offset where a and b differ, or n.
size_t FirstDifference(const uint8_t* a, const uint8_t* b, size_t n) {
  return static_cast<size_t>(std::mismatch(a, a + n, b).first - a);
}

// How many mappings of this process map the test's segments.
int SegmentMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) n += line.find(kSegmentName) != std::string::npos;
  return n;
}

std::vector<Config> Configs() {
  std::vector<Config> c = {{"shm_cma", "shm", true, ""}, {"shm_relay", "shm", false, ""}};
#ifdef HIXL_TEST_HAVE_UCX
  c.push_back({"ucx", "ucx", true, ""});
  c.push_back({"ucx_listener", "ucx", true, "127.0.0.1"});
#endif
  return c;
}

std::string ConfigName(const ::testing::TestParamInfo<Config>& info) { return info.param.name; }
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(Every, TransportTest, ::testing::ValuesIn(Configs()), ConfigName);

#ifdef HIXL_TEST_HAVE_UCX
bool UcxPeerProcess::Start(const std::map<std::string, std::string>& settings) {
  int sv[2];  // sv[0] the parent's end, sv[1] the child's
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    ADD_FAILURE() << "socketpair: " << std::strerror(errno);
    return false;
  }
  pid_ = ::fork();
  if (pid_ < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  if (pid_ == 0) {  // the peer: registers its region, tells the parent how to reach it, waits to be killed
    ::close(sv[0]);
    TestHost h1(1);
    Options options;
    options.only = "ucx";
    options.settings = settings;
    auto t1 = CreateTransports(&h1, options);
    if (!t1.ok()) ::_exit(2);
    Memory m(Backing::kPrivate, kPeerBytes, 23);
    auto key = t1.value()[0]->RegisterRegion(m.region());
    if (!key.ok()) ::_exit(3);
    h1.Add(m.addr(), m.len());
    net::Writer w;
    w.Put<uint64_t>(m.addr()).PutBytes(t1.value()[0]->LocalAddress()).PutBytes(key.value());
    const uint64_t n = w.str().size();
    const net::Deadline deadline = net::DeadlineIn(60000);
    if (!net::SendAll(sv[1], &n, sizeof(n), deadline).ok() || !net::SendAll(sv[1], w.str().data(), n, deadline).ok()) {
      ::_exit(4);
    }
    char c;
    (void)net::RecvAll(sv[1], &c, 1, deadline);  // the parent kills it first
    ::_exit(0);
  }
  ::close(sv[1]);
  fd_ = sv[0];
  const net::Deadline deadline = net::DeadlineIn(60000);
  uint64_t n = 0;
  Status got = net::RecvAll(fd_, &n, sizeof(n), deadline);
  if (!got.ok() || n >= (uint64_t{1} << 20)) {
    ADD_FAILURE() << "the UCX peer process sent no address: " << got.message();
    return false;
  }
  std::string msg(n, '\0');
  got = net::RecvAll(fd_, msg.data(), n, deadline);
  net::Reader r(msg);
  if (!got.ok() || !r.Get(&addr) || !r.GetBytes(&address) || !r.GetBytes(&blob)) {
    ADD_FAILURE() << "the UCX peer process sent a bad address: " << got.message();
    return false;
  }
  return true;
}

void UcxPeerProcess::Kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}
#endif

}  // namespace hixl::transport::test
