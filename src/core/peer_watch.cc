#include "core/peer_watch.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/socket.h"

namespace hixl::core {

namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Back-off for a peer that accepted but did not finish its handshake.
constexpr milliseconds kFirstRetry{250};
constexpr milliseconds kMaxRetry{8000};
}  // namespace

struct PeerWatch::Impl {
  struct Entry {
    std::string host;
    uint16_t port = 0;
    auth::MaybeSecret secret;
    std::string who;
    OnDead on_dead;
    net::Fd fd;                  // the idle connection (invalid: to dial)
    bool closed = false;         // a connection of it ended: the next dial decides
    Clock::time_point retry_at;  // when to dial
    milliseconds backoff = kFirstRetry;
  };

  mutable std::mutex mu;
  std::map<uint64_t, Entry> entries;  // guarded by mu
  std::vector<net::Fd> to_close;      // guarded by mu; closed by the thread
  uint64_t next_key = 1;              // guarded by mu
  bool stop = false;                  // guarded by mu
  // Held while a callback runs: Unwatch waits on it.
  std::mutex callback_mu;
  net::Fd wake;  // eventfd
  std::thread thread;

  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake.get(), &one, sizeof(one));
  }

  enum class Outcome { kAlive, kDead, kUnsure };
  // Dials an entry's endpoint: a connection that passed the handshake, or
  // why not.  Blocks up to kRedialMs.
  static Outcome Dial(const Entry& e, bool after_close, net::Fd* out, std::string* why) {
    const std::string where = fmt::format("{}:{}", e.host, e.port);
    // One bound for the connection and its handshake: the watcher's end
    // (and so a Finalize) waits at most that long for a dial in progress.
    const net::Deadline deadline = net::DeadlineIn(kRedialMs);
    auto fd = net::Connect(e.host, e.port, deadline, /*retry_refused=*/false);
    if (!fd.ok()) {
      const bool refused = fd.status().code() == Errc::kPeerFailed;
      *why = fmt::format(
          "its control endpoint {} {}: {}", where,
          after_close ? "closed the connection, and does not accept another" : "does not accept connections any more",
          fd.status().message());
      return refused || after_close ? Outcome::kDead : Outcome::kUnsure;
    }
    Status hs = auth::ClientHandshake(fd->get(), e.secret, auth::Kind::kControl, deadline,
                                      fmt::format("{} at {}", e.who, where));
    if (!hs.ok()) {
      *why = hs.message();
      return Outcome::kUnsure;  // a stopped peer, or one out of room: not known dead
    }
    *out = std::move(fd.value());
    return Outcome::kAlive;
  }

  // The key's callback, unless it was unwatched meanwhile; the entry goes.
  void Report(uint64_t key, const std::string& why) {
    std::lock_guard cb(callback_mu);
    OnDead fn;
    std::string who;
    {
      std::lock_guard lock(mu);
      auto it = entries.find(key);
      if (it == entries.end()) return;
      fn = std::move(it->second.on_dead);
      who = it->second.who;
      if (it->second.fd.valid()) to_close.push_back(std::move(it->second.fd));
      entries.erase(it);
    }
    HIXL_LOG_INFO("peer watch: {} is dead: {}", who, why);
    if (fn) fn(why);
  }

  void Run() {
    std::vector<pollfd> pfds;
    std::vector<uint64_t> keys;
    while (true) {
      pfds.clear();
      keys.clear();
      std::vector<std::pair<uint64_t, Entry>> due;  // copies to dial, without the fd or callback
      int timeout = -1;
      {
        std::lock_guard lock(mu);
        if (stop) return;
        to_close.clear();
        const auto now = Clock::now();
        pfds.push_back({wake.get(), POLLIN, 0});
        for (auto& [key, e] : entries) {
          if (e.fd.valid()) {
            pfds.push_back({e.fd.get(), POLLIN | POLLRDHUP, 0});
            keys.push_back(key);
          } else if (e.retry_at <= now) {
            Entry copy;
            copy.host = e.host;
            copy.port = e.port;
            copy.secret = e.secret;
            copy.who = e.who;
            copy.closed = e.closed;
            e.retry_at = Clock::time_point::max();  // until Settle decides
            due.emplace_back(key, std::move(copy));
          } else {
            const auto ms = std::chrono::ceil<milliseconds>(e.retry_at - now).count();
            timeout = timeout < 0 ? static_cast<int>(ms) : std::min(timeout, static_cast<int>(ms));
          }
        }
      }
      if (!due.empty()) {
        for (auto& [key, copy] : due) {
          {
            // Not for an entry unwatched meanwhile, nor after the end.
            std::lock_guard lock(mu);
            if (stop) return;
            if (!entries.count(key)) continue;
          }
          Settle(key, copy);
        }
        continue;
      }
      if (::poll(pfds.data(), pfds.size(), timeout) < 0 && errno != EINTR) {
        HIXL_LOG_WARN("peer watch: poll failed: {}", std::strerror(errno));
      }
      if (pfds[0].revents) {
        uint64_t n = 0;
        (void)!::read(wake.get(), &n, sizeof(n));
      }
      for (size_t i = 1; i < pfds.size(); ++i) {
        if (!pfds[i].revents) continue;
        char buf[256];
        const ssize_t n = ::recv(pfds[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;  // nothing is sent on it
        std::lock_guard lock(mu);
        auto it = entries.find(keys[i - 1]);
        if (it == entries.end() || it->second.fd.get() != pfds[i].fd) continue;
        // Closed: dialled again at once; that dial decides.
        to_close.push_back(std::move(it->second.fd));
        it->second.closed = true;
        it->second.retry_at = Clock::now();
      }
    }
  }

  // Dials one due entry and applies the outcome.
  void Settle(uint64_t key, const Entry& copy) {
    net::Fd fd;
    std::string why;
    const Outcome o = Dial(copy, copy.closed, &fd, &why);
    if (o == Outcome::kDead) return Report(key, why);
    std::lock_guard lock(mu);
    auto it = entries.find(key);
    if (it == entries.end()) return;  // unwatched meanwhile: fd closes here
    Entry& e = it->second;
    if (o == Outcome::kAlive) {
      e.fd = std::move(fd);
      e.closed = false;
      e.backoff = kFirstRetry;
      return;
    }
    HIXL_LOG_DEBUG("peer watch: {} not reached yet ({}); again in {} ms", e.who, why, e.backoff.count());
    e.retry_at = Clock::now() + e.backoff;
    e.backoff = std::min(e.backoff * 2, kMaxRetry);
  }
};

namespace {
std::mutex g_mu;
std::weak_ptr<PeerWatch> g_watch;  // guarded by g_mu
pid_t g_pid = 0;                   // the process that made g_watch; guarded by g_mu
}  // namespace

std::shared_ptr<PeerWatch> PeerWatch::Acquire() {
  std::lock_guard lock(g_mu);
  if (g_pid == ::getpid()) {
    if (std::shared_ptr<PeerWatch> w = g_watch.lock()) return w;
  } else if (g_pid != 0) {
    // A child of fork(): the parent's watcher has no thread here; its state
    // is left alone (freeing it would run the parent's destructors here).
    new std::weak_ptr<PeerWatch>(std::move(g_watch));
    g_watch.reset();
  }
  auto impl = std::make_unique<Impl>();
  impl->wake = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->wake.valid()) {
    HIXL_LOG_WARN("peer watch: cannot make an eventfd: {}; dead peers are found by timeouts only",
                  std::strerror(errno));
    return nullptr;
  }
  Impl* raw = impl.get();
  try {
    impl->thread = std::thread([raw] { raw->Run(); });
  } catch (const std::system_error& e) {
    HIXL_LOG_WARN("peer watch: cannot start its thread: {}; dead peers are found by timeouts only", e.what());
    return nullptr;
  }
  // Named before anyone can look (tests count the process's threads).
  ::pthread_setname_np(impl->thread.native_handle(), "hixl-watch");
  std::shared_ptr<PeerWatch> w(new PeerWatch(std::move(impl)));
  g_watch = w;
  g_pid = ::getpid();
  return w;
}

PeerWatch::PeerWatch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->Wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint64_t PeerWatch::Watch(const std::string& host, uint16_t port, const auth::MaybeSecret& secret,
                          const std::string& who, OnDead on_dead) {
  uint64_t key = 0;
  {
    std::lock_guard lock(impl_->mu);
    key = impl_->next_key++;
    Impl::Entry& e = impl_->entries[key];
    e.host = host;
    e.port = port;
    e.secret = secret;
    e.who = who;
    e.on_dead = std::move(on_dead);
    e.retry_at = Clock::now();
  }
  impl_->Wake();
  return key;
}

void PeerWatch::Unwatch(uint64_t key) {
  if (key == 0) return;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->entries.find(key);
    if (it != impl_->entries.end()) {
      if (it->second.fd.valid()) impl_->to_close.push_back(std::move(it->second.fd));
      impl_->entries.erase(it);
    }
  }
  impl_->Wake();
  // A callback of this key that started (and took its entry) before ends first.
  std::lock_guard cb(impl_->callback_mu);
}

size_t PeerWatch::watched() const {
  std::lock_guard lock(impl_->mu);
  return impl_->entries.size();
}

}  // namespace hixl::core
