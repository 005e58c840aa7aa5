// The module's global state (see state.h).
#include "state.h"

#include <hixl/hixl.h>

#include <fmt/format.h>

#include <iterator>
#include <utility>

#include "errors.h"

namespace hixl_py {

State& S() {
  static State* s = new State;
  return *s;
}

hixl::World& WorldOrRaise(const char* api) {
  if (!S().world) {
    Raise(HIXL_ERR_NOT_INITIALIZED,
          fmt::format("{} called {}", api, S().finalized ? "after hixl.finalize()" : "before hixl.init()"));
  }
  return *S().world;
}

uint64_t Track(Keep keep) {
  if (keep.empty()) return 0;
  uint64_t seq = S().next_seq++;
  S().pending.push_back({seq, std::move(keep)});
  return seq;
}

void Untrack(uint64_t seq) {
  if (seq == 0) return;
  auto& p = S().pending;
  for (auto it = p.rbegin(); it != p.rend(); ++it) {
    if (it->seq == seq) {
      p.erase(std::next(it).base());
      return;
    }
  }
}

// Every transfer started before `mark` was taken is complete.
void Completed(uint64_t mark) {
  auto& p = S().pending;
  while (!p.empty() && p.front().seq < mark) p.pop_front();
}

}  // namespace hixl_py
