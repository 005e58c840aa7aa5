#include "bootstrap/control.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/log.h"

namespace hixl::bootstrap {

// Request frame: [u8 type][i64 from][payload].
// Reply frame:   [i32 code][payload, or the error message when code != 0].
// The server is in control_server.cc.

// Holds the client's turn from a successful Take until destroyed.
struct ControlClient::Turn {
  explicit Turn(ControlClient* c) : c_(c) {}
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  ~Turn() {
    if (!held_) return;
    {
      std::lock_guard lock(c_->mu_);
      c_->busy_ = false;
    }
    c_->turn_cv_.notify_one();
  }
  void Take() {
    std::unique_lock lock(c_->mu_);
    c_->turn_cv_.wait(lock, [this] { return !c_->busy_; });
    c_->busy_ = true;
    held_ = true;
  }
  // False when another call still held the turn at the deadline.
  bool Take(net::Deadline deadline) {
    std::unique_lock lock(c_->mu_);
    if (!c_->turn_cv_.wait_until(lock, deadline, [this] { return !c_->busy_; })) return false;
    c_->busy_ = true;
    held_ = true;
    return true;
  }

 private:
  ControlClient* c_;
  bool held_ = false;
};

Status ControlClient::Connect(int64_t timeout_ms) {
  const auto deadline = net::DeadlineIn(timeout_ms);
  Turn turn(this);
  if (!turn.Take(deadline)) {
    return Err(Errc::kTimeout, "cannot reach {} within {} ms (another call to it was still waiting)", name_,
               timeout_ms);
  }
  return ConnectLocked(deadline, nullptr);
}

Status ControlClient::ConnectLocked(net::Deadline deadline, bool* reached) {
  if (failed_) return Err(Errc::kPeerFailed, "{} is unreachable (its control connection failed earlier)", name_);
  if (fd_.valid()) return Status::Ok();
  auto fd = net::Connect(host_, port_, deadline, !listens_already_);
  if (!fd.ok()) {
    failed_ = true;
    return Err(fd.status().code(), "cannot reach {} at {}:{}: {}", name_, host_, port_, fd.status().message());
  }
  if (reached) *reached = true;
  Status auth = auth::ClientHandshake(fd->get(), secret_, auth::Kind::kControl, deadline,
                                      fmt::format("{} at {}:{}", name_, host_, port_));
  if (!auth.ok()) {
    failed_ = true;
    return Err(auth.code() == Errc::kTimeout ? Errc::kTimeout : Errc::kPeerFailed, "{}", auth.message());
  }
  fd_ = std::move(fd.value());
  answered_once_.store(true, std::memory_order_relaxed);
  return Status::Ok();
}

Result<std::string> ControlClient::Call(uint8_t type, std::string_view payload, int64_t timeout_ms) {
  const auto deadline = net::DeadlineIn(timeout_ms);
  Turn turn(this);
  if (!turn.Take(deadline)) {
    return Err(Errc::kTimeout, "{} did not answer within {} ms (another call to it was still waiting)", name_,
               timeout_ms);
  }
  bool reached = false;
  if (Status c = ConnectLocked(deadline, &reached); !c.ok()) {
    // Nobody accepted in time is a failed peer to a caller that was not
    // connecting on purpose; a handshake that timed out stays a timeout.
    const bool handshake_timeout = c.code() == Errc::kTimeout && reached;
    return Status(handshake_timeout ? Errc::kTimeout : Errc::kPeerFailed, c.message());
  }
  net::Writer req;
  req.Put<uint8_t>(type).Put<int64_t>(my_rank_).str().append(payload);
  Status s = net::SendFrame(fd_.get(), req.str(), deadline);
  Result<std::string> reply = s.ok() ? net::RecvFrame(fd_.get(), deadline, kMaxControlReply) : Result<std::string>(s);
  if (!reply.ok()) {
    // The stream may be out of step now; never reuse it.
    fd_.Reset();
    Errc code = reply.status().code() == Errc::kTimeout ? Errc::kTimeout : Errc::kPeerFailed;
    if (code == Errc::kPeerFailed) failed_ = true;
    return Err(code, "{} did not answer: {}", name_, reply.status().message());
  }
  std::string_view r = reply.value();
  if (r.size() < 4) return Err(Errc::kTransport, "malformed control reply from {}", name_);
  int32_t code = 0;
  std::memcpy(&code, r.data(), 4);
  if (code != 0) return Status(static_cast<Errc>(code), std::string(r.substr(4)));
  return std::string(r.substr(4));
}

void ControlClient::Close() {
  Turn turn(this);
  turn.Take();
  fd_.Reset();
}

}  // namespace hixl::bootstrap
