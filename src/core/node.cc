#include "core/node.h"

#include <algorithm>

#include "base/auth.h"
#include "base/log.h"

namespace hixl::core {

namespace {

// Every live node, by its options.  Held while a node is found or made, and
// while front doors are counted in and out.
std::mutex g_nodes_mu;
std::vector<std::weak_ptr<Node>>& Nodes() {
  static auto* nodes = new std::vector<std::weak_ptr<Node>>();  // outlives static destructors
  return *nodes;
}

}  // namespace

bool Node::Options::operator==(const Options& o) const {
  // Settings are compared as given: the same value once as an option and
  // once from the environment makes two nodes (harmless, if wasteful).
  return timeout_ms == o.timeout_ms && transports.only == o.transports.only &&
         transports.settings == o.transports.settings && transports.local_only == o.transports.local_only &&
         transports.secret == o.transports.secret;
}

Node::Options Node::Options::From(const bootstrap::SharedOptions& shared) {
  Options o;
  o.timeout_ms = shared.timeout_ms;
  o.transports.only = shared.transport;
  o.transports.settings = shared.transport_settings;
  o.transports.secret = shared.secret;
  return o;
}

Result<std::shared_ptr<Node>> Node::Attach(const Options& options, int self_id, int identity_ids) {
  std::lock_guard lock(g_nodes_mu);
  auto& nodes = Nodes();
  std::erase_if(nodes, [](const std::weak_ptr<Node>& w) { return w.expired(); });
  for (const std::weak_ptr<Node>& w : nodes) {
    std::shared_ptr<Node> n = w.lock();
    if (!n || !(n->opts_ == options)) continue;
    if (self_id >= 0 && (n->self_id_ != self_id || !n->ReserveIdentity(identity_ids))) continue;
    ++n->doors_;
    return n;
  }
  std::shared_ptr<Node> n(new Node(options, self_id >= 0 ? self_id : 0));
  HIXL_RETURN_IF_ERROR(n->Start());
  if (!n->ReserveIdentity(identity_ids)) {
    return Err(Errc::kInternal, "a new node cannot give out peer ids [0, {})", identity_ids);
  }
  ++n->doors_;
  nodes.push_back(n);
  return n;
}

int Node::LiveCount() {
  std::lock_guard lock(g_nodes_mu);
  int live = 0;
  for (const std::weak_ptr<Node>& w : Nodes()) live += w.expired() ? 0 : 1;
  return live;
}

Status Node::Start() {
  if (!opts_.transports.secret) auth::WarnUnauthenticatedOnce();
  HIXL_ASSIGN_OR_RETURN(transports_, transport::CreateTransports(this, opts_.transports));
  ids_.insert(self_id_);
  // This process itself, once for every front door: a transport must never
  // see one peer id connected twice.
  for (auto& t : transports_) {
    Status s = t->Connect(self_id_, t->LocalAddress(), {});
    if (!s.ok()) return Err(s.code(), "{}: connecting this process to itself: {}", t->name(), s.message());
  }
  return Status::Ok();
}

Node::~Node() {
  // Requests first (they read the registrations), then the transports.
  {
    std::lock_guard lock(control_mu_);
    control_.reset();
  }
  for (auto& t : transports_) t->Shutdown();
}

bool Node::ReserveIdentity(int identity_ids) {
  std::lock_guard lock(ids_mu_);
  for (int id = 0; id < identity_ids; ++id) {
    if (id != self_id_ && ids_.count(id)) return false;
  }
  for (int id = 0; id < identity_ids; ++id) ids_.insert(id);
  return true;
}

namespace {

// The lowest number from `first` up that `taken` lacks, now taken.
int TakeLowestFree(std::set<int>& taken, int first) {
  int n = first;
  while (taken.count(n)) ++n;
  taken.insert(n);
  return n;
}

}  // namespace

int Node::AllocateId() {
  std::lock_guard lock(ids_mu_);
  return TakeLowestFree(ids_, 0);
}

void Node::Detach(const std::vector<int>& ids) {
  {
    std::lock_guard lock(g_nodes_mu);
    if (--doors_ == 0) return;  // the node goes, and everything its transports hold with it
  }
  // Other front doors go on: the transports let go of this one's peers.
  for (int id : ids) FreeId(id);
}

void Node::FreeId(int id) {
  if (id == self_id_) return;
  for (auto& t : transports_) t->Disconnect(id);
  std::lock_guard lock(ids_mu_);
  ids_.erase(id);
}

int Node::AllocateLane() {
  std::lock_guard lock(lanes_mu_);
  return TakeLowestFree(lanes_, 1);
}

void Node::FreeLane(int lane) {
  if (lane <= 0) return;
  for (auto& t : transports_) t->CloseLane(lane);
  std::lock_guard lock(lanes_mu_);
  lanes_.erase(lane);
}

bool Node::AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const {
  std::lock_guard lock(reg_mu_);
  auto it = regs_.upper_bound(addr);
  while (it != regs_.begin()) {
    --it;
    if (addr - it->first > max_len_) break;  // no region starting this low is long enough
    if (RangeInside(addr, len, it->first, it->second.desc.len)) {
      fn();
      return true;
    }
  }
  return false;
}

Status Node::Acquire(const LocalRegistry::Region& region, std::map<std::string, std::string>* keys) {
  const transport::LocalRegion& d = region.desc;
  std::lock_guard lock(reg_mu_);
  auto [first, last] = regs_.equal_range(d.base);
  for (auto it = first; it != last; ++it) {
    if (it->second.desc.len == d.len && it->second.heap == region.heap) {
      ++it->second.refs;
      *keys = it->second.keys;
      return Status::Ok();
    }
  }
  Registration r;
  r.desc = d;
  r.heap = region.heap;
  r.refs = 1;
  for (auto& t : transports_) {
    auto key = t->RegisterRegion(d);
    if (!key.ok()) {
      for (auto& u : transports_) {
        if (u.get() == t.get()) break;
        u->DeregisterRegion(d);
      }
      return key.status();
    }
    r.keys.emplace(std::string(t->name()), std::move(key.value()));
  }
  *keys = r.keys;
  max_len_ = std::max(max_len_, d.len);
  regs_.emplace(d.base, std::move(r));
  return Status::Ok();
}

void Node::Release(const transport::LocalRegion& desc, bool heap) {
  std::optional<Registration> gone;
  {
    std::lock_guard lock(reg_mu_);
    auto [first, last] = regs_.equal_range(desc.base);
    for (auto it = first; it != last; ++it) {
      if (it->second.desc.len != desc.len || it->second.heap != heap) continue;
      if (--it->second.refs == 0) {
        gone = std::move(it->second);
        regs_.erase(it);
      }
      break;
    }
  }
  if (!gone) return;
  for (auto& t : transports_) t->DeregisterRegion(gone->desc);
}

Result<bootstrap::ControlServer*> Node::Control() {
  std::lock_guard lock(control_mu_);
  if (!control_) {
    HIXL_ASSIGN_OR_RETURN(control_, bootstrap::ControlServer::Create(opts_.transports.secret));
  }
  return control_.get();
}

}  // namespace hixl::core
