#include "transport/ucx/memory.h"

#include <algorithm>

#include "base/log.h"

namespace hixl::transport::ucx {

UcxKey::~UcxKey() {
  std::vector<std::shared_ptr<UcxKey>> lane_keys;  // each takes mu as it goes, after the lock
  std::lock_guard lock(peer->w->mu);
  if (rkey) ucp_rkey_destroy(rkey);
  peer->keys.erase(this);
  lane_keys.swap(lanes);
}

Result<std::shared_ptr<RemoteKey>> UnpackRkey(std::shared_ptr<Peer> p, uint64_t base, uint64_t len,
                                              std::string_view key_blob) {
  if (key_blob.empty()) {
    return Err(Errc::kTransport, "ucx: {} published no key for its region at {:#x}", p->Name(), base);
  }
  // ucp_ep_rkey_unpack reads the blob as a packed rkey; it checks the
  // framing itself.
  ucp_rkey_h rkey = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(p->ep, key_blob.data(), &rkey);
  if (st != UCS_OK) {
    return Err(Errc::kTransport, "ucx: cannot unpack the key of the region [{:#x}, +{}) of {}: {}", base, len,
               p->Name(), ucs_status_string(st));
  }
  return std::shared_ptr<RemoteKey>(std::make_shared<UcxKey>(std::move(p), rkey, base, len, key_blob));
}

void DestroyKeys(Peer* p) {
  for (UcxKey* k : p->keys) {
    ucp_rkey_destroy(k->rkey);
    k->rkey = nullptr;
  }
  p->keys.clear();
}

Regions::~Regions() {
  std::lock_guard lock(w_->mu);
  for (auto& [base, m] : mapped_) ucp_mem_unmap(w_->context, m.memh);
  mapped_.clear();
}

Result<std::string> Regions::Register(const LocalRegion& region) {
  if (region.kind != MemKind::kHost) return Err(Errc::kUnsupported, "ucx: this transport moves host memory only");
  ucp_mem_map_params_t mp{};
  mp.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = reinterpret_cast<void*>(region.base);
  mp.length = region.len;
  mp.memory_type = UCS_MEMORY_TYPE_HOST;
  std::lock_guard lock(w_->mu);
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(w_->context, &mp, &memh);
  if (st != UCS_OK) {
    return Err(Errc::kTransport, "ucx: ucp_mem_map of {} bytes at {:#x} failed: {}", region.len, region.base,
               ucs_status_string(st));
  }
  void* buf = nullptr;
  size_t size = 0;
  st = ucp_rkey_pack(w_->context, memh, &buf, &size);
  if (st != UCS_OK) {
    ucp_mem_unmap(w_->context, memh);
    return Err(Errc::kTransport, "ucx: ucp_rkey_pack of the region at {:#x} failed: {}", region.base,
               ucs_status_string(st));
  }
  std::string blob(static_cast<const char*>(buf), size);
  ucp_rkey_buffer_release(buf);
  mapped_.emplace(region.base, Mapped{region.len, memh});
  max_len_ = std::max(max_len_, region.len);
  return blob;
}

void Regions::Deregister(const LocalRegion& region) {
  std::lock_guard lock(w_->mu);
  auto [first, last] = mapped_.equal_range(region.base);
  for (auto it = first; it != last; ++it) {
    if (it->second.len != region.len) continue;
    ucs_status_t st = ucp_mem_unmap(w_->context, it->second.memh);
    if (st != UCS_OK) {
      HIXL_LOG_WARN("ucx: ucp_mem_unmap of the region at {:#x} failed: {}", region.base, ucs_status_string(st));
    }
    mapped_.erase(it);
    return;
  }
}

bool Regions::CoversLocked(uint64_t addr, uint64_t len) const {
  if (len == 0) return false;
  auto it = mapped_.upper_bound(addr);
  while (it != mapped_.begin()) {
    --it;
    const uint64_t offset = addr - it->first;  // it->first <= addr
    if (offset > max_len_) break;              // no region starting this low is long enough
    if (offset < it->second.len && len <= it->second.len - offset) return true;
  }
  return false;
}

}  // namespace hixl::transport::ucx
