// MemoryStore: the in-process store of a world of one.
#include <condition_variable>
#include <mutex>

#include "bootstrap/store.h"
#include "bootstrap/store_kv.h"

namespace hixl::bootstrap {

using detail::After;
using detail::CheckTimeout;
using detail::Op;
using detail::WaitWhat;
using net::Clock;
using net::Deadline;

struct MemoryStore::Impl {
  std::mutex mu;
  std::condition_variable cv;
  detail::Kv kv;
};

MemoryStore::MemoryStore() : impl_(std::make_unique<Impl>()) {}
MemoryStore::~MemoryStore() = default;

Status MemoryStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->kv.Set(key, value);
  }
  impl_->cv.notify_all();
  return Status::Ok();
}

Result<std::string> MemoryStore::Get(const std::string& key, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("Get", key, timeout_ms));
  const Deadline deadline = After(timeout_ms);
  std::unique_lock<std::mutex> lock(impl_->mu);
  while (true) {
    if (const std::string* v = impl_->kv.Find(key)) return *v;
    if (Clock::now() >= deadline) {
      return Err(Errc::kTimeout, "timed out after {} ms waiting for {}", timeout_ms, WaitWhat(Op::kGet, key, 0));
    }
    impl_->cv.wait_until(lock, deadline);
  }
}

Result<int64_t> MemoryStore::Add(const std::string& key, int64_t delta) {
  Result<int64_t> r = [&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->kv.Add(key, delta);
  }();
  if (r.ok()) impl_->cv.notify_all();
  return r;
}

Status MemoryStore::WaitAtLeast(const std::string& key, int64_t target, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("WaitAtLeast", key, timeout_ms));
  const Deadline deadline = After(timeout_ms);
  std::unique_lock<std::mutex> lock(impl_->mu);
  while (true) {
    HIXL_ASSIGN_OR_RETURN(bool done, impl_->kv.AtLeast(key, target));
    if (done) return Status::Ok();
    if (Clock::now() >= deadline) {
      return Err(Errc::kTimeout, "timed out after {} ms waiting for {} ({})", timeout_ms,
                 WaitWhat(Op::kWaitAtLeast, key, target), impl_->kv.Describe(key));
    }
    impl_->cv.wait_until(lock, deadline);
  }
}

Result<std::vector<std::string>> MemoryStore::Gather(const std::string& prefix, int64_t count, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("Gather", prefix, timeout_ms));
  HIXL_RETURN_IF_ERROR(detail::CheckGatherCount(prefix, count));
  const Deadline deadline = After(timeout_ms);
  std::unique_lock<std::mutex> lock(impl_->mu);
  int64_t next = 0;
  while (true) {
    while (next < count && impl_->kv.Find(detail::GatherKey(prefix, next))) ++next;
    if (next == count) {  // every key exists (the lock is held: none can go)
      std::vector<std::string> out;
      uint64_t bytes = sizeof(uint32_t);
      for (int64_t i = 0; i < count; ++i) {
        out.push_back(*impl_->kv.Find(detail::GatherKey(prefix, i)));
        bytes += sizeof(uint32_t) + out.back().size();
        if (bytes > kMaxGatherBytes) {
          return Err(Errc::kInvalidArg, "Gather of the {} keys {}0..: their values are larger than {} bytes", count,
                     detail::Quote(prefix), kMaxGatherBytes);
        }
      }
      return out;
    }
    if (Clock::now() >= deadline) {
      return Err(Errc::kTimeout, "timed out after {} ms waiting for {}", timeout_ms,
                 WaitWhat(Op::kGather, prefix, count, detail::GatherKey(prefix, next)));
    }
    impl_->cv.wait_until(lock, deadline);
  }
}

Status MemoryStore::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->kv.Erase(key);
  return Status::Ok();
}

}  // namespace hixl::bootstrap
