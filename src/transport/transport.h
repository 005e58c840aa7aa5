// The one interface every transport implements.  The core (src/core) talks
// to transports only through this file; it never names a transport.
//
// Life cycle: the core creates every transport built into the library
// (CreateTransports), publishes each one's LocalAddress() through the store,
// and for every peer picks the first transport whose CanReach() accepts the
// peer's address (or the one HIXL_TRANSPORT names).  Regions are registered
// with every transport; a region's key blobs travel to peers in the region
// table, and a peer turns the blob of its chosen transport into a RemoteKey.
//
// Transports are self-contained: each parses its own switches (an engine
// option and a HIXL_* variable each, see Switch) from Options::settings and
// the environment.  Adding a transport touches only its folder, the list in
// transport.cc (CreateTransports, AllSwitches, BuiltInNames) and CMake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/auth.h"
#include "base/status.h"

namespace hixl::transport {

// What memory a region holds.  Device memory comes later; a transport says
// which kinds it can move in its capabilities.
enum class MemKind : uint8_t { kHost = 0, kDevice = 1 };

enum class AtomicOp : uint8_t { kFetch = 0, kSet = 1, kAdd = 2, kCompareSwap = 3 };

// Applies op to *word atomically (sequentially consistent) and returns the
// value before it; shared by transports that touch the memory themselves.
uint64_t ApplyAtomic(uint64_t* word, AtomicOp op, uint64_t operand, uint64_t compare);
// Wakes threads sleeping in hixl_wait_until on word (any process that maps it).
void WakeWaiters(const uint64_t* word);

// What a transport can do, as data: the core picks a transport per peer by
// these (and CanReach), never by name, and tests skip only what a transport
// says it lacks.  Each transport states every field; the defaults are the
// least a transport may do.
struct Capabilities {
  bool host_memory = true;     // moves MemKind::kHost regions
  bool device_memory = false;  // moves MemKind::kDevice regions
  bool remote_hosts = false;   // reaches peers on other machines (false: same host only)
  bool loopback = false;       // Connect/Put/Get to its own process (peer == Host::rank()) work
  bool atomics = false;        // Atomic() is implemented (not kUnsupported)
  bool batch = false;          // Batch() moves many pieces with fewer calls than Put/Get one by one
  // A kSet/kAdd/kCompareSwap Atomic() on a peer's word wakes the peer's
  // threads sleeping on that word's futex (WakeWaiters); without it, a
  // waiter must poll (the barrier sleeps in short slices then).
  bool wakes_waiters = false;
};

// A region of this process, as handed to RegisterRegion.
struct LocalRegion {
  uint64_t base = 0;
  uint64_t len = 0;
  MemKind kind = MemKind::kHost;
  // Set when the region lies in shared-memory backing (the symmetric heap):
  // the memfd of its segment, the segment's id and the region's offset in it.
  // The memfd's size must be sealed against shrinking (F_SEAL_SHRINK):
  // peers map no other (shm::MapPeerFile).
  int backing_fd = -1;
  uint32_t segment_id = 0;
  uint64_t segment_offset = 0;
  uint64_t segment_size = 0;
};

// A peer's region made usable by one transport (an unpacked key, a mapping).
class RemoteKey {
 public:
  virtual ~RemoteKey() = default;
  // Where the peer's byte at addr (inside this key's region) is mapped in
  // this process, so that loads and stores reach it; null where the
  // transport moves the bytes itself.  Valid while the key lives.
  virtual void* Direct(uint64_t addr) const {
    (void)addr;
    return nullptr;
  }
  // A hint: makes this process's page tables for the peer's bytes
  // [addr, addr+len) where the transport maps them (in the mapping that
  // holds this key's region, beyond the region too), so that the first
  // load or store there takes no page fault.  What is not mapped is
  // skipped; nothing fails.
  virtual void Prefault(uint64_t addr, uint64_t len) const {
    (void)addr;
    (void)len;
  }
};

// What a transport may ask of the core.
class Host {
 public:
  virtual ~Host() = default;
  virtual int rank() const = 0;
  virtual int64_t timeout_ms() const = 0;
  // Runs fn if [addr, addr+len) lies inside one region this process has
  // registered, holding off deregistration of that region while fn runs;
  // returns whether it ran.  For transports that serve remote requests on
  // the target side (the copy happens in fn).
  virtual bool AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const = 0;
};

// The deadline of the front-door call the calling thread is making (an
// engine transfer's or Disconnect's own timeout).  Every wait in a
// transport ends at WaitDeadline: the earlier of that and
// Host::timeout_ms() from now, so a call to one peer never waits longer
// than its caller asked, whatever another peer does.
using Clock = std::chrono::steady_clock;
class CallDeadline {
 public:
  // Sets the calling thread's deadline until this goes out of scope.
  explicit CallDeadline(Clock::time_point deadline);
  ~CallDeadline();
  CallDeadline(const CallDeadline&) = delete;
  CallDeadline& operator=(const CallDeadline&) = delete;

 private:
  Clock::time_point previous_;
};
Clock::time_point WaitDeadline(const Host& host);
// What is left of WaitDeadline(host), in ms (at least 1, for calls that take
// a timeout rather than a deadline).
int64_t WaitMs(const Host& host);

// What a front door asks of the transports, in transport-neutral terms.
struct Options {
  std::string only;  // HIXL_TRANSPORT / the engine's "transport": the one transport to use ("" = all)
  // The values a front door was given for transports' switches, by option
  // name (Switch::option), as written.  A switch absent here is read by its
  // transport from its variable (Switch::variable).
  std::map<std::string, std::string> settings;
  // Every peer is on this host (the world's MASTER_ADDR, or the engine's
  // listening address, is a loopback one): with `only` empty, transports
  // that would listen on a network interface are not started (bind only
  // where needed, docs/security.md).  A transport asked for by name still is.
  bool local_only = false;
  // The job secret (HIXL_SECRET, the engine's "secret"): a transport's own
  // listeners admit only connections that prove it (base/auth.h); without
  // one, same-host sockets admit only this user.
  auth::MaybeSecret secret;
};

// One switch of one transport: its name as an engine option, its HIXL_*
// variable and a line of help.
struct Switch {
  const char* option;
  const char* variable;
  const char* help;
};

// The value a switch was given: from options.settings (shown as "option
// NAME"), else from the environment (shown as the variable), else nothing.
struct SwitchValue {
  std::string shown;  // how the user wrote it, for messages
  std::string text;
};
std::optional<SwitchValue> LookUp(const Options& options, const Switch& sw);

// Same-host peers open each other's heap segments (the shm transport) and
// region table boards (core/table_board.h) through /proc, with no message.
inline constexpr Switch kProcFd = {"shm_procfd", "HIXL_SHM_PROCFD",
                                   "same-host peers open each other's heap segments and region tables through "
                                   "/proc, with no message (default 1; 0: they ask over their sockets)"};
// Its value in `options` (true unless set to 0); kInvalidArg for a bad value.
Result<bool> ProcFdAllowed(const Options& options);

// Every switch of every transport built in, each once.
std::vector<Switch> AllSwitches();
// The names of the transports built in, in order of preference.
std::vector<std::string> BuiltInNames();
// Ok when `name` is empty, "auto" or in BuiltInNames(); else kInvalidArg
// naming `shown` (the variable or option as written) and listing the names.
Status CheckName(std::string_view shown, std::string_view name);

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  virtual const Capabilities& caps() const = 0;

  // Published to every peer at start-up.
  virtual std::string LocalAddress() const = 0;
  // Whether a peer that published `address` can be reached.  Must not block.
  virtual bool CanReach(std::string_view address) const = 0;
  // Prepares communication with `peer` (may connect lazily).  reached_at:
  // the IP address at which the front door reached the peer's process (an
  // engine's host), or empty (the world, whose peers stay until finalize).
  // A transport may connect there rather than by `address` alone, so that
  // Disconnect releases what both sides hold (ucx: listener.h).
  virtual Status Connect(int peer, std::string_view address, std::string_view reached_at) = 0;

  // Returns the key blob that peers need to reach the region.
  virtual Result<std::string> RegisterRegion(const LocalRegion& region) = 0;
  virtual void DeregisterRegion(const LocalRegion& region) = 0;
  // Turns a peer's key blob for its region [base, base+len) into a key.
  virtual Result<std::shared_ptr<RemoteKey>> UnpackKey(int peer, uint64_t base, uint64_t len,
                                                       std::string_view key_blob) = 0;

  // Start a transfer; the range has been checked against the peer's region.
  // May complete later; Flush completes it.  Errors found later are
  // returned by Flush, naming the peer.
  virtual Status Put(int peer, const RemoteKey& key, const void* src, uint64_t dst, size_t n) = 0;
  virtual Status Get(int peer, const RemoteKey& key, uint64_t src, void* dst, size_t n) = 0;
  // Completes every transfer started so far, by any thread, to every peer.
  virtual Status Flush() = 0;
  // Completes every transfer to or from `peer` started so far, by any
  // thread; transfers to other peers may stay in flight.  Errors found are
  // returned naming the peer.  A peer that is not connected has nothing in
  // flight: Ok.
  virtual Status Flush(int peer) = 0;

  // One block of a batch: n bytes between local memory and the peer's
  // address `remote`, checked to lie in key's region.
  struct Piece {
    const RemoteKey* key;
    uint64_t remote;
    void* local;
    size_t n;
  };
  // Starts a batch of puts (write) or gets with one peer, as Put/Get would
  // one by one (which is what this default does); a transport may move
  // them with fewer calls.
  virtual Status Batch(int peer, bool write, const Piece* pieces, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      const Piece& b = pieces[i];
      Status s = write ? Put(peer, *b.key, b.local, b.remote, b.n) : Get(peer, *b.key, b.remote, b.local, b.n);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // A 64-bit atomic on the peer's word at addr (8-byte aligned, checked to
  // lie in the key's region).  Ordered after every put this process issued
  // to the peer before it; complete when it returns; *old receives the
  // value before the operation.  Transports without atomics say so.
  virtual Status Atomic(int peer, const RemoteKey& key, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare,
                        uint64_t* old) {
    (void)key, (void)op, (void)addr, (void)operand, (void)compare, (void)old;
    return Err(Errc::kUnsupported, "the {} transport has no remote atomics (rank {})", name(), peer);
  }

  // Writes n bytes from src to the peer's address dst (in data_key's
  // region; n == 0: no data, data_key may be null), then updates the
  // peer's 64-bit word at sig_addr (8-byte aligned, in sig_key's region)
  // with op (kSet or kAdd, with value), and wakes threads waiting on that
  // word there (hixl_wait_until).  Whoever sees the new value sees the
  // data and every put issued to the peer before.  Like Put, it may
  // complete later (src stays untouched until Flush); errors found later
  // are returned by Flush.  This default does a Put and then an Atomic,
  // which completes before it returns.
  virtual Status PutSignal(int peer, const RemoteKey* data_key, const void* src, uint64_t dst, size_t n,
                           const RemoteKey& sig_key, uint64_t sig_addr, AtomicOp op, uint64_t value) {
    if (n > 0) {
      Status s = Put(peer, *data_key, src, dst, n);
      if (!s.ok()) return s;
    }
    uint64_t old = 0;
    return Atomic(peer, sig_key, op, sig_addr, value, 0, &old);
  }

  // Lanes: transfers that a front door completes apart from the rest (an
  // OpenSHMEM context's, whose quiet must not wait for other contexts').
  // Lane 0 is the one Put, Get, PutSignal and Flush(peer) use; the node
  // hands out the others (Node::AllocateLane).  A transport whose transfers
  // complete later keeps each lane's apart (ucx: an endpoint per lane and
  // peer, made on first use); one whose transfers complete in the call
  // carries every lane as lane 0 (these defaults).  Flush() and Flush(peer)
  // complete every lane's transfers; FlushLane(peer, lane) only that lane's
  // to or from the peer.
  virtual Status PutOn(int lane, int peer, const RemoteKey& key, const void* src, uint64_t dst, size_t n) {
    (void)lane;
    return Put(peer, key, src, dst, n);
  }
  virtual Status GetOn(int lane, int peer, const RemoteKey& key, uint64_t src, void* dst, size_t n) {
    (void)lane;
    return Get(peer, key, src, dst, n);
  }
  // PutSignal on a lane: the signal is ordered after its data and every
  // put this process issued to the peer before it on the same lane (not
  // after those on other lanes: ucx carries each lane on a connection of
  // its own).
  virtual Status PutSignalOn(int lane, int peer, const RemoteKey* data_key, const void* src, uint64_t dst, size_t n,
                             const RemoteKey& sig_key, uint64_t sig_addr, AtomicOp op, uint64_t value) {
    (void)lane;
    return PutSignal(peer, data_key, src, dst, n, sig_key, sig_addr, op, value);
  }
  virtual Status FlushLane(int peer, int lane) {
    (void)lane;
    return Flush(peer);
  }
  // Completes the lane's transfers with every peer (bounded by
  // Host::timeout_ms(); errors are dropped) and releases what the lane
  // holds; the node may hand its number out again afterwards.
  virtual void CloseLane(int lane) { (void)lane; }

  // Releases everything the transport holds for `peer` (connections,
  // mappings of its memory, relay channels, endpoints), waiting at most
  // Host::timeout_ms() for transfers still in flight to it; errors they
  // meet are dropped (Flush(peer) first to see them).  Afterwards every
  // Put, Get, Batch, Atomic or UnpackKey for the peer, including with keys
  // unpacked before, fails with kNotConnected until Connect(peer) is called
  // again; keys unpacked before stay unusable even then.  Such a key may be
  // destroyed at any time; until then it may keep alive what it points into
  // (shm: its mapping of the peer's heap segment, so that a call racing with
  // Disconnect never touches unmapped memory).  A peer that is not
  // connected: nothing happens.
  virtual void Disconnect(int peer) = 0;

  // Stops background work; called once before destruction.
  virtual void Shutdown() = 0;

  // Does on the calling thread, once, the work the transport's background
  // thread would otherwise be woken for (messages from peers that have
  // arrived); true if there was some.  Never blocks: where another thread
  // holds that work, false at once.  For waits that spin: a message that
  // arrives during the spin is served without waking a thread.
  virtual bool Poll() { return false; }
};

// Every transport built into this library, in order of preference; one that
// is built in but cannot start here is left out (and logged).  With
// options.only, just that one: kInvalidArg listing BuiltInNames() when it
// is not built in, kUnsupported saying why when it cannot start.  A
// malformed switch value (options.settings or a HIXL_* variable) is
// kInvalidArg naming the option or variable as written.
Result<std::vector<std::unique_ptr<Transport>>> CreateTransports(Host* host, const Options& options);

}  // namespace hixl::transport
