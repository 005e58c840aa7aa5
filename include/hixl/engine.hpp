// hixl: the engine API.  Engines that start and stop independently, find
// each other by address, register memory and move batches of blocks between
// them (KV caches between prefill and decode, weights to a changing set of
// servers).  The shape is that of class `Hixl` in the CANN stack's one-sided
// library of the same name, so code written for it ports with few changes;
// see docs/engine.md for the differences (all of them additions).
//
// An engine shares hixl's core with the rank-based world (include/hixl/hixl.hpp):
// the memory registry with its checked remote access, the shm transport for
// engines on one host and UCX for the others, the control plane.  A process
// may hold several engines, and a world as well.
//
// Every method is safe from any thread.  Every failure returns a non-zero
// EngineStatus and leaves its explanation in words for the calling thread:
// Engine::LastError().  Blocking: each method's comment says what it waits
// for; every wait is bounded (its timeout_ms, else the "timeout_ms" option).
// Ownership: memory registered or named in a transfer stays the caller's;
// the engine keeps no caller pointer beyond a call except registered ranges
// (until DeregisterMem) and the buffers of an asynchronous transfer (until
// GetTransferStatus reports its final status).
#ifndef HIXL_ENGINE_HPP_
#define HIXL_ENGINE_HPP_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <hixl/hixl_errors.h>
// Everything declared below is libhixl's exported API: the library is built
// with hidden visibility, and only the public headers' declarations are
// exported (nm -D libhixl.so lists no internal symbol).
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

namespace hixl {

// Status codes, with the CANN library's numeric values: one constant per
// row of HIXL_ENGINE_STATUSES (hixl/hixl_errors.h, the one table of error
// codes): SUCCESS (0), PARAM_INVALID, TIMEOUT, NOT_CONNECTED,
// ALREADY_CONNECTED, UNSUPPORTED, RESOURCE_EXHAUSTED, FAILED.  Inside, the engine works
// with hixl::Errc codes; each maps to one of these by that table's
// ENGINE_STATUS column.  (hixl::Status is the world API's status class; the
// engine returns these plain numbers.)
using EngineStatus = uint32_t;
#define HIXL_ENGINE_STATUS_CONSTANT_(name, value, desc, py) inline constexpr EngineStatus name = value;
HIXL_ENGINE_STATUSES(HIXL_ENGINE_STATUS_CONSTANT_)
#undef HIXL_ENGINE_STATUS_CONSTANT_

// "PARAM_INVALID" for a code ("UNKNOWN" for a number that is none of them).
// A static string; does not block.
const char* EngineStatusName(EngineStatus status);

struct MemDesc {
  uintptr_t addr = 0;
  size_t len = 0;
};

// Both spellings work: MemType::HOST and MEM_HOST.
enum MemType : int { MEM_DEVICE = 0, MEM_HOST = 1, DEVICE = MEM_DEVICE, HOST = MEM_HOST };

// Both spellings work: TransferOp::READ and READ.
enum TransferOp : int { READ = 0, WRITE = 1 };

// Identifies a registration (the same range registered twice gives the same handle).
using MemHandle = void*;

struct TransferOpDesc {
  uintptr_t local_addr = 0;
  uintptr_t remote_addr = 0;
  size_t len = 0;
};

struct TransferArgs {
  // Bound on the whole asynchronous transfer; 0 takes the engine's default
  // (the "timeout_ms" option).  Past it, GetTransferStatus reports TIMEOUT.
  int32_t timeout_ms = 0;
};

// Identifies an asynchronous transfer until GetTransferStatus has reported
// its final status (COMPLETED, FAILED or TIMEOUT); after that it is unknown.
using TransferReq = void*;

enum class TransferStatus { WAITING, COMPLETED, TIMEOUT, FAILED };

struct NotifyDesc {
  std::string name;
  std::string notify_msg;
};

class Engine {
 public:
  Engine();
  ~Engine();  // finalizes (blocks like Finalize)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // local_engine: "ip", "ip:port", "[ipv6]" or "[ipv6]:port".  A port > 0
  // makes this engine listen there for peers that Connect to it; without
  // one it can only connect to others.  Options (all optional; unknown
  // names are PARAM_INVALID):
  //   "timeout_ms"          bound on internal waits and on transfers without
  //                         their own timeout (default HIXL_TIMEOUT_MS, else 60000)
  //   "transport"           "auto" (default HIXL_TRANSPORT, else auto), "shm", "ucx"
  //   "net_dev"             UCX device (default HIXL_NET_DEV)
  //   "shm_cma"             "0" forces the shared-memory relay (default HIXL_SHM_CMA, else 1)
  //   "shm_thp"             "0": no huge-page advice for registered memory (default HIXL_SHM_THP, else 1)
  //   "notify_queue_depth"  notifications held before senders get
  //                         RESOURCE_EXHAUSTED (default 1024)
  // Does not wait for other engines.
  EngineStatus Initialize(const std::string& local_engine, const std::map<std::string, std::string>& options = {});
  // Fails every pending asynchronous transfer, tells connected engines that
  // this one is gone (blocks until each has been told, or the timeout),
  // releases everything.  Idempotent.
  void Finalize();

  // Makes [addr, addr+len) reachable by connected engines (also by those that
  // connected before).  Registering exactly the same range again returns the
  // same handle and counts a reference; a partly overlapping range is
  // PARAM_INVALID.  Device memory is UNSUPPORTED for now.  Does not wait for
  // peers.  `handle` is valid until the matching DeregisterMem.
  EngineStatus RegisterMem(const MemDesc& mem, MemType type, MemHandle& handle);
  // Drops one reference; the last one makes the range unreachable before
  // this returns (peers' later transfers to it fail with PARAM_INVALID):
  // it blocks until every connected engine has forgotten the range.
  EngineStatus DeregisterMem(MemHandle handle);

  // remote_engine: the peer's local_engine string with its port.  Connecting
  // to an engine already connected is ALREADY_CONNECTED; connecting to this
  // engine itself works.  Both block until the peer has answered (at most
  // timeout_ms).
  EngineStatus Connect(const std::string& remote_engine, int32_t timeout_ms = 1000);
  EngineStatus Disconnect(const std::string& remote_engine, int32_t timeout_ms = 1000);

  // Moves a batch of blocks: WRITE copies local_addr -> remote_addr, READ
  // remote_addr -> local_addr.  Every remote range must lie inside one
  // region the peer registered (else PARAM_INVALID, checked before any byte
  // moves).  Returns when every block is complete (written data visible in
  // the peer's memory), or TIMEOUT/FAILED.
  EngineStatus TransferSync(const std::string& remote_engine, TransferOp operation,
                            const std::vector<TransferOpDesc>& op_descs, int32_t timeout_ms = 1000);
  // Starts the same in the background and returns without waiting; poll
  // with GetTransferStatus.  `req` is the engine's: it is released when
  // GetTransferStatus reports the final status (or at Finalize).
  EngineStatus TransferAsync(const std::string& remote_engine, TransferOp operation,
                             const std::vector<TransferOpDesc>& op_descs, const TransferArgs& optional_args,
                             TransferReq& req);
  // Sets status.  Returns SUCCESS while WAITING and once COMPLETED; for a
  // transfer that ended FAILED it returns FAILED, for one that ended TIMEOUT
  // it returns TIMEOUT (LastError() and LastErrorCode() say why).  An
  // unknown req is PARAM_INVALID.
  // Does not block.
  EngineStatus GetTransferStatus(const TransferReq& req, TransferStatus& status);

  // A small message (name + msg, at most 64 KiB together) to the peer's
  // queue, delivered after every transfer this engine completed to it before.
  // Blocks until the peer has queued it (at most timeout_ms).
  EngineStatus SendNotify(const std::string& remote_engine, const NotifyDesc& notify, int32_t timeout_ms = 1000);
  // Takes every queued notification (none is not an error) without waiting.
  EngineStatus GetNotifies(std::vector<NotifyDesc>& notifies);
  // hixl's addition: waits up to timeout_ms for at least one, then takes them
  // all (TIMEOUT when none came).  An engine of another process that this
  // one connected to, or that connected to this one, and that died without
  // a goodbye (its Disconnect or Finalize; or ours) ends the wait when no
  // notification is queued: FAILED (LastErrorCode() HIXL_ERR_PEER_FAILED),
  // LastError() naming it; each death once.  GetNotifies never reports one.
  EngineStatus WaitNotifies(std::vector<NotifyDesc>& notifies, int32_t timeout_ms);

  // The calling thread's last failure, in words ("" after a success).  The
  // string is thread-local: valid until this thread's next engine call.
  static const char* LastError();
  // The same failure as its precise HIXL_ERR_* code (hixl.h; HIXL_SUCCESS
  // after a success): e.g. HIXL_ERR_NOT_REGISTERED for a PARAM_INVALID
  // that is a remote range the peer has not registered.
  static int LastErrorCode();

  // The implementation, private to libhixl (never exported).
#if defined(__GNUC__)
  struct __attribute__((visibility("hidden"))) Impl;
#else
  struct Impl;
#endif

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace hixl

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#endif  // HIXL_ENGINE_HPP_
