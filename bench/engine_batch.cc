// hixl_perf --engine: batch bandwidth of hixl::Engine (see engine_batch.h).
//
// Rank 0 runs a listening engine with a registered buffer of twice the batch
// size; rank 1's engine connects to it and moves batches of `block`-byte
// blocks into every other block-sized slot of it (scattered, as KV-cache
// blocks are).  The world only tells rank 1 where rank 0 listens and keeps
// the ranks together between phases.
#include "engine_batch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hixl/engine.hpp>

#include <cstdio>
#include <functional>

using namespace hixl_bench;  // NOLINT(build/namespaces)

namespace {

uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

struct Where {
  uint64_t port = 0;
  uint64_t addr = 0;
};

}  // namespace

json RunEngineBatch(hixl::World& world, const EngineBatchOptions& o, bool* ok) {
  const int me = world.rank();
  json rows = json::array();
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "hixl_perf --engine (rank %d): %s\n", me, what.c_str());
    *ok = false;
  };
  if (world.size() < 2) {
    fail("needs at least 2 ranks");
    return rows;
  }
  const uint64_t batch = RoundUp(o.batch_bytes, 8);
  const std::map<std::string, std::string> opts = {{"transport", o.transport}};
  hixl::Engine engine;
  Buffer remote;
  Where where;
  if (me == 0) {
    remote = AllocBuffer(2 * batch);
    std::memset(remote.get(), 0, 2 * batch);
    for (int attempt = 0; attempt < 5 && where.port == 0; ++attempt) {
      const uint16_t port = FreePort();
      if (engine.Initialize("127.0.0.1:" + std::to_string(port), opts) == hixl::SUCCESS) where.port = port;
    }
    hixl::MemHandle h = nullptr;
    if (where.port == 0 || engine.RegisterMem({reinterpret_cast<uintptr_t>(remote.get()), 2 * batch}, hixl::MEM_HOST,
                                              h) != hixl::SUCCESS) {
      fail(std::string("engine set-up: ") + hixl::Engine::LastError());
      where.port = 0;
    }
    if (!world.RegisterMemory(remote.get(), 2 * batch).ok()) fail("hixl_register_memory failed");
    where.addr = reinterpret_cast<uint64_t>(remote.get());
  }
  std::vector<Where> all(static_cast<size_t>(world.size()));
  if (!world.Allgather(&where, all.data(), sizeof(Where)).ok()) {
    fail("allgather failed");
    return rows;
  }
  where = all[0];
  if (where.port == 0) {
    if (me != 0) fail("rank 0's engine did not start");
    return rows;
  }
  const std::string server = "127.0.0.1:" + std::to_string(where.port);

  if (me == 1) {
    if (engine.Initialize("127.0.0.1", opts) != hixl::SUCCESS || engine.Connect(server, 10000) != hixl::SUCCESS) {
      fail(std::string("engine set-up: ") + hixl::Engine::LastError());
    }
  }
  if (me == 1 && *ok) {
    Buffer src = AllocBuffer(batch), dst = AllocBuffer(batch), local = AllocBuffer(2 * batch);
    std::memset(dst.get(), 0, batch);
    std::memset(local.get(), 0, 2 * batch);
    std::printf(
        "\nengine batches: %s per batch into every other block of rank 0's registered memory, transport "
        "%s, median of %d batches (GB/s)\n",
        SizeName(batch).c_str(), o.transport.c_str(), o.reps);
    std::printf("%10s %8s %5s %12s %12s %12s %10s %10s\n", "block", "blocks", "op", "engine", "world", "memcpy",
                "vs world", "vs memcpy");
    uint64_t seed_no = 1;
    uint64_t remote_seed = 0, local_seed = 0;  // what rank 0's buffer and `local` hold
    for (uint64_t block : o.block_sizes) {
      const uint64_t n = batch / block;
      if (n == 0 || block % 8 != 0) continue;
      const uint64_t bytes = n * block;
      std::vector<hixl::TransferOpDesc> wr(n), rd(n);
      for (uint64_t i = 0; i < n; ++i) {
        wr[i] = {reinterpret_cast<uintptr_t>(src.get() + i * block), where.addr + 2 * i * block, block};
        rd[i] = {reinterpret_cast<uintptr_t>(dst.get() + i * block), where.addr + 2 * i * block, block};
      }
      // One timed batch per rep after one warm-up; `check` verifies the data
      // of each (seed = what was last written to rank 0).
      // `held`: the seed of what the written-to memory holds (writes set it;
      // reads check against it).
      auto measure = [&](const char* what, const std::function<bool(uint64_t seed)>& run,
                         const std::function<bool(uint64_t seed)>& check, bool writes, uint64_t* held) {
        std::vector<double> gbps;
        uint64_t seed = *held;
        for (int r = -1; r < o.reps && *ok; ++r) {
          if (writes) {
            seed = Seed(++seed_no, 1);
            Fill(src.get(), bytes, seed);
          } else {
            std::memset(dst.get(), 0, bytes);
          }
          auto t0 = Clock::now();
          if (!run(seed)) {
            fail(std::string(what) + " of " + SizeName(block) + " blocks failed: " + hixl::Engine::LastError());
            break;
          }
          const double s = std::max(Seconds(t0), 1e-9);
          if (!check(seed)) {
            fail(std::string("VERIFICATION FAILED: ") + what + " of " + SizeName(block) + " blocks");
            break;
          }
          *held = seed;
          if (r >= 0) gbps.push_back(static_cast<double>(bytes) / s / 1e9);
        }
        return Summarize(gbps);
      };
      // Reads rank 0's blocks back with the engine and checks them.
      auto check_remote = [&](uint64_t seed) {
        std::memset(dst.get(), 0, bytes);
        return engine.TransferSync(server, hixl::READ, rd, 60000) == hixl::SUCCESS && !Check(dst.get(), bytes, seed);
      };
      auto check_dst = [&](uint64_t seed) { return !Check(dst.get(), bytes, seed); };
      auto world_ops = [&](bool put) {
        for (uint64_t i = 0; i < n; ++i) {
          hixl::Status s = put ? world.Put(0, src.get() + i * block, where.addr + 2 * i * block, block)
                               : world.Get(0, where.addr + 2 * i * block, dst.get() + i * block, block);
          if (!s.ok()) return false;
        }
        return world.Fence().ok();
      };
      for (bool put : {true, false}) {
        const char* op = put ? "put" : "get";
        Stats e =
            put ? measure(
                      "engine WRITE",
                      [&](uint64_t) { return engine.TransferSync(server, hixl::WRITE, wr, 60000) == hixl::SUCCESS; },
                      check_remote, true, &remote_seed)
                : measure(
                      "engine READ",
                      [&](uint64_t) { return engine.TransferSync(server, hixl::READ, rd, 60000) == hixl::SUCCESS; },
                      check_dst, false, &remote_seed);
        Stats w = measure(
            put ? "world put" : "world get", [&](uint64_t) { return world_ops(put); },
            put ? std::function<bool(uint64_t)>(check_remote) : check_dst, put, &remote_seed);
        // The same blocks with one core's memcpy, scattered the same way
        // (put) or gathered (get), within this process.
        Stats m = measure(
            "memcpy",
            [&](uint64_t) {
              for (uint64_t i = 0; i < n; ++i) {
                if (put) {
                  std::memcpy(local.get() + 2 * i * block, src.get() + i * block, block);
                } else {
                  std::memcpy(dst.get() + i * block, local.get() + 2 * i * block, block);
                }
              }
              asm volatile("" ::: "memory");
              return true;
            },
            [&](uint64_t seed) {
              if (!put) return !Check(dst.get(), bytes, seed);
              return std::memcmp(local.get() + 2 * (n - 1) * block, src.get() + (n - 1) * block, block) == 0 &&
                     std::memcmp(local.get(), src.get(), block) == 0;
            },
            put, &local_seed);
        if (!*ok) break;
        std::printf("%10s %8llu %5s %12s %12s %12s %9.2fx %9.2fx\n", SizeName(block).c_str(),
                    static_cast<unsigned long long>(n), op, Spread(e).c_str(), Spread(w).c_str(), Spread(m).c_str(),
                    e.median / w.median, e.median / m.median);
        rows.push_back(json{{"block", block},
                            {"blocks", n},
                            {"op", op},
                            {"transport", o.transport},
                            {"engine_gbps", ToJson(e)},
                            {"world_gbps", ToJson(w)},
                            {"memcpy_gbps", ToJson(m)},
                            {"engine_vs_world", e.median / w.median},
                            {"engine_vs_memcpy", e.median / m.median}});
      }
      if (!*ok) break;
    }
    std::fflush(stdout);
  }
  if (!world.Barrier().ok()) fail("barrier failed");
  if (me == 0) (void)world.DeregisterMemory(remote.get());
  engine.Finalize();
  // Everyone learns whether rank 1 succeeded.
  const int32_t mine = *ok ? 1 : 0;
  std::vector<int32_t> oks(static_cast<size_t>(world.size()));
  if (!world.Allgather(&mine, oks.data(), sizeof(mine)).ok()) *ok = false;
  for (int32_t v : oks) *ok = *ok && v == 1;
  return rows;
}
