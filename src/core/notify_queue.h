// A bounded queue of received notifications, shared by the front doors
// (the world queues {rank, bytes}, the engine {name, message}).  Thread-safe:
// the control thread pushes, users take.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace hixl::core {

template <typename T>
class NotifyQueue {
 public:
  explicit NotifyQueue(size_t depth = 1024) : depth_(depth) {}

  void set_depth(size_t depth) {
    std::lock_guard lock(mu_);
    depth_ = depth;
  }

  // Appends item unless `depth` items wait already; then returns false and
  // sets *waiting (for the caller's message).
  bool Push(T item, size_t* waiting) {
    std::lock_guard lock(mu_);
    if (items_.size() >= depth_) {
      *waiting = items_.size();
      return false;
    }
    items_.push_back(std::move(item));
    cv_.notify_all();
    return true;
  }

  // Something that ends a wait early (a peer died), in words: the next
  // waiting Take that finds no item takes it (each alert once, oldest
  // first); items queued before or after it are taken first.  At most
  // kMaxAlerts wait; beyond, the last one counts the others.
  static constexpr size_t kMaxAlerts = 1024;
  void Alert(std::string why) {
    {
      std::lock_guard lock(mu_);
      if (alerts_.size() < kMaxAlerts) {
        alerts_.push_back(std::move(why));
      } else {
        alerts_.back() += "; and another: " + why.substr(0, 200);
        if (alerts_.back().size() > 8192) alerts_.back().resize(8192);
      }
    }
    cv_.notify_all();
  }

  enum class Taken { kTaken, kTimedOut, kClosed, kAlert };

  // Moves up to max items, oldest first, onto the end of *out.  With `wait`
  // and an empty queue, first waits up to timeout_ms for an item; kTimedOut
  // when none came, kClosed when Close() was called and none is left.  With
  // `alert` (and `wait`), a pending alert ends the wait when no item is
  // there: kAlert, with the alert moved into *alert.
  Taken Take(size_t max, bool wait, int64_t timeout_ms, std::vector<T>* out, std::string* alert = nullptr) {
    std::unique_lock lock(mu_);
    if (wait && items_.empty()) {
      const auto alerted = [&] { return alert && !alerts_.empty(); };
      if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                        [&] { return !items_.empty() || closed_ || alerted(); })) {
        return Taken::kTimedOut;
      }
      if (items_.empty()) {
        if (closed_ || !alerted()) return Taken::kClosed;
        *alert = std::move(alerts_.front());
        alerts_.pop_front();
        return Taken::kAlert;
      }
    }
    while (!items_.empty() && out->size() < max) {
      out->push_back(std::move(items_.front()));
      items_.pop_front();
    }
    return Taken::kTaken;
  }

  // Wakes every waiting Take, and makes later waits on an empty queue return
  // kClosed at once; Reopen() undoes it.
  void Close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  void Reopen() {
    std::lock_guard lock(mu_);
    closed_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  std::deque<std::string> alerts_;
  size_t depth_;
  bool closed_ = false;
};

}  // namespace hixl::core
