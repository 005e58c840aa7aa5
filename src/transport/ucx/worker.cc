#include "transport/ucx/worker.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

#include "base/log.h"

namespace hixl::transport::ucx {

namespace {

// UCX_TLS when the user has not set it: everything but the transports that
// cannot serve endpoints with peer-failure handling (see CreateContext).
constexpr const char* kDefaultTls = "^posix,sysv";
// UCX settings hixl changes from UCX's defaults unless the user set them.
// `key` is the name ucp_config_modify takes for the TCP transport's field
// (without its table prefix: only the TCP transport has these fields).
struct UcxDefault {
  const char* key;
  const char* value;
  const char* env[2];  // the variables that set it (UCX takes both spellings)
};
constexpr UcxDefault kTcpDefaults[] = {
    {"TX_SEG_SIZE", "512k", {"UCX_TCP_TX_SEG_SIZE", "UCX_TX_SEG_SIZE"}},
    {"RX_SEG_SIZE", "512k", {"UCX_TCP_RX_SEG_SIZE", "UCX_RX_SEG_SIZE"}},
};

// A UCP context from the UCX_* variables, HIXL_NET_DEV and, if asked,
// hixl's TCP settings.
Result<ucp_context_h> CreateContext(const UcxOptions& options, bool tune_tcp) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return Err(Errc::kTransport, "ucx: cannot read the UCX configuration (UCX_* variables): {}", ucs_status_string(st));
  }
  for (const UcxDefault& d : kTcpDefaults) {
    if (!tune_tcp || std::getenv(d.env[0]) != nullptr || std::getenv(d.env[1]) != nullptr) continue;
    st = ucp_config_modify(config, d.key, d.value);
    if (st != UCS_OK) HIXL_LOG_DEBUG("ucx: cannot set {}={}: {}", d.env[0], d.value, ucs_status_string(st));
  }
  // hixl's endpoints need peer-failure handling (a dead peer must be an
  // error, not a hang), which UCX's posix and sysv shared-memory transports
  // lack in UCX 1.13: they can never carry hixl's traffic, so unless
  // UCX_TLS says otherwise they are left out.  Opened, they would only take
  // memory (their receive FIFOs), and at an exit without finalize
  // LeakSanitizer reports UCX's descriptors, kept inside those FIFOs, as
  // leaked.
  if (std::getenv("UCX_TLS") == nullptr) {
    st = ucp_config_modify(config, "TLS", kDefaultTls);
    if (st != UCS_OK) HIXL_LOG_DEBUG("ucx: cannot set UCX_TLS={}: {}", kDefaultTls, ucs_status_string(st));
  }
  if (!options.net_dev.empty()) {
    st = ucp_config_modify(config, "NET_DEVICES", options.net_dev.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return Err(Errc::kInvalidArg, "ucx: HIXL_NET_DEV={} is not a valid UCX device list: {}", options.net_dev,
                 ucs_status_string(st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.name = "hixl";
  ucp_context_h context = nullptr;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) {
    return Err(Errc::kTransport, "ucx: ucp_init failed: {}{}", ucs_status_string(st),
               options.net_dev.empty() ? "" : fmt::format(" (HIXL_NET_DEV={})", options.net_dev));
  }
  return context;
}

// Whether the context has a TCP resource: ucp_context_print_info lists
// each as "resource N : md M dev D flags -- tcp/<device>".
bool HasTcpResource(ucp_context_h context) {
  char* text = nullptr;
  size_t size = 0;
  FILE* f = ::open_memstream(&text, &size);
  if (!f) return true;  // cannot tell: keep the settings
  ucp_context_print_info(context, f);
  std::fclose(f);
  const bool found = text && std::string_view(text, size).find("-- tcp/") != std::string_view::npos;
  std::free(text);
  return found;
}

}  // namespace

Result<std::shared_ptr<Worker>> Worker::Create(const UcxOptions& options) {
  auto w = std::make_shared<Worker>();
  // UCX emulates RMA over TCP with active messages of at most one TCP
  // segment (8 KiB by default): every segment costs a system call and a
  // progress round on both sides.  Larger segments make large puts and gets
  // several times faster (docs/ucx.md has the figures).  The UCX_TCP_*
  // variables still win when set.  Where UCX has no TCP device (UCX_TLS=rc,
  // HIXL_NET_DEV=mlx5_0:1) nothing would take the settings and UCX would
  // warn about them at every start, so the context is made again without.
  auto context = CreateContext(options, /*tune_tcp=*/true);
  if (context.ok() && !HasTcpResource(context.value())) {
    ucp_cleanup(context.value());
    context = CreateContext(options, /*tune_tcp=*/false);
  }
  if (!context.ok()) return context.status();
  w->context = context.value();
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t st = ucp_worker_create(w->context, &wp, &w->worker);
  if (st != UCS_OK) {
    w->worker = nullptr;
    return Err(Errc::kTransport, "ucx: ucp_worker_create failed: {}{}", ucs_status_string(st),
               options.net_dev.empty() ? "" : fmt::format(" (HIXL_NET_DEV={})", options.net_dev));
  }
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  st = ucp_worker_query(w->worker, &attr);
  if (st != UCS_OK) return Err(Errc::kTransport, "ucx: cannot get the worker address: {}", ucs_status_string(st));
  w->address.assign(reinterpret_cast<const char*>(attr.address), attr.address_length);
  ucp_worker_release_address(w->worker, attr.address);
  return w;
}

Worker::~Worker() {
  StopProgressThread();
  {
    std::lock_guard lock(mu);
    acceptor.reset();  // its endpoints go before the worker
  }
  if (worker) ucp_worker_destroy(worker);
  abandoned.clear();  // requests UCX never completed: no callback can reach them now
  if (context) ucp_cleanup(context);
}

Status Worker::StartProgressThread(int64_t spin_us) {
  spin_ = std::chrono::microseconds(spin_us);
  ucs_status_t st = ucp_worker_get_efd(worker, &efd_);
  if (st != UCS_OK) return Err(Errc::kTransport, "ucx: cannot get the worker's event fd: {}", ucs_status_string(st));
  wake_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return Err(Errc::kTransport, "ucx: eventfd failed: {}", std::strerror(errno));
  thread_ = std::thread([this] { Run(); });
  ::pthread_setname_np(thread_.native_handle(), "hixl-ucx");  // one per node: tests count them
  return Status::Ok();
}

void Worker::StopProgressThread() {
  if (thread_.joinable()) {
    stop_.store(true);
    Kick();
    thread_.join();
  }
}

void Worker::Kick() {
  if (!wake_.valid()) return;
  uint64_t one = 1;
  ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  (void)n;
}

bool Worker::PollOnce() {
  // Only waits call this, and a wait that finds nothing sleeps next.
  NeedProgress();
  std::unique_lock lock(mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  if (ucp_worker_progress(worker) == 0) return false;
  // No kick: waking the progress thread after every message doubled
  // put_signal's latency on 2 CPUs.
  DrainLocked();
  return true;
}

void Worker::NeedProgress() {
  if (aside_until_ns_.load(std::memory_order_relaxed) != 0) aside_until_ns_.store(0, std::memory_order_seq_cst);
  // After the store: the progress thread sets aside_ before it looks at
  // aside_until_ns_ again, so either it sees the store or this sees aside_.
  if (aside_.load(std::memory_order_seq_cst)) Kick();
}

bool Worker::StandAside() {
  const auto aside = [this](int64_t now) {
    return spinners_.load(std::memory_order_seq_cst) > 0 || now < aside_until_ns_.load(std::memory_order_seq_cst);
  };
  if (!aside(NowNs())) return false;
  aside_.store(true, std::memory_order_seq_cst);
  const int64_t now = NowNs();
  if (stop_.load() || !aside(now)) {
    aside_.store(false, std::memory_order_relaxed);
    return false;
  }
  // Until the caller's linger ends, or for as long again while one spins.
  const int64_t until = aside_until_ns_.load(std::memory_order_relaxed);
  const int64_t ns = std::max<int64_t>(until - now, kAsideAfterSpin.count() * 1000);
  Nap(ns);
  aside_.store(false, std::memory_order_relaxed);
  return true;
}

void Worker::Nap(int64_t ns) {
  aside_sleeps_.fetch_add(1, std::memory_order_relaxed);
  const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  pollfd fd{wake_.get(), POLLIN, 0};
  if (::ppoll(&fd, 1, &ts, nullptr) > 0) {
    uint64_t count;
    (void)!::read(wake_.get(), &count, sizeof(count));
  }
}

bool Worker::LockUnlessSpinning() {
  for (int tries = 1;; ++tries) {
    if (mu.try_lock()) {
      if (spinners_.load(std::memory_order_seq_cst) == 0) return true;
      mu.unlock();  // taken in a spinning caller's drop of mu between two of its rounds: given back
      return false;
    }
    if (spinners_.load(std::memory_order_seq_cst) > 0 || stop_.load()) return false;
    if (tries % kYieldsBeforeNap != 0) {
      ::sched_yield();
      continue;
    }
    // Held long by a thread that does not progress (a connection, a
    // registration): a nap, not a CPU spent yielding.
    Nap(kLockNap.count() * 1000);
  }
}

void Worker::FinishLocked() {
  if (aside_.load(std::memory_order_seq_cst)) {
    NotifyLocked();
    return;
  }
  DrainLocked();
}

void Worker::DrainLocked() {
  while (ucp_worker_progress(worker) != 0) {
  }
  NotifyLocked();
}

void Worker::NotifyLocked() {
  if (waiters_ == 0 || !completed.exchange(false, std::memory_order_relaxed)) return;
  progressed_.notify_all();
  const uint64_t one = 1;
  for (int fd : sleeper_fds_) (void)!::write(fd, &one, sizeof(one));
}

namespace {

// The calling thread's eventfd for SleepLocked (made on first need; -1 if
// that failed), closed when the thread ends.
int SleeperFd() {
  thread_local net::Fd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  return fd.get();
}

}  // namespace

void Worker::SleepLocked(std::unique_lock<std::mutex>& lock) {
  const int mine = efd_ >= 0 ? SleeperFd() : -1;
  if (mine < 0 || ucp_worker_arm(worker) != UCS_OK) {
    progressed_.wait_for(lock, std::chrono::milliseconds(kWaitMs));
    return;
  }
  sleeper_fds_.push_back(mine);
  lock.unlock();
  pollfd fds[2] = {{efd_, POLLIN, 0}, {mine, POLLIN, 0}};
  (void)::poll(fds, 2, kWaitMs);
  lock.lock();
  std::erase(sleeper_fds_, mine);
  // Out of the list, so no notice comes after this: clear one that came
  // (non-blocking), so that the next sleep does not end at once.
  uint64_t count;
  (void)!::read(mine, &count, sizeof(count));
}

void Worker::Run() {
  bool warned = false;
  // Until when the thread polls instead of sleeping: spin_ past the last
  // request it served (whichever thread's progress ran its handler), or
  // the last progress it made itself.  The latter is a peer's put or get
  // over TCP, which UCX serves with messages that hixl never sees: asleep
  // on the event fd, the thread was woken for the put and again for the
  // flush that follows it (an 8-byte put + fence took 38 us on loopback,
  // UCX alone 14 us; 17 us with this).
  auto awake_until = net::Clock::now();
  while (!stop_.load()) {
    if (StandAside()) continue;
    ucs_status_t armed;
    bool spin = false;
    {
      if (!LockUnlessSpinning()) continue;
      std::lock_guard lock(mu, std::adopt_lock);
      const unsigned progressed = ucp_worker_progress(worker);
      if (acceptor) acceptor->Serve();  // what the listener's callbacks queued, here or in another thread's progress
      if (served_request) {
        served_request = false;
        awake_until = net::Clock::now() + spin_;
      }
      if (progressed != 0) {
        awake_until = std::max(awake_until, net::Clock::now() + spin_);
        NotifyLocked();
        continue;
      }
      spin = net::Clock::now() < awake_until;
      armed = spin ? UCS_OK : ucp_worker_arm(worker);
    }
    if (spin) {
      // Yielding: a rank on this CPU that has work gets it first.
      ::sched_yield();
      continue;
    }
    if (armed == UCS_ERR_BUSY) continue;
    if (armed != UCS_OK && !warned) {
      HIXL_LOG_WARN("ucx: cannot arm the worker's event fd ({}); polling it every 10 ms instead",
                    ucs_status_string(armed));
      warned = true;
    }
    // Never asleep for long, armed or not: UCX 1.13 over TCP may leave the
    // armed event fd quiet while a message waits to be handled (seen once
    // in CI: an atomic's request lay unanswered on an idle rank for the
    // whole 120 s timeout; ucxx's issue 15 reports the same of UCX before
    // 1.14), and a progress call every kIdlePollMs recovers it.
    // Asleep here, the thread would be woken by each reply to a caller that
    // starts to spin meanwhile -- within this one poll, which finds the
    // event fd quiet again (the caller took the reply) and sleeps on, so
    // it would never stand aside: a caller that starts to spin kicks it
    // out (Spinning).  polling_ first, then spinners_; the caller the
    // other way round.
    polling_.store(true, std::memory_order_seq_cst);
    if (spinners_.load(std::memory_order_seq_cst) > 0) {
      polling_.store(false, std::memory_order_relaxed);
      continue;
    }
    pollfd fds[2] = {{efd_, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    int r = ::poll(fds, 2, armed == UCS_OK ? kIdlePollMs : 10);
    polling_.store(false, std::memory_order_relaxed);
    if (r > 0 && (fds[1].revents & POLLIN)) {
      uint64_t count;
      ssize_t n = ::read(wake_.get(), &count, sizeof(count));
      (void)n;
    }
  }
}

}  // namespace hixl::transport::ucx
