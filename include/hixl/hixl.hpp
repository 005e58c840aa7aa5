// hixl: one-sided put/get between processes.  The C++ API.
//
// The same model as hixl.h: a world of ranks, symmetric and registered
// memory, put/get/fence/barrier/allgather.  (This API and the C one are two
// thin front doors over the same world; neither calls the other.)
// Failures are returned as Status / Result<T>, never thrown (only
// std::bad_alloc may escape when the process is out of memory; the C API
// turns it into HIXL_ERR_NO_MEMORY).  The codes are hixl::Errc, the rows of
// the one table in hixl/hixl_errors.h.
#ifndef HIXL_HIXL_HPP_
#define HIXL_HIXL_HPP_

#include <hixl/hixl.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

// Everything declared below is libhixl's exported API: the library is built
// with hidden visibility, and only the public headers' declarations are
// exported (nm -D libhixl.so lists no internal symbol).
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

namespace hixl {

// The error codes: one enumerator per row of HIXL_ERROR_CODES
// (hixl/hixl_errors.h, the one table), with the values of hixl.h.
enum class Errc : int {
#define HIXL_ERRC_ENUMERATOR_(c_name, cxx_name, value, desc, engine, py) cxx_name = value,
  HIXL_ERROR_CODES(HIXL_ERRC_ENUMERATOR_)
#undef HIXL_ERRC_ENUMERATOR_
};

enum class SignalOp : int { kSet = HIXL_SIGNAL_SET, kAdd = HIXL_SIGNAL_ADD };
enum class Cmp : int {
  kEq = HIXL_CMP_EQ,
  kNe = HIXL_CMP_NE,
  kGt = HIXL_CMP_GT,
  kGe = HIXL_CMP_GE,
  kLt = HIXL_CMP_LT,
  kLe = HIXL_CMP_LE,
};

struct Notification {
  int src_rank = -1;
  std::string data;
};

// A small value type: success, or an error code with a message in words.
// No shared state: copy it and use it from any thread freely.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Errc code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == Errc::kOk; }
  Errc code() const { return code_; }
  int raw_code() const { return static_cast<int>(code_); }
  const std::string& message() const { return message_; }
  // "HIXL_ERR_TIMEOUT: <message>"
  std::string ToString() const;

 private:
  Errc code_ = Errc::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.  Like everything
// here it never throws: value(), operator* and operator-> require ok(); on
// an error they print the Status to stderr and abort the process (a bug in
// the caller, as with a null pointer).  Check ok() or status() first.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(runtime/explicit)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(runtime/explicit)
  Result(Errc code, std::string msg) : v_(Status(code, std::move(msg))) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  // Precondition: ok() (else abort, see above).
  T& value() & { return *Checked(); }
  const T& value() const& { return *Checked(); }
  T&& value() && { return std::move(*Checked()); }
  T& operator*() & { return value(); }
  T* operator->() { return Checked(); }
  // Status::Ok() when ok().
  Status status() const {
    const Status* s = std::get_if<Status>(&v_);
    return s ? *s : Status::Ok();
  }

 private:
  T* Checked() { return const_cast<T*>(static_cast<const Result*>(this)->Checked()); }
  const T* Checked() const {
    const T* v = std::get_if<T>(&v_);
    if (!v) {
      std::fprintf(stderr, "hixl: Result::value() called on an error (check ok() first): %s\n",
                   std::get_if<Status>(&v_)->ToString().c_str());
      std::abort();
    }
    return v;
  }

  std::variant<T, Status> v_;
};

// The process's membership in the world.  Init() joins it (collective);
// the destructor (or Finalize()) leaves it (collective).  One per process.
// All methods but Finalize are safe from any thread.  Each method blocks
// exactly as its hixl.h counterpart does (World::Put as hixl_put, ...): Init,
// Finalize, Barrier, Allgather and Broadcast wait for every rank; Fence, WaitUntil,
// WaitNotification, Notify, Free, DeregisterMemory and the atomics wait as
// documented there; the rest do not wait for other processes.  Results are
// the caller's copies; memory passed in stays the caller's.
class World {
 public:
  static Result<World> Init();
  World(World&& other) noexcept : live_(std::exchange(other.live_, false)) {}
  World& operator=(World&& other) noexcept;
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World();

  Status Finalize();
  int rank() const;
  int size() const;
  // The transport that reaches `rank`: "shm" or "ucx" (see
  // hixl_peer_transport).  kInvalidRank outside [0, size()).  Does not block.
  Result<std::string> PeerTransport(int rank) const;

  // Symmetric memory, see hixl_alloc: the block is hixl's until Free (or
  // Finalize).
  Result<void*> Alloc(size_t size);
  Status Free(void* ptr);
  Status RegisterMemory(void* addr, size_t size);
  Status DeregisterMemory(void* addr);

  Status Put(int dst_rank, const void* src, uint64_t dst_addr, size_t size);
  Status Get(int src_rank, uint64_t src_addr, void* dst, size_t size);
  Status Fence();
  Status Barrier();
  // recv.size() becomes size() * send.size().
  Status Allgather(const void* send, void* recv, size_t bytes_per_rank);
  // buf's size bytes at `root` copied to buf at every rank (hixl_broadcast).
  Status Broadcast(int root, void* buf, size_t size);
  // Signals, atomics and notifications: see hixl.h.
  Status PutSignal(int dst_rank, const void* src, uint64_t dst_addr, size_t size, uint64_t sig_addr, uint64_t value,
                   SignalOp op);
  // timeout_ms < 0 means HIXL_TIMEOUT_MS.
  Status WaitUntil(const uint64_t* sig, Cmp cmp, uint64_t value, int64_t timeout_ms = -1);
  // Does not block; false on bad input as well.
  static bool Test(const uint64_t* sig, Cmp cmp, uint64_t value);
  Result<uint64_t> AtomicFetch(int rank, uint64_t addr);
  Status AtomicSet(int rank, uint64_t addr, uint64_t value);
  Status AtomicAdd(int rank, uint64_t addr, uint64_t value);
  Result<uint64_t> AtomicFetchAdd(int rank, uint64_t addr, uint64_t value);
  Result<uint64_t> AtomicSwap(int rank, uint64_t addr, uint64_t value);
  // Returns the value seen; the swap happened if it equals `expected`.
  Result<uint64_t> AtomicCompareSwap(int rank, uint64_t addr, uint64_t expected, uint64_t desired);
  Status Notify(int dst_rank, const void* bytes, size_t len);
  // Every queued notification, without waiting.
  Result<std::vector<Notification>> GetNotifications();
  Result<Notification> WaitNotification(int64_t timeout_ms = -1);

  template <typename T>
  Result<std::vector<T>> Allgather(const T& value) {
    std::vector<T> out(static_cast<size_t>(size()));
    Status s = Allgather(&value, out.data(), sizeof(T));
    if (!s.ok()) return s;
    return out;
  }

 private:
  World() : live_(true) {}
  bool live_ = false;
};

// Registers memory for the lifetime of the object.  The memory stays the
// caller's and must stay mapped while the Registration lives; the destructor
// deregisters it (blocking like hixl_deregister_memory), and does nothing
// once the world is finalized.  One object must not be used from two threads
// at once (distinct objects may).
class Registration {
 public:
  static Result<Registration> Make(void* addr, size_t size);
  Registration(Registration&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)) {}
  Registration& operator=(Registration&& o) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ~Registration();
  void* addr() const { return addr_; }

 private:
  explicit Registration(void* addr) : addr_(addr) {}
  void* addr_ = nullptr;
};

}  // namespace hixl

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#endif  // HIXL_HIXL_HPP_
