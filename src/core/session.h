// The peer-session layer that every front door (the rank world, the engine)
// stands on:
//  * Node (core/node.h): what the process has once, for every front door:
//    the transports, their registrations of local memory, the peer-id space
//    and the control server thread.
//  * Session: one front door's side of it: the transport chosen per peer
//    (from the peer's published addresses, by capability and CanReach), the
//    peer ids it took from the node, its own region table (a peer of this
//    door sees only regions registered through this door) and the peers that
//    hold a copy of it (told of every deregistration, and awaited), and its
//    control listener on the node's server, which serves the requests of
//    control_protocol.h that every front door shares.  Requests that arrive
//    at this door's listener reach this door's Delegate, with `from` as the
//    door's peers send it.
//  * PeerSession: one peer: the transport that reaches it, the control client
//    to it, and the cached copy of its region table, refreshed on a miss.
//
// A front door keeps its own naming of peers (ranks, engine connections)
// and answers the Session's few questions about them (Session::Delegate).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "bootstrap/control.h"
#include "core/control_protocol.h"
#include "core/node.h"
#include "core/registry.h"
#include "core/table_board.h"
#include "transport/transport.h"

namespace hixl::core {

// One peer.  Its transport and control client are fixed at construction;
// the table is safe to use from any thread.
class PeerSession {
 public:
  // `who` names the peer in messages ("rank 3", "engine 10.0.0.1:5000").
  // `self` is set (and `control` may be null) when the peer is this process
  // itself: its table is then read from `self` rather than fetched.
  PeerSession(int id, std::string who, transport::Transport* transport,
              std::shared_ptr<bootstrap::ControlClient> control, const LocalRegistry* self = nullptr)
      : id_(id), who_(std::move(who)), transport_(transport), control_(std::move(control)), self_(self) {}
  PeerSession(const PeerSession&) = delete;
  PeerSession& operator=(const PeerSession&) = delete;

  int id() const { return id_; }  // the transports' peer id
  const std::string& who() const { return who_; }
  transport::Transport& transport() const { return *transport_; }
  const std::shared_ptr<bootstrap::ControlClient>& control() const { return control_; }
  PeerTable& table() { return table_; }

  // A control request to the peer.
  Result<std::string> Call(ControlMsg type, std::string_view payload, int64_t timeout_ms) const;
  // Fetches the peer's region table again and installs it (one refresh at a
  // time per peer; blocks on the peer's answer, bounded by timeout_ms).
  Status Refresh(int64_t timeout_ms);
  // The cached entry holding [addr, addr+len) wholly; on a miss the table is
  // refreshed once (the peer may have registered since).  nullptr when the
  // peer has no such region.  *pin holds the entry (see PeerTable::Pin):
  // keep it until the transport call that uses the entry has returned.  No
  // pin is held while refreshing (that waits on the peer's control thread).
  Result<const PeerTable::Entry*> Find(uint64_t addr, uint64_t len, int64_t timeout_ms, PeerTable::Pin* pin) {
    if (const PeerTable::Entry* e = FindKnown(addr, len, pin)) return e;
    return FindAfterRefresh(addr, len, timeout_ms, pin);
  }
  // Find's lock-free part, inline (every put and get of a front door comes
  // here): the entry held by *pin, or nullptr when our copy of the table
  // has none (then Find, which refreshes it).
  const PeerTable::Entry* FindKnown(uint64_t addr, uint64_t len, PeerTable::Pin* pin) {
    table_.Hold(pin);
    return table_.Find(addr, len);
  }

  // Reads the peer's table from its board (core/table_board.h) from now
  // on, subscribing as `self_id` (this process's id at the peer) at the
  // first refresh; a read the board cannot answer goes over the control
  // connection.  Call before the peer is used.
  void AttachBoard(std::unique_ptr<BoardReader> board, int self_id) {
    board_ = std::move(board);
    board_self_id_ = self_id;
  }
  bool has_board() const { return board_ != nullptr; }
  // A removal of ours that the peer must acknowledge: rings the doorbell on
  // its board as `self_id` (has_board() first: without one it is asked over
  // the control connection).
  void RingBoard(int self_id) { board_->Ring(self_id); }
  // False once the peer's process has exited (as its board's pidfd says).
  bool BoardAlive() const { return !board_ || board_->Alive(); }
  // The peer rang our doorbell: drops from our copy of its table what its
  // published table no longer holds (the same range with the same key; all
  // of it when the table cannot be read), fences our transfers into it
  // (Quiesce), then acknowledges its latest removal on its board as
  // `self_id`.  Not acknowledged when the fence fails (the peer then reports
  // us as silent).  Called on the session's doorbell thread.
  Status AcknowledgeRemovals(int self_id, int64_t timeout_ms);
  // Prepares the first touch without a message and without subscribing:
  // reads the table from the board and unpacks each region's key, so that
  // what the transport sets up per peer (a heap segment's mapping) is there
  // when the peer is first used; the keys are dropped (the peer is not told,
  // and a later refresh reads the board again).  The peer's bytes in `hot`
  // (where the first accesses will go, in or after its regions) get their
  // page tables too, where a key maps them (RemoteKey::Prefault).  Failures
  // are only logged: the first touch then does the work.  No-op without a
  // board.
  struct Span {
    uint64_t addr = 0;
    uint64_t len = 0;
  };
  void Warm(std::span<const Span> hot = {});

  // Makes an invalidation (or Close) of the table a fence, on the thread
  // that serves it (a control worker, or the thread that closes): waits until the operations that were using removed
  // entries have returned, then completes what they left in flight on the
  // transport (Flush(peer)), all bounded by timeout_ms.  kTimeout when
  // either did not finish in time: the peer may then still be reached.
  // Errors of the flushed transfers themselves are kept for the next
  // TakeDeferred, which their issuer's fence calls.
  Status Quiesce(int64_t timeout_ms);
  // An error a Quiesce collected from the transport (OK when none); cleared.
  Status TakeDeferred();

 private:
  // Find's miss: refreshes the table (no pin held meanwhile), then looks again.
  Result<const PeerTable::Entry*> FindAfterRefresh(uint64_t addr, uint64_t len, int64_t timeout_ms,
                                                   PeerTable::Pin* pin);
  // Find's miss where the peer's board lies on this host: the one region
  // holding [addr, addr+len) is read where the board lies and added to our
  // copy, the rest of the table neither copied nor built (a first touch
  // costs one region's key: docs/scale.md, "First touch").  True when done
  // (added, or the board has no such region: the lookup then misses); false
  // when the whole table must be read instead (Refresh).
  Result<bool> LearnFromBoard(uint64_t addr, uint64_t len);
  // The table: from the board where it answers, else over the control
  // connection.  refresh_mu_ is held.
  Result<RegionTable> FetchTable(int64_t timeout_ms);
  // The table as the board holds it (board_ set), parsed; no subscribing.
  Result<RegionTable> ReadBoard() const;
  const int id_;
  const std::string who_;
  transport::Transport* const transport_;
  const std::shared_ptr<bootstrap::ControlClient> control_;
  const LocalRegistry* const self_;
  PeerTable table_;
  std::mutex refresh_mu_;
  std::unique_ptr<BoardReader> board_;  // used under refresh_mu_
  int board_self_id_ = -1;
  std::atomic<bool> has_deferred_{false};
  std::mutex deferred_mu_;
  Status deferred_;
};

// One control request to each of many peers at once, all bounded by one
// deadline, timeout_ms from now: the total wait is the timeout's however
// many peers there are and however many never answer (a bounded number of
// threads make the calls; a call whose turn comes after the deadline is not
// made, and is kTimeout).  The result is each call's, in order.
struct FanoutCall {
  std::shared_ptr<bootstrap::ControlClient> client;
  uint8_t type = 0;
  std::string payload;
};
std::vector<Result<std::string>> CallEach(const std::vector<FanoutCall>& calls, int64_t timeout_ms);
inline constexpr size_t kMaxFanoutThreads = 32;

// "a, b, c (and 7 more)": names for a message, at most `most` of them.
std::string NameSome(const std::vector<std::string>& names, size_t most = 8);

class Session final {
 public:
  struct Options {
    // This process's peer id for the transports: its rank for the world
    // (whose ranks are then the peer ids [0, identity_ids)); -1 for a front
    // door that takes its peers' ids from the node (engines).
    int self_id = -1;
    int identity_ids = 0;
    Node::Options node;  // the transports and timeout: which node serves this door
    // The options of bootstrap's shared switches (HIXL_* variables, engine
    // options), the one mapping of them.
    static Options From(const bootstrap::SharedOptions& shared, int self_id = -1, int identity_ids = 0);
  };

  // A peer that holds a copy of our region table, and the client through
  // which it hears of deregistrations.
  struct Subscriber {
    std::string who;
    std::shared_ptr<bootstrap::ControlClient> client;
  };

  // What the session asks of its front door while serving a request from
  // `from` (the id the requester's connection is bound to: see
  // bootstrap::ControlHandler).  Called on the event loop thread; with a
  // table board, SubscriberFor and PeerFor also from the thread that removes
  // a region and from the doorbell thread (ServeRings).  Each must refuse an
  // id that names none of the door's peers.
  class Delegate {
   public:
    virtual ~Delegate() = default;
    // kFetchTable: who `from` is; an error refuses the request.
    virtual Result<Subscriber> SubscriberFor(int64_t from) = 0;
    // kInvalidate: the peer whose table `from` invalidates (nullptr: none
    // any more; the request is acknowledged and ignored).
    virtual Result<std::shared_ptr<PeerSession>> PeerFor(int64_t from) = 0;
    // kNotify: queue the payload (kQueueFull when full).
    virtual Status Notified(int64_t from, std::string_view payload) = 0;
    // Every other message type.
    virtual Result<std::string> Other(int64_t from, uint8_t type, std::string_view payload) = 0;
  };

  // Attaches to the process's node for these options (Node::Attach), which
  // starts the transports when it is the first.
  static Result<std::unique_ptr<Session>> Create(const Options& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // This process's transport peer id (the node's self id).
  int self_id() const { return node_->self_id(); }
  int64_t timeout_ms() const { return opts_.node.timeout_ms; }
  const std::shared_ptr<Node>& node() const { return node_; }
  // A new transport peer id for a peer of this front door, released with it.
  int NewPeerId();
  // Disconnects the peer id from every transport (Transport::Disconnect)
  // and gives it back to the node.
  void ReleasePeerId(int id);
  // A lane of the node's transports (Node::AllocateLane), and its release.
  int AllocateLane() { return node_->AllocateLane(); }
  void FreeLane(int lane) { node_->FreeLane(lane); }

  // --- transports
  const std::vector<std::unique_ptr<transport::Transport>>& transports() const { return node_->transports(); }
  // Transport::Poll on each: for waits that spin.  True if any found work.
  bool PollTransports() const {
    bool any = false;
    for (const auto& t : transports()) any = t->Poll() || any;
    return any;
  }
  // What peers need to choose and connect a transport to this process.
  PublishedAddresses Addresses() const;
  // The transport for a peer that published `theirs`: the first, in order of
  // preference, that can move memory of `kind` and accepts the peer's
  // address of its kind (CanReach).  nullptr when none does.
  struct Choice {
    transport::Transport* transport = nullptr;
    std::string address;  // the peer's, for Transport::Connect
    bool self = false;    // the address is this node's own: use self_id(), connected already
  };
  Choice Pick(const PublishedAddresses& theirs, transport::MemKind kind = transport::MemKind::kHost) const;
  // Whether some transport here reaches peers on other hosts.
  bool ReachesOtherHosts() const;
  // "shm, ucx": the transports in use, for messages.
  std::string TransportNames() const;
  // Completes every transfer started so far, on every transport; the first error.
  Status Flush();

  // --- control endpoint
  // Serves control requests on host:port (0: a free port) until Shutdown,
  // on the node's control server.  `delegate` must outlive the endpoint.
  Status Listen(const std::string& host, uint16_t port, Delegate* delegate);
  uint16_t port() const;  // 0 when not listening

  // Publishes this door's region table on a board (core/table_board.h)
  // whose address goes with Addresses(), for peers on this host; `ids`
  // subscriber bits, one per peer id (a world's ranks).  Call before
  // Addresses() is published.  No board (and OK) where HIXL_SHM_PROCFD=0.
  Status EnableBoard(uint32_t ids);
  // Starts answering peers' removals rung on the board (the `hixl-board`
  // thread), once the door's Delegate can name its peers (PeerFor): until
  // then a ring waits.  No-op without a board.
  void ServeBoard();

  // --- local memory (this front door's regions)
  const LocalRegistry& registry() const { return registry_; }
  // The peer that is this process itself, if the front door has one: its
  // cached table forgets removed regions first.
  void set_self_peer(std::shared_ptr<PeerSession> self) { self_peer_ = std::move(self); }
  // Registers the region with every transport (through the node, which
  // counts ranges registered through several doors) and adds it to this
  // door's table.
  Status AddRegion(LocalRegistry::Region region);
  // Drops one reference of the region at base.  When the last goes, every
  // subscriber forgets the region and finishes its transfers into or out of
  // it (PeerSession::Quiesce) before it answers; each answer is awaited,
  // bounded by the timeout; then the node releases the region, and *removed
  // (if given) receives it.  The region is gone from the table whatever the
  // answers; the result says whether every peer answered:
  //  * OK: no peer's transfer touches the region after this returns;
  //  * kPeerFailed: some subscribers are gone (named; dropped, and they can
  //    no longer reach the region), every other one answered;
  //  * kTimeout (or the peer's error): some subscribers did not answer in
  //    time, and may still reach the memory (named).  Those whose address
  //    never answered at all are dropped, so that no later deregistration
  //    waits on them again.  *removed is set still.
  // The subscribers are asked at once (CallEach): the whole wait is bounded
  // by one timeout, however many there are.
  Status RemoveRegion(uint64_t base, bool heap, std::optional<LocalRegistry::Region>* removed = nullptr);
  void Unsubscribe(int64_t from);
  // Releases every region of this door (at teardown).
  void ReleaseAllRegions();

  // Stops this door's control listener, releases its regions and peers from
  // the node.  Idempotent; the destructor calls it.  The node (and with it
  // the transports, when this was the last door) goes with the Session.
  void Shutdown();

 private:
  Session(const Options& options, std::shared_ptr<Node> node) : opts_(options), node_(std::move(node)) {}
  // One request at this door's listener, on the event loop thread.  All are
  // answered at once but kInvalidate, whose fence (PeerSession::Quiesce)
  // runs on a control worker (bootstrap::ControlAnswer::Later).
  bootstrap::ControlAnswer Serve(int64_t from, uint8_t type, std::string_view payload);
  // The registry's table onto the board, if there is one.
  void PublishTable();
  // The doorbell thread (`hixl-board`): answers peers' removals rung on our
  // board (PeerSession::AcknowledgeRemovals) until Shutdown.
  void ServeRings();

  const Options opts_;
  const std::shared_ptr<Node> node_;
  LocalRegistry registry_;
  std::unique_ptr<TableBoard> board_;
  std::thread rings_;  // ServeRings, while board_
  std::atomic<bool> stop_rings_{false};
  std::shared_ptr<PeerSession> self_peer_;
  Delegate* delegate_ = nullptr;
  bootstrap::ControlServer* server_ = nullptr;  // the node's, while listening
  int listener_ = 0;
  uint16_t port_ = 0;
  std::mutex subscribers_mu_;
  std::map<int64_t, Subscriber> subscribers_;  // by the id their connection is bound to
  std::set<int64_t> board_dropped_;            // board subscribers dropped (gone, or never answered)
  std::mutex ids_mu_;
  std::vector<int> ids_;  // peer ids taken from the node
  bool shut_down_ = false;
};

}  // namespace hixl::core
