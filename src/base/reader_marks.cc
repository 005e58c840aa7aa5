#include "base/reader_marks.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace hixl::marks {

namespace {

long Membarrier(int cmd) { return ::syscall(__NR_membarrier, cmd, 0, 0); }

// Every thread's slots, in blocks that are never freed: a thread that ends
// gives its block back for the next thread to start.
struct Block {
  Slot slots[kSlots];
  bool in_use = false;
};

struct Blocks {
  std::mutex mu;
  std::vector<std::unique_ptr<Block>> all;
};

Blocks& AllBlocks() {
  static auto* b = new Blocks();  // outlives static destructors and late threads
  return *b;
}

struct ThreadBlock {
  Block* block = nullptr;
  ~ThreadBlock() {
    if (!block) return;
    detail::t_slots = nullptr;
    std::lock_guard lock(AllBlocks().mu);
    block->in_use = false;  // no mark is held: marks live inside one call
  }
};

}  // namespace

bool Probe() {
  const long cmds = Membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  return Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

namespace detail {

constinit thread_local Slot* t_slots __attribute__((tls_model("initial-exec"))) = nullptr;

Slot* RegisterThread() {
  thread_local ThreadBlock mine;  // gives the block back when the thread ends
  if (mine.block) return t_slots = mine.block->slots;
  Blocks& b = AllBlocks();
  std::lock_guard lock(b.mu);
  for (auto& blk : b.all) {
    if (!blk->in_use) {
      mine.block = blk.get();
      break;
    }
  }
  if (!mine.block) {
    b.all.push_back(std::make_unique<Block>());
    mine.block = b.all.back().get();
  }
  mine.block->in_use = true;
  return t_slots = mine.block->slots;
}

}  // namespace detail

bool AwaitMarks(const void* owner, std::chrono::steady_clock::time_point deadline) {
  // Every thread now executes a full barrier: a mark whose stores are not
  // visible below was taken after the snapshot the caller published, and its
  // reads see that snapshot.
  if (Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) return false;
  std::vector<std::pair<const Slot*, uint64_t>> held;
  {
    Blocks& b = AllBlocks();
    std::lock_guard lock(b.mu);
    for (auto& blk : b.all) {
      for (const Slot& s : blk->slots) {
        const uint64_t st = s.state.load(std::memory_order_acquire);
        // The owner is read after the state: if it was overwritten meanwhile,
        // that mark is over (a later one of the same thread wrote it).
        if ((st & 1) && s.owner.load(std::memory_order_acquire) == owner) held.emplace_back(&s, st);
      }
    }
  }
  for (const auto& [s, st] : held) {
    const Slot* slot = s;
    const uint64_t taken = st;
    if (!WaitUntil([slot, taken] { return slot->state.load(std::memory_order_acquire) != taken; }, deadline)) {
      return false;
    }
  }
  return true;
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
  for (int spin = 0; !done(); ++spin) {
    if (spin < 256) continue;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (spin < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return true;
}

}  // namespace hixl::marks
