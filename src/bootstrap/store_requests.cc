// The store server's requests: HELLO, SET, GET, ADD, WAIT, GATHER and BYE, the
// connections parked on a key, and the failure of a rank (store_server_impl.h).
#include "bootstrap/store_server_impl.h"

namespace hixl::bootstrap {

void TcpStoreServer::Impl::Handle(Conn& c, std::string_view payload) {
  Request q;
  const Decoded d = detail::DecodeRequest(payload, &q);
  if (d == Decoded::kEmpty) {
    Reply(c, Err(Errc::kBootstrap, "the store received an empty request"));
    return;
  }
  const Op op = q.op;
  if (d == Decoded::kBadKey) return Malformed(c, op);
  if (op != Op::kHello && c.rank < 0) {
    Reply(c, Err(Errc::kBootstrap, "the store received {} before HELLO on a new connection", OpName(op)));
    return;
  }
  if (d == Decoded::kBadFields) return Malformed(c, op);
  switch (op) {
    case Op::kHello: return Hello(c, q.rank);
    case Op::kSet:
      kv.Set(q.key, std::move(q.value));
      Reply(c, Status::Ok());
      return Notify(q.key);
    case Op::kGet:
    case Op::kWaitAtLeast:
    case Op::kGather: {
      Parked p;
      p.op = op;
      p.target = q.target;
      p.timeout_ms = std::clamp<int64_t>(q.timeout_ms, 0, kMaxTimeoutMs);
      p.deadline = Clock::now() + milliseconds(p.timeout_ms);
      p.key = std::move(q.key);
      if (std::optional<Outcome> o = TryComplete(p)) return Reply(c, o->status, o->fields);
      return Park(c, std::move(p));
    }
    case Op::kAdd: {
      Result<int64_t> sum = kv.Add(q.key, q.delta);
      if (!sum.ok()) return Reply(c, sum.status());
      Reply(c, Status::Ok(), detail::EncodeInt(*sum));
      return Notify(q.key);
    }
    case Op::kDelete: kv.Erase(q.key); return Reply(c, Status::Ok());
    case Op::kBye:
      c.said_bye = true;  // from now on its close is a clean leave
      return Reply(c, Status::Ok());
  }
  Reply(c, Err(Errc::kBootstrap, "the store received an unknown request type {} from rank {}",
               static_cast<int>(static_cast<uint8_t>(op)), c.rank));
}

void TcpStoreServer::Impl::Malformed(Conn& c, Op op) {
  HIXL_LOG_WARN("store: a malformed {} request from {}", OpName(op), Who(c));
  Reply(c, Err(Errc::kBootstrap, "the store received a malformed {} request from {}", OpName(op),
               c.rank >= 0 ? fmt::format("rank {}", c.rank) : std::string("a new connection")));
}

std::string TcpStoreServer::Impl::Who(const Conn& c) const {
  return c.rank >= 0 ? fmt::format("rank {} ({})", c.rank, fs->Peer(c.id))
                     : fmt::format("a new connection from {}", fs->Peer(c.id));
}

void TcpStoreServer::Impl::Hello(Conn& c, int32_t rank) {
  if (c.rank >= 0) {
    return Reply(c,
                 Err(Errc::kBootstrap, "HELLO as rank {} on a store connection that is already rank {}", rank, c.rank));
  }
  if (rank < 0 || rank >= world_size) {
    return Reply(
        c, Err(Errc::kInvalidRank, "rank {} is out of range for the store of a world of {} ranks", rank, world_size));
  }
  for (auto& [id, o] : conns) {
    if (o.get() != &c && !o->dead && !o->said_bye && o->rank == rank) {
      return Reply(c, Err(Errc::kInvalidRank,
                          "rank {} is already connected to the store (do two processes use the "
                          "same rank?)",
                          rank));
    }
  }
  c.rank = rank;
  fs->Bind(c.id);  // a rank's connection may be idle for the whole job
  Reply(c, Status::Ok());
}

std::optional<TcpStoreServer::Impl::Outcome> TcpStoreServer::Impl::TryComplete(Parked& p) const {
  p.watch = p.key;
  if (p.op == Op::kGather) {
    // The keys before p.next exist already (keys are removed only by DELETE,
    // and gathered keys are deleted after everyone has gathered them).
    for (; p.next < p.target; ++p.next) {
      if (!kv.Find(detail::GatherKey(p.key, p.next))) {
        p.watch = detail::GatherKey(p.key, p.next);
        return std::nullopt;
      }
    }
    std::vector<const std::string*> values;
    values.reserve(static_cast<size_t>(p.target));
    for (int64_t i = 0; i < p.target; ++i) {
      const std::string* v = kv.Find(detail::GatherKey(p.key, i));
      if (!v) {  // deleted while parked: wait for it again
        p.next = i;
        p.watch = detail::GatherKey(p.key, i);
        return std::nullopt;
      }
      values.push_back(v);
    }
    std::optional<std::string> fields = detail::EncodeValues(values);
    if (!fields) {
      return Outcome{Err(Errc::kInvalidArg,
                         "GATHER of the {} keys {}0.. : their values are larger than a reply "
                         "may be ({} bytes)",
                         p.target, detail::Quote(p.key), kMaxGatherBytes),
                     {}};
    }
    return Outcome{Status::Ok(), std::move(*fields)};
  }
  if (p.op == Op::kGet) {
    const std::string* v = kv.Find(p.key);
    if (!v) return std::nullopt;
    return Outcome{Status::Ok(), detail::EncodeValue(*v)};
  }
  Result<bool> done = kv.AtLeast(p.key, p.target);
  if (!done.ok()) return Outcome{done.status(), {}};
  if (*done) return Outcome{Status::Ok(), {}};
  return std::nullopt;
}

Status TcpStoreServer::Impl::FailedStatus(const Conn& c, const Parked& p) const {
  const Failure& f = failed.front();
  // Every rank that failed, by number: the store cannot tell which went
  // first where their connections closed together (a rank that stops
  // because another died may be seen going before it).
  std::string more;
  constexpr size_t kNamed = 8;
  for (size_t i = 1; i < failed.size() && i <= kNamed; ++i) {
    more += fmt::format("{}rank {}", i == 1 ? "; " : ", ", failed[i].rank);
  }
  if (failed.size() > kNamed + 1) more += fmt::format(" and {} more", failed.size() - kNamed - 1);
  if (failed.size() > 1) more += " failed too";
  return Err(Errc::kPeerFailed, "rank {} left without finalizing ({}){} while rank {} was waiting for {}", f.rank,
             f.why, more, c.rank, WaitWhat(p.op, p.key, p.target, p.watch));
}

Status TcpStoreServer::Impl::TimeoutStatus(const Conn& c, const Parked& p) const {
  std::string state = p.op == Op::kWaitAtLeast ? fmt::format(" ({})", kv.Describe(p.key)) : "";
  return Err(Errc::kTimeout, "rank {} timed out after {} ms waiting for {}{}", c.rank, p.timeout_ms,
             WaitWhat(p.op, p.key, p.target, p.watch), state);
}

void TcpStoreServer::Impl::Park(Conn& c, Parked p) {
  if (!failed.empty()) return Reply(c, FailedStatus(c, p));
  if (p.timeout_ms <= 0) return Reply(c, TimeoutStatus(c, p));
  waiters[p.watch].insert(c.id);
  deadlines.emplace(p.deadline, c.id);
  c.parked = std::move(p);
  fs->Pause(c.id, true);  // its next request is served after this one's reply
  Rearm();
}

void TcpStoreServer::Impl::Unpark(Conn& c) {
  if (!c.parked) return;
  Unwatch(c.id, c.parked->watch);
  deadlines.erase({c.parked->deadline, c.id});
  c.parked.reset();
  if (!c.dead) fs->Pause(c.id, false);
}

void TcpStoreServer::Impl::Unwatch(uint64_t id, const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  it->second.erase(id);
  if (it->second.empty()) waiters.erase(it);
}

void TcpStoreServer::Impl::Notify(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::vector<uint64_t> ids(it->second.begin(), it->second.end());
  for (uint64_t id : ids) {
    auto ci = conns.find(id);
    if (ci == conns.end()) continue;
    Conn& w = *ci->second;
    if (w.dead || !w.parked || w.parked->watch != key) continue;
    if (std::optional<Outcome> o = TryComplete(*w.parked)) {
      w.parked->watch = key;  // where Unpark finds it
      Unpark(w);
      Reply(w, o->status, o->fields);
    } else if (w.parked->watch != key) {  // a GATHER that now waits for a later key
      Unwatch(id, key);
      waiters[w.parked->watch].insert(id);
    }
  }
}

void TcpStoreServer::Impl::ExpireDeadlines() {
  const Deadline now = Clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    uint64_t id = deadlines.begin()->second;
    auto ci = conns.find(id);
    if (ci == conns.end() || !ci->second->parked) {
      deadlines.erase(deadlines.begin());  // cannot happen; never loop on it
      continue;
    }
    Conn& c = *ci->second;
    Status st = TimeoutStatus(c, *c.parked);
    Unpark(c);
    Reply(c, st);
  }
}

void TcpStoreServer::Impl::MarkFailed(int rank, const std::string& why) {
  failed.push_back({rank, why});
  std::vector<uint64_t> ids;
  for (auto& [id, c] : conns) {
    if (c->parked && !c->dead) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    auto ci = conns.find(id);
    if (ci == conns.end()) continue;
    Conn& w = *ci->second;
    if (w.dead || !w.parked) continue;
    Parked p = *w.parked;
    Unpark(w);
    Reply(w, FailedStatus(w, p));
  }
}
}  // namespace hixl::bootstrap
