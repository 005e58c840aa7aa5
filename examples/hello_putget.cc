// Every rank puts a block into every other rank's symmetric memory and gets
// one back from registered memory, then checks every byte and says so.
//
//   hixlrun -n 4 ./build/examples/hello_putget
#include <hixl/hixl.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  auto world = hixl::World::Init();
  if (!world) {
    std::fprintf(stderr, "init failed: %s\n", world.status().ToString().c_str());
    return 1;
  }
  const int me = world->rank(), n = world->size();
  constexpr size_t kBlock = 1 << 20;

  // Symmetric memory: one inbox slot per rank, the same address everywhere.
  auto inbox = world->Alloc(kBlock * static_cast<size_t>(n));
  // Registered memory: an ordinary vector, its address told to everyone.
  std::vector<unsigned char> outbox(kBlock, static_cast<unsigned char>(me + 1));
  auto reg = hixl::Registration::Make(outbox.data(), outbox.size());
  if (!inbox || !reg) {
    std::fprintf(stderr, "memory set-up failed\n");
    return 1;
  }
  auto addrs = world->Allgather(reinterpret_cast<uint64_t>(outbox.data()));
  if (!addrs) return 1;

  std::vector<unsigned char> mine(kBlock, static_cast<unsigned char>(0x40 + me));
  for (int r = 0; r < n; ++r) {
    uint64_t slot = reinterpret_cast<uint64_t>(*inbox) + static_cast<uint64_t>(me) * kBlock;
    if (auto s = world->Put(r, mine.data(), slot, kBlock); !s.ok()) {
      std::fprintf(stderr, "put failed: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (auto s = world->Barrier(); !s.ok()) return 1;  // all puts are visible everywhere now

  size_t checked = 0;
  auto* in = static_cast<unsigned char*>(*inbox);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < kBlock; ++i, ++checked) {
      if (in[static_cast<size_t>(r) * kBlock + i] != 0x40 + r) {
        std::fprintf(stderr, "rank %d: wrong byte from rank %d at %zu\n", me, r, i);
        return 1;
      }
    }
  }
  // Get every peer's registered outbox.
  std::vector<unsigned char> got(kBlock);
  for (int r = 0; r < n; ++r) {
    if (auto s = world->Get(r, (*addrs)[static_cast<size_t>(r)], got.data(), kBlock); !s.ok()) {
      std::fprintf(stderr, "get failed: %s\n", s.ToString().c_str());
      return 1;
    }
    if (auto s = world->Fence(); !s.ok()) return 1;
    for (size_t i = 0; i < kBlock; ++i, ++checked) {
      if (got[i] != r + 1) {
        std::fprintf(stderr, "rank %d: wrong byte got from rank %d at %zu\n", me, r, i);
        return 1;
      }
    }
  }
  std::printf("rank %d of %d: put %d x %zu B into symmetric memory, got %d x %zu B from registered memory, "
              "%zu bytes verified\n", me, n, n, kBlock, n, kBlock, checked);
  if (auto s = world->Barrier(); !s.ok()) return 1;
  (void)world->Free(*inbox);
  return world->Finalize().ok() ? 0 : 1;
}
