// The engine's transfers (checked as a whole batch, then moved in chunks)
// and notifications.
#include <algorithm>
#include <cstdint>

#include "core/control_protocol.h"
#include "engine/engine_impl.h"

namespace hixl {

namespace {

// What a transport's timeout means to the caller: the call's own timeout
// passed (the transport's message names its own wait, not that).
std::string TimeoutNote(const Status& s, int64_t timeout_ms) {
  return s.code() == Errc::kTimeout ? fmt::format(" (the call's timeout of {} ms passed)", timeout_ms) : "";
}

}  // namespace

// Checks the whole batch, then moves it; bounded by deadline.  `stop`
// (may be null) ends it early.
Status Engine::Impl::Run(const char* api, Conn& c, TransferOp op, const std::vector<TransferOpDesc>& descs,
                         Clock::time_point deadline, int64_t timeout_ms, const std::atomic<bool>* stop) {
  if (op != READ && op != WRITE) return Err(Errc::kInvalidArg, "{}: unknown TransferOp {}", api, static_cast<int>(op));
  // Every wait in the transport (a full relay ring, the flush) ends by this
  // call's own deadline, whatever another peer does.
  const transport::CallDeadline bound(deadline);
  for (size_t i = 0; i < descs.size(); ++i) {
    const TransferOpDesc& d = descs[i];
    if (d.len == 0) continue;
    if (d.local_addr == 0 || d.remote_addr == 0) {
      return Err(Errc::kInvalidArg, "{}: block {} of {}: the {} address is 0", api, i, descs.size(),
                 d.local_addr == 0 ? "local" : "remote");
    }
    if (d.local_addr + d.len < d.local_addr || d.remote_addr + d.len < d.remote_addr) {
      return Err(Errc::kInvalidArg, "{}: block {} of {}: a range of {} bytes wraps around", api, i, descs.size(),
                 d.len);
    }
  }
  // Every block's entry, under one pin that holds them until the transfer
  // is complete (the final flush), so a deregistration on the peer waits
  // for it.  Returns the first block that misses (descs.size(): none).
  std::vector<const PeerTable::Entry*> keys(descs.size());
  auto find_all = [&]() {
    for (size_t i = 0; i < descs.size(); ++i) {
      if (descs[i].len == 0) continue;
      keys[i] = c.peer->table().Find(descs[i].remote_addr, descs[i].len);
      if (!keys[i]) return i;
    }
    return descs.size();
  };
  PeerTable::Pin pin = c.peer->table().Hold();
  size_t miss = find_all();
  if (miss < descs.size()) {
    // The peer may have registered since we last looked: once per batch,
    // with no pin held (the refresh waits on the peer), then all again.
    pin.Release();
    HIXL_RETURN_IF_ERROR(c.peer->Refresh(cfg.timeout_ms));
    c.peer->table().Hold(&pin);
    miss = find_all();
  }
  if (miss < descs.size()) {
    const TransferOpDesc& d = descs[miss];
    return Err(Errc::kNotRegistered,
               "{}: Remote memory not registered: engine {} has no registered region holding {} bytes at {:#x} "
               "(block {} of {}; the range [{:#x}, {:#x}) must lie inside one region it registered); nothing "
               "was transferred",
               api, c.name, d.len, d.remote_addr, miss, descs.size(), d.remote_addr, d.remote_addr + d.len);
  }
  // Issued in chunks, so that the deadline and `stop` are looked at
  // between them (a transport may move a chunk with few calls).
  constexpr size_t kChunk = 256;
  std::vector<transport::Transport::Piece> pieces;
  pieces.reserve(std::min(descs.size(), kChunk));
  for (size_t first = 0; first < descs.size(); first += kChunk) {
    if ((stop && stop->load(std::memory_order_relaxed)) || Clock::now() >= deadline) {
      (void)c.peer->transport().Flush(c.peer->id());
      return Err(Errc::kTimeout, "{}: to engine {}: the timeout of {} ms passed with {} of {} blocks started", api,
                 c.name, timeout_ms, first, descs.size());
    }
    pieces.clear();
    const size_t end = std::min(descs.size(), first + kChunk);
    for (size_t i = first; i < end; ++i) {
      const TransferOpDesc& d = descs[i];
      if (d.len == 0) continue;
      pieces.push_back({keys[i]->key.get(), d.remote_addr, reinterpret_cast<void*>(d.local_addr), d.len});
    }
    Status s = c.peer->transport().Batch(c.peer->id(), op == WRITE, pieces.data(), pieces.size());
    if (!s.ok()) {
      (void)c.peer->transport().Flush(c.peer->id());
      return Err(s.code(), "{}: {} of blocks {}..{} of {} with engine {}: {}{}", api, op == WRITE ? "WRITE" : "READ",
                 first, end - 1, descs.size(), c.name, s.message(), TimeoutNote(s, timeout_ms));
    }
  }
  Status s = c.peer->transport().Flush(c.peer->id());
  if (s.ok()) s = c.peer->TakeDeferred();  // failures a deregistration's fence completed for us
  if (!s.ok()) {
    return Err(s.code(), "{}: completing the transfer with engine {}: {}{}", api, c.name, s.message(),
               TimeoutNote(s, timeout_ms));
  }
  return Status::Ok();
}

// A failure that means the peer is gone marks the connection and releases
// what the transport holds for the peer (so nothing of it is left posted or
// mapped for later calls to trip over); the peer id stays the connection's
// until Disconnect.
Status Engine::Impl::Note(Conn& c, Status s) {
  if (s.code() == Errc::kPeerFailed && c.Break(s.message()) && c.owns_peer_id) {
    std::lock_guard lock(c.release_mu);
    if (!c.released) {
      const transport::CallDeadline bound(Clock::now() + std::chrono::milliseconds(kTeardownMs));
      c.peer->transport().Disconnect(c.peer->id());
    }
  }
  return s;
}

Status Engine::Impl::TransferSync(const std::string& remote, TransferOp op, const std::vector<TransferOpDesc>& descs,
                                  int32_t timeout_ms) {
  if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::TransferSync: timeout_ms {} must be > 0", timeout_ms);
  HIXL_ASSIGN_OR_RETURN(auto c, Find("Engine::TransferSync", remote));
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  return Note(*c, Run("Engine::TransferSync", *c, op, descs, deadline, timeout_ms, nullptr));
}

Result<uint64_t> Engine::Impl::TransferAsync(const std::string& remote, TransferOp op,
                                             const std::vector<TransferOpDesc>& descs, const TransferArgs& args) {
  if (args.timeout_ms < 0)
    return Err(Errc::kInvalidArg, "Engine::TransferAsync: timeout_ms {} is negative", args.timeout_ms);
  if (op != READ && op != WRITE) {
    return Err(Errc::kInvalidArg, "Engine::TransferAsync: unknown TransferOp {}", static_cast<int>(op));
  }
  HIXL_ASSIGN_OR_RETURN(auto c, Find("Engine::TransferAsync", remote));
  auto r = std::make_shared<Request>();
  r->conn = std::move(c);
  r->op = op;
  r->descs = descs;
  r->timeout_ms = args.timeout_ms > 0 ? args.timeout_ms : cfg.timeout_ms;
  r->deadline = Clock::now() + std::chrono::milliseconds(r->timeout_ms);
  std::lock_guard lock(req_mu);
  if (workers.size() < kWorkers && workers.size() <= queue.size()) {
    workers.emplace_back([this] { Work(); });
  }
  r->id = next_req++;
  requests.emplace(r->id, r);
  queue.push_back(r);
  req_cv.notify_one();
  return r->id;
}

void Engine::Impl::Work() {
  while (true) {
    std::shared_ptr<Request> r;
    {
      std::unique_lock lock(req_mu);
      req_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) return;
      r = std::move(queue.front());
      queue.pop_front();
    }
    Status s = r->abandoned ? Err(Errc::kTimeout, "abandoned")
                            : Note(*r->conn, Run("Engine::TransferAsync", *r->conn, r->op, r->descs, r->deadline,
                                                 r->timeout_ms, &r->abandoned));
    r->descs = {};
    TransferStatus st = TransferStatus::COMPLETED;
    // Under req_mu: GetStatus writes message when it abandons a request
    // past its deadline, maybe while this worker is finishing it.
    std::lock_guard lock(req_mu);
    if (!s.ok()) {
      r->message = s.message();
      r->code = s.code();
      st = s.code() == Errc::kTimeout ? TransferStatus::TIMEOUT : TransferStatus::FAILED;
    }
    r->state.store(static_cast<int>(st), std::memory_order_release);
  }
}

Status Engine::Impl::GetStatus(TransferReq req, TransferStatus* out) {
  const auto id = reinterpret_cast<uint64_t>(req);
  std::lock_guard lock(req_mu);
  auto it = requests.find(id);
  if (it == requests.end()) {
    return Err(Errc::kInvalidArg,
               "Engine::GetTransferStatus: unknown request {} (never made, or its final status "
               "was reported already)",
               req);
  }
  Request& r = *it->second;
  auto st = static_cast<TransferStatus>(r.state.load(std::memory_order_acquire));
  if (st == TransferStatus::WAITING && Clock::now() >= r.deadline) {
    // Still running past its bound (a peer that does not progress): report
    // the timeout now; the worker stops it at the next block.
    r.abandoned = true;
    r.message = fmt::format("the transfer to engine {} did not complete within {} ms", r.conn->name, r.timeout_ms);
    st = TransferStatus::TIMEOUT;
  }
  *out = st;
  Status s;
  if (st == TransferStatus::FAILED || st == TransferStatus::TIMEOUT) {
    // The failure's own code (a FAILED transfer never has kTimeout: that
    // ends it TIMEOUT), not a stand-in.
    s = Status(st == TransferStatus::FAILED ? r.code : Errc::kTimeout, r.message);
  }
  if (st != TransferStatus::WAITING) requests.erase(it);
  return s;
}

// --------------------------------------------------------- notifications

Status Engine::Impl::SendNotify(const std::string& remote, const NotifyDesc& n, int32_t timeout_ms) {
  if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::SendNotify: timeout_ms {} must be > 0", timeout_ms);
  if (n.name.size() + n.notify_msg.size() > engine::kMaxNotifyBytes) {
    return Err(Errc::kInvalidArg, "Engine::SendNotify: name and message are {} bytes; at most {} fit",
               n.name.size() + n.notify_msg.size(), engine::kMaxNotifyBytes);
  }
  HIXL_ASSIGN_OR_RETURN(auto c, Find("Engine::SendNotify", remote));
  auto r = c->peer->Call(core::ControlMsg::kNotify, core::Encode(core::NamedNotify{n.name, n.notify_msg}), timeout_ms);
  if (!r.ok()) return Note(*c, Err(r.status().code(), "Engine::SendNotify: {}", r.status().message()));
  return Status::Ok();
}

Status Engine::Impl::TakeNotifies(std::vector<NotifyDesc>* out, bool wait, int32_t timeout_ms) {
  if (wait && timeout_ms < 0) {
    return Err(Errc::kInvalidArg, "Engine::WaitNotifies: timeout_ms {} is negative", timeout_ms);
  }
  std::vector<NotifyDesc> got;
  std::string died;
  switch (notifies.Take(SIZE_MAX, wait, timeout_ms, &got, &died)) {
    case core::NotifyQueue<NotifyDesc>::Taken::kAlert: return Status(Errc::kPeerFailed, died);
    case core::NotifyQueue<NotifyDesc>::Taken::kTimedOut:
      return Err(Errc::kTimeout, "Engine::WaitNotifies: no notification came within {} ms", timeout_ms);
    case core::NotifyQueue<NotifyDesc>::Taken::kClosed:
      return Err(Errc::kNotInitialized, "Engine::WaitNotifies: the engine was finalized");
    case core::NotifyQueue<NotifyDesc>::Taken::kTaken: break;
  }
  *out = std::move(got);
  return Status::Ok();
}

}  // namespace hixl
