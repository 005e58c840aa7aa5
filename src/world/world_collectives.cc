// The world's small collectives: allgather and broadcast.
//
// On the data plane (once the barrier runs there): through a scratch area in
// the first symmetric block, right after the barrier's flags, so at the same
// address on every rank and known to every peer before the first call.  The
// scratch has two halves used in turn, one per round.  A part is a slot: a
// 16-byte header, then its bytes.
//  * allgather rides on the dissemination barrier (Bruck's allgather): rank
//    r keeps rank b's part at position (r - b) mod n of its half, its own at
//    0: the headers in an array of n at the half's start, the bytes in an
//    array of n after it (so that a rank called with another size garbles
//    only the bytes, never the headers that name it).  In barrier round k it
//    puts positions [0, c) of both arrays, c = min(2^k, n - 2^k) (all it
//    has gathered so far), to positions [2^k, 2^k + c) of its partner
//    r + 2^k, then signals; after log2 n rounds every rank holds every
//    part, with 2 log2 n puts instead of n - 1.
// A rank writes half h again only in round k+2, after the barrier of round
// k+1, which nobody passes before everyone has finished round k: the
// barrier is what keeps the halves apart, no reset is needed.
//
// Broadcast has a ring of its own after the halves, and no barrier: its
// data goes in chunks (a slot less its header), chunk s into slot s mod
// kRingSlots at every rank, each slot flagged by its own line of the
// barrier's block (lines kRingLine on), down a binomial tree rooted at the
// root (rank v places from the root, v > 0, hears from v less its lowest
// set bit, and sends to v + 2^k for every 2^k below that bit, the largest
// first).  A rank sends a chunk from its own slot: it puts the slot into
// the child's, then sets the child's flag of the slot to s + 1 -- a copy
// and a store where the child's block is mapped here (a futex wake only if
// the child sleeps, as a barrier round's signal), else one put with
// signal, and a fence after the chunk (the transport may read our slot,
// the source, after the put returns).  A rank waits for its flag (spinning,
// then sleeping, as a barrier round does), sends the chunk on, copies it
// out, and counts it taken in the ring's first word (the root counts its
// own chunks too).  Before a rank writes chunk s into a child's slot it
// must know that the child has taken chunk s - kRingSlots, which was in the
// same slot (whoever wrote it then): what the child was last seen to have
// taken is kept, and asked again (a load where its memory is mapped, else
// an atomic fetch) only when it is not enough.  A rank waits only for
// older chunks than the one it sends, so no wait goes round in a circle.
// So a broadcast costs every rank at most ceil(log2 n) puts and signals
// and one wait, the root included (no rank's work grows with n), and
// back-to-back broadcasts run up to kRingSlots chunks ahead of the slowest
// rank; chunks' flags only grow, so none is ever reset.
//
// The header names the round and the lengths the writer was called with, so
// that ranks that called with different sizes (or a different sequence of
// collectives) get an error naming the rank, never each other's bytes.
//
// Data that does not fit the scratch: allgather goes through rank 0's store
// (as it does before the data-plane barrier starts, during init).
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>

#include "base/reader_marks.h"
#include "bootstrap/store_protocol.h"
#include "world/world.h"

namespace hixl::world {

namespace {

size_t Round8(size_t n) { return (n + 7) & ~size_t{7}; }

// The header's first word: the round and this slot's length (below 2^24).
constexpr unsigned kLengthBits = 24;
uint64_t Tag(uint64_t round, size_t len) { return ((round + 1) << kLengthBits) | static_cast<uint64_t>(len); }
// Whether a tag is of `round` (whatever its length), and the length it says.
bool TagOfRound(uint64_t tag, uint64_t round) { return (tag >> kLengthBits) == round + 1; }
size_t TagLength(uint64_t tag) { return tag & ((uint64_t{1} << kLengthBits) - 1); }

struct Header {
  uint64_t tag;
  uint64_t total;  // allgather: bytes per rank; broadcast: the whole size
};
constexpr size_t kHeader = sizeof(Header);

// A slot: the header, then len bytes of data.
void WriteSlot(char* slot, const Header& h, const void* data, size_t len) {
  std::memcpy(slot, &h, sizeof h);
  std::memcpy(slot + kHeader, data, len);
}

// Whether the slot's header is `want`; *got is what it holds.
bool HeaderIs(const char* slot, const Header& want, Header* got) {
  std::memcpy(got, slot, sizeof *got);
  return got->tag == want.tag && got->total == want.total;
}

}  // namespace

char* WorldImpl::ScratchHalf(uint64_t round) const {
  return static_cast<char*>(barrier_block_) + DisseminationBarrier::kBlockBytes + (round % 2) * kScratchHalf;
}

Status WorldImpl::Allgather(const void* send, void* recv, size_t bytes_per_rank) {
  if (bytes_per_rank == 0) return Status::Ok();
  if (!send || !recv) return Err(Errc::kInvalidArg, "hixl_allgather: {} is NULL", send ? "recv" : "send");
  if (bytes_per_rank > (size_t{64} << 20)) {
    return Err(Errc::kInvalidArg,
               "hixl_allgather: {} bytes per rank is too large (at most 64 MiB; it is meant for "
               "small data such as addresses)",
               bytes_per_rank);
  }
  const size_t n = static_cast<size_t>(size());
  const size_t stride = Round8(bytes_per_rank);
  if (!barrier_ || (kHeader + stride) * n > kScratchHalf) return StoreAllgather(send, recv, bytes_per_rank);
  std::lock_guard<std::mutex> lock(collective_mu_);
  const uint64_t round = collective_round_++;
  char* half = ScratchHalf(round);
  char* data = half + n * kHeader;
  const Header h{Tag(round, bytes_per_rank), bytes_per_rank};
  std::memcpy(half, &h, kHeader);  // position 0: our own
  std::memcpy(data, send, bytes_per_rank);
  const auto base = reinterpret_cast<uint64_t>(half);
  auto forward = [&](size_t k, int to) -> Status {
    const size_t dist = size_t{1} << k;
    const size_t count = std::min(dist, n - dist);
    HIXL_RETURN_IF_ERROR(Put(to, data, base + n * kHeader + dist * stride, count * stride));
    return Put(to, half, base + dist * kHeader, count * kHeader);
  };
  Status s = Fence();
  if (s.ok()) s = barrier_->Run(forward);
  if (!s.ok()) return Err(s.code(), "hixl_allgather: {}", s.message());
  // Rank b's part is at position (rank - b) mod n.
  auto at = [&](size_t b) { return (static_cast<size_t>(rank()) + n - b) % n; };
  for (size_t b = 0; b < n; ++b) {
    Header got;
    if (!HeaderIs(half + at(b) * kHeader, h, &got)) {
      return Err(Errc::kInvalidArg,
                 "hixl_allgather: rank {}'s part does not match this rank's call ({} bytes per rank{}): every rank "
                 "must call the same collectives in the same order with the same bytes_per_rank",
                 b, bytes_per_rank,
                 TagOfRound(got.tag, round) ? fmt::format("; it passed {}", got.total) : std::string());
    }
  }
  auto* out = static_cast<char*>(recv);
  for (size_t b = 0; b < n; ++b) std::memcpy(out + b * bytes_per_rank, data + at(b) * stride, bytes_per_rank);
  return Status::Ok();
}

char* WorldImpl::Ring() const {
  return static_cast<char*>(barrier_block_) + DisseminationBarrier::kBlockBytes + 2 * kScratchHalf;
}

Result<uint64_t> WorldImpl::FetchWord(const char* api, int r, uint64_t addr) {
  PeerTable::Pin pin;
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, Lookup(api, r, addr, sizeof(uint64_t), &pin));
  if (void* p = e->key->Direct(addr)) return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(p)).load();
  uint64_t v = 0;
  HIXL_RETURN_IF_ERROR(peer(r).transport().Atomic(r, *e->key, transport::AtomicOp::kFetch, addr, 0, 0, &v));
  return v;
}

Status WorldImpl::AwaitRingRoom(int to, uint64_t seq) {
  uint64_t& seen = ring_taken_[static_cast<size_t>(to)];
  auto room = [&] { return seq < DisseminationBarrier::kRingSlots || seen + DisseminationBarrier::kRingSlots > seq; };
  if (room()) return Status::Ok();
  // `to` is kRingSlots chunks behind: it is still copying out (a large
  // broadcast), or late.  Asked again as a writer waits for readers.
  const auto taken_at = reinterpret_cast<uint64_t>(Ring());
  auto next_probe = std::chrono::steady_clock::now() + kProbeEvery;
  Status failed;
  const bool done = marks::WaitUntil(
      [&] {
        Result<uint64_t> v = FetchWord("hixl_broadcast", to, taken_at);
        if (!v.ok()) failed = v.status();
        if (v.ok()) seen = v.value();
        if (!failed.ok() || room()) return true;
        if (std::chrono::steady_clock::now() >= next_probe) {
          failed = DeadPeer("hixl_broadcast");
          next_probe = std::chrono::steady_clock::now() + kProbeEvery;
        }
        return !failed.ok();
      },
      std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.timeout_ms));
  if (!failed.ok()) return failed;
  if (done) return Status::Ok();
  return Err(Errc::kTimeout,
             "hixl_broadcast: rank {} has taken {} chunks of broadcasts in {} ms, and chunk {} needs its slot "
             "(HIXL_TIMEOUT_MS={})",
             to, seen, cfg_.timeout_ms, seq, cfg_.timeout_ms);
}

Result<bool> WorldImpl::RingSend(int to, const char* slot, size_t n, size_t line, uint64_t epoch) {
  const auto addr = reinterpret_cast<uint64_t>(slot);
  const uint64_t flag = reinterpret_cast<uint64_t>(barrier_block_) + DisseminationBarrier::FlagOffset(line);
  {
    PeerTable::Pin pin;
    char* mapped = nullptr;
    HIXL_RETURN_IF_ERROR(PeerBlock("hixl_broadcast", to, &pin, &mapped).status());
    if (mapped) {
      std::memcpy(mapped + (slot - static_cast<char*>(barrier_block_)), slot, n);
      DisseminationBarrier::SignalMapped(reinterpret_cast<uint64_t*>(mapped), line,
                                         epoch);  // a futex wake only if it sleeps
      return true;
    }
  }
  Status s = PutSignal(to, slot, addr, n, flag, epoch, HIXL_SIGNAL_SET);
  if (!s.ok()) {
    // A peer that died is the cause worth naming (and the store may hear of
    // it after our transport did).
    HIXL_RETURN_IF_ERROR(DeadPeer("hixl_broadcast", s.code() == Errc::kPeerFailed ? DeathNews() : kNoWait));
    return Err(s.code(), "hixl_broadcast: rank {} cannot send rank {} its chunk: {}", rank(), to, s.message());
  }
  return false;
}

Status WorldImpl::Broadcast(int root, void* buf, size_t bytes) {
  if (root < 0 || root >= size()) {
    return Err(Errc::kInvalidRank, "hixl_broadcast: root {} is outside the world [0, {})", root, size());
  }
  if (bytes == 0) return Status::Ok();
  if (!buf) return Err(Errc::kInvalidArg, "hixl_broadcast: buf is NULL");
  if (size() == 1) return Status::Ok();
  if (!barrier_) return Err(Errc::kInternal, "hixl_broadcast: the world's barrier is not running");
  std::lock_guard<std::mutex> lock(collective_mu_);
  if (ring_taken_.empty()) ring_taken_.assign(static_cast<size_t>(size()), 0);
  auto* data = static_cast<char*>(buf);
  char* const ring = Ring();
  std::atomic_ref<uint64_t> taken(*reinterpret_cast<uint64_t*>(ring));
  const size_t chunk = kRingSlotBytes - kHeader;
  // Our place in the tree: v from the root; the parent is v less its
  // lowest set bit; the children v + 2^k below that bit (every 2^k < n
  // for the root), the largest subtree first.
  const auto n = static_cast<uint32_t>(size());
  const uint32_t v = (static_cast<uint32_t>(rank()) + n - static_cast<uint32_t>(root)) % n;
  const int parent = v == 0 ? -1 : static_cast<int>(((v & (v - 1)) + static_cast<uint32_t>(root)) % n);
  const uint32_t top_child = v == 0 ? std::bit_floor(n - 1) : (v & (~v + 1)) >> 1;
  for (size_t done = 0; done < bytes;) {
    const size_t len = std::min(chunk, bytes - done);
    const uint64_t seq = ring_seq_++;
    const size_t slot_index = seq % DisseminationBarrier::kRingSlots;
    char* slot = ring + DisseminationBarrier::kLine + slot_index * kRingSlotBytes;
    const size_t line = DisseminationBarrier::kRingLine + slot_index;
    const Header h{Tag(seq, len), bytes};
    Header got = h;
    bool same = true;
    size_t sent = kHeader + len;
    if (parent < 0) {
      // The chunk goes from a copy in our own slot, the header in front of
      // the bytes.
      WriteSlot(slot, h, data + done, len);
    } else {
      HIXL_RETURN_IF_ERROR(barrier_->Await("hixl_broadcast", line, parent, seq + 1));
      same = HeaderIs(slot, h, &got);
      // Not what this rank was called with: what came goes on all the
      // same (as long as the header says, within the slot), and each child
      // judges it against its own call.
      if (!same) sent = kHeader + std::min(TagLength(got.tag), chunk);
    }
    // On to the children; one whose slot still holds an untaken chunk
    // kRingSlots back is waited for first.
    bool sent_by_transport = false;
    for (uint32_t bit = top_child; bit != 0; bit >>= 1) {
      if (v + bit >= n) continue;
      const int child = static_cast<int>((v + bit + static_cast<uint32_t>(root)) % n);
      HIXL_RETURN_IF_ERROR(AwaitRingRoom(child, seq));
      HIXL_ASSIGN_OR_RETURN(const bool mapped, RingSend(child, slot, sent, line, seq + 1));
      sent_by_transport = sent_by_transport || !mapped;
    }
    // A transport may read a put's source after the put returns: our slot
    // is written again kRingSlots chunks on.
    if (sent_by_transport) {
      Status s = Fence();
      if (!s.ok()) return Err(s.code(), "hixl_broadcast: {}", s.message());
    }
    if (parent >= 0 && same) std::memcpy(data + done, slot + kHeader, len);
    taken.store(seq + 1, std::memory_order_release);  // the slot is free for chunk seq + kRingSlots
    if (!same) {
      return Err(Errc::kInvalidArg,
                 "hixl_broadcast: root {}'s data does not match this rank's call ({} bytes){}: every rank must "
                 "call the same collectives in the same order, with the same root and size",
                 root, bytes,
                 TagOfRound(got.tag, seq) ? fmt::format(" (the root broadcasts {} bytes)", got.total) : "");
    }
    done += len;
  }
  return Status::Ok();
}

Status WorldImpl::StoreAllgather(const void* send, void* recv, size_t bytes_per_rank) {
  const uint64_t epoch = allgather_epoch_.fetch_add(1);
  const std::string mine(static_cast<const char*>(send), bytes_per_rank);
  HIXL_RETURN_IF_ERROR(store_->Set(fmt::format("ag/{}/{}", epoch, rank()), mine));
  auto* out = static_cast<char*>(recv);
  auto take = [&](int r, const std::string& v) -> Status {
    if (v.size() != bytes_per_rank) {
      return Err(Errc::kInvalidArg, "hixl_allgather: rank {} sent {} bytes but this rank expects {}", r, v.size(),
                 bytes_per_rank);
    }
    std::memcpy(out + static_cast<size_t>(r) * bytes_per_rank, v.data(), bytes_per_rank);
    return Status::Ok();
  };
  // Everyone's part in one request where it fits one reply, else one by one.
  if ((bytes_per_rank + 4) * static_cast<uint64_t>(size()) + 4 <= bootstrap::kMaxGatherBytes) {
    auto all = store_->Gather(fmt::format("ag/{}/", epoch), size(), cfg_.timeout_ms);
    if (!all.ok()) return Err(all.status().code(), "hixl_allgather: {}", all.status().message());
    for (int r = 0; r < size(); ++r) HIXL_RETURN_IF_ERROR(take(r, all.value()[static_cast<size_t>(r)]));
  } else {
    for (int r = 0; r < size(); ++r) {
      auto v = store_->Get(fmt::format("ag/{}/{}", epoch, r), cfg_.timeout_ms);
      if (!v.ok()) return Err(v.status().code(), "hixl_allgather: waiting for rank {}: {}", r, v.status().message());
      HIXL_RETURN_IF_ERROR(take(r, v.value()));
    }
  }
  // The last rank to finish reading removes the round's keys.
  HIXL_ASSIGN_OR_RETURN(int64_t done, store_->Add(fmt::format("ag/{}/done", epoch), 1));
  if (done == size()) {
    for (int r = 0; r < size(); ++r) (void)store_->Delete(fmt::format("ag/{}/{}", epoch, r));
    (void)store_->Delete(fmt::format("ag/{}/done", epoch));
  }
  return Status::Ok();
}

}  // namespace hixl::world
