// The process-wide layer below the front doors: one Node holds what a
// process needs only once, whatever number of front doors (the rank world,
// any number of engines) stand on it:
//  * the set of transports (transport::CreateTransports) and the
//    transport::Host they ask questions of;
//  * the transports' registrations of local memory, counted: the same range
//    registered through two front doors is registered with the transports
//    once, and Host::AccessLocalRange covers memory registered through any
//    front door (each door keeps its own region table, core/session.h);
//  * the transports' peer ids: one process-unique id space that every front
//    door allocates from, with one id for this process itself (connected
//    to itself by the node, on every transport, once);
//  * one control server (one thread, bootstrap::ControlServer) on which each
//    front door adds its own listening socket.
//
// A node is created by the first front door that needs one and destroyed
// when the last lets go (Attach hands out shared_ptrs; a weak_ptr per node
// is kept under a mutex).  Nodes are keyed by their options: a front door
// that asks for other transport options (or another timeout) than the live
// node's gets a node of its own, as does a world whose ranks cannot be
// given as peer ids by the live node (see Attach).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "bootstrap/control.h"
#include "bootstrap/env.h"
#include "core/registry.h"
#include "transport/transport.h"

namespace hixl::core {

class Node final : public transport::Host {
 public:
  struct Options {
    int64_t timeout_ms = 60000;  // Host::timeout_ms: the transports' bound on waits
    transport::Options transports;
    bool operator==(const Options& o) const;
    // The options a front door's shared switches (HIXL_* variables, engine
    // options) ask for; the one mapping of bootstrap::SharedOptions.
    static Options From(const bootstrap::SharedOptions& shared);
  };

  // A node for `options`: the live one with the same options, else a new
  // one.  With self_id >= 0 the node's own peer id must be self_id and the
  // ids [0, identity_ids) must be free to be given out as themselves (a
  // world maps rank r to peer id r); they are then reserved.  A live node
  // that cannot do so is passed over (a new node is made).  With self_id < 0
  // (engines) any node of those options serves; a new one has self id 0.
  static Result<std::shared_ptr<Node>> Attach(const Options& options, int self_id = -1, int identity_ids = 0);
  // Called by each front door that attached when it is done with the node
  // (before it drops its shared_ptr): releases `ids`, unless this was the
  // last front door (then the node is about to go with everything in it).
  void Detach(const std::vector<int>& ids);
  ~Node() override;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // --- transport::Host
  int rank() const override { return self_id_; }
  int64_t timeout_ms() const override { return opts_.timeout_ms; }
  bool AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const override;

  int self_id() const { return self_id_; }
  const Options& options() const { return opts_; }
  const std::vector<std::unique_ptr<transport::Transport>>& transports() const { return transports_; }

  // A fresh peer id (the lowest free one), for a front door's new peer.
  int AllocateId();
  // Disconnects `id` from every transport, then frees it for AllocateId.
  void FreeId(int id);

  // A fresh lane (transport.h: transfers completed apart from other
  // lanes'), the lowest free one above 0.
  int AllocateLane();
  // Closes the lane on every transport (completing its transfers, bounded),
  // then frees it for AllocateLane.
  void FreeLane(int lane);

  // Registers `region` with every transport, or counts one more reference
  // where exactly this range (and heap flag) is registered already (through
  // any front door); *keys receives each transport's key blob.
  Status Acquire(const LocalRegistry::Region& region, std::map<std::string, std::string>* keys);
  // Drops a reference taken by Acquire; the last releases the range from
  // the transports.  AccessLocalRange stops covering it before that.
  void Release(const transport::LocalRegion& desc, bool heap);

  // The process's control server, started on first use.
  Result<bootstrap::ControlServer*> Control();

  // For tests and tools: how many nodes are alive in this process.
  static int LiveCount();

 private:
  Node(const Options& options, int self_id) : opts_(options), self_id_(self_id) {}
  Status Start();
  // Reserves the ids [0, identity_ids) as themselves; false when one is taken.
  bool ReserveIdentity(int identity_ids);

  struct Registration {
    transport::LocalRegion desc;
    bool heap = false;
    int refs = 0;
    std::map<std::string, std::string> keys;
  };

  const Options opts_;
  const int self_id_;
  std::vector<std::unique_ptr<transport::Transport>> transports_;

  std::mutex ids_mu_;
  std::set<int> ids_;  // given out (and the self id)
  std::mutex lanes_mu_;
  std::set<int> lanes_;  // lanes given out
  int doors_ = 0;        // front doors attached; guarded by the nodes' registry mutex

  mutable std::mutex reg_mu_;
  std::multimap<uint64_t, Registration> regs_;  // by base; ranges of different doors may overlap
  uint64_t max_len_ = 0;

  std::mutex control_mu_;
  std::unique_ptr<bootstrap::ControlServer> control_;
};

}  // namespace hixl::core
