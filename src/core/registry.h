// Memory regions: this process's own (LocalRegistry) and the cached tables
// of peers' regions (PeerTable).  Every remote access is checked against a
// PeerTable: the whole range must lie inside one region.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/reader_marks.h"
#include "base/status.h"
#include "transport/transport.h"

namespace hixl {

// True when [addr, addr+len) lies inside [base, base+size); overflow-safe.
inline bool RangeInside(uint64_t addr, uint64_t len, uint64_t base, uint64_t size) {
  return addr >= base && len <= size && addr - base <= size - len;
}

// A region as it travels in a table: its range and one key blob per transport.
struct RegionRecord {
  uint64_t base = 0;
  uint64_t len = 0;
  transport::MemKind kind = transport::MemKind::kHost;
  std::map<std::string, std::string> keys;  // transport name -> key blob
};

// The table a rank serves to its peers; `generation` grows with every change.
// Parse treats its bytes as untrusted: regions sorted by base, non-empty,
// not wrapping, not overlapping; at most kMaxTableRegions regions of at most
// kMaxTableKeys keys (names in increasing order, of at most kMaxKeyName bytes; blobs of
// at most kMaxKeyBlob); nothing after the last region.  Whether a key blob
// fits its region is for its transport's UnpackKey to say.
inline constexpr uint32_t kMaxTableRegions = 1u << 16;
inline constexpr uint32_t kMaxTableKeys = 16;
inline constexpr uint32_t kMaxKeyName = 64;
inline constexpr uint32_t kMaxKeyBlob = 16u << 10;
struct RegionTable {
  uint64_t generation = 0;
  std::vector<RegionRecord> regions;
  std::string Serialize() const;
  static Result<RegionTable> Parse(std::string_view bytes);
};

// A serialized table visited where it lies, with Parse's checks (Parse is
// built on it), so a reader that wants one region builds nothing else:
// Region for each region in order, then Key for each of its keys, the views
// pointing into the scanned bytes.  A visit may be followed by an error (a
// later record is malformed): act on what was visited only once the scan
// returned the generation.
class RegionTableVisitor {
 public:
  virtual ~RegionTableVisitor() = default;
  virtual void Region(uint64_t base, uint64_t len, transport::MemKind kind) = 0;
  virtual void Key(std::string_view name, std::string_view blob) = 0;
};
Result<uint64_t> ScanRegionTable(std::string_view bytes, RegionTableVisitor& v);

// This process's regions.  Thread-safe.
class LocalRegistry {
 public:
  struct Region {
    transport::LocalRegion desc;
    bool heap = false;
    int refs = 1;
    std::map<std::string, std::string> keys;
  };

  // Adds a region, or counts one more reference when exactly [base, base+len)
  // is registered already (then *added is false).  A partly overlapping
  // range is kInvalidArg naming the region it overlaps.
  Status Add(const Region& r, bool* added);
  // Drops one reference of the region starting at base; when the last goes,
  // the region is removed and returned in *removed (else *removed is unset).
  Status Remove(uint64_t base, bool heap, std::optional<Region>* removed);
  bool Contains(uint64_t addr, uint64_t len) const;
  // Runs fn under the registry's lock if [addr, addr+len) lies inside one
  // region (so the region cannot be removed meanwhile); returns whether it ran.
  bool Access(uint64_t addr, uint64_t len, const std::function<void()>& fn) const;
  RegionTable Table() const;
  uint64_t generation() const;
  // Removes every region, whatever its references, and returns them.
  std::vector<Region> TakeAll();

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, Region> regions_;  // by base
  uint64_t generation_ = 1;
};

// One peer's regions as this process knows them: an immutable snapshot read
// without locks on the fast path, replaced under a mutex on refresh or
// invalidation.  An entry Find returns stays valid while the pin taken
// before the Find is held: replaced snapshots are freed once no pin taken
// before their replacement is held (tried each time kReclaimAfter of them
// have piled up; a pin taken later reads the current snapshot).
//
// Pins make an invalidation a fence: an operation takes a Pin before it
// looks an entry up and keeps it until the transport call that uses the
// entry has returned; AwaitReaders, after an invalidation, waits until every
// pin taken before it is released.  A pin is a reader mark of the calling
// thread (base/reader_marks.h: two plain stores, no shared cache line); where
// marks are unavailable, two atomic additions on one of two counters chosen
// by an epoch that AwaitReaders advances, so a steady stream of new readers
// cannot starve it.
class PeerTable {
 public:
  class Pin {
   public:
    Pin() = default;
    explicit Pin(std::atomic<int64_t>* counter) : counter_(counter) {}
    explicit Pin(marks::Slot* slot) : slot_(slot) {}
    Pin(Pin&& o) noexcept : counter_(std::exchange(o.counter_, nullptr)), slot_(std::exchange(o.slot_, nullptr)) {}
    Pin& operator=(Pin&& o) noexcept {
      if (this != &o) {
        Release();
        counter_ = std::exchange(o.counter_, nullptr);
        slot_ = std::exchange(o.slot_, nullptr);
      }
      return *this;
    }
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin() { Release(); }
    void Release() {
      if (slot_) marks::Unmark(slot_);
      if (counter_) counter_->fetch_sub(1, std::memory_order_release);
      counter_ = nullptr;
      slot_ = nullptr;
    }

   private:
    friend class PeerTable;
    std::atomic<int64_t>* counter_ = nullptr;
    marks::Slot* slot_ = nullptr;
  };

  // A key blob, shared by the snapshots that hold its entry: a snapshot
  // copies its entries, and a blob (a few dozen bytes) would cost an
  // allocation each time.
  class Blob {
   public:
    Blob() = default;
    Blob(std::string_view b)  // NOLINT(google-explicit-constructor): entries are written as {base, len, key, blob}
        : p_(b.empty() ? nullptr : std::make_shared<const std::string>(b)) {}
    Blob(const char* b) : Blob(std::string_view(b)) {}  // NOLINT(google-explicit-constructor)
    std::string_view view() const { return p_ ? std::string_view(*p_) : std::string_view(); }

   private:
    std::shared_ptr<const std::string> p_;
  };
  struct Entry {
    uint64_t base;
    uint64_t len;
    std::shared_ptr<transport::RemoteKey> key;
    Blob blob;  // the key blob it was unpacked from (a region added again with another key is another region)
  };
  struct Snapshot {
    uint64_t generation = 0;
    std::vector<Entry> entries;  // sorted by base, non-overlapping
  };

  PeerTable();
  // The entry holding [addr, addr+len) wholly, or nullptr.  Lock-free.
  const Entry* Find(uint64_t addr, uint64_t len) const {
    // Sequentially consistent (a plain load on x86): ordered after a
    // counted pin's increment, against PublishLocked's check of the counters.
    const Snapshot* s = current_.load(std::memory_order_seq_cst);
    const auto& e = s->entries;
    // The last entry whose base is <= addr.
    auto it = std::upper_bound(e.begin(), e.end(), addr, [](uint64_t a, const Entry& x) { return a < x.base; });
    if (it == e.begin()) return nullptr;
    --it;
    return RangeInside(addr, len, it->base, it->len) ? &*it : nullptr;
  }
  uint64_t generation() const;
  // Installs a freshly fetched table unless an invalidation newer than it
  // arrived meanwhile (then returns false: fetch again).
  bool Install(uint64_t generation, std::vector<Entry> entries);
  // Adds one entry that the owner's table held at `generation` and keeps
  // the others (a miss learns the one region it needs: their removals reach
  // us as invalidations, since we subscribed before reading).  kStale: an
  // invalidation newer than `generation` arrived meanwhile (read again);
  // kOverlaps: the entry overlaps one we hold, whose removal we have not
  // taken yet (install the whole table instead).
  enum class Added { kYes, kStale, kOverlaps };
  Added Add(uint64_t generation, Entry e);
  // The owner removed the regions overlapping [base, base+len) at `generation`.
  void Invalidate(uint64_t generation, uint64_t base, uint64_t len);
  // The owner's table at `generation` keeps only the entries `keep` says it
  // still holds: the others are removed, as by Invalidate.
  void Retain(uint64_t generation, const std::function<bool(const Entry&)>& keep);
  // Forgets every region and refuses to install tables from now on (the
  // connection is going).
  void Close();

  // Holds entries found from now until the pin is released (lock-free).
  Pin Hold() const;
  // The same into *pin, releasing what it held first (the hot path: no Pin
  // is copied through memory).
  void Hold(Pin* pin) const {
    pin->Release();
    if (marks::Available()) {
      if (marks::Slot* slot = marks::Mark(this)) {
        pin->slot_ = slot;
        return;
      }
    }
    HoldCounted(pin);
  }
  // Waits until every pin taken before this call is released; false when
  // timeout_ms passes first.  Call after Invalidate/Close: afterwards no
  // operation uses a removed entry.
  bool AwaitReaders(int64_t timeout_ms);
  // Snapshots kept, the current one included (for tests).
  size_t snapshots() const {
    std::lock_guard lock(mu_);
    return snapshots_.size();
  }
  static constexpr size_t kReclaimAfter = 32;

 private:
  // Publishes `s` as the current snapshot and frees the replaced ones that
  // no pin can hold any more.  mu_ held.
  void PublishLocked(std::unique_ptr<Snapshot> s);
  std::atomic<const Snapshot*> current_;
  mutable std::mutex mu_;
  uint64_t known_generation_ = 0;
  bool closed_ = false;
  std::vector<std::unique_ptr<Snapshot>> snapshots_;
  // Hold's way without a reader mark: a pin on the epoch's counter.
  void HoldCounted(Pin* pin) const;
  mutable std::atomic<uint64_t> epoch_{0};
  mutable std::atomic<int64_t> readers_[2] = {0, 0};  // pins taken in even / odd epochs
  std::mutex await_mu_;                               // one AwaitReaders at a time
};

// Registers `region` with every transport (collecting each one's key blob)
// and adds it to `registry`.  Undoes the transports' registrations when that
// fails, or when exactly this range was registered already (then the
// registry only counts a reference).
Status AddRegionEverywhere(LocalRegistry& registry,
                           const std::vector<std::unique_ptr<transport::Transport>>& transports,
                           LocalRegistry::Region region);

// Fetches a peer's region table (fetch) and installs it in `table`, turning
// the key blobs of transport `t` into keys (those of regions already known
// are kept).  Retries while invalidations race with the fetch.  `who`
// names the peer in messages ("rank 3").
Status RefreshPeerTable(PeerTable& table, transport::Transport& t, int peer, const std::string& who,
                        const std::function<Result<RegionTable>()>& fetch);

}  // namespace hixl
