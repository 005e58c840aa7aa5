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
//  * broadcast: the root writes its slot and puts it into the same place at
//    every other rank, then all run the barrier (which fences the puts
//    first); then everyone reads its own half.
// A rank writes half h again only in round k+2, after the barrier of round
// k+1, which nobody passes before everyone has finished round k: the
// barrier is what keeps the halves apart, no reset is needed.
//
// The header names the round and the lengths the writer was called with, so
// that ranks that called with different sizes (or a different sequence of
// collectives) get an error naming the rank, never each other's bytes.
//
// Data that does not fit the scratch: allgather goes through rank 0's store
// (as it does before the data-plane barrier starts, during init); broadcast
// goes through the scratch in chunks, one round each.
#include <algorithm>
#include <cstring>

#include "bootstrap/store_protocol.h"
#include "world/world.h"

namespace hixl::world {

namespace {

size_t Round8(size_t n) { return (n + 7) & ~size_t{7}; }

// The header's first word: the round and this slot's length.
uint64_t Tag(uint64_t round, size_t len) { return ((round + 1) << 24) | static_cast<uint64_t>(len); }

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

Status WorldImpl::ScratchRound(const char* api, char* slot, size_t slot_bytes, bool put) {
  if (put) {
    const auto addr = reinterpret_cast<uint64_t>(slot);
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      Status s = Put(r, slot, addr, slot_bytes);
      if (!s.ok()) return Err(s.code(), "{}: {}", api, s.message());
    }
  }
  Status s = Barrier();
  if (!s.ok()) return Err(s.code(), "{}: {}", api, s.message());
  return Status::Ok();
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
                 (got.tag >> 24) == round + 1 ? fmt::format("; it passed {}", got.total) : std::string());
    }
  }
  auto* out = static_cast<char*>(recv);
  for (size_t b = 0; b < n; ++b) std::memcpy(out + b * bytes_per_rank, data + at(b) * stride, bytes_per_rank);
  return Status::Ok();
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
  auto* data = static_cast<char*>(buf);
  const size_t chunk = kScratchHalf - kHeader;
  for (size_t done = 0; done < bytes;) {
    const size_t len = std::min(chunk, bytes - done);
    const uint64_t round = collective_round_++;
    char* slot = ScratchHalf(round);
    const Header h{Tag(round, len), bytes};
    if (rank() == root) WriteSlot(slot, h, data + done, len);
    HIXL_RETURN_IF_ERROR(ScratchRound("hixl_broadcast", slot, kHeader + len, rank() == root));
    if (rank() != root) {
      Header got;
      if (!HeaderIs(slot, h, &got)) {
        return Err(Errc::kInvalidArg,
                   "hixl_broadcast: root {}'s data does not match this rank's call ({} bytes){}: every rank must "
                   "call the same collectives in the same order, with the same root and size",
                   root, bytes,
                   (got.tag >> 24) == round + 1 ? fmt::format(" (the root broadcasts {} bytes)", got.total) : "");
      }
      std::memcpy(data + done, slot + kHeader, len);
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
