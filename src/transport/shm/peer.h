// What the shm transport holds for one connected peer, and the keys of the
// peer's regions.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/socket.h"
#include "transport/shm/fd_channel.h"
#include "transport/shm/mapping.h"
#include "transport/shm/relay.h"
#include "transport/transport.h"

namespace hixl::transport::shm {

// Keys unpacked for the peer share it, so a key never outlives what it
// points to; Disconnect releases its resources and marks it closed, after
// which calls with its keys fail.
struct Peer {
  int rank = -1;
  bool self = false;  // this process itself
  int32_t pid = 0;
  std::string sock_name;     // the abstract name of its request socket
  auth::MaybeSecret secret;  // the job's (the connection proves it), or none: then same user only
  std::atomic<bool> use_cma{true};
  std::atomic<bool> closed{false};  // set by Disconnect
  // The peer's process (pidfd_open at Connect; invalid where refused): a
  // copy into its mapped memory (its heap, or promoted registered memory:
  // promotion.h) is a plain memcpy that cannot see it die, as cross-memory
  // attach would (ESRCH), so a flush after such copies asks this
  // (CheckAlive).
  net::Fd pidfd;
  std::atomic<bool> mapped_copies{false};  // copies into or out of its mapped memory since the last flush
  // When CheckAlive last found it alive (steady clock, ns): it asks the
  // pidfd again only kAliveWindowNs later.
  mutable std::atomic<int64_t> alive_at_ns{INT64_MIN / 2};
  static constexpr int64_t kAliveWindowNs = 20'000;
  // The steady clock in nanoseconds, the clock of the liveness windows.
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The request connection to the peer's progress thread (heap segments,
  // relay set-up), made on first need.
  std::mutex conn_mu;
  net::Fd conn;                                           // guarded by conn_mu
  std::map<uint32_t, std::shared_ptr<Mapping>> segments;  // guarded by conn_mu

  RelayOrigin relay;  // the relay channel to it, made on first need

  // One request/response with the peer's progress thread, connecting first
  // if needed; conn_mu is held.  A reply's failure status becomes an error.
  Status Request(const Msg& m, int fd_to_pass, Msg* reply, net::Fd* reply_fd, int64_t timeout_ms);
  // The peer's heap segment `seg` of (at least) `size` bytes, mapped here on
  // first need; an error where the segment is smaller.  A promoted range's
  // segment (kPromotedSegmentBit) is mapped anew for each call and kept by
  // the caller's key only, so it is unmapped when its region's keys go.
  // A heap segment whose key names the owner's descriptor (fd, ino: see
  // KeyFields) is opened through /proc first (sharedmem::OpenPeerFd), with
  // no message; where that is refused, it is asked for over the socket.
  Result<std::shared_ptr<Mapping>> MapSegment(uint32_t seg, uint64_t size, int32_t fd, uint64_t ino,
                                              int64_t timeout_ms);
  // kPeerFailed when the peer's process has exited (its pidfd is readable).
  // Asks the kernel at most once per kAliveWindowNs (a system call would
  // cost more than the small copy it follows): a death is seen within
  // 20 us, as if it had come that much later.
  Status CheckAlive() const;
  // CheckAlive for many peers with one system call (a flush after copies to
  // every peer of a large world would otherwise make one per peer): the
  // first of `peers`, in order, found exited.
  static Status CheckAlive(const std::vector<std::shared_ptr<Peer>>& peers);
  // Closes the request connection and lets go of the segment mappings (a key
  // that points into one keeps it mapped until the key goes).
  void CloseConnection();
};

// What a heap region's key blob says: [u32 segment][u64 offset][u64 size]
// [i32 fd][u64 ino].
struct KeyFields {
  uint32_t segment = 0;
  uint64_t offset = 0;  // where the region starts in the segment
  uint64_t size = 0;    // the bytes of the segment the region needs mapped
  int32_t fd = -1;      // the owner's descriptor of the segment (-1: ask over the socket)
  uint64_t ino = 0;     // and its inode number, checked when it is opened
};
inline constexpr size_t kKeyBytes = 32;
// The blob of KeyFields.
std::string EncodeKey(const KeyFields& k);
// Parses an untrusted key blob for a region of len bytes: exactly kKeyBytes,
// and the region [offset, offset+len) inside the first `size` bytes.  Whether
// the segment really has `size` bytes is MapSegment's check (fstat of the
// memfd the owner passes).  `peer` names the peer in the error.
Result<KeyFields> ParseKey(std::string_view blob, uint64_t len, int peer);

// The error of every call for a peer after Disconnect.
Status NotConnected(const Peer& p);

struct ShmKey final : RemoteKey {
  uint64_t base = 0;
  uint8_t* mapped = nullptr;         // the region in this process, for heap and promoted regions
  bool promoted = false;             // mapped from a promoted range of the peer (not the heap)
  std::shared_ptr<Mapping> segment;  // keeps `mapped` valid, even after Disconnect
  std::shared_ptr<Peer> peer;        // so the hot path takes no lock

  void* Direct(uint64_t addr) const override { return mapped ? mapped + (addr - base) : nullptr; }
  // Within the heap segment that holds the region (a promoted range's
  // mapping is the region alone).
  void Prefault(uint64_t addr, uint64_t len) const override;
};

}  // namespace hixl::transport::shm
