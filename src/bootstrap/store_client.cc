// TcpStoreClient: a rank's connection to the store server, one request at a
// time.  The wire format is in store_protocol.h.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

#include "base/auth.h"
#include "base/socket.h"
#include "bootstrap/store.h"
#include "bootstrap/store_kv.h"
#include "bootstrap/store_protocol.h"

namespace hixl::bootstrap {

using detail::After;
using detail::CheckTimeout;
using detail::HasKey;
using detail::kIoTimeoutMs;
using detail::kMaxTimeoutMs;
using detail::kSlackMs;
using detail::Op;
using detail::OpName;
using detail::Quote;
using detail::Request;
using net::Clock;
using net::Deadline;
using std::chrono::milliseconds;

namespace {

// A mutex that can be waited for until a deadline, for std::unique_lock.
// (Not std::timed_mutex: libstdc++ implements its try_lock_until with
// pthread_mutex_clocklock, which ThreadSanitizer does not intercept, so every
// unlock would be reported as an unlock of an unlocked mutex.)
class DeadlineMutex {
 public:
  void lock() { (void)try_lock_until(Deadline::max()); }
  bool try_lock_until(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (deadline == Deadline::max()) {
      cv_.wait(lock, [&] { return !held_; });
    } else if (!cv_.wait_until(lock, deadline, [&] { return !held_; })) {
      return false;
    }
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

Request MakeRequest(Op op, const std::string& key) {
  Request q;
  q.op = op;
  q.key = key;
  return q;
}

}  // namespace

struct TcpStoreClient::Impl {
  Impl(std::string h, uint16_t p, int r, net::Fd f) : host(std::move(h)), port(p), rank(r), fd(std::move(f)) {}

  std::string What(Op op, const std::string& key) const {
    return HasKey(op) ? fmt::format("{} of key {}", OpName(op), Quote(key)) : OpName(op);
  }

  // One request and its reply.  wait_ms is the server-side wait of GET and
  // WAIT_AT_LEAST (q.timeout_ms is set from it, less the time spent waiting
  // for the connection), nullopt for the others.  Returns the reply's fields.
  Result<std::string> Call(Request q, std::optional<int64_t> wait_ms) {
    const Op op = q.op;
    const std::string& key = q.key;
    const Clock::time_point start = Clock::now();
    const int64_t bound_ms = (wait_ms ? std::min(*wait_ms, kMaxTimeoutMs) : kIoTimeoutMs) + kSlackMs;
    const Deadline deadline = start + milliseconds(bound_ms);
    std::unique_lock<DeadlineMutex> lock(mu, std::defer_lock);
    if (!lock.try_lock_until(deadline)) {
      return Err(Errc::kTimeout,
                 "{} (rank {}) timed out after {} ms: another thread's request on the same store "
                 "connection did not finish",
                 What(op, key), rank, bound_ms);
    }
    if (closed) {
      return Err(Errc::kNotInitialized, "{}: the store client of rank {} is closed", What(op, key), rank);
    }
    if (!broken.empty()) {
      return Err(Errc::kPeerFailed, "{}: the connection of rank {} to the store at {}:{} is lost ({})", What(op, key),
                 rank, host, port, broken);
    }
    if (wait_ms) {
      int64_t spent = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
      q.timeout_ms = std::max<int64_t>(0, std::min(*wait_ms, kMaxTimeoutMs) - spent);
    }
    return CallLocked(q, deadline);
  }

  Result<std::string> CallLocked(const Request& q, Deadline deadline) {
    const std::string payload = detail::EncodeRequest(q);
    if (q.key.size() > detail::kMaxKey || q.value.size() > detail::kMaxValue ||
        payload.size() > detail::MaxRequestFrame(q.op)) {
      return Err(Errc::kInvalidArg,
                 "{}: a key of {} bytes and a value of {} bytes is too large for the store (keys of at most {} "
                 "bytes, values of at most {})",
                 What(q.op, q.key), q.key.size(), q.value.size(), detail::kMaxKey, detail::kMaxValue);
    }
    Status sent = net::SendFrame(fd.get(), payload, deadline);
    if (!sent.ok()) return Lost(q.op, q.key, sent);
    Result<std::string> frame = net::RecvFrame(fd.get(), deadline, detail::kMaxReplyFrame);
    if (!frame.ok()) return Lost(q.op, q.key, frame.status());
    std::optional<detail::Reply> reply = detail::DecodeReply(*frame);
    if (!reply) return Lost(q.op, q.key, Err(Errc::kBootstrap, "malformed reply"));
    if (!reply->status.ok()) return std::move(reply->status);
    return std::move(reply->fields);
  }

  // The connection failed mid-request: the stream can no longer be trusted,
  // so close it; every later request fails at once.
  Status Lost(Op op, const std::string& key, const Status& why) {
    fd.Reset();
    if (why.code() == Errc::kTimeout) {
      broken = fmt::format("no reply to {} in time", What(op, key));
      return Err(Errc::kTimeout,
                 "rank {} got no reply from the store at {}:{} to {} in time ({}); the connection is "
                 "closed",
                 rank, host, port, What(op, key), why.message());
    }
    broken = fmt::format("{} failed: {}", What(op, key), why.message());
    return Err(Errc::kPeerFailed,
               "rank {} lost its connection to the store at {}:{} during {}: {} (the store server, "
               "hosted by rank 0, has stopped or failed)",
               rank, host, port, What(op, key), why.message());
  }

  const std::string host;
  const uint16_t port;
  const int rank;
  DeadlineMutex mu;  // one request at a time on the connection
  net::Fd fd;
  bool closed = false;
  std::string broken;  // why the connection is unusable; empty while it is fine
};

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, uint16_t port, int rank,
                                                                int64_t timeout_ms, const auth::MaybeSecret& secret) {
  if (rank < 0) return Err(Errc::kInvalidRank, "cannot connect to the store as rank {}", rank);
  if (timeout_ms < 0) {
    return Err(Errc::kInvalidArg, "connecting to the store: timeout_ms must be >= 0, got {}", timeout_ms);
  }
  const Deadline deadline = After(timeout_ms);
  Result<net::Fd> fd = net::Connect(host, port, deadline);
  if (!fd.ok()) {
    return Status(fd.status().code(), fmt::format("rank {} cannot reach the store at {}:{} within {} ms: {}", rank,
                                                  host, port, timeout_ms, fd.status().message()));
  }
  // Connected: give the handshake and the greeting at least the slack,
  // however short the timeout was.
  const Deadline greet_by = std::max(deadline, After(kSlackMs));
  const std::string server = fmt::format("the store at {}:{}", host, port);
  if (Status s = auth::ClientHandshake(fd->get(), secret, auth::Kind::kStore, greet_by, server); !s.ok()) {
    return Status(s.code(), fmt::format("rank {}: {}", rank, s.message()));
  }
  auto impl = std::make_unique<Impl>(host, port, rank, std::move(*fd));
  Request q = MakeRequest(Op::kHello, {});
  q.rank = rank;
  Status hello = impl->CallLocked(q, greet_by).status();
  if (!hello.ok()) return hello;
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(std::move(impl)));
}

TcpStoreClient::TcpStoreClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreClient::~TcpStoreClient() = default;  // closing without BYE: a failure to the server

Status TcpStoreClient::Set(const std::string& key, const std::string& value) {
  Request q = MakeRequest(Op::kSet, key);
  q.value = value;
  return impl_->Call(std::move(q), std::nullopt).status();
}

Result<std::string> TcpStoreClient::Get(const std::string& key, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("Get", key, timeout_ms));
  // (Not HIXL_ASSIGN_OR_RETURN into a std::string: GCC 12 then warns
  // -Wmaybe-uninitialized on the moved string, a known false positive.)
  Result<std::string> fields = impl_->Call(MakeRequest(Op::kGet, key), timeout_ms);
  if (!fields.ok()) return fields.status();
  std::string value;
  if (!detail::DecodeValue(*fields, &value)) {
    return Err(Errc::kBootstrap, "malformed reply from the store to GET of key {}", Quote(key));
  }
  return value;
}

Result<int64_t> TcpStoreClient::Add(const std::string& key, int64_t delta) {
  Request q = MakeRequest(Op::kAdd, key);
  q.delta = delta;
  Result<std::string> fields = impl_->Call(std::move(q), std::nullopt);
  if (!fields.ok()) return fields.status();
  int64_t sum = 0;
  if (!detail::DecodeInt(*fields, &sum)) {
    return Err(Errc::kBootstrap, "malformed reply from the store to ADD of key {}", Quote(key));
  }
  return sum;
}

Status TcpStoreClient::WaitAtLeast(const std::string& key, int64_t target, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("WaitAtLeast", key, timeout_ms));
  Request q = MakeRequest(Op::kWaitAtLeast, key);
  q.target = target;
  return impl_->Call(std::move(q), timeout_ms).status();
}

Result<std::vector<std::string>> TcpStoreClient::Gather(const std::string& prefix, int64_t count, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("Gather", prefix, timeout_ms));
  HIXL_RETURN_IF_ERROR(detail::CheckGatherCount(prefix, count));
  Request q = MakeRequest(Op::kGather, prefix);
  q.target = count;
  Result<std::string> fields = impl_->Call(std::move(q), timeout_ms);
  if (!fields.ok()) return fields.status();
  std::vector<std::string> values;
  if (!detail::DecodeValues(*fields, count, &values)) {
    return Err(Errc::kBootstrap, "malformed reply from the store to GATHER of the {} keys {}0..", count, Quote(prefix));
  }
  return values;
}

Status TcpStoreClient::Delete(const std::string& key) {
  return impl_->Call(MakeRequest(Op::kDelete, key), std::nullopt).status();
}

Status TcpStoreClient::Close() {
  Impl& m = *impl_;
  std::unique_lock<DeadlineMutex> lock(m.mu, std::defer_lock);
  if (!lock.try_lock_until(After(kIoTimeoutMs + kSlackMs))) {
    return Err(Errc::kTimeout,
               "rank {} cannot close its store connection: another thread's request on it did not "
               "finish",
               m.rank);
  }
  if (m.closed) return Status::Ok();
  m.closed = true;
  if (!m.broken.empty()) {
    return Err(Errc::kPeerFailed, "rank {} cannot say goodbye to the store at {}:{}: the connection is lost ({})",
               m.rank, m.host, m.port, m.broken);
  }
  Status st = m.CallLocked(MakeRequest(Op::kBye, {}), After(kIoTimeoutMs + kSlackMs)).status();
  m.fd.Reset();
  return st;
}

}  // namespace hixl::bootstrap
