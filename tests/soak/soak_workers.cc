// The chaos soak's workers (soak.cc explains the soak): an engine process
// doing random engine operations on its peers, and a world rank doing
// random world operations, each checking data, canaries, bounds and
// failures, and answering the driver over standard input and output.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hixl/engine.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../engine/free_port.h"
#include "../engine/peer_proc.h"
#include "../mp/mp_util.h"

#include "soak_common.h"

namespace hixl::test {
World* g_world = nullptr;  // unused here; mp_util.h declares it
}  // namespace hixl::test

namespace soak {
namespace {

using hixl::test::Fnv;

// Runs step (which says whether to go on) until until_ms after t0, and
// returns the most descriptors and threads seen, sampled every 50 ms.
template <class Step>
hixl::test::ProcStats PeakWhile(Clock::time_point t0, int64_t until_ms, Step step) {
  hixl::test::ProcStats peak = hixl::test::SelfStats();
  auto next = Clock::now() + std::chrono::milliseconds(50);
  while (MsSince(t0) < until_ms && step()) {
    if (Clock::now() < next) continue;
    next = Clock::now() + std::chrono::milliseconds(50);
    const hixl::test::ProcStats s = hixl::test::SelfStats();
    peak.fds = std::max(peak.fds, s.fds);
    peak.threads = std::max(peak.threads, s.threads);
  }
  return peak;
}

struct Region {
  std::vector<uint8_t> mem;  // canary, the registered bytes, canary
  size_t len = 0;
  hixl::MemHandle h = nullptr;
  uint64_t canary_seed = 0;
  uint64_t fnv = 0;     // in quarantine: the bytes when DeregisterMem returned
  int checks_left = 0;  // in quarantine: checks before it is freed
  uintptr_t addr() const { return reinterpret_cast<uintptr_t>(mem.data() + kCanary); }
  bool CanariesOk() const {
    return hixl::test::FirstMismatch(mem.data(), kCanary, canary_seed) < 0 &&
           hixl::test::FirstMismatch(mem.data() + kCanary + len, kCanary, canary_seed, kCanary) < 0;
  }
};

struct Peer {
  std::string name;
  bool connected = false;
  bool gone = false;                    // it failed: no more operations to it
  std::map<uintptr_t, size_t> regions;  // as it announced them
  long failures = 0;                    // PEER_FAILED / NOT_CONNECTED from it
};

class Worker {
 public:
  Worker(int idx, std::vector<std::string> names, uint64_t seed) : idx_(idx), names_(std::move(names)), rng_(seed) {}

  int Main() {
    std::map<std::string, std::string> opts{{"timeout_ms", std::to_string(kEngineMs)}};
    if (e_.Initialize(names_[idx_], opts) != hixl::SUCCESS) return Say("INITFAIL " + Why()), 1;
    for (int i = 0; i < 2; ++i) Register();
    Say("READY");
    hixl::test::LineReader in{0};
    std::string line;
    if (!in.Next(&line) || line != "go") return 0;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (static_cast<int>(i) == idx_) continue;
      peers_[i].name = names_[i];
      Connect(peers_[i]);
    }
    AnnounceAll();
    // What is made per peer on first use (a relay channel, a callback
    // connection, a transport's sockets) comes and goes with the
    // connect/disconnect cycles, so the reference is the most seen in the
    // first half of the round (sampled from after a warm-up of 500 ms), not
    // one moment's count: a leak per cycle (fifty or more cycles in the
    // second half) still stands out at the end.
    const auto t0 = Clock::now();
    while (MsSince(t0) < 500 && errors_.empty()) Step();
    const hixl::test::ProcStats start = PeakWhile(t0, kRoundMs / 2, [this] {
      Step();
      return errors_.empty();
    });
    while (MsSince(t0) < kRoundMs && errors_.empty()) Step();
    const int64_t ms = MsSince(t0);
    for (auto& r : regions_) Check(r, "end");
    const hixl::test::ProcStats end = hixl::test::SelfStats();
    std::string gone;
    for (auto& [i, p] : peers_) {
      if (p.failures) gone.append(" ").append(std::to_string(i));
    }
    std::ostringstream out;
    out << "DONE ok=" << errors_.empty() << " ms=" << ms << " fds=" << start.fds << "," << end.fds
        << " threads=" << start.threads << "," << end.threads << " cycles=" << cycles_ << " soft=" << soft_
        << " maxcall=" << max_call_ms_;
    for (int k = 0; k < kNumKinds; ++k) out << " " << kKinds[k] << "=" << ops_[k];
    out << " failed_peers=[" << gone << " ] errors=" << (errors_.empty() ? "-" : errors_);
    Say(out.str());
    in.Next(&line);  // "quit" (or the driver went away): serve until then
    e_.Finalize();
    return 0;
  }

 private:
  static std::string Why() { return hixl::Engine::LastError(); }
  static int Say(const std::string& s) {
    std::string l = s + "\n";
    return static_cast<int>(!::write(1, l.data(), l.size()));
  }
  void Error(const std::string& what) {
    if (errors_.empty()) errors_ = what;
    for (char& c : errors_) c = c == ' ' ? '_' : c;  // one token for the driver
  }

  // Runs one call, checks its bound, and sorts its outcome.  Returns the
  // status; a failure meaning the peer is gone marks it.
  template <typename F>
  hixl::EngineStatus Call(const char* what, Peer* p, int bound_ms, F&& f) {
    const auto t0 = Clock::now();
    const hixl::EngineStatus s = f();
    const int64_t ms = MsSince(t0);
    max_call_ms_ = std::max(max_call_ms_, ms);
    if (ms > bound_ms + kSlackMs) Error(std::string(what) + " took " + std::to_string(ms) + " ms");
    if (s == hixl::SUCCESS || !p) return s;
    const int code = hixl::Engine::LastErrorCode();
    if (code == HIXL_ERR_PEER_FAILED || code == HIXL_ERR_NOT_CONNECTED) {
      // Said on standard error, whose tail a failed round prints: which
      // call, and why, when the peer turns out to be alive.
      if (!p->failures) std::fprintf(stderr, "soak: %s to %s: %s\n", what, p->name.c_str(), hixl::Engine::LastError());
      ++p->failures;
      p->gone = true;
      if (p->connected) (void)e_.Disconnect(p->name, kCallMs);
      p->connected = false;
    } else if (code == HIXL_ERR_NOT_REGISTERED || code == HIXL_ERR_QUEUE_FULL || s == hixl::TIMEOUT) {
      // A region deregistered since it was announced; a peer busy in a
      // long call (its queue full); a peer too slow (or stopped by its own
      // death): none is ours to judge here.
      ++soft_;
    } else {
      Error(std::string(what) + " to " + p->name + ": " + hixl::Engine::LastError());
    }
    return s;
  }

  void Connect(Peer& p) {
    if (Call("Connect", &p, kCallMs, [&] { return e_.Connect(p.name, kCallMs); }) == hixl::SUCCESS) p.connected = true;
  }

  void Register() {
    auto r = std::make_unique<Region>();
    r->len = (size_t{64} << 10) * (1 + rng_() % 4);
    r->mem.assign(r->len + 2 * kCanary, 0);
    r->canary_seed = rng_();
    hixl::test::Fill(r->mem.data(), kCanary, r->canary_seed);
    hixl::test::Fill(r->mem.data() + kCanary + r->len, kCanary, r->canary_seed, kCanary);
    if (Call("RegisterMem", nullptr, kCallMs, [&] {
          return e_.RegisterMem({r->addr(), r->len}, hixl::MEM_HOST, r->h);
        }) != hixl::SUCCESS) {
      return Error("RegisterMem: " + std::string(hixl::Engine::LastError()));
    }
    ++ops_[4];
    regions_.push_back(std::move(r));
  }

  void Announce(const std::string& msg) {
    for (auto& entry : peers_) {
      auto& p = entry.second;  // not a structured binding: clang 14 cannot capture one
      if (!p.connected) continue;
      Call("SendNotify", &p, kCallMs, [&] { return e_.SendNotify(p.name, {std::to_string(idx_), msg}, kCallMs); });
      ++ops_[3];
    }
  }
  void AnnounceAll() {
    for (auto& r : regions_) Announce("reg " + std::to_string(r->addr()) + " " + std::to_string(r->len));
  }

  void Deregister() {
    if (regions_.size() < 2) return;
    const size_t i = rng_() % regions_.size();
    std::unique_ptr<Region> r = std::move(regions_[i]);
    regions_.erase(regions_.begin() + static_cast<long>(i));
    const hixl::EngineStatus s = Call("DeregisterMem", nullptr, kEngineMs, [&] { return e_.DeregisterMem(r->h); });
    ++ops_[5];
    // A peer that died holding the key: PEER_FAILED, the region is ours.
    // Any other failure leaves the region reachable: never freed.
    if (s != hixl::SUCCESS && hixl::Engine::LastErrorCode() != HIXL_ERR_PEER_FAILED) {
      Error("DeregisterMem: " + std::string(hixl::Engine::LastError()));
      leaked_.push_back(std::move(r));
      return;
    }
    r->fnv = Fnv(r->mem.data(), r->mem.size());
    r->checks_left = 20;
    Announce("dereg " + std::to_string(r->addr()));
    quarantine_.push_back(std::move(r));
  }

  void Check(const std::unique_ptr<Region>& r, const char* when) {
    if (!r->CanariesOk())
      Error(std::string("a canary of region ") + std::to_string(r->addr()) + " changed (" + when + ")");
  }

  Peer* RandomPeer() {
    std::vector<Peer*> live;
    for (auto& [i, p] : peers_) {
      if (!p.gone) live.push_back(&p);
    }
    return live.empty() ? nullptr : live[rng_() % live.size()];
  }

  void TakeNotifies() {
    std::vector<hixl::NotifyDesc> ns;
    if (e_.GetNotifies(ns) != hixl::SUCCESS) return Error("GetNotifies: " + std::string(hixl::Engine::LastError()));
    for (auto& n : ns) {
      const int from = std::atoi(n.name.c_str());
      auto it = peers_.find(from);
      if (it == peers_.end()) continue;
      std::istringstream m(n.notify_msg);
      std::string verb;
      uintptr_t addr = 0;
      size_t len = 0;
      m >> verb >> addr >> len;
      if (verb == "reg") it->second.regions[addr] = len;
      if (verb == "dereg") it->second.regions.erase(addr);
    }
  }

  void Put(Peer& p, bool async) {
    if (p.regions.empty() || !p.connected) return;
    auto it = p.regions.begin();
    std::advance(it, static_cast<long>(rng_() % p.regions.size()));
    const size_t slice = it->second / kEngines;
    const size_t len = 1 + rng_() % slice;
    const uintptr_t remote = it->first + slice * idx_ + rng_() % (slice - len + 1);
    const uint64_t seed = rng_();
    std::vector<uint8_t> src(len), back(len);
    hixl::test::Fill(src.data(), len, seed);
    const std::vector<hixl::TransferOpDesc> put{{reinterpret_cast<uintptr_t>(src.data()), remote, len}};
    hixl::EngineStatus s;
    if (async) {
      hixl::TransferArgs args;
      args.timeout_ms = kCallMs;
      hixl::TransferReq req = nullptr;
      s = Call("TransferAsync", &p, kCallMs, [&] {
        hixl::EngineStatus st = e_.TransferAsync(p.name, hixl::WRITE, put, args, req);
        hixl::TransferStatus ts = hixl::TransferStatus::WAITING;
        while (st == hixl::SUCCESS && ts == hixl::TransferStatus::WAITING) {
          st = e_.GetTransferStatus(req, ts);
          if (ts == hixl::TransferStatus::WAITING) ::sched_yield();
        }
        return st;
      });
      ++ops_[2];
    } else {
      s = Call("TransferSync(WRITE)", &p, kCallMs, [&] { return e_.TransferSync(p.name, hixl::WRITE, put, kCallMs); });
      ++ops_[0];
    }
    if (s != hixl::SUCCESS) return;
    const std::vector<hixl::TransferOpDesc> get{{reinterpret_cast<uintptr_t>(back.data()), remote, len}};
    s = Call("TransferSync(READ)", &p, kCallMs, [&] { return e_.TransferSync(p.name, hixl::READ, get, kCallMs); });
    ++ops_[1];
    if (s == hixl::SUCCESS && std::memcmp(src.data(), back.data(), len) != 0) {
      Error("read back " + std::to_string(len) + " bytes at " + std::to_string(remote) + " of " + p.name +
            ": not what was written");
    }
  }

  // A put just past a region's end (its canary): refused, never landing.
  void BadPut(Peer& p) {
    if (p.regions.empty() || !p.connected) return;
    auto it = p.regions.begin();
    uint8_t b[16] = {};
    const hixl::EngineStatus s = Call("TransferSync(bad)", &p, kCallMs, [&] {
      return e_.TransferSync(p.name, hixl::WRITE, {{reinterpret_cast<uintptr_t>(b), it->first + it->second, 16}},
                             kCallMs);
    });
    ++ops_[7];
    if (s == hixl::SUCCESS) Error("a put past the end of a region of " + p.name + " succeeded");
  }

  void Step() {
    TakeNotifies();
    Peer* p = RandomPeer();
    const unsigned pick = rng_() % 100;
    if (p && pick < 40) {
      Put(*p, false);
    } else if (p && pick < 55) {
      Put(*p, true);
    } else if (p && pick < 65) {
      if (p->connected) {
        Call("SendNotify", p, kCallMs, [&] { return e_.SendNotify(p->name, {std::to_string(idx_), "ping"}, kCallMs); });
        ++ops_[3];
      }
    } else if (pick < 72) {
      if (regions_.size() < 5) {
        Register();
        Announce("reg " + std::to_string(regions_.back()->addr()) + " " + std::to_string(regions_.back()->len));
      }
    } else if (pick < 79) {
      Deregister();
    } else if (p && !p->connected) {
      Connect(*p);  // a Connect that timed out earlier
    } else if (p && pick < 84) {
      if (p->connected &&
          Call("Disconnect", p, kCallMs, [&] { return e_.Disconnect(p->name, kCallMs); }) == hixl::SUCCESS) {
        p->connected = false;
        Connect(*p);
        ++cycles_;
        ++ops_[6];
      }
    } else if (p && pick < 88) {
      BadPut(*p);
    } else if (pick < 90) {
      AnnounceAll();
    }
    for (auto& r : regions_) Check(r, "after an operation");
    for (auto it = quarantine_.begin(); it != quarantine_.end();) {
      Check(*it, "deregistered");
      if (Fnv((*it)->mem.data(), (*it)->mem.size()) != (*it)->fnv) Error("a byte landed in a deregistered region");
      if (--(*it)->checks_left > 0) {
        ++it;
      } else {  // kept, never freed: no later region of the round can take its addresses
        retired_.push_back(std::move(*it));
        it = quarantine_.erase(it);
      }
    }
  }

  const int idx_;
  const std::vector<std::string> names_;
  std::mt19937_64 rng_;
  hixl::Engine e_;
  std::map<int, Peer> peers_;
  std::vector<std::unique_ptr<Region>> regions_, quarantine_, retired_, leaked_;
  long ops_[kNumKinds] = {};
  long cycles_ = 0;
  long soft_ = 0;  // refusals and timeouts that are not errors
  int64_t max_call_ms_ = 0;
  std::string errors_;
};

// ------------------------------------------------------- the world ranks

// A world rank: a symmetric block [canary][a slot per rank][a counter per
// rank][canary]; rank w writes only slot w and counter w of each other
// rank, reads them back and counts its atomic adds.
class WorldRank {
 public:
  explicit WorldRank(uint64_t seed) : rng_(seed) {}

  int Main() {
    auto w = hixl::World::Init();
    if (!w.ok()) return Say("INITFAIL " + w.status().ToString()), 1;
    world_ = &w.value();
    me_ = world_->rank();
    const size_t n = static_cast<size_t>(world_->size());
    auto heap = world_->Alloc(Bytes(n));
    if (!heap.ok()) return Say("INITFAIL " + heap.status().ToString()), 1;
    base_ = static_cast<uint8_t*>(*heap);
    std::memset(base_, 0, Bytes(n));
    canary_ = 0xC0FFEE + static_cast<uint64_t>(me_);
    hixl::test::Fill(base_, kCanary, canary_);
    hixl::test::Fill(base_ + Bytes(n) - kCanary, kCanary, canary_, kCanary);
    auto bases = world_->Allgather(reinterpret_cast<uint64_t>(base_));
    if (!bases.ok()) return Say("INITFAIL " + bases.status().ToString()), 1;
    bases_ = *bases;
    adds_.assign(n, 0);
    failures_.assign(n, 0);
    Say("READY");
    hixl::test::LineReader in{0};
    std::string line;
    if (!in.Next(&line) || line != "go") return 0;
    // What a rank makes once per peer (its connections, mappings) is made
    // on first contact: the reference is the most seen in the first half of
    // the round, from after a warm-up of 500 ms.
    const auto t0 = Clock::now();
    while (MsSince(t0) < 500 && errors_.empty()) Step(n);
    const hixl::test::ProcStats start = PeakWhile(t0, kRoundMs / 2, [this, n] {
      Step(n);
      return errors_.empty();
    });
    while (MsSince(t0) < kRoundMs && errors_.empty()) Step(n);
    const hixl::test::ProcStats end = hixl::test::SelfStats();
    std::ostringstream out;
    std::string gone;
    for (size_t r = 0; r < n; ++r) gone += failures_[r] ? " " + std::to_string(r) : "";
    out << "DONE ok=" << errors_.empty() << " ms=" << MsSince(t0) << " fds=" << start.fds << "," << end.fds
        << " threads=" << start.threads << "," << end.threads << " maxcall=" << max_call_ms_ << " soft=" << soft_;
    for (int k = 0; k < kNumKinds; ++k) out << " " << kKinds[k] << "=" << ops_[k];
    out << " failed_peers=[" << gone << " ] errors=" << (errors_.empty() ? "-" : errors_);
    Say(out.str());
    in.Next(&line);
    // A rank is dead: finalizing (collective) fails, bounded; that is
    // what the driver expects then.
    return world_->Finalize().ok() ? 0 : 3;
  }

 private:
  static constexpr size_t kSlot = 16 << 10;
  static size_t Bytes(size_t n) { return 2 * kCanary + n * (kSlot + 8); }
  uint64_t Slot(size_t dst, size_t w) const { return bases_[dst] + kCanary + w * kSlot; }
  uint64_t Counter(size_t dst, size_t w) const { return bases_[dst] + kCanary + bases_.size() * kSlot + w * 8; }

  static int Say(const std::string& s) {
    std::string l = s + "\n";
    return static_cast<int>(!::write(1, l.data(), l.size()));
  }
  void Error(const std::string& what) {
    if (errors_.empty()) errors_ = what;
    for (char& c : errors_) c = c == ' ' ? '_' : c;
  }

  // Checks the bound and sorts the outcome; true on success.  dst < 0:
  // not a call to one rank (a dead rank's failure is not attributed).
  bool Ok(const char* what, int dst, Clock::time_point t0, const hixl::Status& s) {
    const int64_t ms = MsSince(t0);
    max_call_ms_ = std::max(max_call_ms_, ms);
    if (ms > kEngineMs + kSlackMs) Error(std::string(what) + " took " + std::to_string(ms) + " ms");
    if (s.ok()) return true;
    if (s.code() == hixl::Errc::kPeerFailed && dst >= 0) {
      if (!failures_[static_cast<size_t>(dst)]) {
        std::fprintf(stderr, "soak: %s to rank %d: %s\n", what, dst, s.ToString().c_str());
      }
      ++failures_[static_cast<size_t>(dst)];
    } else if (s.code() == hixl::Errc::kPeerFailed || s.code() == hixl::Errc::kTimeout ||
               s.code() == hixl::Errc::kQueueFull) {
      ++soft_;
    } else {
      Error(std::string(what) + ": " + s.ToString());
    }
    return false;
  }

  void Step(size_t n) {
    auto t0 = Clock::now();
    auto notes = world_->GetNotifications();
    Ok("GetNotifications", -1, t0, notes.status());
    std::vector<int> live;
    for (size_t r = 0; r < n; ++r) {
      if (static_cast<int>(r) != me_ && !failures_[r]) live.push_back(static_cast<int>(r));
    }
    const unsigned pick = static_cast<unsigned>(rng_() % 100);
    if (!live.empty()) {
      const int dst = live[rng_() % live.size()];
      const size_t d = static_cast<size_t>(dst), me = static_cast<size_t>(me_);
      if (pick < 45) {  // put, fence, get, fence, compare
        const size_t len = 1 + rng_() % kSlot, off = rng_() % (kSlot - len + 1);
        const uint64_t seed = rng_();
        auto src = std::make_unique<std::vector<uint8_t>>(len), back = std::make_unique<std::vector<uint8_t>>(len);
        hixl::test::Fill(src->data(), len, seed);
        t0 = Clock::now();
        bool ok = Ok("Put", dst, t0, world_->Put(dst, src->data(), Slot(d, me) + off, len));
        ++ops_[0];
        t0 = Clock::now();
        ok = ok && Ok("Fence", -1, t0, world_->Fence());
        ++ops_[9];
        t0 = Clock::now();
        ok = ok && Ok("Get", dst, t0, world_->Get(dst, Slot(d, me) + off, back->data(), len));
        ++ops_[1];
        t0 = Clock::now();
        ok = ok && Ok("Fence", -1, t0, world_->Fence());  // the get is complete only now
        ++ops_[9];
        if (ok && std::memcmp(src->data(), back->data(), len) != 0) {
          Error("read back " + std::to_string(len) + " bytes of rank " + std::to_string(dst) + ": not what was put");
        }
        if (!ok) {  // a transfer that failed may still be in flight: its buffers stay
          graveyard_.push_back(std::move(src));
          graveyard_.push_back(std::move(back));
        }
      } else if (pick < 75) {  // fetch-add on our counter there: it counts our adds
        t0 = Clock::now();
        auto v = world_->AtomicFetchAdd(dst, Counter(d, me), 1);
        ++ops_[8];
        constexpr uint64_t kUnknown = ~uint64_t{0};  // an add failed: it may or may not have happened
        if (Ok("AtomicFetchAdd", dst, t0, v.status())) {
          if (adds_[d] != kUnknown && *v != adds_[d]) {
            Error("rank " + std::to_string(dst) + "'s counter is " + std::to_string(*v) + ", not " +
                  std::to_string(adds_[d]));
          }
          adds_[d] = *v + 1;
        } else {
          adds_[d] = kUnknown;
        }
      } else if (pick < 90) {
        const std::string msg = "n" + std::to_string(me_);
        t0 = Clock::now();
        Ok("Notify", dst, t0, world_->Notify(dst, msg.data(), msg.size()));
        ++ops_[3];
      }
    }
    if (pick >= 90) {  // a private registration, made and dropped
      std::vector<uint8_t> buf(4096 * (1 + rng_() % 8));
      t0 = Clock::now();
      if (Ok("RegisterMemory", -1, t0, world_->RegisterMemory(buf.data(), buf.size()))) {
        ++ops_[4];
        t0 = Clock::now();
        Ok("DeregisterMemory", -1, t0, world_->DeregisterMemory(buf.data()));
        ++ops_[5];
      }
    }
    const size_t bytes = Bytes(n);
    if (hixl::test::FirstMismatch(base_, kCanary, canary_) >= 0 ||
        hixl::test::FirstMismatch(base_ + bytes - kCanary, kCanary, canary_, kCanary) >= 0) {
      Error("a canary of the symmetric block changed");
    }
  }

  std::mt19937_64 rng_;
  hixl::World* world_ = nullptr;
  int me_ = 0;
  uint8_t* base_ = nullptr;
  uint64_t canary_ = 0;
  std::vector<uint64_t> bases_, adds_;
  std::vector<long> failures_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> graveyard_;
  long ops_[kNumKinds] = {};
  long soft_ = 0;
  int64_t max_call_ms_ = 0;
  std::string errors_;
};
}  // namespace

// soak --worker IDX SEED NAME...
int WorkerMain(int argc, char** argv) {
  if (argc < 5) return 2;
  std::vector<std::string> names(argv + 4, argv + argc);
  Worker w(std::atoi(argv[2]), names, std::strtoull(argv[3], nullptr, 10));
  return w.Main();
}

int RankMain(uint64_t seed) { return WorldRank(seed).Main(); }

}  // namespace soak
