#include "core/table_board.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

#include "base/log.h"

namespace hixl::core {

namespace {

// The layout: [magic][seq][len][removal number][removal generation] in the
// first 64 bytes; the doorbell's futex word at 64 and the acknowledgements'
// at 128 (each on a line of its own); from 192 the subscriber bits, the
// doorbell's bits (who rang), one acknowledgement word per id; the table
// from the next multiple of 64 after them.
constexpr uint64_t kMagic = 0x3244524c42584948ULL;  // "HIXLBRD2"
constexpr uint64_t kSeqAt = 8, kLenAt = 16, kRemovalAt = 24, kRemovalGenAt = 32;
constexpr uint64_t kBellAt = 64, kAckBellAt = 128, kBitsAt = 192;
constexpr int kReadTries = 64;
constexpr int64_t kProbeMs = 20;  // how often AwaitAcks asks whether pending subscribers live

uint64_t BitWords(uint32_t ids) { return (uint64_t{ids} + 63) / 64; }
uint64_t RungAt(uint32_t ids) { return kBitsAt + BitWords(ids) * 8; }
uint64_t AcksAt(uint32_t ids) { return RungAt(ids) + BitWords(ids) * 8; }
uint64_t TableAt(uint32_t ids) { return (AcksAt(ids) + uint64_t{ids} * 8 + 63) / 64 * 64; }
uint64_t BoardBytes(uint32_t ids) { return TableAt(ids) + kBoardTableBytes; }

uint64_t* Word(const sharedmem::Mapping& m, uint64_t at) {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(m.get()) + at);
}
uint32_t* FutexWord(const sharedmem::Mapping& m, uint64_t at) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(m.get()) + at);
}

// A shared (not process-private) futex: the word lies in a MAP_SHARED file.
void FutexWait(uint32_t* word, uint32_t seen, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000), static_cast<long>(timeout_ns % 1'000'000'000)};
  ::syscall(SYS_futex, word, FUTEX_WAIT, seen, timeout_ns < 0 ? nullptr : &ts, nullptr, 0);
}
void FutexWakeAll(uint32_t* word) {
  __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Sets bit `id` of the bit array at `at`.
void SetBit(const sharedmem::Mapping& m, uint64_t at, int id) {
  const uint64_t w = static_cast<uint64_t>(id) / 64;
  __atomic_fetch_or(Word(m, at + 8 * w), uint64_t{1} << (id % 64), __ATOMIC_SEQ_CST);
}

// The set bits of `words` words at `at`, below `ids`; cleared when `take`.
std::vector<int> Bits(const sharedmem::Mapping& m, uint64_t at, uint32_t ids, bool take) {
  std::vector<int> out;
  for (uint64_t w = 0; w < BitWords(ids); ++w) {
    uint64_t* word = Word(m, at + 8 * w);
    uint64_t bits = take ? __atomic_exchange_n(word, 0, __ATOMIC_SEQ_CST) : __atomic_load_n(word, __ATOMIC_SEQ_CST);
    while (bits) {
      const int b = __builtin_ctzll(bits);
      bits &= bits - 1;
      const uint64_t id = w * 64 + static_cast<uint64_t>(b);
      if (id < ids) out.push_back(static_cast<int>(id));
    }
  }
  return out;
}

}  // namespace

std::string Encode(const BoardAddress& a) {
  net::Writer w;
  w.PutBytes(a.host).Put<int32_t>(a.pid).Put<int32_t>(a.fd).Put<uint64_t>(a.ino).Put<uint32_t>(a.ids);
  return std::move(w.str());
}

std::optional<BoardAddress> DecodeBoardAddress(std::string_view bytes) {
  net::Reader r(bytes);
  BoardAddress a;
  if (!r.GetBytes(&a.host) || !r.Get(&a.pid) || !r.Get(&a.fd) || !r.Get(&a.ino) || !r.Get(&a.ids) || !r.empty()) {
    return std::nullopt;
  }
  if (a.host.size() > 256 || a.pid <= 0 || a.fd < 0 || a.ino == 0 || a.ids == 0 || a.ids > kMaxBoardIds) {
    return std::nullopt;
  }
  return a;
}

// ------------------------------------------------------------------ owner

Result<std::unique_ptr<TableBoard>> TableBoard::Create(uint32_t ids) {
  if (ids == 0 || ids > kMaxBoardIds) return Err(Errc::kInvalidArg, "a table board of {} ids", ids);
  std::unique_ptr<TableBoard> b(new TableBoard());
  b->fd_ = net::Fd(::memfd_create("hixl-table", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!b->fd_.valid()) return Err(Errc::kNoMemory, "memfd_create of the table board: {}", std::strerror(errno));
  const uint64_t size = BoardBytes(ids);
  if (::ftruncate(b->fd_.get(), static_cast<off_t>(size)) != 0) {
    return Err(Errc::kNoMemory, "cannot size the {}-byte table board: {}", size, std::strerror(errno));
  }
  HIXL_RETURN_IF_ERROR(sharedmem::SealSize(b->fd_.get()));
  HIXL_ASSIGN_OR_RETURN(b->map_, sharedmem::MapShared(b->fd_.get(), size));
  __atomic_store_n(Word(b->map_, 0), kMagic, __ATOMIC_RELEASE);
  b->addr_ = {sharedmem::HostIdentity(), static_cast<int32_t>(::getpid()), b->fd_.get(),
              sharedmem::FileInode(b->fd_.get()), ids};
  return b;
}

void TableBoard::Publish(const std::function<std::string()>& serialize) {
  std::lock_guard lock(mu_);
  const std::string table = serialize();
  uint64_t* seq = Word(map_, kSeqAt);
  uint64_t* len = Word(map_, kLenAt);
  // Our own count, never read back from the board (which readers can write).
  const uint64_t s = seq_;
  seq_ += 2;
  __atomic_store_n(seq, s + 1, __ATOMIC_RELAXED);  // odd: being written
  __atomic_thread_fence(__ATOMIC_RELEASE);
  if (table.size() <= kBoardTableBytes) {
    std::memcpy(static_cast<char*>(map_.get()) + TableAt(addr_.ids), table.data(), table.size());
    __atomic_store_n(len, table.size(), __ATOMIC_RELAXED);
  } else {
    __atomic_store_n(len, UINT64_MAX, __ATOMIC_RELAXED);  // readers ask over the control connection
  }
  __atomic_store_n(seq, s + 2, __ATOMIC_SEQ_CST);
}

std::vector<int> TableBoard::Subscribers() const {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return Bits(map_, kBitsAt, addr_.ids, false);
}

uint64_t TableBoard::BeginRemoval(uint64_t generation) {
  std::lock_guard lock(mu_);
  removal_generation_ = std::max(removal_generation_, generation);
  __atomic_store_n(Word(map_, kRemovalGenAt), removal_generation_, __ATOMIC_SEQ_CST);
  __atomic_store_n(Word(map_, kRemovalAt), ++removals_, __ATOMIC_SEQ_CST);
  return removals_;
}

std::vector<std::pair<int, Errc>> TableBoard::AwaitAcks(uint64_t number, const std::vector<int>& ids,
                                                        std::chrono::steady_clock::time_point deadline,
                                                        const std::function<bool(int)>& gone) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::pair<int, Errc>> failed;
  std::vector<int> pending;
  for (int id : ids) {
    if (id >= 0 && static_cast<uint64_t>(id) < addr_.ids) pending.push_back(id);
  }
  uint32_t* bell = FutexWord(map_, kAckBellAt);
  auto next_probe = Clock::now() + std::chrono::milliseconds(kProbeMs);
  while (true) {
    const uint32_t seen = __atomic_load_n(bell, __ATOMIC_SEQ_CST);
    std::erase_if(pending, [&](int id) {
      return __atomic_load_n(Word(map_, AcksAt(addr_.ids) + 8 * static_cast<uint64_t>(id)), __ATOMIC_ACQUIRE) >= number;
    });
    if (pending.empty()) return failed;
    auto now = Clock::now();
    if (now >= next_probe) {
      std::erase_if(pending, [&](int id) {
        if (!gone(id)) return false;
        failed.emplace_back(id, Errc::kPeerFailed);
        return true;
      });
      if (pending.empty()) return failed;
      now = Clock::now();
      next_probe = now + std::chrono::milliseconds(kProbeMs);
    }
    if (now >= deadline) {
      for (int id : pending) failed.emplace_back(id, Errc::kTimeout);
      return failed;
    }
    FutexWait(bell, seen,
              std::chrono::duration_cast<std::chrono::nanoseconds>(std::min(deadline, next_probe) - now).count());
  }
}

std::vector<int> TableBoard::TakeRings(int64_t timeout_ms, const std::atomic<bool>* stop) {
  uint32_t* bell = FutexWord(map_, kBellAt);
  // The word first, then the stop flag and the bits: a WakeRings (after
  // its stop) or a Ring (after its bit) that comes later changes the word,
  // and the wait below returns at once.
  const uint32_t seen = __atomic_load_n(bell, __ATOMIC_SEQ_CST);
  std::vector<int> rang = Bits(map_, RungAt(addr_.ids), addr_.ids, true);
  if (!rang.empty() || timeout_ms == 0 || (stop && stop->load(std::memory_order_seq_cst))) return rang;
  FutexWait(bell, seen, timeout_ms < 0 ? -1 : timeout_ms * 1'000'000);
  return Bits(map_, RungAt(addr_.ids), addr_.ids, true);
}

void TableBoard::WakeRings() { FutexWakeAll(FutexWord(map_, kBellAt)); }

// ----------------------------------------------------------------- reader

Result<std::unique_ptr<BoardReader>> BoardReader::Open(std::string_view address, const std::string& who) {
  std::optional<BoardAddress> a = DecodeBoardAddress(address);
  if (!a) return Err(Errc::kTransport, "the table board address of {} is malformed ({} bytes)", who, address.size());
  if (a->host != sharedmem::HostIdentity()) return std::unique_ptr<BoardReader>();
  const std::string what = fmt::format("the table board of {}", who);
  net::Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, a->pid, 0)));
  HIXL_ASSIGN_OR_RETURN(net::Fd fd, sharedmem::OpenPeerFd(pidfd.get(), a->pid, a->fd, a->ino, what));
  std::unique_ptr<BoardReader> r(new BoardReader());
  r->pidfd_ = std::move(pidfd);
  HIXL_ASSIGN_OR_RETURN(r->map_, sharedmem::MapPeerFile(fd.get(), BoardBytes(a->ids), what));
  if (__atomic_load_n(Word(r->map_, 0), __ATOMIC_ACQUIRE) != kMagic) {
    return Err(Errc::kTransport, "refused {}: it is not a table board", what);
  }
  r->addr_ = std::move(*a);
  r->who_ = who;
  return r;
}

void BoardReader::Subscribe(int id) {
  if (subscribed_ || id < 0 || static_cast<uint64_t>(id) >= addr_.ids) return;
  SetBit(map_, kBitsAt, id);
  subscribed_ = true;
}

Result<std::string> BoardReader::Read() const {
  std::string out;
  HIXL_RETURN_IF_ERROR(Visit([&out](std::string_view bytes) {
    out.assign(bytes);
    return Status::Ok();
  }));
  return out;
}

Status BoardReader::Visit(const std::function<Status(std::string_view)>& scan) const {
  const uint64_t* seq = Word(map_, kSeqAt);
  const uint64_t* len = Word(map_, kLenAt);
  const char* data = static_cast<const char*>(map_.get()) + TableAt(addr_.ids);
  for (int i = 0; i < kReadTries; ++i) {
    if (i > 0) ::sched_yield();
    const uint64_t s1 = __atomic_load_n(seq, __ATOMIC_SEQ_CST);
    if (s1 & 1) continue;
    const uint64_t n = __atomic_load_n(len, __ATOMIC_RELAXED);
    if (n > kBoardTableBytes) {
      // Outgrown (or a lie): a consistent answer either way.
      if (__atomic_load_n(seq, __ATOMIC_ACQUIRE) == s1) {
        return Err(Errc::kUnsupported, "the region table of {} is larger than its board", who_);
      }
      continue;
    }
    Status s = scan(std::string_view(data, n));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(seq, __ATOMIC_RELAXED) == s1) return s;
  }
  return Err(Errc::kTimeout, "the region table of {} changed at each of {} reads of its board", who_, kReadTries);
}

void BoardReader::Ring(int id) {
  if (id < 0 || static_cast<uint64_t>(id) >= addr_.ids) return;
  SetBit(map_, RungAt(addr_.ids), id);
  FutexWakeAll(FutexWord(map_, kBellAt));
}

BoardReader::Removal BoardReader::LatestRemoval() const {
  Removal r;
  r.number = __atomic_load_n(Word(map_, kRemovalAt), __ATOMIC_SEQ_CST);
  r.generation = __atomic_load_n(Word(map_, kRemovalGenAt), __ATOMIC_SEQ_CST);
  return r;
}

void BoardReader::Ack(int id, uint64_t number) {
  if (id < 0 || static_cast<uint64_t>(id) >= addr_.ids) return;
  uint64_t* ack = Word(map_, AcksAt(addr_.ids) + 8 * static_cast<uint64_t>(id));
  uint64_t a = __atomic_load_n(ack, __ATOMIC_RELAXED);
  while (a < number && !__atomic_compare_exchange_n(ack, &a, number, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  FutexWakeAll(FutexWord(map_, kAckBellAt));
}

bool BoardReader::Alive() const { return !sharedmem::Exited(pidfd_.get()); }

}  // namespace hixl::core
