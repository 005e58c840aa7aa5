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
  // idle CPU costs more than the round trip (docs/ucx.md).  While a caller
  // of this process progresses the worker itself (ProgressUntil), and for
  // kAsideAfterSpin after, it stands aside (StandAside).
  Status StartProgressThread(int64_t spin_us);
  void StopProgressThread();
  // Wakes the progress thread: a caller that progressed the worker itself
  // may have taken events the thread was armed for.  Call without mu.
  void Kick();
  // Kick, where the thread sleeps on the worker's event fd (after a
  // caller's ProgressUntil): standing aside, it naps on its own eventfd
  // and progresses and arms the worker again when it wakes, so a kick
  // would only wake it once per call for nothing (it did, once per put +
  // fence: 0.8 wake-ups a call, each taking the caller's CPU).
  void KickIfPolling() {
    if (polling_.load(std::memory_order_seq_cst)) Kick();
  }
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
  // DrainLocked, but where the progress thread stands aside (it progresses
  // before it arms when it comes back, so nothing is left for it half done
  // meanwhile), only the wake-up of those asleep in ProgressUntil: a caller
  // in a loop of atomics saves a progress round per call.  mu held.
  void FinishLocked();

  // Progresses the worker until done() holds or the deadline passes (lock
  // holds mu); returns done().  While progress finds work, this thread does
  // it; once it finds none for a while (the peer is working), it sleeps
  // until the network has something or another thread completes a request
  // (SleepLocked), rather than competing for the CPU with the processes it
  // waits on.
  //
  // While this thread spins, the progress thread stands aside (Run): it
  // would only be woken by the very reply this thread waits for, and on two
  // CPUs its wake-up lands on the CPU of the peer's progress thread or of
  // this one.
  template <typename Done>
  bool ProgressUntil(std::unique_lock<std::mutex>& lock, net::Deadline deadline, Done done) {
    Spinning spinning(this);
    for (auto last_work = net::Clock::now();;) {
      const auto now = net::Clock::now();
      if (ucp_worker_progress(worker) != 0) last_work = now;
      // What the listener's callbacks queued: the progress thread, standing
      // aside, does not serve it meanwhile.
      if (acceptor) acceptor->Serve();
      if (done()) return true;
      if (now >= deadline) return false;
      if (now - last_work < kSpinBeforeSleep) {
        lock.unlock();  // let other threads start transfers meanwhile
        lock.lock();
        continue;
      }
      // Asleep, this thread progresses the worker only when woken: the
      // progress thread takes the worker back, and is kicked first, for the
      // reason above; the bound on the wait is a safety net only.
      spinning.Pause();
      caller_sleeps_.fetch_add(1, std::memory_order_relaxed);
      ++waiters_;
      Kick();
      SleepLocked(lock);
      --waiters_;
      spinning.Resume();
    }
  }

  // For a thread about to wait for what peers' messages bring (a signal, a
  // barrier's flag) without progressing the worker itself: the progress
  // thread, if it stands aside, serves the network again now.
  void NeedProgress();

  // For tests: how often the progress thread went to sleep standing aside
  // (or napping for the mutex), and how often a caller in ProgressUntil
  // went to sleep.
  int64_t AsideSleeps() const { return aside_sleeps_.load(std::memory_order_relaxed); }
  int64_t CallerSleeps() const { return caller_sleeps_.load(std::memory_order_relaxed); }

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
  // How long the progress thread stays aside after the last spinning
  // caller left (Run): a caller that calls again at once (a loop of remote
  // atomics) finds it still asleep, not woken by each reply.  While callers
  // spin, it wakes this often to look again: each wake-up takes a CPU from
  // someone for a few microseconds (at 200 us, fetch_add over two network
  // namespaces was 1-2 us slower than at 1 ms; at 50 us, slower still).  A
  // peer's request that arrives after the caller left, while this process
  // calls nothing, waits at most this long; a wait in the library ends the
  // stand-aside at once (NeedProgress).
  static constexpr std::chrono::microseconds kAsideAfterSpin{1000};
  // LockUnlessSpinning: tries (yielding between) before a nap of kLockNap.
  static constexpr int kYieldsBeforeNap = 64;
  static constexpr std::chrono::microseconds kLockNap{100};

  // Counts the caller in ProgressUntil as spinning while it is in scope
  // (but for Pause .. Resume), and marks when it left.
  class Spinning {
   public:
    explicit Spinning(Worker* w) : w_(w) { Resume(); }
    ~Spinning() { Leave(NowNs() + kAsideAfterSpin.count() * 1000); }
    Spinning(const Spinning&) = delete;
    Spinning& operator=(const Spinning&) = delete;
    // A progress thread asleep on the event fd is kicked out, to stand aside.
    void Resume() {
      w_->spinners_.fetch_add(1, std::memory_order_seq_cst);
      if (w_->polling_.load(std::memory_order_seq_cst)) w_->Kick();
    }
    // Before the caller sleeps: the progress thread comes back at once.
    void Pause() { Leave(0); }

   private:
    void Leave(int64_t aside_until_ns) {
      w_->aside_until_ns_.store(aside_until_ns, std::memory_order_seq_cst);
      w_->spinners_.fetch_sub(1, std::memory_order_seq_cst);
    }

    Worker* w_;
  };
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(net::Clock::now().time_since_epoch()).count();
  }

  void Run();
  // Run's stand-aside: while a caller spins in ProgressUntil, or did until
  // kAsideAfterSpin ago, sleeps on wake_ alone (not on the worker's event
  // fd) for at most that long and returns true; false once neither holds.
  bool StandAside();
  // Takes mu for the progress thread, unless a caller spins in
  // ProgressUntil meanwhile (false: Run stands aside instead).  Never
  // sleeps in the mutex: a spinning caller drops mu and takes it again at
  // once, and a thread asleep in the mutex would be woken by each drop and
  // lose the race each time, costing the caller a system call a round and
  // the peer's progress thread its CPU (seen over two network namespaces).
  // It yields instead, and naps for kLockNap after every kYieldsBeforeNap
  // tries.
  bool LockUnlessSpinning();
  // Sleeps on wake_ alone for at most ns nanoseconds (a kick ends it).
  void Nap(int64_t ns);
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
  std::condition_variable progressed_;      // with mu: the progress thread completed something
  int waiters_ = 0;                         // guarded by mu: threads asleep in ProgressUntil
  std::vector<int> sleeper_fds_;            // guarded by mu: the eventfds of those asleep on the event fd
  std::atomic<int> spinners_{0};            // callers spinning in ProgressUntil
  std::atomic<int64_t> aside_until_ns_{0};  // the progress thread stands aside until then (steady clock)
  std::atomic<int64_t> aside_sleeps_{0};    // AsideSleeps
  std::atomic<int64_t> caller_sleeps_{0};   // CallerSleeps
  // The progress thread stands aside now (or is about to): StandAside.
  std::atomic<bool> aside_{false};
  // It sleeps on the worker's event fd now (or is about to): Run, Spinning.
  std::atomic<bool> polling_{false};
};

}  // namespace hixl::transport::ucx
