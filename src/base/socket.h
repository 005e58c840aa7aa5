// TCP sockets for the control plane: an owning fd, bounded connect/accept,
// and length-prefixed frames.  Every blocking call takes a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "base/status.h"

namespace hixl::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline DeadlineIn(int64_t ms) { return Clock::now() + std::chrono::milliseconds(ms); }
// Milliseconds left until d (0 if past), clamped to int for poll().
int MsLeft(Deadline d);

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void Reset();

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0 picks a free one).  host "" or "0.0.0.0" is any.
Result<Fd> Listen(const std::string& host, uint16_t port, int backlog = 128);
// The local port a socket is bound to.
Result<uint16_t> LocalPort(int fd);
// Connects to host:port, retrying refused connections until the deadline
// (the peer may not listen yet).  The socket has TCP_NODELAY set.  With
// retry_refused false (a peer known to listen there already), a refused
// connection is kPeerFailed at once: nothing listens there any more.
Result<Fd> Connect(const std::string& host, uint16_t port, Deadline deadline, bool retry_refused = true);

// The local address that routes to host:port (which is the address that
// host can reach us on); "127.0.0.1" when there is no route.  Sends nothing.
std::string LocalAddressTowards(const std::string& host, uint16_t port);
// True when every address `host` resolves to is a loopback one (127.0.0.0/8,
// ::1): only processes of this host can reach a socket bound there.  False
// for "", "0.0.0.0", "::" and names that do not resolve.
bool IsLoopback(const std::string& host);

// "host:port" of the socket's peer ("unknown peer" when it has none), for
// messages about what a peer sent.
std::string PeerAddress(int fd);

// Send/receive exactly n bytes.  On EOF, RecvAll returns kPeerFailed.
Status SendAll(int fd, const void* buf, size_t n, Deadline deadline);
Status RecvAll(int fd, void* buf, size_t n, Deadline deadline);

// Frames: a 4-byte little-endian length, then the payload.
// No frame is ever larger than this, whoever sends it.
constexpr uint32_t kMaxFrameBytes = 1u << 30;
Status SendFrame(int fd, std::string_view payload, Deadline deadline);
// Receives one frame of at most max_bytes (a longer header is refused with
// kTransport before any of its body is read).  The buffer grows with the
// bytes that arrive, not with what the header claims, so a peer that sends
// a large header and then stalls costs nothing.
Result<std::string> RecvFrame(int fd, Deadline deadline, uint32_t max_bytes = kMaxFrameBytes);
// Whether a frame header of n bytes is acceptable under max_bytes; the one
// check every frame reader uses (exposed for the fuzzers).
inline bool FrameLengthOk(uint32_t n, uint32_t max_bytes) { return n <= max_bytes && n <= kMaxFrameBytes; }

// Little helpers to build and parse binary payloads.
class Writer {
 public:
  template <typename T>
  Writer& Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Writer& PutBytes(std::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.append(s);
    return *this;
  }
  std::string& str() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  template <typename T>
  bool Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (s_.size() < sizeof(T)) return false;
    std::memcpy(v, s_.data(), sizeof(T));
    s_.remove_prefix(sizeof(T));
    return true;
  }
  // A u32 length, then that many bytes; false when they are not all there
  // or there are more than max.
  bool GetBytes(std::string* out, uint32_t max = UINT32_MAX) {
    uint32_t n = 0;
    if (!Get(&n) || n > max || s_.size() < n) return false;
    out->assign(s_.data(), n);
    s_.remove_prefix(n);
    return true;
  }
  // The same, as a view into the bytes being read (nothing copied).
  bool GetView(std::string_view* out, uint32_t max = UINT32_MAX) {
    uint32_t n = 0;
    if (!Get(&n) || n > max || s_.size() < n) return false;
    *out = s_.substr(0, n);
    s_.remove_prefix(n);
    return true;
  }
  bool empty() const { return s_.empty(); }
  size_t left() const { return s_.size(); }

 private:
  std::string_view s_;
};

}  // namespace hixl::net
