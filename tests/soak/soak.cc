// The chaos soak (issue 14): for HIXL_SOAK_SECONDS (default 180) it runs
// rounds; each round starts kEngines engine processes and kRanks world
// ranks (torchrun-style variables, rank 0 holds the store) over one
// transport (shm with cross-memory attach, the shm relay, UCX where built;
// taken in turn), lets them do random operations on each other for a few
// seconds, and SIGKILLs one of the processes at a random moment.  The
// survivors check:
//  * data: every write is read back and compared (each writer has its own
//    slice of every region, with its own pattern); every fetch-add returns
//    the count of the adder's own earlier adds;
//  * canaries: 64 bytes before and after every region (never registered)
//    are checked after every operation, and an engine region's bytes are
//    checked unchanged for a while after its DeregisterMem returned (never
//    freed within the round, so that no later region takes its addresses
//    and a stale address can only be refused);
//  * bounds: every call returns within its timeout (plus slack for a
//    loaded machine);
//  * failures: PEER_FAILED / NOT_CONNECTED only from the killed process;
//  * leaks: descriptors and threads at the end of the round against those
//    after a warm-up (hundreds of connect/disconnect cycles between).
// A watchdog bounds every round; every process is killed and reaped.
// Prints the seed (HIXL_SOAK_SEED replays the rounds' choices; timing
// differs) and a summary: rounds, operations per second per kind for
// engines and world, faults injected.
//
// Engine operations: put/get (sync), async put, notify, register,
// deregister (then a quarantine), disconnect/connect, a put past a
// region's end (must be refused), reading notifications.  World
// operations: put, fence, get, fence; fetch-add; notify; register and
// deregister of private memory; reading notifications.
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
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../engine/free_port.h"
#include "../engine/peer_proc.h"
#include "../mp/mp_util.h"

namespace hixl::test {
World* g_world = nullptr;  // unused here; mp_util.h declares it
}  // namespace hixl::test

namespace {

using Clock = std::chrono::steady_clock;
using hixl::test::Fnv;

constexpr int kEngines = 3;
constexpr size_t kCanary = 64;
constexpr int kCallMs = 2000;    // each call's own timeout
constexpr int kEngineMs = 3000;  // the engines' timeout_ms (deregistration acks)
constexpr int kSlackMs = 5000;   // a loaded 2-core machine
constexpr int kRoundMs = 6000;   // operations per round
constexpr int kWatchdogMs = 90000;

const char* const kKinds[] = {"put",        "get",       "async",   "notify", "register",
                              "deregister", "reconnect", "bad_put", "atomic", "fence"};
constexpr int kNumKinds = 10;
constexpr int kRanks = 4;  // world ranks a round

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// ------------------------------------------------------------- the worker

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
    // connection) is counted from after a warm-up of 500 ms; a leak per
    // connect/disconnect cycle (a hundred or more a round) stands out.
    const auto t0 = Clock::now();
    while (MsSince(t0) < 500 && errors_.empty()) Step();
    const hixl::test::ProcStats start = hixl::test::SelfStats();
    while (MsSince(t0) < kRoundMs && errors_.empty()) Step();
    const int64_t ms = MsSince(t0);
    for (auto& r : regions_) Check(r, "end");
    const hixl::test::ProcStats end = hixl::test::SelfStats();
    std::string gone;
    for (auto& [i, p] : peers_) gone += p.failures ? " " + std::to_string(i) : "";
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
    // on first contact: counted from after a warm-up of 500 ms.
    const auto t0 = Clock::now();
    while (MsSince(t0) < 500 && errors_.empty()) Step(n);
    const hixl::test::ProcStats start = hixl::test::SelfStats();
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

int WorkerMain(int argc, char** argv);
int DriverMain();

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && std::string(argv[1]) == "--worker") return WorkerMain(argc, argv);
  if (argc == 3 && std::string(argv[1]) == "--rank") return WorldRank(std::strtoull(argv[2], nullptr, 10)).Main();
  return DriverMain();
}

// soak --worker IDX SEED NAME...
int WorkerMain(int argc, char** argv) {
  if (argc < 5) return 2;
  std::vector<std::string> names(argv + 4, argv + argc);
  Worker w(std::atoi(argv[2]), names, std::strtoull(argv[3], nullptr, 10));
  return w.Main();
}

// ------------------------------------------------------------- the driver

namespace {

struct Transport {
  const char* name;
  const char* transport;
  const char* cma;
};

std::string Self() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
}

// Starts `self args...` with the transport's variables, talking over pipes.
bool Spawn(hixl::test::PeerProc& p, const std::vector<std::string>& args, const Transport& t,
           const std::vector<std::pair<std::string, std::string>>& env) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0) return false;
  if (::pipe2(from, O_CLOEXEC) != 0) {
    ::close(to[0]);
    ::close(to[1]);
    return false;
  }
  p.pid = ::fork();
  if (p.pid == 0) {
    ::setenv("HIXL_TRANSPORT", t.transport, 1);
    ::setenv("HIXL_SHM_CMA", t.cma, 1);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::dup2(to[0], 0);
    ::dup2(from[1], 1);
    std::vector<std::string> a = args;
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  p.in = to[1];
  p.out = from[0];
  return p.pid > 0;
}

// The next line of the protocol from p within bound_ms; lines that are
// not (UCX logs to standard output) are shown and skipped.
std::string Reply(hixl::test::PeerProc& p, const std::string& who, int bound_ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(bound_ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    std::string l = p.Line(static_cast<int>(std::max<int64_t>(1, left)));
    for (const char* tag : {"READY", "INITFAIL", "DONE ", "NO REPLY", "EOF"}) {
      if (l.rfind(tag, 0) == 0) return l;
    }
    std::printf("  %s said: %s\n", who.c_str(), l.c_str());
  }
}

// The value of `key=` in a DONE line ("" when absent).
std::string Field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  for (std::string t; in >> t;) {
    if (t.rfind(key + "=", 0) == 0) return t.substr(key.size() + 1);
  }
  return "";
}

std::pair<long, long> Pair(const std::string& v) {
  long a = -1, b = -1;
  std::sscanf(v.c_str(), "%ld,%ld", &a, &b);
  return {a, b};
}

struct Totals {
  long ops[2][kNumKinds] = {};  // engines, world ranks
  long kills = 0, rounds = 0, retries = 0;
  std::map<std::string, long> rounds_by_transport;
};

// One round; "" when it checked out, else what went wrong.
std::string Round(const Transport& t, uint64_t seed, Totals* tot, bool* retry) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> names;
  for (int i = 0; i < kEngines; ++i) names.push_back("127.0.0.1:" + std::to_string(hixl::test::FreePort()));
  // procs: the engines 0..kEngines-1, then world ranks 0..kRanks-1.
  std::vector<std::unique_ptr<hixl::test::PeerProc>> procs;
  auto who = [](int i) {
    return i < kEngines ? "engine " + std::to_string(i) : "rank " + std::to_string(i - kEngines);
  };
  const std::string self = Self();
  const auto t0 = Clock::now();
  auto left = [&] { return static_cast<int>(std::max<int64_t>(1, kWatchdogMs - MsSince(t0))); };
  for (int i = 0; i < kEngines; ++i) {
    procs.push_back(std::make_unique<hixl::test::PeerProc>());
    std::vector<std::string> args = {self, "--worker", std::to_string(i), std::to_string(rng())};
    args.insert(args.end(), names.begin(), names.end());
    if (!Spawn(*procs.back(), args, t, {})) return "cannot start a worker";
  }
  const std::string store_port = std::to_string(hixl::test::FreePort());
  for (int r = 0; r < kRanks; ++r) {
    procs.push_back(std::make_unique<hixl::test::PeerProc>());
    const std::vector<std::pair<std::string, std::string>> env = {{"RANK", std::to_string(r)},
                                                                  {"WORLD_SIZE", std::to_string(kRanks)},
                                                                  {"LOCAL_RANK", std::to_string(r)},
                                                                  {"LOCAL_WORLD_SIZE", std::to_string(kRanks)},
                                                                  {"MASTER_ADDR", "127.0.0.1"},
                                                                  {"MASTER_PORT", store_port},
                                                                  {"HIXL_TIMEOUT_MS", std::to_string(kEngineMs)}};
    if (!Spawn(*procs.back(), {self, "--rank", std::to_string(rng())}, t, env)) return "cannot start a rank";
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    const std::string l = Reply(*procs[i], who(static_cast<int>(i)), std::min(30000, left()));
    if (l.rfind("INITFAIL", 0) == 0) {  // a port taken meanwhile: the round again, with others
      *retry = true;
      return who(static_cast<int>(i)) + ": " + l;
    }
    if (l != "READY") return who(static_cast<int>(i)) + " did not start: " + l;
  }
  for (auto& p : procs) {
    if (::write(p->in, "go\n", 3) != 3) return "cannot start a worker's round";
  }
  // The fault: one process killed at a random moment of the round.  (A
  // wait for that moment, not for a condition: it is what is randomised.)
  const int victim = static_cast<int>(rng() % procs.size());
  const int kill_at = static_cast<int>(rng() % kRoundMs);
  ::poll(nullptr, 0, kill_at);
  procs[static_cast<size_t>(victim)]->Kill();
  ++tot->kills;
  std::printf("  killed %s after %d ms\n", who(victim).c_str(), kill_at);
  std::string failure;
  for (int i = 0; i < static_cast<int>(procs.size()); ++i) {
    if (i == victim) continue;
    auto& p = *procs[static_cast<size_t>(i)];
    const std::string l = Reply(p, who(i), left());
    if (l.rfind("DONE ", 0) != 0) {
      failure = who(i) + " (watchdog, " + std::to_string(kWatchdogMs) + " ms): " + l;
      break;
    }
    if (Field(l, "ok") != "1") failure = who(i) + ": " + Field(l, "errors");
    // Failures are the victim's only (engines number engines, ranks ranks).
    const int dead = i < kEngines ? victim : victim - kEngines;
    const bool same_kind = (i < kEngines) == (victim < kEngines);
    const size_t at = l.find("failed_peers=[") + 14;
    std::istringstream fp(l.substr(at, l.find(']', at) - at));
    for (int w; fp >> w;) {
      if (!same_kind || w != dead) failure = who(i) + " saw a live peer (" + std::to_string(w) + ") fail: " + l;
    }
    // Engines' descriptors and threads: a few more are made lazily (the
    // async workers, a callback connection); UCX keeps one per cycle (README).
    const auto [fd0, fd1] = Pair(Field(l, "fds"));
    const auto [th0, th1] = Pair(Field(l, "threads"));
    const long cycles = std::atol(Field(l, "cycles").c_str());
    // Whether each peer is connected, and its channel made, at either
    // count varies: up to 6 descriptors a peer.
    const long fd_slack = 12 + (std::string(t.transport) == "ucx" ? 2 * cycles : 0);
    if (fd1 > fd0 + fd_slack || th1 > th0 + 3) failure = who(i) + " grew: " + l;
    for (int k = 0; k < kNumKinds; ++k) tot->ops[i < kEngines ? 0 : 1][k] += std::atol(Field(l, kKinds[k]).c_str());
    std::printf("  %s: %s\n", who(i).c_str(), l.c_str());
  }
  // The survivors finalize and exit, bounded; the rest are killed.  A
  // rank's Finalize fails (exit 3) when a rank was killed.
  for (auto& p : procs) {
    if (p->pid > 0 && ::write(p->in, "quit\n", 5) != 5) failure = "a worker's stdin closed early";
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    auto& p = procs[i];
    const auto until = Clock::now() + std::chrono::seconds(20);
    const int allowed = static_cast<int>(i) >= kEngines && victim >= kEngines ? 3 : 0;
    int status = 0;
    while (p->pid > 0) {
      const pid_t r = ::waitpid(p->pid, &status, WNOHANG);
      if (r == p->pid) {
        if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != allowed))
          failure = who(static_cast<int>(i)) + " exited with status " + std::to_string(status);
        p->pid = -1;
      } else if (Clock::now() > until) {
        failure = who(static_cast<int>(i)) + " did not exit within 20 s of quit";
        p->Kill();
      } else {
        ::poll(nullptr, 0, 10);  // bounded polling for the exit
      }
    }
  }
  return failure;
}

}  // namespace

int DriverMain() {
  const char* sec = std::getenv("HIXL_SOAK_SECONDS");
  const int64_t seconds = sec ? std::max(1L, std::atol(sec)) : 180;
  const char* given = std::getenv("HIXL_SOAK_SEED");
  const uint64_t seed = given ? std::strtoull(given, nullptr, 10) : std::random_device{}();
  std::printf(
      "soak: seed %llu (HIXL_SOAK_SEED=%llu replays the same rounds), %lld s, %d engines and %d world ranks a round\n",
      static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed), static_cast<long long>(seconds),
      kEngines, kRanks);
  std::fflush(stdout);
  std::vector<Transport> ts = {{"shm_cma", "shm", "1"}, {"shm_relay", "shm", "0"}};
#ifdef HIXL_TEST_HAVE_UCX
  ts.push_back({"ucx", "ucx", "1"});
#endif
  std::mt19937_64 rng(seed);
  Totals tot;
  const auto t0 = Clock::now();
  std::string failure;
  for (int round = 0; failure.empty() && (round == 0 || MsSince(t0) < seconds * 1000); ++round) {
    const Transport& t = ts[static_cast<size_t>(round) % ts.size()];
    const uint64_t round_seed = rng();
    std::printf("round %d: %s, seed %llu\n", round, t.name, static_cast<unsigned long long>(round_seed));
    std::fflush(stdout);
    bool retry = false;
    std::string f = Round(t, round_seed, &tot, &retry);
    if (retry && tot.retries++ < 10) {
      std::printf("  again (%s)\n", f.c_str());
      continue;
    }
    if (!f.empty()) failure = "round " + std::to_string(round) + " (" + t.name + "): " + f;
    ++tot.rounds;
    ++tot.rounds_by_transport[t.name];
  }
  // Leftovers: every child was reaped (none remains), and hixl keeps its
  // shared memory in memfds, so nothing of it is in /dev/shm.
  errno = 0;
  if (::waitpid(-1, nullptr, WNOHANG) != -1 || errno != ECHILD) failure += "; a worker process is left";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (e.path().filename().string().find("hixl") != std::string::npos)
      failure += "; left in /dev/shm: " + e.path().string();
  }
  const double s = static_cast<double>(MsSince(t0)) / 1000.0;
  std::string per[2];
  for (int w = 0; w < 2; ++w) {
    for (int k = 0; k < kNumKinds; ++k) {
      if (tot.ops[w][k] == 0) continue;
      per[w] += std::string(" ") + kKinds[k] + "=" +
                std::to_string(static_cast<long>(static_cast<double>(tot.ops[w][k]) / s));
    }
  }
  std::string by;
  for (auto& [n, c] : tot.rounds_by_transport) by += " " + n + "=" + std::to_string(c);
  std::printf(
      "soak summary: seed %llu, %.0f s, rounds %ld (%s), faults injected %ld (SIGKILL), engine ops/s:%s, world "
      "ops/s:%s\n",
      static_cast<unsigned long long>(seed), s, tot.rounds, by.empty() ? "" : by.c_str() + 1, tot.kills, per[0].c_str(),
      per[1].c_str());
  if (!failure.empty()) {
    std::printf("soak FAILED: %s\n(replay: HIXL_SOAK_SEED=%llu)\n", failure.c_str(),
                static_cast<unsigned long long>(seed));
    return 1;
  }
  std::printf("soak passed\n");
  return 0;
}
