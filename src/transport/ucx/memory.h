// Memory of the ucx transport: this process's regions mapped with
// ucp_mem_map (a region's key blob is its packed rkey), and the keys of
// peers' regions (unpacked rkeys).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "transport/transport.h"
#include "transport/ucx/endpoint.h"
#include "transport/ucx/worker.h"

namespace hixl::transport::ucx {

// A peer's region: the rkey unpacked with the endpoint to it.  Holds the
// Peer, and so the endpoint and the worker, until it is destroyed.
struct UcxKey final : RemoteKey {
  // w->mu held.
  UcxKey(std::shared_ptr<Peer> peer, ucp_rkey_h rkey, uint64_t base, uint64_t len, std::string_view blob)
      : peer(std::move(peer)), rkey(rkey), base(base), len(len), blob(blob) {
    this->peer->keys.insert(this);
  }
  UcxKey(const UcxKey&) = delete;
  UcxKey& operator=(const UcxKey&) = delete;
  // The rkey goes before the endpoint (and the worker) that `peer` keeps
  // alive; Disconnect may have destroyed it already, with the endpoint.
  // Takes w->mu (the lanes' keys go after it is released).
  ~UcxKey() override;

  const std::shared_ptr<Peer> peer;
  ucp_rkey_h rkey;  // guarded by peer->w->mu; null once Disconnect destroyed it
  // The region and its blob, for the lanes' own unpacking.
  const uint64_t base;
  const uint64_t len;
  const std::string blob;
  // The same region's key for each lane above 0 (at lane - 1), unpacked
  // with that lane's endpoint on first use (UcxTransport::LaneKey); null
  // where none is.  Guarded by peer->w->mu.
  mutable std::vector<std::shared_ptr<UcxKey>> lanes;
};

// Unpacks the key blob of p's region [base, base+len) with p's endpoint
// (which exists).  w->mu held.
Result<std::shared_ptr<RemoteKey>> UnpackRkey(std::shared_ptr<Peer> p, uint64_t base, uint64_t len,
                                              std::string_view key_blob);
// Destroys the rkeys of every key unpacked for p; the keys stay, unusable
// (p->closed).  w->mu held.
void DestroyKeys(Peer* p);

// This process's regions, mapped with ucp_mem_map where they lie.
class Regions {
 public:
  explicit Regions(Worker* w) : w_(w) {}
  Regions(const Regions&) = delete;
  Regions& operator=(const Regions&) = delete;
  // Unmaps every region still mapped.
  ~Regions();

  // Maps the region and returns its packed rkey.  Takes w->mu.
  Result<std::string> Register(const LocalRegion& region);
  // Unmaps one registration of [base, base+len).  Takes w->mu.
  void Deregister(const LocalRegion& region);
  // Whether [addr, addr+len) (len > 0) lies inside one mapped region.
  // w->mu held: the region stays mapped while the caller holds it.
  bool CoversLocked(uint64_t addr, uint64_t len) const;
  Worker* worker() const { return w_; }

 private:
  struct Mapped {
    uint64_t len = 0;
    ucp_mem_h memh = nullptr;
  };
  Worker* const w_;
  std::multimap<uint64_t, Mapped> mapped_;  // base -> mapping (one per registration); guarded by w_->mu
  uint64_t max_len_ = 0;                    // the longest region ever mapped (bounds CoversLocked's search)
};

}  // namespace hixl::transport::ucx
