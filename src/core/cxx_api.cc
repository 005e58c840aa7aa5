// The C++ API: handles over the process's world (core/world.h).
#include <hixl/hixl.hpp>

#include "core/world.h"

namespace hixl {

namespace {
// The world, or the kNotInitialized status naming `api`.
#define HIXL_WORLD_OR_RETURN(w, api)                  \
  core::WorldImpl* w = core::Current();               \
  if (!w) return core::NotInitialized(api)
}  // namespace

Result<World> World::Init() {
  HIXL_RETURN_IF_ERROR(core::InitCurrent());
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
  if (!live_) return core::NotInitialized("World::Finalize");
  live_ = false;
  return core::FinalizeCurrent();
}

int World::rank() const {
  core::WorldImpl* w = core::Current();
  return w ? w->rank() : HIXL_ERR_NOT_INITIALIZED;
}

int World::size() const {
  core::WorldImpl* w = core::Current();
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

Result<Registration> Registration::Make(void* addr, size_t size) {
  HIXL_WORLD_OR_RETURN(w, "hixl_register_memory");
  HIXL_RETURN_IF_ERROR(w->Register(addr, size));
  return Registration(addr);
}

Registration& Registration::operator=(Registration&& o) noexcept {
  if (this != &o) {
    if (addr_) {
      if (core::WorldImpl* w = core::Current()) (void)w->Deregister(addr_);
    }
    addr_ = std::exchange(o.addr_, nullptr);
  }
  return *this;
}

Registration::~Registration() {
  if (!addr_) return;
  if (core::WorldImpl* w = core::Current()) (void)w->Deregister(addr_);
}

}  // namespace hixl
