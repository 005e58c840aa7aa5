#include <hixl/hixl.hpp>

#include <cstdio>
#include <cstring>

int main() {
  auto world = hixl::World::Init();
  if (!world) return 1;
  char src[32] = "found with find_package(hixl)";
  char dst[32] = {};
  auto reg = hixl::Registration::Make(dst, sizeof dst);
  if (!reg) return 1;
  if (!world->Put(world->rank(), src, reinterpret_cast<uint64_t>(dst), sizeof src).ok()) return 1;
  if (!world->Fence().ok() || std::strcmp(src, dst) != 0) return 1;
  // A world of one reaches itself through shared memory.
  const char* transport = hixl_peer_transport(world->rank());
  if (!transport || std::strcmp(transport, "shm") != 0) return 1;
  std::printf("%s\n", dst);
  return world->Finalize().ok() ? 0 : 1;
}
