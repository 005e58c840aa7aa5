// The chaos soak's pieces that its driver (soak.cc) and its workers
// (soak_workers.cc) share: the round's shape and the operation kinds.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace soak {

using Clock = std::chrono::steady_clock;

constexpr int kEngines = 3;
constexpr size_t kCanary = 64;
constexpr int kCallMs = 2000;    // each call's own timeout
constexpr int kEngineMs = 3000;  // the engines' timeout_ms (deregistration acks)
constexpr int kSlackMs = 5000;   // a loaded 2-core machine
constexpr int kRoundMs = 6000;   // operations per round
constexpr int kWatchdogMs = 90000;

const char* const kKinds[] = {"put",        "get",       "async",   "notify", "register",
                              "deregister", "reconnect", "bad_put", "atomic", "fence"};
constexpr int kNumKinds = 10;
constexpr int kRanks = 4;  // world ranks a round

inline int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// soak --worker IDX SEED NAME...: an engine process of a round.
int WorkerMain(int argc, char** argv);
// soak --rank SEED: a world rank of a round.
int RankMain(uint64_t seed);

}  // namespace soak
