// OpenSHMEM setup, query and symmetric memory (shmem.h) on the runtime.
#include <cstring>

#include <fmt/format.h>

#include "shmem/runtime.h"

using hixl::shmem::S;
using hixl::shmem::W;

namespace {

void BarrierAll(const char* api) { hixl::shmem::Check(api, W(api)->Barrier()); }

// Every allocation: the world's symmetric heap, then a barrier (the
// standard's), so that no PE puts into a block a peer has not made yet
// (zeroed first, for calloc).
void* Allocate(const char* api, size_t alignment, size_t size, bool zero = false) {
  auto& s = S();
  hixl::world::WorldImpl* w = W(api);
  void* user = nullptr;
  if (size > 0) {
    // The heap's blocks are 64-byte aligned; more takes a larger block.
    const size_t extra = alignment > 64 ? alignment : 0;
    auto r = w->Alloc(size + extra);
    if (r.ok()) {
      void* base = r.value();
      user = base;
      if (extra) user = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + alignment - 1) & ~(alignment - 1));
      if (zero) std::memset(user, 0, size);
      std::lock_guard lock(s.mu);
      s.allocations[user] = {base, size};
    }
  }
  BarrierAll(api);
  return user;
}

void Release(const char* api, void* ptr) {
  auto& s = S();
  hixl::world::WorldImpl* w = W(api);
  BarrierAll(api);
  if (ptr == nullptr) return;
  void* base = nullptr;
  {
    std::lock_guard lock(s.mu);
    auto it = s.allocations.find(ptr);
    if (it == s.allocations.end()) {
      hixl::shmem::Fail(api, fmt::format("{} is not a block of shmem_malloc (or it was freed already)", ptr));
    }
    base = it->second.base;
    s.allocations.erase(it);
  }
  hixl::shmem::Check(api, w->Free(base));
}

}  // namespace

extern "C" {

void shmem_init(void) { hixl::shmem::Init("shmem_init"); }

int shmem_init_thread(int requested, int* provided) {
  hixl::shmem::Init("shmem_init_thread");
  (void)requested;
  // Every call of hixl's world is safe from any thread.
  if (provided) *provided = SHMEM_THREAD_MULTIPLE;
  return 0;
}

void shmem_query_thread(int* provided) {
  (void)W("shmem_query_thread");
  if (provided) *provided = SHMEM_THREAD_MULTIPLE;
}

void shmem_finalize(void) { hixl::shmem::Finalize("shmem_finalize"); }

void shmem_global_exit(int status) { hixl::shmem::Exit(status); }

int shmem_my_pe(void) { return W("shmem_my_pe") ? S().me : -1; }
int shmem_n_pes(void) { return W("shmem_n_pes") ? S().npes : -1; }
void start_pes(int npes) {
  (void)npes;
  hixl::shmem::Init("start_pes");
}
int _my_pe(void) { return W("_my_pe") ? S().me : -1; }
int _num_pes(void) { return W("_num_pes") ? S().npes : -1; }

int shmem_pe_accessible(int pe) {
  (void)W("shmem_pe_accessible");
  return pe >= 0 && pe < S().npes ? 1 : 0;
}

int shmem_addr_accessible(const void* addr, int pe) {
  (void)W("shmem_addr_accessible");
  return pe >= 0 && pe < S().npes && hixl::shmem::Symmetric(addr) ? 1 : 0;
}

void* shmem_ptr(const void* dest, int pe) {
  hixl::world::WorldImpl* w = W("shmem_ptr");
  // Where the peer's object is mapped here (a same-host peer's heap, or
  // its promoted memory); NULL where it is not, as the standard allows.
  if (pe < 0 || pe >= S().npes || !hixl::shmem::Symmetric(dest)) return nullptr;
  auto r = w->Direct(pe, hixl::shmem::Remote(dest, pe), 1);
  return r.ok() ? r.value() : nullptr;
}

void shmem_info_get_version(int* major, int* minor) {
  if (major) *major = SHMEM_MAJOR_VERSION;
  if (minor) *minor = SHMEM_MINOR_VERSION;
}

void shmem_info_get_name(char* name) {
  if (name) {
    std::strncpy(name, SHMEM_VENDOR_STRING, SHMEM_MAX_NAME_LEN - 1);
    name[SHMEM_MAX_NAME_LEN - 1] = '\0';
  }
}

void* shmem_malloc(size_t size) { return Allocate("shmem_malloc", 0, size); }
void* shmem_malloc_with_hints(size_t size, long hints) {
  (void)hints;
  return Allocate("shmem_malloc_with_hints", 0, size);
}

void* shmem_calloc(size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) return Allocate("shmem_calloc", 0, 0);
  return Allocate("shmem_calloc", 0, count * size, true);
}

void* shmem_align(size_t alignment, size_t size) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return Allocate("shmem_align", 0, 0);
  return Allocate("shmem_align", alignment, size);
}

void* shmem_realloc(void* ptr, size_t size) {
  const char* api = "shmem_realloc";
  if (ptr == nullptr) return Allocate(api, 0, size);
  if (size == 0) {
    Release(api, ptr);
    return nullptr;
  }
  auto& s = S();
  size_t old_size = 0;
  {
    std::lock_guard lock(s.mu);
    auto it = s.allocations.find(ptr);
    if (it == s.allocations.end()) hixl::shmem::Fail(api, fmt::format("{} is not a block of shmem_malloc", ptr));
    old_size = it->second.size;
  }
  // Every PE still reads its old block: barrier, copy, then free it.
  BarrierAll(api);
  auto r = W(api)->Alloc(size);
  if (!r.ok()) {
    BarrierAll(api);
    return nullptr;
  }
  void* fresh = r.value();
  std::memcpy(fresh, ptr, old_size < size ? old_size : size);
  void* base = nullptr;
  {
    std::lock_guard lock(s.mu);
    auto it = s.allocations.find(ptr);
    base = it->second.base;
    s.allocations.erase(it);
    s.allocations[fresh] = {fresh, size};
  }
  hixl::shmem::Check(api, W(api)->Free(base));
  BarrierAll(api);
  return fresh;
}

void shmem_free(void* ptr) { Release("shmem_free", ptr); }

void* shmalloc(size_t size) { return Allocate("shmalloc", 0, size); }
void* shmemalign(size_t alignment, size_t size) { return shmem_align(alignment, size); }
void* shrealloc(void* ptr, size_t size) { return shmem_realloc(ptr, size); }
void shfree(void* ptr) { Release("shfree", ptr); }

}  // extern "C"
