// The copy pool (base/copy_pool.h): the split, the settings, and the
// process-wide workers.
//
// A transfer that is split becomes a Job on the caller's stack, queued in
// the pool.  Parts are claimed with one atomic increment, by the caller and
// by any worker that finds the job at the head of the queue, so a caller
// whose workers are slow to wake (or busy with another transfer) does the
// parts itself.  The caller takes its job off the queue before it waits for
// the parts that workers claimed; a worker touches a job only under the
// pool's lock while it is queued, and again under the lock when its part is
// done, so the job never outlives a worker's use of it.
#include "base/copy_pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace hixl::copy {

// ------------------------------------------------------------ the split

size_t MinPart(const Plan& plan) {
  const size_t quarter = plan.split_min / 4 / kPage * kPage;
  return std::clamp(quarter, kPage, kDefaultMinPart);
}

int Split(uint64_t addr, size_t n, const Plan& plan, size_t* bounds) {
  bounds[0] = 0;
  const int threads = std::clamp(plan.threads, 1, kMaxThreads);
  size_t parts = 1;
  if (threads > 1 && n >= plan.split_min) {
    parts = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads), n / MinPart(plan)));
  }
  const size_t step = n / parts;  // at least MinPart >= one page when parts > 1
  for (size_t i = 1; i < parts; ++i) {
    const uint64_t at = addr + step * i;
    const uint64_t up = (at + kPage - 1) / kPage * kPage;  // the next page boundary of addr's pages
    bounds[i] = static_cast<size_t>(up - addr);            // < step * i + kPage <= n
  }
  bounds[parts] = n;
  return static_cast<int>(parts);
}

// ------------------------------------------------------------ settings

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

EnvLookUp ProcessEnvLookUp() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

}  // namespace

int LocalRanks(const EnvLookUp& env) {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    std::optional<std::string> v = env(name);
    if (!v) continue;
    std::optional<int64_t> n = ParseInt(*v);
    if (n && *n >= 1 && *n <= (1 << 20)) return static_cast<int>(*n);
  }
  return 1;
}

int AutoThreads(int cores, int local_ranks) {
  cores = std::max(cores, 1);
  return std::clamp(std::max(cores / std::max(local_ranks, 1), std::min(cores, 2)), 1, kAutoMaxThreads);
}

Result<int> ParseThreads(std::string_view shown, std::string_view text, int auto_threads) {
  if (text == "auto") return auto_threads;
  std::optional<int64_t> n = ParseInt(text);
  if (!n || *n < 1 || *n > kMaxThreads) {
    return Err(Errc::kInvalidArg, "{}='{}' must be auto or a number of copy threads from 1 to {}", shown, text,
               kMaxThreads);
  }
  return static_cast<int>(*n);
}

Result<size_t> ParseSplitMin(std::string_view shown, std::string_view text) {
  std::optional<int64_t> n = ParseInt(text);
  if (!n || *n < static_cast<int64_t>(kPage) || *n > (int64_t{1} << 40)) {
    return Err(Errc::kInvalidArg, "{}='{}' must be a number of bytes from {} to 2^40", shown, text, kPage);
  }
  return static_cast<size_t>(*n);
}

// ------------------------------------------------------------ the pool

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWorkerSpin = std::chrono::microseconds(50);  // after a part, before sleeping
constexpr auto kCallerSpin = std::chrono::microseconds(20);  // waiting for the workers' parts

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

struct Job {
  Job(const size_t* b, int p, PartFn f) : bounds(b), parts(p), fn(f) {}
  const size_t* const bounds;
  const int parts;
  const PartFn fn;
  std::atomic<int> next{0};      // the next part to claim
  std::atomic<int> finished{0};  // parts done (for the caller's spin)
  // Guarded by Pool::mu_:
  int done = 0;  // parts done
  Status first;  // the first error of a part
  Job* queue_next = nullptr;
  bool queued = false;
};

class Pool {
 public:
  // Never destroyed: a thread still copying at exit must find it.  The
  // workers are joined by an atexit handler.
  static Pool& Get() {
    static Pool* pool = new Pool();
    return *pool;
  }

  Status Run(Job* job) {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        Grow(job->parts - 1);
        Enqueue(job);
        if (idle_ > 0) {
          if (job->parts - 1 >= idle_) {
            work_cv_.notify_all();
          } else {
            for (int i = 0; i < job->parts - 1; ++i) work_cv_.notify_one();
          }
        }
      }
    }
    int mine = 0;
    for (;;) {
      const int i = job->next.fetch_add(1, std::memory_order_relaxed);
      if (i >= job->parts) break;
      Status s = job->fn(job->bounds[i], job->bounds[i + 1]);
      ++mine;
      if (!s.ok()) Record(job, std::move(s));
    }
    // The workers' parts: spin a little (they are about as long as ours),
    // then sleep.
    const int others = job->parts - mine;
    const auto spin_until = Clock::now() + kCallerSpin;
    while (job->finished.load(std::memory_order_acquire) < others && Clock::now() < spin_until) CpuRelax();
    std::unique_lock lock(mu_);
    if (job->queued) Unqueue(job);
    job->done += mine;
    done_cv_.wait(lock, [&] { return job->done == job->parts; });
    return std::move(job->first);
  }

  int Workers() {
    std::lock_guard lock(mu_);
    return static_cast<int>(workers_.size());
  }

 private:
  Pool() {
    ::pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); }, [] { Get().AfterForkInChild(); });
    std::atexit([] { Get().Stop(); });
  }

  // Under mu_: at least `want` workers (as many as can start).
  void Grow(int want) {
    want = std::min(want, kMaxThreads - 1);
    while (static_cast<int>(workers_.size()) < want) {
      // Workers take no signals: those are the application's threads' to handle.
      sigset_t all, old;
      sigfillset(&all);
      ::pthread_sigmask(SIG_SETMASK, &all, &old);
      pthread_t t;
      const int rc = ::pthread_create(
          &t, nullptr,
          [](void*) -> void* {
            Get().Work();
            return nullptr;
          },
          nullptr);
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      if (rc != 0) return;  // the callers do the parts themselves
      ::pthread_setname_np(t, "hixl-copy");
      workers_.push_back(t);
    }
  }

  void Enqueue(Job* job) {
    job->queued = true;
    job->queue_next = nullptr;
    if (tail_) {
      tail_->queue_next = job;
    } else {
      head_ = job;
    }
    tail_ = job;
    queued_.fetch_add(1, std::memory_order_release);
  }

  void Unqueue(Job* job) {
    Job** at = &head_;
    Job* prev = nullptr;
    while (*at != job) {
      prev = *at;
      at = &(*at)->queue_next;
    }
    *at = job->queue_next;
    if (tail_ == job) tail_ = prev;
    job->queued = false;
    queued_.fetch_sub(1, std::memory_order_release);
  }

  void Record(Job* job, Status s) {
    std::lock_guard lock(mu_);
    if (job->first.ok()) job->first = std::move(s);
  }

  void Work() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (stopping_) return;
      Job* job = head_;
      if (job == nullptr) {
        lock.unlock();
        const auto spin_until = Clock::now() + kWorkerSpin;
        while (queued_.load(std::memory_order_acquire) == 0 && Clock::now() < spin_until) CpuRelax();
        lock.lock();
        if (head_ == nullptr && !stopping_) {
          ++idle_;
          work_cv_.wait(lock, [&] { return head_ != nullptr || stopping_; });
          --idle_;
        }
        continue;
      }
      const int i = job->next.fetch_add(1, std::memory_order_relaxed);
      if (i >= job->parts - 1) Unqueue(job);  // its last part is claimed: nothing more for anyone
      if (i >= job->parts) continue;
      lock.unlock();
      Status s = job->fn(job->bounds[i], job->bounds[i + 1]);
      lock.lock();
      if (!s.ok() && job->first.ok()) job->first = std::move(s);
      job->finished.fetch_add(1, std::memory_order_release);
      if (++job->done == job->parts) done_cv_.notify_all();
    }
  }

  void Stop() {
    std::vector<pthread_t> workers;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      workers.swap(workers_);
      work_cv_.notify_all();
    }
    for (pthread_t t : workers) ::pthread_join(t, nullptr);
  }

  // The child of fork() has only the thread that forked: no workers, and no
  // job of another thread.  mu_ was locked by the prepare handler.
  void AfterForkInChild() {
    workers_.clear();
    head_ = tail_ = nullptr;
    queued_.store(0, std::memory_order_relaxed);
    idle_ = 0;
    // Condition variables that other threads (gone in the child) waited on
    // are made afresh.
    new (&work_cv_) std::condition_variable();
    new (&done_cv_) std::condition_variable();
    mu_.unlock();
  }

  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or stopping
  std::condition_variable done_cv_;  // a job's last part finished
  std::vector<pthread_t> workers_;   // guarded by mu_
  Job* head_ = nullptr;              // the queue of jobs with parts to claim; guarded by mu_
  Job* tail_ = nullptr;
  std::atomic<int> queued_{0};  // jobs queued (read without mu_ by spinning workers)
  int idle_ = 0;                // workers asleep on work_cv_; guarded by mu_
  bool stopping_ = false;       // at exit; guarded by mu_
};

}  // namespace

Status RunParts(const size_t* bounds, int parts, PartFn fn) {
  if (parts <= 1) return fn(bounds[0], bounds[parts < 1 ? 0 : 1]);
  Job job(bounds, parts, fn);
  return Pool::Get().Run(&job);
}

void CopySplit(void* dst, const void* src, size_t n, const Plan& plan) {
  size_t bounds[kMaxThreads + 1];
  const int parts = Split(reinterpret_cast<uint64_t>(dst), n, plan, bounds);
  auto part = [&](size_t b, size_t e) {
    std::memcpy(static_cast<uint8_t*>(dst) + b, static_cast<const uint8_t*>(src) + b, e - b);
    return Status::Ok();
  };
  (void)RunParts(bounds, parts, part);
}

int WorkersForTesting() { return Pool::Get().Workers(); }

}  // namespace hixl::copy
