// The fixture's helpers, the transport configurations and the one
// instantiation of TransportTest over them (for the TEST_Ps of every file
// of this binary).
#include "transport_fixture.h"

#include <algorithm>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

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

}  // namespace hixl::transport::test
