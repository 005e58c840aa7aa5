// The UCP context and worker of the ucx transport, and the progress that
// drives them: the progress thread, and the bounded waits of callers.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "transport/transport.h"
#include "transport/ucx/listener.h"
#include "transport/ucx/options.h"

namespace hixl::transport::ucx {

// Shared by the transport, its peers and the keys unpacked for them, so
// that whichever goes last tears the worker and the context down.
class Worker {
 public:
  // A context from the UCX_* variables, HIXL_NET_DEV (options.net_dev) and
  // hixl's TCP settings, and a worker on it.
  static Result<std::shared_ptr<Worker>> Create(const UcxOptions& options);

  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker();

  // Every UCP call on the context, the worker, the endpoints and the rkeys
  // is made holding mu (the worker is UCS_THREAD_MODE_SERIALIZED).  UCP
  // callbacks run inside ucp_worker_progress, so they run holding it too.
  std::mutex mu;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::string address;  // the worker's UCP address, for peers
  // The listener for peers that connect by IP address and port (null when
  // UCX could not listen: then peers reach us by the worker address only).
  // Guarded by mu; served by the progress thread.
  std::unique_ptr<Acceptor> acceptor;
  // Set when a request completes or an endpoint fails: what a waiting
  // flush may be waiting for.
  std::atomic<bool> completed{false};
  // Set by the handlers of peers' requests (a signal, an atomic; mu held):
  // the progress thread then keeps polling for spin_us before it sleeps.
  bool served_request = false;
  // What UCX may still read and no caller waits for any more: atomics
  // whose callers gave up waiting (HIXL_TIMEOUT_MS) or had their reply
  // first, atomics' replies (atomics.cc).  A request's completion removes
  // its own entry; whatever UCX never completes goes with the worker, after
  // ucp_worker_destroy (no callback can run then).  Guarded by mu.
  std::vector<std::shared_ptr<void>> abandoned;

  // The progress thread serves the network on the target side (needed where
  // UCX emulates RMA, as over TCP) and sleeps on the worker's event fd
  // whenever there is nothing to do -- but for spin_us after it served a
  // peer's request, polling and yielding the CPU between polls: a peer that
  // signals or updates a word in a loop finds it awake, where waking an
  // idle CPU costs more than the round trip (docs/ucx.md).
  Status StartProgressThread(int64_t spin_us);
  void StopProgressThread();
  // Wakes the progress thread: a caller that progressed the worker itself
  // may have taken events the thread was armed for.  Call without mu.
  void Kick();
  // One round of progress on the calling thread unless another thread
  // holds mu (Transport::Poll); true if it found work.  Call without mu.
  bool PollOnce();
  // Progresses until nothing is left to do, as the progress thread does
  // before it arms, so that nothing this thread took from the worker is
  // left half done for a progress thread asleep in poll (it is woken by
  // the next arrival); wakes the threads asleep in ProgressUntil if a
  // request completed.  For a caller done with ProgressUntil, in place of
  // a kick.  mu held.
  void DrainLocked();

  // Progresses the worker until done() holds or the deadline passes (lock
  // holds mu); returns done().  While progress finds work, this thread does
  // it; once it finds none for a while (the peer is working), it sleeps
  // until the network has something or another thread completes a request
  // (SleepLocked), rather than competing for the CPU with the processes it
  // waits on.
  template <typename Done>
  bool ProgressUntil(std::unique_lock<std::mutex>& lock, net::Deadline deadline, Done done) {
    for (auto last_work = net::Clock::now();;) {
      const auto now = net::Clock::now();
      if (ucp_worker_progress(worker) != 0) last_work = now;
      if (done()) return true;
      if (now >= deadline) return false;
      if (now - last_work < kSpinBeforeSleep) {
        lock.unlock();  // let other threads start transfers meanwhile
        lock.lock();
        continue;
      }
      // The progress thread is kicked first, for the reason above; the bound
      // on the wait is a safety net only.
      ++waiters_;
      Kick();
      SleepLocked(lock);
      --waiters_;
    }
  }

 private:
  // A wait progresses the worker itself for this long without finding work
  // (about a round trip over TCP and a half) before it sleeps until the
  // progress thread completes a request, checking again at least every
  // kWaitMs (a safety net only).  Waking from that sleep costs more than a
  // round trip: a shorter spin doubled a remote fetch_add's latency.
  static constexpr std::chrono::microseconds kSpinBeforeSleep{50};
  static constexpr int kWaitMs = 10;
  // The progress thread progresses the worker at least this often (ms),
  // woken by its event fd or not (see Run).
  static constexpr int kIdlePollMs = 100;

  void Run();
  // ProgressUntil's sleep (mu held, released while asleep): on the worker's
  // event fd itself, armed, and on this thread's own eventfd, which
  // NotifyLocked writes; so a reply from the network wakes the caller at
  // once, in parallel with the progress thread, not through it (one
  // wake-up, not two in a row).  Where the worker cannot be armed now, on
  // progressed_, which the progress thread notifies.
  void SleepLocked(std::unique_lock<std::mutex>& lock);
  // Wakes the threads asleep in ProgressUntil if a request completed (mu held).
  void NotifyLocked();

  int efd_ = -1;                       // the worker's event fd, owned by the worker
  std::chrono::microseconds spin_{0};  // see StartProgressThread
  net::Fd wake_;                       // wakes the progress thread
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::condition_variable progressed_;  // with mu: the progress thread completed something
  int waiters_ = 0;                     // guarded by mu: threads asleep in ProgressUntil
  std::vector<int> sleeper_fds_;        // guarded by mu: the eventfds of those asleep on the event fd
};

}  // namespace hixl::transport::ucx
