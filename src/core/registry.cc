#include "core/registry.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/socket.h"

namespace hixl {

std::string RegionTable::Serialize() const {
  net::Writer w;
  w.Put<uint64_t>(generation).Put<uint32_t>(static_cast<uint32_t>(regions.size()));
  for (const RegionRecord& r : regions) {
    w.Put(r.base).Put(r.len).Put(static_cast<uint8_t>(r.kind));
    w.Put<uint32_t>(static_cast<uint32_t>(r.keys.size()));
    for (const auto& [name, blob] : r.keys) w.PutBytes(name).PutBytes(blob);
  }
  return std::move(w.str());
}

Result<uint64_t> ScanRegionTable(std::string_view bytes, RegionTableVisitor& v) {
  net::Reader rd(bytes);
  uint64_t generation = 0;
  uint32_t n = 0;
  auto bad = [](const std::string& what) {
    return Err(Errc::kTransport, "malformed region table from peer: {}", what);
  };
  if (!rd.Get(&generation) || !rd.Get(&n)) return bad("cut inside its header");
  if (n > kMaxTableRegions) return bad(fmt::format("{} regions (at most {})", n, kMaxTableRegions));
  uint64_t prev_base = 0, prev_len = 0;
  for (uint32_t j = 0; j < n; ++j) {
    uint64_t base = 0, len = 0;
    uint8_t kind = 0;
    uint32_t nkeys = 0;
    if (!rd.Get(&base) || !rd.Get(&len) || !rd.Get(&kind) || !rd.Get(&nkeys)) {
      return bad(fmt::format("region {} is cut", j));
    }
    if (len == 0 || len - 1 > UINT64_MAX - base) {
      return bad(fmt::format("region {} [{:#x}, +{}) is empty or wraps the address space", j, base, len));
    }
    // Sorted and apart: the previous region ends at or before this one.
    if (j > 0 && (base <= prev_base || base - prev_base < prev_len)) {
      return bad(fmt::format("region {} [{:#x}, +{}) is out of order with or overlaps region {} [{:#x}, +{})", j, base,
                             len, j - 1, prev_base, prev_len));
    }
    if (kind > static_cast<uint8_t>(transport::MemKind::kDevice)) {
      return bad(fmt::format("region {} has memory kind {}", j, kind));
    }
    if (nkeys > kMaxTableKeys) return bad(fmt::format("region {} has {} keys (at most {})", j, nkeys, kMaxTableKeys));
    v.Region(base, len, static_cast<transport::MemKind>(kind));
    std::string_view prev_name;
    for (uint32_t i = 0; i < nkeys; ++i) {
      std::string_view name, blob;
      if (!rd.GetView(&name, kMaxKeyName) || !rd.GetView(&blob, kMaxKeyBlob)) {
        return bad(
            fmt::format("key {} of region {} is cut or too long (names of at most {} bytes, blobs of at most {})", i, j,
                        kMaxKeyName, kMaxKeyBlob));
      }
      // In the order Serialize writes them (by name), so each name once.
      if (i > 0 && name <= prev_name) {
        return bad(fmt::format("region {} repeats a key's name or lists its keys out of order", j));
      }
      prev_name = name;
      v.Key(name, blob);
    }
    prev_base = base;
    prev_len = len;
  }
  if (!rd.empty()) return bad(fmt::format("{} bytes after its last region", rd.left()));
  return generation;
}

Result<RegionTable> RegionTable::Parse(std::string_view bytes) {
  // Records are appended as they parse: the count comes from the peer and is
  // not trusted to size an allocation.
  struct Builder final : RegionTableVisitor {
    RegionTable t;
    void Region(uint64_t base, uint64_t len, transport::MemKind kind) override {
      RegionRecord& r = t.regions.emplace_back();
      r.base = base;
      r.len = len;
      r.kind = kind;
    }
    void Key(std::string_view name, std::string_view blob) override {
      auto& keys = t.regions.back().keys;
      keys.emplace_hint(keys.end(), std::string(name), std::string(blob));
    }
  } b;
  HIXL_ASSIGN_OR_RETURN(b.t.generation, ScanRegionTable(bytes, b));
  return std::move(b.t);
}

Status LocalRegistry::Add(const Region& r, bool* added) {
  const uint64_t base = r.desc.base, len = r.desc.len;
  std::lock_guard lock(mu_);
  auto it = regions_.find(base);
  if (it != regions_.end() && it->second.desc.len == len && it->second.heap == r.heap) {
    ++it->second.refs;
    *added = false;
    return Status::Ok();
  }
  // The first region starting after base, and the one before it.
  auto next = regions_.upper_bound(base);
  auto check = [&](std::map<uint64_t, Region>::const_iterator o) -> Status {
    const uint64_t ob = o->first, ol = o->second.desc.len;
    if (base < ob + ol && ob < base + len) {
      return Err(Errc::kInvalidArg, "cannot register [{:#x}, +{}): it overlaps the registered region [{:#x}, +{}){}",
                 base, len, ob, ol, o->second.heap ? " of the symmetric heap" : "");
    }
    return Status::Ok();
  };
  if (next != regions_.end()) HIXL_RETURN_IF_ERROR(check(next));
  if (next != regions_.begin()) HIXL_RETURN_IF_ERROR(check(std::prev(next)));
  regions_.emplace(base, r);
  ++generation_;
  *added = true;
  return Status::Ok();
}

Status LocalRegistry::Remove(uint64_t base, bool heap, std::optional<Region>* removed) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(base);
  if (it == regions_.end()) {
    return Err(Errc::kInvalidArg, "{:#x} is not the start of a {}", base,
               heap ? "block from hixl_alloc" : "registered region");
  }
  if (it->second.heap != heap) {
    return Err(Errc::kInvalidArg, "{:#x} is {}", base,
               it->second.heap ? "symmetric memory from hixl_alloc: release it with hixl_free"
                               : "registered memory: release it with hixl_deregister_memory");
  }
  if (--it->second.refs > 0) return Status::Ok();
  removed->emplace(std::move(it->second));
  regions_.erase(it);
  ++generation_;
  return Status::Ok();
}

bool LocalRegistry::Contains(uint64_t addr, uint64_t len) const {
  return Access(addr, len, [] {});
}

bool LocalRegistry::Access(uint64_t addr, uint64_t len, const std::function<void()>& fn) const {
  std::lock_guard lock(mu_);
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return false;
  --it;
  if (!RangeInside(addr, len, it->first, it->second.desc.len)) return false;
  fn();
  return true;
}

RegionTable LocalRegistry::Table() const {
  std::lock_guard lock(mu_);
  RegionTable t;
  t.generation = generation_;
  t.regions.reserve(regions_.size());
  for (const auto& [base, r] : regions_) {
    t.regions.push_back(RegionRecord{base, r.desc.len, r.desc.kind, r.keys});
  }
  return t;
}

std::vector<LocalRegistry::Region> LocalRegistry::TakeAll() {
  std::lock_guard lock(mu_);
  std::vector<Region> out;
  for (auto& [base, r] : regions_) out.push_back(std::move(r));
  if (!regions_.empty()) ++generation_;
  regions_.clear();
  return out;
}

uint64_t LocalRegistry::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

PeerTable::PeerTable() {
  snapshots_.push_back(std::make_unique<Snapshot>());
  current_.store(snapshots_.back().get(), std::memory_order_release);
}

uint64_t PeerTable::generation() const {
  std::lock_guard lock(mu_);  // the snapshot is not pinned: read it where it cannot be freed
  return current_.load(std::memory_order_relaxed)->generation;
}

bool PeerTable::Install(uint64_t generation, std::vector<Entry> entries) {
  std::lock_guard lock(mu_);
  if (closed_) return true;  // nothing is installed any more; lookups miss
  if (generation < known_generation_) return false;
  known_generation_ = generation;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.base < b.base; });
  auto s = std::make_unique<Snapshot>();
  s->generation = generation;
  s->entries = std::move(entries);
  PublishLocked(std::move(s));
  return true;
}

void PeerTable::PublishLocked(std::unique_ptr<Snapshot> s) {
  // Sequentially consistent: a pin counted after the check below (the
  // counters' increments are too) reads this snapshot; for reader marks,
  // AwaitMarks' membarrier orders it.
  current_.store(s.get(), std::memory_order_seq_cst);
  snapshots_.push_back(std::move(s));
  if (snapshots_.size() < kReclaimAfter) return;
  // Every pin taken before now released (a reader still holding one leaves
  // the snapshots to a later try): no reader holds a replaced snapshot.
  if (marks::Available() && !marks::AwaitMarks(this, std::chrono::steady_clock::now())) return;
  if (readers_[0].load(std::memory_order_seq_cst) != 0 || readers_[1].load(std::memory_order_seq_cst) != 0) return;
  const Snapshot* cur = snapshots_.back().get();
  std::erase_if(snapshots_, [cur](const std::unique_ptr<Snapshot>& x) { return x.get() != cur; });
}

PeerTable::Added PeerTable::Add(uint64_t generation, Entry e) {
  std::lock_guard lock(mu_);
  if (closed_) return Added::kYes;  // as Install: nothing is installed any more
  if (generation < known_generation_) return Added::kStale;
  const Snapshot* cur = current_.load(std::memory_order_relaxed);
  const auto& old = cur->entries;
  auto at = std::upper_bound(old.begin(), old.end(), e.base, [](uint64_t a, const Entry& x) { return a < x.base; });
  // (Differences, not ends: a region may end at the top of the address space.)
  if (at != old.begin() && e.base - std::prev(at)->base < std::prev(at)->len) return Added::kOverlaps;
  if (at != old.end() && at->base - e.base < e.len) return Added::kOverlaps;
  known_generation_ = generation;
  auto s = std::make_unique<Snapshot>();
  s->generation = std::max(cur->generation, generation);
  s->entries.reserve(old.size() + 1);
  s->entries.insert(s->entries.end(), old.begin(), at);
  s->entries.push_back(std::move(e));
  s->entries.insert(s->entries.end(), at, old.end());
  PublishLocked(std::move(s));
  return Added::kYes;
}

void PeerTable::Invalidate(uint64_t generation, uint64_t base, uint64_t len) {
  Retain(generation, [&](const Entry& e) { return !(e.base < base + len && base < e.base + e.len); });
}

void PeerTable::Retain(uint64_t generation, const std::function<bool(const Entry&)>& keep) {
  std::lock_guard lock(mu_);
  known_generation_ = std::max(known_generation_, generation);
  const Snapshot* cur = current_.load(std::memory_order_relaxed);
  auto s = std::make_unique<Snapshot>();
  s->generation = std::max(cur->generation, generation);
  for (const Entry& e : cur->entries) {
    if (keep(e)) s->entries.push_back(e);
  }
  PublishLocked(std::move(s));
}

void PeerTable::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  auto s = std::make_unique<Snapshot>();
  s->generation = current_.load(std::memory_order_relaxed)->generation;
  PublishLocked(std::move(s));
}

PeerTable::Pin PeerTable::Hold() const {
  Pin pin;
  Hold(&pin);
  return pin;
}

void PeerTable::HoldCounted(Pin* pin) const {
  for (;;) {
    // seq_cst: the counter's increment is ordered before the second epoch
    // load, so an AwaitReaders that advanced the epoch after it sees it.
    const uint64_t e = epoch_.load(std::memory_order_seq_cst);
    std::atomic<int64_t>& c = readers_[e & 1];
    c.fetch_add(1, std::memory_order_seq_cst);
    if (epoch_.load(std::memory_order_seq_cst) == e) {
      pin->counter_ = &c;
      return;
    }
    c.fetch_sub(1, std::memory_order_release);  // raced with AwaitReaders: take the new epoch's counter
  }
}

bool PeerTable::AwaitReaders(int64_t timeout_ms) {
  std::lock_guard lock(await_mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (marks::Available() && !marks::AwaitMarks(this, deadline)) return false;
  // Pins on the counters (marks unavailable, or a thread's slots all held):
  // readers that see the new epoch also see the snapshot stored before it;
  // those counted in the old epoch's counter are the ones to wait for.
  auto drained = [&deadline](const std::atomic<int64_t>& c) {
    return marks::WaitUntil([&c] { return c.load(std::memory_order_acquire) == 0; }, deadline);
  };
  // The other counter, which the epoch is about to send new readers to,
  // still counts readers older than the previous call when that call timed
  // out: they are older than this invalidation too.  No new reader joins
  // it until the epoch advances.
  const uint64_t now = epoch_.load(std::memory_order_seq_cst);
  if (!drained(readers_[(now + 1) & 1])) return false;
  const uint64_t old = epoch_.fetch_add(1, std::memory_order_seq_cst);
  return drained(readers_[old & 1]);
}

Status AddRegionEverywhere(LocalRegistry& registry,
                           const std::vector<std::unique_ptr<transport::Transport>>& transports,
                           LocalRegistry::Region region) {
  for (const auto& t : transports) {
    auto key = t->RegisterRegion(region.desc);
    if (!key.ok()) {
      for (const auto& u : transports) {
        if (u.get() == t.get()) break;
        u->DeregisterRegion(region.desc);
      }
      return key.status();
    }
    region.keys.emplace(std::string(t->name()), std::move(key.value()));
  }
  bool added = false;
  Status s = registry.Add(region, &added);
  if (!s.ok() || !added) {
    for (const auto& t : transports) t->DeregisterRegion(region.desc);
  }
  return s;
}

Status RefreshPeerTable(PeerTable& table, transport::Transport& t, int peer, const std::string& who,
                        const std::function<Result<RegionTable>()>& fetch) {
  const std::string tname(t.name());
  for (int attempt = 0; attempt < 8; ++attempt) {
    HIXL_ASSIGN_OR_RETURN(RegionTable fetched, fetch());
    std::vector<PeerTable::Entry> entries;
    entries.reserve(fetched.regions.size());
    for (const RegionRecord& r : fetched.regions) {
      auto k = r.keys.find(tname);
      if (k == r.keys.end()) continue;  // not reachable with our transport
      // Keep keys already unpacked for regions we know (the same range, the
      // same key); the pin holds the entry while it is copied (a removal
      // taken meanwhile may replace its snapshot), not while a key unpacks.
      {
        PeerTable::Pin pin = table.Hold();
        if (const PeerTable::Entry* old = table.Find(r.base, r.len);
            old && old->base == r.base && old->len == r.len && old->blob.view() == k->second) {
          entries.push_back(*old);
          continue;
        }
      }
      HIXL_ASSIGN_OR_RETURN(auto key, t.UnpackKey(peer, r.base, r.len, k->second));
      entries.push_back({r.base, r.len, std::move(key), PeerTable::Blob(k->second)});
    }
    if (table.Install(fetched.generation, std::move(entries))) return Status::Ok();
  }
  return Err(Errc::kInternal, "the region table of {} keeps changing; try again", who);
}

}  // namespace hixl
