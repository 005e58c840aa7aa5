// A front door's region table, published in shared memory for the peers on
// its host (docs/scale.md, "First touch"): a peer on the same host reads it
// there instead of asking over the control connection, so the first touch
// of a peer costs no message.
//
// The board is a sealed memfd: a header, one subscriber bit per peer id,
// then the serialized table (RegionTable::Serialize) under a sequence lock.
// A reader opens it through /proc (sharedmem::OpenPeerFd), so nothing is
// sent to set it up; where that is refused, or the table has outgrown the
// board, or it keeps changing while read, the reader asks over the control
// connection as before.
//
// Subscribing: the owner must tell every peer that holds a copy of its
// table when a region goes (Session::RemoveRegion).  A reader sets its bit
// before its first read; the owner publishes a removal before it reads the
// bits (both sequentially consistent), so a reader either is seen as a
// subscriber or reads the table without the region.
//
// Removals are acknowledged through the boards too, with no message: the
// owner numbers the removal on its board (BeginRemoval), rings each
// subscriber's doorbell in the subscriber's own board (BoardReader::Ring:
// the owner's bit, a futex word), and waits for each subscriber's
// acknowledgement word on its board to reach the number (AwaitAcks, a futex
// word the subscribers bump).  The subscriber's doorbell thread
// (TakeRings) drops its copy of the owner's table, fences its transfers
// into it (PeerSession::Quiesce) and acknowledges (BoardReader::Ack).
//
// The board is untrusted on the reader's side: lengths are bounded by the
// size the reader mapped, the bytes go to RegionTable::Parse, and the
// reader never waits on the owner (a bounded number of tries).  A reader
// that sets bits it should not only makes the owner ask more peers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/shared_file.h"
#include "base/socket.h"
#include "base/status.h"

namespace hixl::core {

// The kind under which a board's address travels with a door's published
// addresses (Session::Addresses); no transport has this name.
inline constexpr std::string_view kBoardKind = "table-board";
// The table bytes a board holds (larger tables are fetched over the control
// connection); the memory is committed only as far as the table reaches.
inline constexpr uint64_t kBoardTableBytes = uint64_t{1} << 20;
// At most this many subscriber ids (a world's ranks).
inline constexpr uint32_t kMaxBoardIds = uint32_t{1} << 20;

// Where a board lies: what its address says.
struct BoardAddress {
  std::string host;  // sharedmem::HostIdentity() of its owner
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t ino = 0;
  uint32_t ids = 0;  // subscriber bits
};
std::string Encode(const BoardAddress& a);
std::optional<BoardAddress> DecodeBoardAddress(std::string_view bytes);  // untrusted: bounded

// The owner's side.  Thread-safe.
class TableBoard {
 public:
  // A board with `ids` subscriber bits (peer ids [0, ids)).
  static Result<std::unique_ptr<TableBoard>> Create(uint32_t ids);
  std::string Address() const { return Encode(addr_); }
  // Publishes what `serialize` returns, called under the board's lock: the
  // last publish holds every change made before it.
  void Publish(const std::function<std::string()>& serialize);
  // The ids whose bit is set, read after a sequentially consistent fence
  // (call after publishing a removal).
  std::vector<int> Subscribers() const;

  // Numbers a removal published at table `generation`: subscribers rung
  // after this see at least this number (and generation).
  uint64_t BeginRemoval(uint64_t generation);
  // Waits until every id in `ids` has acknowledged removal `number`, or the
  // deadline passes; `gone(id)`, asked of those still pending every few ms,
  // says a subscriber's process has exited.  The ids that did not
  // acknowledge, each with kPeerFailed (gone) or kTimeout.
  std::vector<std::pair<int, Errc>> AwaitAcks(uint64_t number, const std::vector<int>& ids,
                                              std::chrono::steady_clock::time_point deadline,
                                              const std::function<bool(int)>& gone);
  // The owners (ids) that rang this board's doorbell since the last call,
  // their bits cleared; waits up to timeout_ms (-1: until rung or woken by
  // WakeRings) when none has, unless *stop is set.  For one thread.
  std::vector<int> TakeRings(int64_t timeout_ms, const std::atomic<bool>* stop = nullptr);
  // Wakes TakeRings: set its stop flag first, then call this.
  void WakeRings();

 private:
  TableBoard() = default;
  BoardAddress addr_;
  net::Fd fd_;
  sharedmem::Mapping map_;
  std::mutex mu_;     // one publish or removal at a time; guards the counts below
  uint64_t seq_ = 0;  // the sequence lock's count
  uint64_t removals_ = 0;
  uint64_t removal_generation_ = 0;
};

// A peer's board, mapped.  Thread-compatible (PeerSession serializes).
class BoardReader {
 public:
  // Opens the board at `address`: nullptr (and OK) when it lies on another
  // host; an error when it cannot be opened or is not what it claims.
  static Result<std::unique_ptr<BoardReader>> Open(std::string_view address, const std::string& who);
  // Sets bit `id` (once; ids out of range are ignored).
  void Subscribe(int id);
  // A consistent copy of the table's bytes; an error (the caller asks over
  // the control connection instead) when the table outgrew the board or it
  // changed at every try.
  Result<std::string> Read() const;
  // The same without the copy: `scan` reads the table where it lies, and is
  // called again while the owner changed it meanwhile (its results from a
  // torn read must be dropped: it restarts from nothing on each call, and
  // treats the bytes as untrusted, as always).  Read's errors, or scan's.
  Status Visit(const std::function<Status(std::string_view)>& scan) const;

  // Rings the owner's doorbell as `id` (this process's id at the owner):
  // a removal of ours awaits its acknowledgement.  Thread-safe.
  void Ring(int id);
  // The owner's latest removal: its number and table generation.
  struct Removal {
    uint64_t number = 0;
    uint64_t generation = 0;
  };
  Removal LatestRemoval() const;
  // Acknowledges the owner's removals up to `number` as `id`.  Thread-safe.
  void Ack(int id, uint64_t number);
  // False once the owner's process has exited (its pidfd is readable).
  bool Alive() const;

 private:
  BoardReader() = default;
  BoardAddress addr_;
  std::string who_;
  net::Fd pidfd_;
  sharedmem::Mapping map_;
  bool subscribed_ = false;
};

}  // namespace hixl::core
