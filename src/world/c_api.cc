// The C API: a thin front door over the process's world (world/world.h),
// beside the C++ one (cxx_api.cc) rather than on top of it; both call the
// same WorldImpl, so they behave the same.  Every failure records its
// message for hixl_last_error() on the calling thread.  No exception
// crosses this boundary.
#include <hixl/hixl.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "world/world.h"

using hixl::Status;

namespace {

int Report(const Status& s) {
  if (!s.ok()) hixl::SetLastError(s);
  return s.raw_code();
}

template <typename F>
int Guard(F&& f) noexcept {
  try {
    return Report(f());
  } catch (const std::bad_alloc&) {
    return Report(Status(hixl::Errc::kNoMemory, "out of memory"));
  } catch (const std::exception& e) {
    return Report(Status(hixl::Errc::kInternal, std::string("internal error: ") + e.what()));
  } catch (...) {
    return Report(Status(hixl::Errc::kInternal, "internal error"));
  }
}

#define WORLD_OR_FAIL(w, api)                         \
  hixl::world::WorldImpl* w = hixl::world::Current(); \
  if (!w) return hixl::world::NotInitialized(api)

}  // namespace

extern "C" {

int hixl_init(void) {
  return Guard([] { return hixl::world::InitCurrent(); });
}

int hixl_finalize(void) {
  return Guard([] { return hixl::world::FinalizeCurrent(); });
}

int hixl_rank(void) {
  hixl::world::WorldImpl* w = hixl::world::Current();
  return w ? w->rank() : Report(hixl::world::NotInitialized("hixl_rank"));
}

int hixl_world_size(void) {
  hixl::world::WorldImpl* w = hixl::world::Current();
  return w ? w->size() : Report(hixl::world::NotInitialized("hixl_world_size"));
}

void* hixl_alloc(size_t size) {
  void* out = nullptr;
  Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_alloc");
    auto r = w->Alloc(size);
    if (!r.ok()) return Status(r.status().code(), "hixl_alloc: " + r.status().message());
    out = r.value();
    return Status::Ok();
  });
  return out;
}

int hixl_free(void* ptr) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_free");
    return w->Free(ptr);
  });
}

int hixl_register_memory(void* addr, size_t size) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_register_memory");
    return w->Register(addr, size);
  });
}

int hixl_deregister_memory(void* addr) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_deregister_memory");
    return w->Deregister(addr);
  });
}

int hixl_put(int dst_rank, const void* src_addr, uint64_t dst_addr, size_t size) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_put");
    return w->Put(dst_rank, src_addr, dst_addr, size);
  });
}

int hixl_get(int src_rank, uint64_t src_addr, void* dst_addr, size_t size) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_get");
    return w->Get(src_rank, src_addr, dst_addr, size);
  });
}

int hixl_fence(void) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_fence");
    return w->Fence();
  });
}

int hixl_barrier(void) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_barrier");
    return w->Barrier();
  });
}

int hixl_allgather(const void* send, void* recv, size_t bytes_per_rank) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_allgather");
    return w->Allgather(send, recv, bytes_per_rank);
  });
}

int hixl_broadcast(int root, void* buf, size_t size) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_broadcast");
    return w->Broadcast(root, buf, size);
  });
}

int hixl_put_signal(int dst_rank, const void* src_addr, uint64_t dst_addr, size_t size, uint64_t sig_addr,
                    uint64_t value, int op) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_put_signal");
    return w->PutSignal(dst_rank, src_addr, dst_addr, size, sig_addr, value, op);
  });
}

int hixl_wait_until(const uint64_t* sig_addr, int cmp, uint64_t value, int64_t timeout_ms) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_wait_until");
    return w->WaitUntil(sig_addr, cmp, value, timeout_ms);
  });
}

int hixl_test(const uint64_t* sig_addr, int cmp, uint64_t value) {
  auto r = hixl::world::TestSignal(sig_addr, cmp, value);
  if (!r.ok()) return Report(hixl::Status(r.status().code(), "hixl_test: " + r.status().message()));
  return r.value() ? 1 : 0;
}

static int AtomicCall(const char* api, int rank, uint64_t addr, hixl::transport::AtomicOp op, uint64_t operand,
                      uint64_t compare, uint64_t* old) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, api);
    return w->Atomic(api, rank, addr, op, operand, compare, old);
  });
}

int hixl_atomic_fetch(int rank, uint64_t addr, uint64_t* value) {
  if (!value) return Report(hixl::Status(hixl::Errc::kInvalidArg, "hixl_atomic_fetch: value is NULL"));
  return AtomicCall("hixl_atomic_fetch", rank, addr, hixl::transport::AtomicOp::kFetch, 0, 0, value);
}
int hixl_atomic_set(int rank, uint64_t addr, uint64_t value) {
  return AtomicCall("hixl_atomic_set", rank, addr, hixl::transport::AtomicOp::kSet, value, 0, nullptr);
}
int hixl_atomic_add(int rank, uint64_t addr, uint64_t value) {
  return AtomicCall("hixl_atomic_add", rank, addr, hixl::transport::AtomicOp::kAdd, value, 0, nullptr);
}
int hixl_atomic_fetch_add(int rank, uint64_t addr, uint64_t value, uint64_t* old) {
  return AtomicCall("hixl_atomic_fetch_add", rank, addr, hixl::transport::AtomicOp::kAdd, value, 0, old);
}
int hixl_atomic_swap(int rank, uint64_t addr, uint64_t value, uint64_t* old) {
  return AtomicCall("hixl_atomic_swap", rank, addr, hixl::transport::AtomicOp::kSet, value, 0, old);
}
int hixl_atomic_compare_swap(int rank, uint64_t addr, uint64_t expected, uint64_t desired, uint64_t* old) {
  return AtomicCall("hixl_atomic_compare_swap", rank, addr, hixl::transport::AtomicOp::kCompareSwap, desired, expected,
                    old);
}

int hixl_notify(int dst_rank, const void* bytes, size_t len) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_notify");
    return w->Notify(dst_rank, bytes, len);
  });
}

// Never more than the caller's field holds (the receiver refuses longer
// notifications already; this is the last line).
static void CopyOut(const hixl::Notification& n, hixl_notification_t* out) {
  const size_t len = std::min(n.data.size(), sizeof(out->data));
  out->src_rank = n.src_rank;
  out->len = static_cast<uint32_t>(len);
  std::memcpy(out->data, n.data.data(), len);
}

int hixl_get_notifications(hixl_notification_t* out, int max, int* count) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_get_notifications");
    if (!out || !count || max < 0) {
      return hixl::Status(hixl::Errc::kInvalidArg, "hixl_get_notifications: out and count must not be NULL, max >= 0");
    }
    std::vector<hixl::Notification> got;
    HIXL_RETURN_IF_ERROR(w->TakeNotifications(static_cast<size_t>(max), false, 0, &got));
    for (size_t i = 0; i < got.size(); ++i) CopyOut(got[i], &out[i]);
    *count = static_cast<int>(got.size());
    return hixl::Status::Ok();
  });
}

int hixl_wait_notification(hixl_notification_t* out, int64_t timeout_ms) {
  return Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_wait_notification");
    if (!out) return hixl::Status(hixl::Errc::kInvalidArg, "hixl_wait_notification: out is NULL");
    std::vector<hixl::Notification> got;
    HIXL_RETURN_IF_ERROR(w->TakeNotifications(1, true, timeout_ms, &got));
    CopyOut(got.front(), out);
    return hixl::Status::Ok();
  });
}

const char* hixl_strerror(int err) {
  // "NAME: description", from the one table (hixl_errors.h).
  switch (err) {
#define HIXL_STRERROR_CASE_(c_name, cxx_name, value, desc, engine, py) \
  case value: return #c_name ": " desc;
    HIXL_ERROR_CODES(HIXL_STRERROR_CASE_)
#undef HIXL_STRERROR_CASE_
    default: return "HIXL_ERR_UNKNOWN: unknown error code";
  }
}

const char* hixl_last_error(void) { return hixl::LastError(); }

}  // extern "C"

// hixl_peer_transport: the names are interned, so that the pointer stays
// valid after finalize and whatever a transport's name() points to.
namespace {

const char* InternTransportName(std::string_view name) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> names;  // node-based: c_str() is stable
  std::lock_guard lock(mu);
  auto it = names.find(name);
  if (it == names.end()) it = names.emplace(name).first;
  return it->c_str();
}

}  // namespace

extern "C" const char* hixl_peer_transport(int rank) {
  const char* name = nullptr;
  const int rc = Guard([&]() -> Status {
    WORLD_OR_FAIL(w, "hixl_peer_transport");
    if (rank < 0 || rank >= w->size()) {
      return hixl::Err(hixl::Errc::kInvalidRank, "hixl_peer_transport: rank {} is outside the world [0, {})", rank,
                       w->size());
    }
    name = InternTransportName(w->TransportFor(rank));
    return Status::Ok();
  });
  return rc == HIXL_SUCCESS ? name : nullptr;
}
