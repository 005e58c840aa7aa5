#include "bootstrap/control.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "base/log.h"

namespace hixl::bootstrap {

// Request frame: [u8 type][i32 from_rank][payload].
// Reply frame:   [i32 code][payload, or the error message when code != 0].

struct ControlServer::Impl {
  ControlHandler handler;
  net::Fd listener;
  net::Fd wake;  // eventfd: tells the thread to stop
  uint16_t port = 0;
  std::thread thread;

  void Run() {
    std::vector<net::Fd> conns;
    while (true) {
      std::vector<pollfd> pfds;
      pfds.push_back({wake.get(), POLLIN, 0});
      pfds.push_back({listener.get(), POLLIN, 0});
      for (auto& c : conns) pfds.push_back({c.get(), POLLIN, 0});
      int rc = ::poll(pfds.data(), pfds.size(), -1);
      if (rc < 0) {
        if (errno == EINTR) continue;
        HIXL_LOG_ERROR("control server poll failed: {}", std::strerror(errno));
        return;
      }
      if (pfds[0].revents) return;
      // Serve the connections that were polled, then accept new ones.
      std::vector<size_t> dead;
      for (size_t i = 0; i + 2 < pfds.size(); ++i) {
        if (!pfds[i + 2].revents) continue;
        if (!Serve(conns[i].get())) dead.push_back(i);
      }
      for (auto it = dead.rbegin(); it != dead.rend(); ++it) conns.erase(conns.begin() + static_cast<long>(*it));
      if (pfds[1].revents & POLLIN) {
        int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) conns.emplace_back(fd);
      }
    }
  }

  // Answers one request; false when the connection is finished.
  bool Serve(int fd) {
    // A peer sends a whole frame at once; bound the wait for its tail.
    auto req = net::RecvFrame(fd, net::DeadlineIn(5000));
    if (!req.ok()) return false;
    std::string_view p = req.value();
    net::Writer reply;
    if (p.size() < 5) {
      reply.Put<int32_t>(HIXL_ERR_INVALID_ARG).str().append("malformed control request");
    } else {
      uint8_t type = static_cast<uint8_t>(p[0]);
      int32_t from = 0;
      std::memcpy(&from, p.data() + 1, 4);
      Result<std::string> r = handler(from, type, p.substr(5));
      if (r.ok()) {
        reply.Put<int32_t>(0).str().append(r.value());
      } else {
        reply.Put<int32_t>(r.status().raw_code()).str().append(r.status().message());
      }
    }
    return net::SendFrame(fd, reply.str(), net::DeadlineIn(5000)).ok();
  }
};

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& host, ControlHandler handler,
                                                            uint16_t port) {
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  HIXL_ASSIGN_OR_RETURN(impl->listener, net::Listen(host, port));
  HIXL_ASSIGN_OR_RETURN(impl->port, net::LocalPort(impl->listener.get()));
  impl->wake = net::Fd(::eventfd(0, EFD_CLOEXEC));
  if (!impl->wake.valid()) return Err(Errc::kBootstrap, "eventfd failed: {}", std::strerror(errno));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() {
  uint64_t one = 1;
  ssize_t w = ::write(impl_->wake.get(), &one, sizeof(one));
  (void)w;
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t ControlServer::port() const { return impl_->port; }

Result<std::string> ControlClient::Call(uint8_t type, std::string_view payload, int64_t timeout_ms) {
  std::lock_guard lock(mu_);
  const auto deadline = net::DeadlineIn(timeout_ms);
  if (failed_) return Err(Errc::kPeerFailed, "{} is unreachable (its control connection failed earlier)", name_);
  if (!fd_.valid()) {
    auto fd = net::Connect(host_, port_, deadline);
    if (!fd.ok()) {
      failed_ = true;
      return Err(Errc::kPeerFailed, "cannot reach {} at {}:{}: {}", name_, host_, port_, fd.status().message());
    }
    fd_ = std::move(fd.value());
  }
  net::Writer req;
  req.Put<uint8_t>(type).Put<int32_t>(my_rank_).str().append(payload);
  Status s = net::SendFrame(fd_.get(), req.str(), deadline);
  Result<std::string> reply = s.ok() ? net::RecvFrame(fd_.get(), deadline) : Result<std::string>(s);
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
  std::lock_guard lock(mu_);
  fd_.Reset();
}

}  // namespace hixl::bootstrap
