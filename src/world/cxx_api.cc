// The C++ API: handles over the process's world (world/world.h), beside the C
// API (c_api.cc), which calls the same WorldImpl rather than this file.
#include <hixl/hixl.hpp>

#include "world/world.h"

namespace hixl {

namespace {
// The world, or the kNotInitialized status naming `api`.
#define HIXL_WORLD_OR_RETURN(w, api)      \
  world::WorldImpl* w = world::Current(); \
  if (!w) return world::NotInitialized(api)
}  // namespace

Result<World> World::Init() {
  HIXL_RETURN_IF_ERROR(world::InitCurrent());
  return World();
}

World& World::operator=(World&& other) noexcept {
  if (this != &other) {
    if (live_) (void)Finalize();
    live_ = std::exchange(other.live_, false);
  }
  return *this;
}

World::~World() {
  if (live_) (void)Finalize();
}

Status World::Finalize() {
  if (!live_) return world::NotInitialized("World::Finalize");
  live_ = false;
  return world::FinalizeCurrent();
}

int World::rank() const {
  world::WorldImpl* w = world::Current();
  return w ? w->rank() : HIXL_ERR_NOT_INITIALIZED;
}

int World::size() const {
  world::WorldImpl* w = world::Current();
  return w ? w->size() : HIXL_ERR_NOT_INITIALIZED;
}

Result<void*> World::Alloc(size_t size) {
  HIXL_WORLD_OR_RETURN(w, "hixl_alloc");
  return w->Alloc(size);
}

Status World::Free(void* ptr) {
  HIXL_WORLD_OR_RETURN(w, "hixl_free");
  return w->Free(ptr);
}

Status World::RegisterMemory(void* addr, size_t size) {
  HIXL_WORLD_OR_RETURN(w, "hixl_register_memory");
  return w->Register(addr, size);
}

Status World::DeregisterMemory(void* addr) {
  HIXL_WORLD_OR_RETURN(w, "hixl_deregister_memory");
  return w->Deregister(addr);
}

Status World::Put(int dst_rank, const void* src, uint64_t dst_addr, size_t size) {
  HIXL_WORLD_OR_RETURN(w, "hixl_put");
  return w->Put(dst_rank, src, dst_addr, size);
}

Status World::Get(int src_rank, uint64_t src_addr, void* dst, size_t size) {
  HIXL_WORLD_OR_RETURN(w, "hixl_get");
  return w->Get(src_rank, src_addr, dst, size);
}

Status World::Fence() {
  HIXL_WORLD_OR_RETURN(w, "hixl_fence");
  return w->Fence();
}

Status World::Barrier() {
  HIXL_WORLD_OR_RETURN(w, "hixl_barrier");
  return w->Barrier();
}

Status World::Allgather(const void* send, void* recv, size_t bytes_per_rank) {
  HIXL_WORLD_OR_RETURN(w, "hixl_allgather");
  return w->Allgather(send, recv, bytes_per_rank);
}

Status World::Broadcast(int root, void* buf, size_t size) {
  HIXL_WORLD_OR_RETURN(w, "hixl_broadcast");
  return w->Broadcast(root, buf, size);
}

Status World::PutSignal(int dst_rank, const void* src, uint64_t dst_addr, size_t size, uint64_t sig_addr,
                        uint64_t value, SignalOp op) {
  HIXL_WORLD_OR_RETURN(w, "hixl_put_signal");
  return w->PutSignal(dst_rank, src, dst_addr, size, sig_addr, value, static_cast<int>(op));
}

Status World::WaitUntil(const uint64_t* sig, Cmp cmp, uint64_t value, int64_t timeout_ms) {
  HIXL_WORLD_OR_RETURN(w, "hixl_wait_until");
  return w->WaitUntil(sig, static_cast<int>(cmp), value, timeout_ms);
}

bool World::Test(const uint64_t* sig, Cmp cmp, uint64_t value) {
  auto r = world::TestSignal(sig, static_cast<int>(cmp), value);
  return r.ok() && r.value();
}

namespace {
Result<uint64_t> AtomicResult(const char* api, int rank, uint64_t addr, transport::AtomicOp op, uint64_t operand,
                              uint64_t compare) {
  HIXL_WORLD_OR_RETURN(w, api);
  uint64_t old = 0;
  HIXL_RETURN_IF_ERROR(w->Atomic(api, rank, addr, op, operand, compare, &old));
  return old;
}
}  // namespace

Result<uint64_t> World::AtomicFetch(int rank, uint64_t addr) {
  return AtomicResult("hixl_atomic_fetch", rank, addr, transport::AtomicOp::kFetch, 0, 0);
}
Status World::AtomicSet(int rank, uint64_t addr, uint64_t value) {
  return AtomicResult("hixl_atomic_set", rank, addr, transport::AtomicOp::kSet, value, 0).status();
}
Status World::AtomicAdd(int rank, uint64_t addr, uint64_t value) {
  return AtomicResult("hixl_atomic_add", rank, addr, transport::AtomicOp::kAdd, value, 0).status();
}
Result<uint64_t> World::AtomicFetchAdd(int rank, uint64_t addr, uint64_t value) {
  return AtomicResult("hixl_atomic_fetch_add", rank, addr, transport::AtomicOp::kAdd, value, 0);
}
Result<uint64_t> World::AtomicSwap(int rank, uint64_t addr, uint64_t value) {
  return AtomicResult("hixl_atomic_swap", rank, addr, transport::AtomicOp::kSet, value, 0);
}
Result<uint64_t> World::AtomicCompareSwap(int rank, uint64_t addr, uint64_t expected, uint64_t desired) {
  return AtomicResult("hixl_atomic_compare_swap", rank, addr, transport::AtomicOp::kCompareSwap, desired, expected);
}

Status World::Notify(int dst_rank, const void* bytes, size_t len) {
  HIXL_WORLD_OR_RETURN(w, "hixl_notify");
  return w->Notify(dst_rank, bytes, len);
}

Result<std::vector<Notification>> World::GetNotifications() {
  HIXL_WORLD_OR_RETURN(w, "hixl_get_notifications");
  std::vector<Notification> out;
  HIXL_RETURN_IF_ERROR(w->TakeNotifications(SIZE_MAX, false, 0, &out));
  return out;
}

Result<Notification> World::WaitNotification(int64_t timeout_ms) {
  HIXL_WORLD_OR_RETURN(w, "hixl_wait_notification");
  std::vector<Notification> out;
  HIXL_RETURN_IF_ERROR(w->TakeNotifications(1, true, timeout_ms, &out));
  return std::move(out.front());
}

Result<Registration> Registration::Make(void* addr, size_t size) {
  HIXL_WORLD_OR_RETURN(w, "hixl_register_memory");
  HIXL_RETURN_IF_ERROR(w->Register(addr, size));
  return Registration(addr);
}

Registration& Registration::operator=(Registration&& o) noexcept {
  if (this != &o) {
    if (addr_) {
      if (world::WorldImpl* w = world::Current()) (void)w->Deregister(addr_);
    }
    addr_ = std::exchange(o.addr_, nullptr);
  }
  return *this;
}

Registration::~Registration() {
  if (!addr_) return;
  if (world::WorldImpl* w = world::Current()) (void)w->Deregister(addr_);
}

Result<std::string> World::PeerTransport(int rank) const {
  HIXL_WORLD_OR_RETURN(w, "World::PeerTransport");
  if (rank < 0 || rank >= w->size()) {
    return Err(Errc::kInvalidRank, "World::PeerTransport: rank {} is outside the world [0, {})", rank, w->size());
  }
  return std::string(w->TransportFor(rank));
}

}  // namespace hixl
