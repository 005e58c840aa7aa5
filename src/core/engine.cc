// The engine API (include/hixl/engine.hpp) over hixl's core: the same
// LocalRegistry/PeerTable checks, transports and control plane as the world.
//
// Connections are one-way: the engine that calls Connect (the client) may
// read and write the other's (the server's) registered memory; the server
// takes no part.  Each side numbers its peers itself:
//  * the client gives each connection a peer id for its transports (0 is a
//    connection to itself, others count up from 1 and are never reused);
//  * the server gives each client an id that the client sends as `from` in
//    every control request.
// Control requests (over bootstrap::ControlServer/ControlClient):
//   client -> server: kHello, kFetchTable, kNotify, kBye
//   server -> client (to the client's own control server, its "callback"):
//                     kInvalidate (a region went away), kGone (finalized)
#include <hixl/engine.hpp>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <random>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include <unistd.h>

#include "bootstrap/control.h"
#include "bootstrap/socket.h"
#include "core/log.h"
#include "core/registry.h"
#include "core/status.h"
#include "transport/transport.h"

namespace hixl {

namespace {

constexpr uint8_t kFetchTable = 1;  // -> RegionTable::Serialize(); subscribes the client to invalidations
constexpr uint8_t kInvalidate = 2;  // [u64 generation][u64 base][u64 len] -> ""
constexpr uint8_t kNotify = 3;      // [name][msg] -> "" (or kQueueFull)
constexpr uint8_t kHello = 10;      // see Hello()
constexpr uint8_t kBye = 11;        // the client disconnects -> ""
constexpr uint8_t kGone = 12;       // the server finalized -> ""

constexpr size_t kMaxNotifyBytes = 64 * 1024;
constexpr int kSelfId = 0;

thread_local std::string t_last_error;

using Clock = std::chrono::steady_clock;

EngineStatus FromErrc(Errc c) {
  switch (c) {
    case Errc::kOk: return SUCCESS;
    case Errc::kInvalidArg:
    case Errc::kNotRegistered:
    case Errc::kInvalidRank: return PARAM_INVALID;
    case Errc::kTimeout: return TIMEOUT;
    case Errc::kUnsupported: return UNSUPPORTED;
    case Errc::kNoMemory:
    case Errc::kQueueFull: return RESOURCE_EXHAUSTED;
    case Errc::kNotConnected: return NOT_CONNECTED;
    default: return FAILED;
  }
}

// Sets the calling thread's last error and returns the code.
EngineStatus Fail(EngineStatus code, std::string message) {
  t_last_error = std::move(message);
  return code;
}
EngineStatus Fail(const Status& s) { return Fail(FromErrc(s.code()), s.message()); }
EngineStatus Done() {
  t_last_error.clear();
  return SUCCESS;
}

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "ip", "ip:port", "[ipv6]", "[ipv6]:port".
Result<HostPort> ParseEngine(const char* what, const std::string& s) {
  HostPort hp;
  std::string port;
  if (s.empty()) return Err(Errc::kInvalidArg, "{}: the engine address is empty (expected ip, ip:port, [ipv6] or [ipv6]:port)", what);
  if (s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close == 1) {
      return Err(Errc::kInvalidArg, "{}: '{}' is not [ipv6] or [ipv6]:port", what, s);
    }
    hp.host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') return Err(Errc::kInvalidArg, "{}: '{}' is not [ipv6] or [ipv6]:port", what, s);
      port = s.substr(close + 2);
      if (port.empty()) return Err(Errc::kInvalidArg, "{}: '{}' has an empty port", what, s);
    }
  } else {
    auto colon = s.find(':');
    if (colon != std::string::npos && s.find(':', colon + 1) != std::string::npos) {
      return Err(Errc::kInvalidArg, "{}: '{}': write an IPv6 address in brackets, [ipv6] or [ipv6]:port", what, s);
    }
    hp.host = s.substr(0, colon);
    if (colon != std::string::npos) {
      port = s.substr(colon + 1);
      if (port.empty()) return Err(Errc::kInvalidArg, "{}: '{}' has an empty port", what, s);
    }
    if (hp.host.empty()) return Err(Errc::kInvalidArg, "{}: '{}' has no address before the port", what, s);
  }
  if (!port.empty()) {
    int v = -1;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || p != port.data() + port.size() || v < 0 || v > 65535) {
      return Err(Errc::kInvalidArg, "{}: the port of '{}' is not a number in [0, 65535]", what, s);
    }
    hp.port = static_cast<uint16_t>(v);
  }
  return hp;
}

Result<int64_t> OptionInt(const std::string& name, const std::string& text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < lo || v > hi) {
    return Err(Errc::kInvalidArg, "Engine::Initialize: option {}='{}' is not an integer in [{}, {}]", name, text, lo, hi);
  }
  return v;
}

Result<bool> OptionBool(const std::string& name, const std::string& text) {
  if (text == "1" || text == "true" || text == "on" || text == "yes") return true;
  if (text == "0" || text == "false" || text == "off" || text == "no") return false;
  return Err(Errc::kInvalidArg, "Engine::Initialize: option {}='{}' must be 0 or 1", name, text);
}

struct Config {
  int64_t timeout_ms = 60000;
  std::string transport = "auto";
  std::string net_dev;
  bool shm_cma = true;
  bool shm_thp = true;
  int64_t notify_queue_depth = 1024;
};

// Options override the environment (HIXL_TIMEOUT_MS, HIXL_TRANSPORT, ...).
Result<Config> ParseOptions(const std::map<std::string, std::string>& options) {
  std::map<std::string, std::string> o;
  auto env = [&](const char* var, const char* key) {
    if (const char* v = std::getenv(var)) o[key] = v;
  };
  env("HIXL_TIMEOUT_MS", "timeout_ms");
  env("HIXL_TRANSPORT", "transport");
  env("HIXL_NET_DEV", "net_dev");
  env("HIXL_SHM_CMA", "shm_cma");
  env("HIXL_SHM_THP", "shm_thp");
  env("HIXL_NOTIFY_QUEUE_DEPTH", "notify_queue_depth");
  for (const auto& [k, v] : options) {
    if (k != "timeout_ms" && k != "transport" && k != "net_dev" && k != "shm_cma" && k != "shm_thp" &&
        k != "notify_queue_depth") {
      return Err(Errc::kInvalidArg,
                 "Engine::Initialize: unknown option '{}' (known: timeout_ms, transport, net_dev, shm_cma, shm_thp, "
                 "notify_queue_depth)", k);
    }
    o[k] = v;
  }
  Config c;
  if (auto it = o.find("timeout_ms"); it != o.end()) {
    HIXL_ASSIGN_OR_RETURN(c.timeout_ms, OptionInt("timeout_ms", it->second, 1, int64_t{1} << 40));
  }
  if (auto it = o.find("transport"); it != o.end()) {
    c.transport = it->second.empty() ? "auto" : it->second;
    if (c.transport != "auto" && c.transport != "shm" && c.transport != "ucx") {
      return Err(Errc::kInvalidArg, "Engine::Initialize: transport '{}' is not one of auto, shm, ucx", it->second);
    }
  }
  if (auto it = o.find("net_dev"); it != o.end()) c.net_dev = it->second;
  if (auto it = o.find("shm_cma"); it != o.end()) {
    HIXL_ASSIGN_OR_RETURN(c.shm_cma, OptionBool("shm_cma", it->second));
  }
  if (auto it = o.find("shm_thp"); it != o.end()) {
    HIXL_ASSIGN_OR_RETURN(c.shm_thp, OptionBool("shm_thp", it->second));
  }
  if (auto it = o.find("notify_queue_depth"); it != o.end()) {
    HIXL_ASSIGN_OR_RETURN(c.notify_queue_depth, OptionInt("notify_queue_depth", it->second, 1, 1 << 24));
  }
  return c;
}

uint64_t RandomId() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
}

std::string TransportList(const std::vector<std::unique_ptr<transport::Transport>>& ts) {
  std::string s;
  for (auto& t : ts) s += (s.empty() ? "" : ", ") + std::string(t->name());
  return s;
}

}  // namespace

const char* EngineStatusName(EngineStatus status) {
  switch (status) {
    case SUCCESS: return "SUCCESS";
    case PARAM_INVALID: return "PARAM_INVALID";
    case TIMEOUT: return "TIMEOUT";
    case NOT_CONNECTED: return "NOT_CONNECTED";
    case ALREADY_CONNECTED: return "ALREADY_CONNECTED";
    case UNSUPPORTED: return "UNSUPPORTED";
    case RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case FAILED: return "FAILED";
    default: return "UNKNOWN";
  }
}

struct Engine::Impl final : transport::Host {
  // A connection to an engine we connected to.
  struct Conn {
    std::string name;  // as the user wrote it
    int id = -1;       // our transports' peer id for it (kSelfId for ourselves)
    int key = -1;      // how it names us in calls back (conns_by_id)
    int32_t our_id_there = -1;
    transport::Transport* transport = nullptr;
    std::unique_ptr<bootstrap::ControlClient> control;
    PeerTable table;
    std::mutex refresh_mu;
    std::mutex mu;
    std::atomic<bool> broken{false};
    std::string broken_reason;  // guarded by mu

    void Break(const std::string& why) {
      std::lock_guard lock(mu);
      if (!broken.exchange(true)) broken_reason = why;
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
    bool subscribed = false;
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
    std::string message;  // why it failed; written before state
  };

  // --- transport::Host
  int rank() const override { return kSelfId; }
  int64_t timeout_ms() const override { return cfg.timeout_ms; }
  bool AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const override {
    return registry.Access(addr, len, fn);
  }

  // Held shared by every call, exclusively by Initialize and Finalize.
  std::shared_mutex life_mu;
  enum class State { kNew, kLive, kFinalized } state = State::kNew;

  Config cfg;
  std::string local_name;
  HostPort local;
  std::string callback_host;
  uint64_t uuid = 0;
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::unique_ptr<bootstrap::ControlServer> server;
  LocalRegistry registry;

  std::mutex conns_mu;
  std::map<std::string, std::shared_ptr<Conn>> conns;  // by name; nullptr while connecting
  std::unordered_map<int, std::shared_ptr<Conn>> conns_by_id;
  int next_conn_id = 1;
  bool self_transport_connected = false;

  std::mutex clients_mu;
  std::map<int32_t, Client> clients;
  int32_t next_client_id = 1;

  std::mutex notify_mu;
  std::condition_variable notify_cv;
  std::deque<NotifyDesc> notifies;
  bool waking = false;  // Finalize wakes WaitNotifies

  std::mutex req_mu;
  std::condition_variable req_cv;
  std::deque<std::shared_ptr<Request>> queue;
  std::unordered_map<uint64_t, std::shared_ptr<Request>> requests;
  uint64_t next_req = 1;
  bool stopping = false;
  std::vector<std::thread> workers;
  static constexpr size_t kWorkers = 2;

  ~Impl() override { Teardown(); }

  // ------------------------------------------------------------ life cycle

  Status Start(const std::string& local_engine, const std::map<std::string, std::string>& options) {
    HIXL_ASSIGN_OR_RETURN(local, ParseEngine("Engine::Initialize", local_engine));
    HIXL_ASSIGN_OR_RETURN(cfg, ParseOptions(options));
    local_name = local_engine;
    uuid = RandomId();
    transport::Options topts;
    topts.shm_cma = cfg.shm_cma;
    topts.shm_thp = cfg.shm_thp;
    topts.net_dev = cfg.net_dev;
    if (cfg.transport != "auto") topts.only = cfg.transport;
    auto ts = transport::CreateTransports(this, topts);
    if (!ts.ok()) {
      return Err(ts.status().code(), "Engine::Initialize: {}{}",
                 topts.only.empty() ? "" : "transport " + topts.only + " was asked for but ", ts.status().message());
    }
    transports = std::move(ts.value());
    // A port > 0: listen there for peers.  Otherwise a free port serves only
    // the calls back from engines we connect to.
    auto srv = bootstrap::ControlServer::Start(
        local.host, [this](int from, uint8_t type, std::string_view p) { return Handle(from, type, p); }, local.port);
    if (!srv.ok()) {
      return Err(Errc::kBootstrap, "Engine::Initialize: cannot listen on {}: {}", local_engine, srv.status().message());
    }
    server = std::move(srv.value());
    callback_host = local.host;
    if (callback_host == "0.0.0.0" || callback_host == "::") callback_host.clear();  // decided per peer
    return Status::Ok();
  }

  // Stops everything; safe to call twice.
  void Teardown() {
    {
      std::lock_guard lock(req_mu);
      stopping = true;
    }
    req_cv.notify_all();
    for (auto& w : workers) w.join();
    workers.clear();
    for (auto& [id, r] : requests) {
      if (r->state.load() == static_cast<int>(TransferStatus::WAITING)) {
        r->message = "the engine was finalized before the transfer completed";
        r->state.store(static_cast<int>(TransferStatus::FAILED));
      }
    }
    {
      std::lock_guard lock(notify_mu);
      waking = true;
    }
    notify_cv.notify_all();
    // Tell the engines we connected to, and those connected to us.
    std::map<std::string, std::shared_ptr<Conn>> cs;
    {
      std::lock_guard lock(conns_mu);
      cs.swap(conns);
      conns_by_id.clear();
    }
    const int64_t quick = std::min<int64_t>(cfg.timeout_ms, 2000);
    for (auto& [name, c] : cs) {
      if (c && !c->broken) (void)c->control->Call(kBye, {}, quick);
    }
    std::map<int32_t, Client> cl;
    {
      std::lock_guard lock(clients_mu);
      cl.swap(clients);
    }
    for (auto& [id, c] : cl) (void)c.callback->Call(kGone, {}, quick);
    server.reset();
    for (auto& t : transports) t->Shutdown();
    for (const RegionRecord& r : registry.Table().regions) {
      transport::LocalRegion d;
      d.base = r.base;
      d.len = r.len;
      for (auto& t : transports) t->DeregisterRegion(d);
    }
    transports.clear();
  }

  // ------------------------------------------------------------- control

  Result<std::string> Handle(int from, uint8_t type, std::string_view payload) {
    switch (type) {
      case kHello: return Hello(payload);
      case kFetchTable: {
        std::lock_guard lock(clients_mu);
        auto it = clients.find(from);
        if (it == clients.end()) return Err(Errc::kPeerFailed, "engine {} does not know this client (id {})", local_name, from);
        it->second.subscribed = true;
        return registry.Table().Serialize();
      }
      case kNotify: {
        net::Reader rd(payload);
        NotifyDesc n;
        if (!rd.GetBytes(&n.name) || !rd.GetBytes(&n.notify_msg)) return Err(Errc::kInvalidArg, "malformed notification");
        std::lock_guard lock(notify_mu);
        if (static_cast<int64_t>(notifies.size()) >= cfg.notify_queue_depth) {
          return Err(Errc::kQueueFull,
                     "the notification queue of engine {} is full ({} waiting, notify_queue_depth={}): it has not "
                     "called GetNotifies", local_name, notifies.size(), cfg.notify_queue_depth);
        }
        notifies.push_back(std::move(n));
        notify_cv.notify_all();
        return std::string();
      }
      case kBye: {
        std::lock_guard lock(clients_mu);
        clients.erase(from);
        return std::string();
      }
      case kInvalidate: {
        net::Reader rd(payload);
        uint64_t gen = 0, base = 0, len = 0;
        if (!rd.Get(&gen) || !rd.Get(&base) || !rd.Get(&len)) return Err(Errc::kInvalidArg, "malformed invalidation");
        if (auto c = ConnById(from)) c->table.Invalidate(gen, base, len);
        return std::string();
      }
      case kGone: {
        if (auto c = ConnById(from)) c->Break("it was finalized");
        return std::string();
      }
      default:
        return Err(Errc::kInvalidArg, "unknown control request {}", type);
    }
  }

  std::shared_ptr<Conn> ConnById(int id) {
    std::lock_guard lock(conns_mu);
    auto it = conns_by_id.find(id);
    return it == conns_by_id.end() ? nullptr : it->second;
  }

  std::string TransportAddresses() const {
    net::Writer w;
    w.Put<uint32_t>(static_cast<uint32_t>(transports.size()));
    for (auto& t : transports) w.PutBytes(t->name()).PutBytes(t->LocalAddress());
    return std::move(w.str());
  }

  static bool ReadAddresses(net::Reader& rd, std::vector<std::pair<std::string, std::string>>* out) {
    uint32_t n = 0;
    if (!rd.Get(&n)) return false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string name, addr;
      if (!rd.GetBytes(&name) || !rd.GetBytes(&addr)) return false;
      out->emplace_back(std::move(name), std::move(addr));
    }
    return true;
  }

  // Hello: [u64 uuid][name][callback host][u16 callback port][i32 the client's id for us]
  //   -> [u64 our uuid][i32 the client's id here][our transports]
  Result<std::string> Hello(std::string_view payload) {
    net::Reader rd(payload);
    uint64_t their_uuid = 0;
    std::string name, cb_host;
    uint16_t cb_port = 0;
    int32_t our_id_there = -1;
    if (!rd.Get(&their_uuid) || !rd.GetBytes(&name) || !rd.GetBytes(&cb_host) || !rd.Get(&cb_port) ||
        !rd.Get(&our_id_there)) {
      return Err(Errc::kInvalidArg, "malformed hello");
    }
    std::lock_guard lock(clients_mu);
    const int32_t id = next_client_id++;
    Client c;
    c.name = name;
    c.callback = std::make_shared<bootstrap::ControlClient>(our_id_there, id, cb_host, cb_port, "engine " + name);
    clients.emplace(id, std::move(c));
    net::Writer w;
    w.Put(uuid).Put(id);
    w.str().append(TransportAddresses());
    return std::move(w.str());
  }

  // ------------------------------------------------------------- memory

  Status Register(const MemDesc& mem, MemType type) {
    if (type == MEM_DEVICE) {
      return Err(Errc::kUnsupported, "Engine::RegisterMem: device memory is not supported yet (only MEM_HOST)");
    }
    if (type != MEM_HOST) return Err(Errc::kInvalidArg, "Engine::RegisterMem: unknown MemType {}", static_cast<int>(type));
    if (mem.addr == 0) return Err(Errc::kInvalidArg, "Engine::RegisterMem: addr is 0");
    if (mem.len == 0) return Err(Errc::kInvalidArg, "Engine::RegisterMem: len is 0");
    if (mem.addr + mem.len < mem.addr) {
      return Err(Errc::kInvalidArg, "Engine::RegisterMem: [{:#x}, +{}) wraps around", mem.addr, mem.len);
    }
    LocalRegistry::Region r;
    r.desc.base = mem.addr;
    r.desc.len = mem.len;
    Status s = AddRegionEverywhere(registry, transports, std::move(r));
    if (!s.ok()) return Err(s.code(), "Engine::RegisterMem: {}", s.message());
    return s;
  }

  Status Deregister(MemHandle handle) {
    const auto base = reinterpret_cast<uint64_t>(handle);
    std::optional<LocalRegistry::Region> removed;
    Status s = registry.Remove(base, false, &removed);
    if (!s.ok()) {
      return Err(Errc::kInvalidArg, "Engine::DeregisterMem: handle {} is not a registration of this engine ({})",
                 handle, s.message());
    }
    if (!removed) return Status::Ok();  // references remain
    // Every engine holding our table forgets the region before we return.
    const uint64_t gen = registry.generation();
    net::Writer w;
    w.Put(gen).Put(base).Put(removed->desc.len);
    // Copied out: our own control thread (a connection to ourselves) may
    // need clients_mu to answer.
    std::vector<std::pair<std::string, std::shared_ptr<bootstrap::ControlClient>>> subs;
    {
      std::lock_guard lock(clients_mu);
      for (auto& [id, c] : clients) {
        if (c.subscribed) subs.emplace_back(c.name, c.callback);
      }
    }
    for (auto& [name, cb] : subs) {
      auto r = cb->Call(kInvalidate, w.str(), cfg.timeout_ms);
      if (!r.ok()) HIXL_LOG_DEBUG("engine {} did not acknowledge a deregistration: {}", name, r.status().message());
    }
    for (auto& t : transports) t->DeregisterRegion(removed->desc);
    return Status::Ok();
  }

  // ---------------------------------------------------------- connections

  Status Connect(const std::string& remote, int32_t timeout_ms) {
    HIXL_ASSIGN_OR_RETURN(HostPort hp, ParseEngine("Engine::Connect", remote));
    if (hp.port == 0) {
      return Err(Errc::kInvalidArg, "Engine::Connect: '{}' has no port; an engine is reached at the ip:port it "
                 "listens on", remote);
    }
    if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::Connect: timeout_ms {} must be > 0", timeout_ms);
    int id = 0;
    {
      std::lock_guard lock(conns_mu);
      if (auto it = conns.find(remote); it != conns.end()) {
        return Status(Errc::kAlreadyInitialized, fmt::format("Engine::Connect: already connected to {}{}", remote,
                                                              it->second ? "" : " (a connection is being made)"));
      }
      conns.emplace(remote, nullptr);  // reserved while we connect
      id = next_conn_id++;
    }
    auto c = std::make_shared<Conn>();
    Status s = Dial(remote, hp, id, timeout_ms, c.get());
    std::lock_guard lock(conns_mu);
    if (!s.ok() || state != State::kLive) {
      conns.erase(remote);
      return s.ok() ? Err(Errc::kNotInitialized, "Engine::Connect: the engine was finalized meanwhile") : s;
    }
    conns[remote] = c;
    conns_by_id[c->key] = c;
    return Status::Ok();
  }

  // Says hello to the engine at hp and prepares a transport to it.
  Status Dial(const std::string& remote, const HostPort& hp, int id, int32_t timeout_ms, Conn* c) {
    const std::string who = "engine " + remote;
    std::string cb_host = callback_host.empty() ? net::LocalAddressTowards(hp.host, hp.port) : callback_host;
    net::Writer hello;
    hello.Put(uuid).PutBytes(local_name).PutBytes(cb_host).Put<uint16_t>(server->port()).Put<int32_t>(id);
    bootstrap::ControlClient dial(-1, -1, hp.host, hp.port, who);
    auto reply = dial.Call(kHello, hello.str(), timeout_ms);
    dial.Close();
    if (!reply.ok()) {
      // Nobody listening there (yet): net::Connect retries until the deadline.
      const Status st = reply.status();
      if (st.code() == Errc::kTimeout || st.message().find("before the timeout") != std::string::npos) {
        return Err(Errc::kTimeout, "Engine::Connect: no engine answered at {} within {} ms: {}", remote, timeout_ms,
                   reply.status().message());
      }
      return Err(Errc::kPeerFailed, "Engine::Connect: {}", reply.status().message());
    }
    net::Reader rd(reply.value());
    uint64_t their_uuid = 0;
    int32_t our_id_there = -1;
    std::vector<std::pair<std::string, std::string>> addrs;
    if (!rd.Get(&their_uuid) || !rd.Get(&our_id_there) || !ReadAddresses(rd, &addrs)) {
      return Err(Errc::kTransport, "Engine::Connect: malformed reply from {}", who);
    }
    const bool self = their_uuid == uuid;
    c->name = remote;
    c->key = id;
    c->id = id;
    c->our_id_there = our_id_there;
    for (auto& t : transports) {
      auto it = std::find_if(addrs.begin(), addrs.end(), [&](auto& a) { return a.first == t->name(); });
      if (it == addrs.end() || !t->CanReach(it->second)) continue;
      bool connect = true;
      if (self) {
        std::lock_guard lock(conns_mu);
        connect = !self_transport_connected;  // never replace a peer that keys may point to
        self_transport_connected = true;
      }
      if (connect) {
        Status s = t->Connect(id, it->second);
        if (!s.ok()) return Err(s.code(), "Engine::Connect: {} transport to {}: {}", t->name(), who, s.message());
      }
      c->transport = t.get();
      break;
    }
    if (!c->transport) {
      std::string theirs;
      for (auto& a : addrs) theirs += (theirs.empty() ? "" : ", ") + a.first;
      return Err(Errc::kUnsupported,
                 "Engine::Connect: {} cannot be reached with the transports in use here ({}; it offers {}): it is on "
                 "another host{}", who, TransportList(transports), theirs,
                 cfg.transport == "shm" ? " and transport=shm allows only same-host engines" : "");
    }
    c->control = std::make_unique<bootstrap::ControlClient>(our_id_there, id, hp.host, hp.port, who);
    return Status::Ok();
  }

  Status Disconnect(const std::string& remote, int32_t timeout_ms) {
    if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::Disconnect: timeout_ms {} must be > 0", timeout_ms);
    std::shared_ptr<Conn> c;
    {
      std::lock_guard lock(conns_mu);
      auto it = conns.find(remote);
      if (it == conns.end() || !it->second) {
        return Err(Errc::kNotConnected, "Engine::Disconnect: not connected to {}", remote);
      }
      c = it->second;
      conns.erase(it);
      conns_by_id.erase(c->key);
    }
    if (!c->broken) (void)c->control->Call(kBye, {}, timeout_ms);  // it may have gone; we are disconnected anyway
    return Status::Ok();
  }

  // The live connection to `remote`, or NOT_CONNECTED explaining why not.
  Result<std::shared_ptr<Conn>> Find(const char* api, const std::string& remote) {
    std::shared_ptr<Conn> c;
    {
      std::lock_guard lock(conns_mu);
      auto it = conns.find(remote);
      if (it != conns.end()) c = it->second;
    }
    if (!c) return Err(Errc::kNotConnected, "{}: not connected to engine {} (call Connect first)", api, remote);
    if (c->broken) {
      return Err(Errc::kNotConnected, "{}: engine {} has gone away ({}); Disconnect, then Connect again", api, remote,
                 c->BrokenReason());
    }
    return c;
  }

  // ------------------------------------------------------------ transfers

  Status Refresh(Conn& c) {
    std::lock_guard lock(c.refresh_mu);
    return RefreshPeerTable(c.table, *c.transport, c.id, "engine " + c.name, [&]() -> Result<RegionTable> {
      auto bytes = c.control->Call(kFetchTable, {}, cfg.timeout_ms);
      if (!bytes.ok()) {
        return Err(bytes.status().code(), "fetching the region table of engine {}: {}", c.name, bytes.status().message());
      }
      return RegionTable::Parse(bytes.value());
    });
  }

  // Checks the whole batch, then moves it; bounded by deadline.  `stop`
  // (may be null) ends it early.
  Status Run(const char* api, Conn& c, TransferOp op, const std::vector<TransferOpDesc>& descs,
             Clock::time_point deadline, int64_t timeout_ms, const std::atomic<bool>* stop) {
    if (op != READ && op != WRITE) return Err(Errc::kInvalidArg, "{}: unknown TransferOp {}", api, static_cast<int>(op));
    std::vector<const PeerTable::Entry*> keys(descs.size());
    bool refreshed = false;
    for (size_t i = 0; i < descs.size(); ++i) {
      const TransferOpDesc& d = descs[i];
      if (d.len == 0) continue;
      if (d.local_addr == 0 || d.remote_addr == 0) {
        return Err(Errc::kInvalidArg, "{}: block {} of {}: the {} address is 0", api, i, descs.size(),
                   d.local_addr == 0 ? "local" : "remote");
      }
      if (d.local_addr + d.len < d.local_addr || d.remote_addr + d.len < d.remote_addr) {
        return Err(Errc::kInvalidArg, "{}: block {} of {}: a range of {} bytes wraps around", api, i, descs.size(), d.len);
      }
      const PeerTable::Entry* e = c.table.Find(d.remote_addr, d.len);
      if (!e && !refreshed) {
        // The peer may have registered since we last looked: once per batch.
        HIXL_RETURN_IF_ERROR(Refresh(c));
        refreshed = true;
        e = c.table.Find(d.remote_addr, d.len);
      }
      if (!e) {
        return Err(Errc::kNotRegistered,
                   "{}: Remote memory not registered: engine {} has no registered region holding {} bytes at {:#x} "
                   "(block {} of {}; the range [{:#x}, {:#x}) must lie inside one region it registered); nothing "
                   "was transferred", api, c.name, d.len, d.remote_addr, i, descs.size(), d.remote_addr,
                   d.remote_addr + d.len);
      }
      keys[i] = e;
    }
    // Issued in chunks, so that the deadline and `stop` are looked at
    // between them (a transport may move a chunk with few calls).
    constexpr size_t kChunk = 256;
    std::vector<transport::Transport::Piece> pieces;
    pieces.reserve(std::min(descs.size(), kChunk));
    for (size_t first = 0; first < descs.size(); first += kChunk) {
      if ((stop && stop->load(std::memory_order_relaxed)) || Clock::now() >= deadline) {
        (void)c.transport->Flush();
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
      Status s = c.transport->Batch(c.id, op == WRITE, pieces.data(), pieces.size());
      if (!s.ok()) {
        (void)c.transport->Flush();
        return Err(s.code(), "{}: {} of blocks {}..{} of {} with engine {}: {}", api, op == WRITE ? "WRITE" : "READ",
                   first, end - 1, descs.size(), c.name, s.message());
      }
    }
    Status s = c.transport->Flush();
    if (!s.ok()) return Err(s.code(), "{}: completing the transfer with engine {}: {}", api, c.name, s.message());
    return Status::Ok();
  }

  // A failure that means the peer is gone marks the connection.
  Status Note(Conn& c, Status s) {
    if (s.code() == Errc::kPeerFailed) c.Break(s.message());
    return s;
  }

  Status TransferSync(const std::string& remote, TransferOp op, const std::vector<TransferOpDesc>& descs,
                      int32_t timeout_ms) {
    if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::TransferSync: timeout_ms {} must be > 0", timeout_ms);
    HIXL_ASSIGN_OR_RETURN(auto c, Find("Engine::TransferSync", remote));
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    return Note(*c, Run("Engine::TransferSync", *c, op, descs, deadline, timeout_ms, nullptr));
  }

  Result<uint64_t> TransferAsync(const std::string& remote, TransferOp op, const std::vector<TransferOpDesc>& descs,
                                 const TransferArgs& args) {
    if (args.timeout_ms < 0) return Err(Errc::kInvalidArg, "Engine::TransferAsync: timeout_ms {} is negative", args.timeout_ms);
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

  void Work() {
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
      if (!s.ok()) {
        r->message = s.message();
        st = s.code() == Errc::kTimeout ? TransferStatus::TIMEOUT : TransferStatus::FAILED;
      }
      r->state.store(static_cast<int>(st), std::memory_order_release);
    }
  }

  Status GetStatus(TransferReq req, TransferStatus* out) {
    const auto id = reinterpret_cast<uint64_t>(req);
    std::lock_guard lock(req_mu);
    auto it = requests.find(id);
    if (it == requests.end()) {
      return Err(Errc::kInvalidArg, "Engine::GetTransferStatus: unknown request {} (never made, or its final status "
                 "was reported already)", req);
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
      s = Status(st == TransferStatus::FAILED ? Errc::kTransport : Errc::kTimeout, r.message);
    }
    if (st != TransferStatus::WAITING) requests.erase(it);
    return s;
  }

  // --------------------------------------------------------- notifications

  Status SendNotify(const std::string& remote, const NotifyDesc& n, int32_t timeout_ms) {
    if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::SendNotify: timeout_ms {} must be > 0", timeout_ms);
    if (n.name.size() + n.notify_msg.size() > kMaxNotifyBytes) {
      return Err(Errc::kInvalidArg, "Engine::SendNotify: name and message are {} bytes; at most {} fit", 
                 n.name.size() + n.notify_msg.size(), kMaxNotifyBytes);
    }
    HIXL_ASSIGN_OR_RETURN(auto c, Find("Engine::SendNotify", remote));
    net::Writer w;
    w.PutBytes(n.name).PutBytes(n.notify_msg);
    auto r = c->control->Call(kNotify, w.str(), timeout_ms);
    if (!r.ok()) return Note(*c, Err(r.status().code(), "Engine::SendNotify: {}", r.status().message()));
    return Status::Ok();
  }

  Status TakeNotifies(std::vector<NotifyDesc>* out, bool wait, int32_t timeout_ms) {
    std::unique_lock lock(notify_mu);
    if (wait) {
      if (timeout_ms < 0) return Err(Errc::kInvalidArg, "Engine::WaitNotifies: timeout_ms {} is negative", timeout_ms);
      if (!notify_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !notifies.empty() || waking; })) {
        return Err(Errc::kTimeout, "Engine::WaitNotifies: no notification came within {} ms", timeout_ms);
      }
      if (notifies.empty()) return Err(Errc::kNotInitialized, "Engine::WaitNotifies: the engine was finalized");
    }
    out->clear();
    out->assign(std::make_move_iterator(notifies.begin()), std::make_move_iterator(notifies.end()));
    notifies.clear();
    return Status::Ok();
  }
};

// ------------------------------------------------------------------ Engine

Engine::Engine() : impl_(std::make_shared<Impl>()) {}

Engine::~Engine() { Finalize(); }

const char* Engine::LastError() { return t_last_error.c_str(); }

#define HIXL_ENGINE_LIVE(api)                                                                          \
  std::shared_lock life(impl_->life_mu);                                                             \
  if (impl_->state != Impl::State::kLive) {                                                          \
    return Fail(FAILED, fmt::format("{} called {}", api,                                             \
                                    impl_->state == Impl::State::kNew ? "before Engine::Initialize"  \
                                                                      : "after Engine::Finalize")); \
  }

EngineStatus Engine::Initialize(const std::string& local_engine, const std::map<std::string, std::string>& options) {
  std::unique_lock life(impl_->life_mu);
  if (impl_->state != Impl::State::kNew) {
    return Fail(FAILED, impl_->state == Impl::State::kLive ? "Engine::Initialize called twice"
                                                           : "Engine::Initialize called after Engine::Finalize; use a "
                                                             "new Engine");
  }
  Status s = impl_->Start(local_engine, options);
  if (!s.ok()) {
    impl_->Teardown();
    impl_ = std::make_shared<Impl>();  // a clean one: Initialize may be tried again
    return Fail(s);
  }
  impl_->state = Impl::State::kLive;
  return Done();
}

void Engine::Finalize() {
  {
    // Wake a WaitNotifies first: it holds the life lock shared.
    std::lock_guard lock(impl_->notify_mu);
    impl_->waking = true;
  }
  impl_->notify_cv.notify_all();
  std::unique_lock life(impl_->life_mu);
  if (impl_->state != Impl::State::kLive) {
    if (impl_->state == Impl::State::kNew) impl_->waking = false;
    return;
  }
  impl_->state = Impl::State::kFinalized;
  impl_->Teardown();
}

EngineStatus Engine::RegisterMem(const MemDesc& mem, MemType type, MemHandle& handle) {
  HIXL_ENGINE_LIVE("Engine::RegisterMem");
  Status s = impl_->Register(mem, type);
  if (!s.ok()) return Fail(s);
  handle = reinterpret_cast<MemHandle>(mem.addr);
  return Done();
}

EngineStatus Engine::DeregisterMem(MemHandle handle) {
  HIXL_ENGINE_LIVE("Engine::DeregisterMem");
  Status s = impl_->Deregister(handle);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::Connect(const std::string& remote_engine, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::Connect");
  Status s = impl_->Connect(remote_engine, timeout_ms);
  if (s.code() == Errc::kAlreadyInitialized) return Fail(ALREADY_CONNECTED, s.message());
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::Disconnect(const std::string& remote_engine, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::Disconnect");
  Status s = impl_->Disconnect(remote_engine, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::TransferSync(const std::string& remote_engine, TransferOp operation,
                                  const std::vector<TransferOpDesc>& op_descs, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::TransferSync");
  Status s = impl_->TransferSync(remote_engine, operation, op_descs, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::TransferAsync(const std::string& remote_engine, TransferOp operation,
                                   const std::vector<TransferOpDesc>& op_descs, const TransferArgs& optional_args,
                                   TransferReq& req) {
  HIXL_ENGINE_LIVE("Engine::TransferAsync");
  auto r = impl_->TransferAsync(remote_engine, operation, op_descs, optional_args);
  if (!r.ok()) return Fail(r.status());
  req = reinterpret_cast<TransferReq>(r.value());
  return Done();
}

EngineStatus Engine::GetTransferStatus(const TransferReq& req, TransferStatus& status) {
  HIXL_ENGINE_LIVE("Engine::GetTransferStatus");
  Status s = impl_->GetStatus(req, &status);
  if (s.ok()) return Done();
  // The transfer's own failure: the call worked, the status says FAILED or
  // TIMEOUT, and LastError() says why.
  if (s.code() == Errc::kTransport || s.code() == Errc::kTimeout) {
    t_last_error = s.message();
    return SUCCESS;
  }
  return Fail(s);
}

EngineStatus Engine::SendNotify(const std::string& remote_engine, const NotifyDesc& notify, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::SendNotify");
  Status s = impl_->SendNotify(remote_engine, notify, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::GetNotifies(std::vector<NotifyDesc>& notifies) {
  HIXL_ENGINE_LIVE("Engine::GetNotifies");
  Status s = impl_->TakeNotifies(&notifies, false, 0);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::WaitNotifies(std::vector<NotifyDesc>& notifies, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::WaitNotifies");
  Status s = impl_->TakeNotifies(&notifies, true, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

}  // namespace hixl
