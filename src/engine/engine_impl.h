// The engine front door (include/hixl/engine.hpp) over the peer-session
// layer (core/session.h): the same registry checks, transports and control
// protocol as the world.
//
// Connections are one-way: the engine that calls Connect (the client) may
// read and write the other's (the server's) registered memory; the server
// takes no part.  Each side names its peers itself, with ids that nobody
// can guess (engine::NewConnectionId: random 64-bit, never -1, never reused
// in the process):
//  * the client gives each connection an id that the server sends as
//    `from` in its calls back;
//  * the server gives each client an id that the client sends as `from` in
//    every control request after its hello (which is anonymous, -1).
// The control server binds a connection to the `from` of its first request
// (bootstrap::ControlHandler), and every handler here refuses an id that
// names none of this engine's clients or connections: an engine cannot act
// in another's name without its id, which only the two ends know.  At most
// kMaxClients engines are clients of one engine at a time (a flood of
// hellos is refused beyond), and calls to them (invalidations, the goodbye
// at Finalize) are made at once under one bound (core::CallEach).
//  * the transports' peer id of a connection comes from the process's node
//    (core/node.h), which every engine and the world share: an engine of
//    this process (itself, or another on the same node) is the node's self
//    id, any other engine a fresh id.
// Each engine listens on its own socket of the node's one control server.
// Control requests (core/control_protocol.h):
//   client -> server: kHello, kFetchTable, kNotify, kBye
//   server -> client (to the client's own control endpoint, its "callback"):
//                     kInvalidate (a region went away), kGone (finalized)
//
// Files: options.cc (addresses and options), connections.cc (life cycle,
// control requests, connections, memory), transfers.cc (transfers and
// notifications), engine.cc (the public methods and their status codes).
#pragma once

#include <hixl/engine.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "bootstrap/control.h"
#include "bootstrap/env.h"
#include "core/notify_queue.h"
#include "core/peer_watch.h"
#include "core/session.h"

namespace hixl {

namespace engine {

using Clock = std::chrono::steady_clock;

inline constexpr size_t kMaxNotifyBytes = 64 * 1024;

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "ip", "ip:port", "[ipv6]", "[ipv6]:port"; `what` names the caller in messages.
Result<HostPort> ParseEngine(const char* what, const std::string& s);

// The engine's options over the environment (HIXL_TIMEOUT_MS, ...): the
// switches every front door shares (bootstrap::SharedOptions).
Result<bootstrap::SharedOptions> ParseOptions(const std::map<std::string, std::string>& options);

// A random id that tells this engine apart from others (and from itself).
uint64_t RandomId();

// An id for a connection or a client: unpredictable (a permutation of a
// counter keyed from libsodium's CSPRNG), never -1 (anonymous), never
// returned twice in the process.  Thread-safe.
int64_t NewConnectionId();

}  // namespace engine

struct Engine::Impl final : private core::Session::Delegate {
  using Clock = engine::Clock;

  // A connection to an engine we connected to.
  struct Conn {
    std::string name;  // as the user wrote it
    int64_t id = -1;   // how it names us in calls back (conns_by_id); peer->id() is the transports' id
    int64_t our_id_there = -1;
    std::shared_ptr<core::PeerSession> peer;  // its transport, control client and region table
    bool owns_peer_id = false;                // peer->id() was taken for it (not the node's self id)
    uint64_t watch = 0;                       // its key in the peer watch (0: not watched)
    // Held while the transport lets go of the peer; `released` once
    // Disconnect gave the id back (which a new connection may then take).
    std::mutex release_mu;
    bool released = false;  // guarded by release_mu
    std::mutex mu;
    std::atomic<bool> broken{false};
    std::string broken_reason;  // guarded by mu

    // True for the call that broke it.
    bool Break(const std::string& why) {
      std::lock_guard lock(mu);
      if (broken.exchange(true)) return false;
      broken_reason = why;
      return true;
    }
    std::string BrokenReason() {
      std::lock_guard lock(mu);
      return broken_reason;
    }
  };

  // An engine that connected to us.
  struct Client {
    std::string name;
    std::shared_ptr<bootstrap::ControlClient> callback;
    uint64_t watch = 0;     // its key in the peer watch (0: not watched)
    std::string death_key;  // see told_dead
  };

  // An asynchronous transfer.
  struct Request {
    uint64_t id = 0;
    std::shared_ptr<Conn> conn;
    TransferOp op = WRITE;
    std::vector<TransferOpDesc> descs;
    Clock::time_point deadline;
    int64_t timeout_ms = 0;
    std::atomic<bool> abandoned{false};  // the caller saw TIMEOUT: stop early
    std::atomic<int> state{static_cast<int>(TransferStatus::WAITING)};
    std::string message;    // why it failed; written before state
    Errc code = Errc::kOk;  // why it failed, as a code; written before state
  };

  // Held shared by every call, exclusively by Initialize and Finalize.
  std::shared_mutex life_mu;
  enum class State { kNew, kLive, kFinalized } state = State::kNew;

  bootstrap::SharedOptions cfg;
  std::string local_name;
  engine::HostPort local;
  std::string callback_host;
  uint64_t uuid = 0;
  std::unique_ptr<core::Session> session;

  std::mutex conns_mu;
  std::map<std::string, std::shared_ptr<Conn>> conns;  // by name; nullptr while connecting
  std::unordered_map<int64_t, std::shared_ptr<Conn>> conns_by_id;
  // The ids of connections Disconnect ended lately (the newest
  // kRecentlyClosed): a server whose invalidation crossed our goodbye is
  // answered "nothing of ours reaches it", not refused as a stranger.
  static constexpr size_t kRecentlyClosed = 256;
  std::deque<int64_t> closed_ids;

  std::mutex clients_mu;
  std::map<int64_t, Client> clients;
  // The most engines connected to this one at a time; a hello beyond is
  // refused (kQueueFull), so that hellos cannot grow the table, or the
  // goodbyes of Finalize, without bound.
  static constexpr size_t kMaxClients = 4096;

  core::NotifyQueue<NotifyDesc> notifies;  // closed by Finalize, which wakes WaitNotifies

  // The process's peer watch (core/peer_watch.h), held from the first peer
  // on: a peer that dies without a goodbye (neither Disconnect nor
  // Finalize), either way of the connection, is an alert on `notifies`
  // that ends a WaitNotifies.  Never called with conns_mu or clients_mu held.
  std::mutex watch_mu;
  std::shared_ptr<core::PeerWatch> watch;  // guarded by watch_mu
  // The deaths told, by engine address (a client that does not listen: its
  // name and callback endpoint), so that an engine connected both ways is
  // told dead once; a new Connect or hello under the address forgets it.
  std::mutex dead_mu;
  std::set<std::string> told_dead;  // guarded by dead_mu

  std::mutex req_mu;
  std::condition_variable req_cv;
  std::deque<std::shared_ptr<Request>> queue;
  std::unordered_map<uint64_t, std::shared_ptr<Request>> requests;
  uint64_t next_req = 1;
  bool stopping = false;
  std::vector<std::thread> workers;
  static constexpr size_t kWorkers = 2;
  // The bound on releasing a dead peer's transport resources.
  static constexpr int64_t kTeardownMs = 2000;

  ~Impl() override { Teardown(); }

  // --- life cycle, control requests, connections, memory (connections.cc)
  Status Start(const std::string& local_engine, const std::map<std::string, std::string>& options);
  void Teardown();  // stops everything; safe to call twice
  Status Register(const MemDesc& mem, MemType type);
  Status Deregister(MemHandle handle);
  Status Connect(const std::string& remote, int32_t timeout_ms);
  Status Disconnect(const std::string& remote, int32_t timeout_ms);
  // The live connection to `remote`, or NOT_CONNECTED explaining why not.
  Result<std::shared_ptr<Conn>> Find(const char* api, const std::string& remote);

  // --- transfers and notifications (transfers.cc)
  Status TransferSync(const std::string& remote, TransferOp op, const std::vector<TransferOpDesc>& descs,
                      int32_t timeout_ms);
  Result<uint64_t> TransferAsync(const std::string& remote, TransferOp op, const std::vector<TransferOpDesc>& descs,
                                 const TransferArgs& args);
  Status GetStatus(TransferReq req, TransferStatus* out);
  Status SendNotify(const std::string& remote, const NotifyDesc& n, int32_t timeout_ms);
  Status TakeNotifies(std::vector<NotifyDesc>* out, bool wait, int32_t timeout_ms);

 private:
  // core::Session::Delegate (connections.cc)
  Result<core::Session::Subscriber> SubscriberFor(int64_t from) override;
  Result<std::shared_ptr<core::PeerSession>> PeerFor(int64_t from) override;
  Status Notified(int64_t from, std::string_view payload) override;
  Result<std::string> Other(int64_t from, uint8_t type, std::string_view payload) override;

  Result<std::string> Hello(std::string_view payload);
  // Watches the control endpoint host:port of peer `who`; `died` runs on
  // the watcher thread if it dies.  0 when it cannot be watched.
  uint64_t WatchPeer(const std::string& host, uint16_t port, const std::string& who, core::PeerWatch::OnDead died);
  void Unwatch(uint64_t key);
  // A watched peer died: the connection `id` (we connected to it) or the
  // client `id` (it connected to us), when it is still one; an alert for
  // WaitNotifies naming it.
  void ConnDied(int64_t id, const std::string& why);
  void ClientDied(int64_t id, const std::string& why);
  // Queues the alert unless the death of `key` was told already.
  void TellDeath(const std::string& key, std::string alert);
  void ForgetDeath(const std::string& key);
  std::shared_ptr<Conn> ConnById(int64_t id);
  // Whether `from` is one of our clients; logs a refusal when not.
  bool KnownClient(int64_t from, const char* what);
  // Says hello to the engine at hp and prepares a transport to it.
  Status Dial(const std::string& remote, const engine::HostPort& hp, int64_t id, int32_t timeout_ms, Conn* c);

  // transfers.cc: checks the whole batch, then moves it; bounded by
  // deadline; `stop` (may be null) ends it early.
  Status Run(const char* api, Conn& c, TransferOp op, const std::vector<TransferOpDesc>& descs,
             Clock::time_point deadline, int64_t timeout_ms, const std::atomic<bool>* stop);
  // A failure that means the peer is gone marks the connection.
  static Status Note(Conn& c, Status s);
  void Work();
};

}  // namespace hixl
