#include "transport/ucx/ucx_transport.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "core/log.h"

namespace hixl::transport::ucx {

namespace {

using net::Deadline;
using net::Fd;

constexpr std::string_view kAddressMagic = "hixl-ucx/1";
// A flush progresses the worker itself this many times in a row without
// finding work before it sleeps until the progress thread completes a
// request, checking again at least every kFlushWaitMs (a safety net only).
constexpr int kSpinsBeforeSleep = 64;
constexpr int kFlushWaitMs = 10;
// UCX_TLS when the user has not set it: everything but the transports that
// cannot serve endpoints with peer-failure handling (see CreateContext).
constexpr const char* kDefaultTls = "^posix,sysv";
// UCX settings hixl changes from UCX's defaults unless the user set them.
// `key` is the name ucp_config_modify takes for the TCP transport's field
// (without its table prefix: only the TCP transport has these fields).
struct UcxDefault {
  const char* key;
  const char* value;
  const char* env[2];  // the variables that set it (UCX takes both spellings)
};
constexpr UcxDefault kTcpDefaults[] = {
    {"TX_SEG_SIZE", "512k", {"UCX_TCP_TX_SEG_SIZE", "UCX_TX_SEG_SIZE"}},
    {"RX_SEG_SIZE", "512k", {"UCX_TCP_RX_SEG_SIZE", "UCX_RX_SEG_SIZE"}},
};

// UCX statuses that mean the peer, or the way to it, is gone.
bool IsPeerFailure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_CANCELED:
    case UCS_ERR_IO_ERROR:
      return true;
    default:
      return false;
  }
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

// The UCP context and worker.  Shared by the transport, its peers and the
// keys unpacked for them, so that whichever goes last tears them down.
struct Worker {
  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    if (worker) ucp_worker_destroy(worker);
    if (context) ucp_cleanup(context);
  }

  // Every UCP call on the context, the worker, the endpoints and the rkeys
  // is made holding mu (the worker is UCS_THREAD_MODE_SERIALIZED).  UCP
  // callbacks run inside ucp_worker_progress, so they run holding it too.
  std::mutex mu;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  // Set when a request completes or an endpoint fails: what a waiting
  // flush may be waiting for.
  std::atomic<bool> completed{false};
};

struct UcxKey;

// One peer: its published address and, once needed, the endpoint to it.
struct Peer {
  Peer(std::shared_ptr<Worker> w, int rank, std::string host, std::string address)
      : w(std::move(w)), rank(rank), host(std::move(host)), address(std::move(address)) {}
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  // Closes the endpoint.  Keys unpacked with it hold the Peer, so none is
  // left when this runs.
  ~Peer() {
    std::lock_guard lock(w->mu);
    if (!ep) return;
    if (ep_error.load() == UCS_OK) {
      // Let the endpoint's wire-up finish first: a peer still answering it
      // when the endpoint vanishes fails in UCX itself (an assertion about
      // its wire-up reply, seen with UCX 1.13 when an engine disconnected
      // right after connecting).  A flush completes after the wire-up.
      ucp_request_param_t fp{};
      ucs_status_ptr_t freq = ucp_ep_flush_nbx(ep, &fp);
      if (UCS_PTR_IS_PTR(freq)) {
        const Deadline deadline = net::DeadlineIn(2000);
        while (ucp_request_check_status(freq) == UCS_INPROGRESS && net::Clock::now() < deadline &&
               ep_error.load() == UCS_OK) {
          ucp_worker_progress(w->worker);
        }
        ucp_request_free(freq);
      }
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // local only: never waits for the peer
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) {
      // A forced close completes locally; the bound is only a safety net.
      const Deadline deadline = net::DeadlineIn(5000);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && net::Clock::now() < deadline) {
        ucp_worker_progress(w->worker);
      }
      ucp_request_free(req);
    }
    ep = nullptr;
  }

  std::string Name() const { return fmt::format("rank {} (host {})", rank, host); }

  const std::shared_ptr<Worker> w;
  const int rank;
  const std::string host;
  const std::string address;  // the peer's UCP worker address

  // Guarded by w->mu.
  ucp_ep_h ep = nullptr;
  bool closed = false;             // Disconnect ran: every call with its keys fails
  std::set<UcxKey*> keys;          // the keys unpacked with ep that still hold an rkey
  uint64_t outstanding = 0;        // put/get requests started and not yet completed
  uint64_t flushing = 0;           // endpoint flushes started and not yet completed
  bool dirty = false;              // operations started since the last flush
  ucs_status_t op_error = UCS_OK;  // the first failed operation or flush since the last flush
  // Set by the endpoint's error handler.
  std::atomic<ucs_status_t> ep_error{UCS_OK};
};

struct UcxKey final : RemoteKey {
  // w->mu held.
  UcxKey(std::shared_ptr<Peer> peer, ucp_rkey_h rkey) : peer(std::move(peer)), rkey(rkey) {
    this->peer->keys.insert(this);
  }
  UcxKey(const UcxKey&) = delete;
  UcxKey& operator=(const UcxKey&) = delete;
  // The rkey goes before the endpoint (and the worker) that `peer` keeps
  // alive; Disconnect may have destroyed it already, with the endpoint.
  ~UcxKey() override {
    std::lock_guard lock(peer->w->mu);
    if (rkey) ucp_rkey_destroy(rkey);
    peer->keys.erase(this);
  }
  const std::shared_ptr<Peer> peer;
  ucp_rkey_h rkey;  // guarded by peer->w->mu; null once Disconnect destroyed it
};

// Completion of a put or get that did not complete at once (worker mutex held).
void OnOpDone(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  --p->outstanding;
  if (status != UCS_OK && p->op_error == UCS_OK) p->op_error = status;
  p->w->completed.store(true, std::memory_order_relaxed);
  ucp_request_free(request);
}

// Completion of an endpoint flush (worker mutex held).
void OnFlushDone(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  --p->flushing;
  if (status != UCS_OK && p->op_error == UCS_OK) p->op_error = status;
  p->w->completed.store(true, std::memory_order_relaxed);
  ucp_request_free(request);
}

// One remote atomic in flight.  Its operand and reply live here, not on the
// caller's stack, so that a caller that gives up (HIXL_TIMEOUT_MS) leaves
// UCX nothing dangling: the completion then frees it.
struct AtomicCall {
  Worker* w = nullptr;
  uint64_t operand = 0;  // ucp_atomic_op_nbx's buffer
  uint64_t reply = 0;    // its reply_buffer: the value before the operation
  bool done = false;
  bool abandoned = false;
  ucs_status_t status = UCS_OK;
};

// Completion of an atomic (worker mutex held).
void OnAtomicDone(void* request, ucs_status_t status, void* user_data) {
  auto* c = static_cast<AtomicCall*>(user_data);
  ucp_request_free(request);
  if (c->abandoned) {
    delete c;
    return;
  }
  c->done = true;
  c->status = status;
  c->w->completed.store(true, std::memory_order_relaxed);
}

// UCX's error handler of an endpoint (called from progress): the peer is
// gone, and every later operation to it fails at once.
void OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  ucs_status_t expected = UCS_OK;
  if (p->ep_error.compare_exchange_strong(expected, status)) {
    HIXL_LOG_INFO("ucx: the endpoint to {} failed: {}", p->Name(), ucs_status_string(status));
  }
  p->w->completed.store(true, std::memory_order_relaxed);
}

// -------------------------------------------------------- the transport

class UcxTransport final : public Transport {
 public:
  UcxTransport(Host* host, const Options& options) : host_(host), options_(options) {}

  ~UcxTransport() override {
    Shutdown();
    std::vector<std::shared_ptr<Peer>> peers, dirty, retired;
    std::multimap<uint64_t, Mapped> mapped;
    {
      std::lock_guard lock(w_->mu);
      peers.swap(peers_);
      dirty.swap(dirty_);
      retired.swap(retired_);
      mapped.swap(mapped_);
      for (auto& [base, m] : mapped) ucp_mem_unmap(w_->context, m.memh);
    }
    // Endpoints close as their last holder lets go (keys may hold some).
  }

  Status Start() {
    w_ = std::make_shared<Worker>();
    // UCX emulates RMA over TCP with active messages of at most one TCP
    // segment (8 KiB by default): every segment costs a system call and a
    // progress round on both sides.  Larger segments make large puts and gets
    // several times faster (docs/ucx.md has the figures).  The UCX_TCP_*
    // variables still win when set.  Where UCX has no TCP device (UCX_TLS=rc,
    // HIXL_NET_DEV=mlx5_0:1) nothing would take the settings and UCX would
    // warn about them at every start, so the context is made again without.
    auto context = CreateContext(/*tune_tcp=*/true);
    if (context.ok() && !HasTcpResource(context.value())) {
      ucp_cleanup(context.value());
      context = CreateContext(/*tune_tcp=*/false);
    }
    if (!context.ok()) return context.status();
    w_->context = context.value();
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    ucs_status_t st = ucp_worker_create(w_->context, &wp, &w_->worker);
    if (st != UCS_OK) {
      w_->worker = nullptr;
      return Err(Errc::kTransport, "ucx: ucp_worker_create failed: {}{}", ucs_status_string(st),
                 options_.net_dev.empty() ? "" : fmt::format(" (HIXL_NET_DEV={})", options_.net_dev));
    }
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    st = ucp_worker_query(w_->worker, &attr);
    if (st != UCS_OK) return Err(Errc::kTransport, "ucx: cannot get the worker address: {}", ucs_status_string(st));
    worker_address_.assign(reinterpret_cast<const char*>(attr.address), attr.address_length);
    ucp_worker_release_address(w_->worker, attr.address);
    st = ucp_worker_get_efd(w_->worker, &efd_);
    if (st != UCS_OK) return Err(Errc::kTransport, "ucx: cannot get the worker's event fd: {}", ucs_status_string(st));
    wake_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_.valid()) return Err(Errc::kTransport, "ucx: eventfd failed: {}", std::strerror(errno));
    host_name_ = HostName();
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  // A UCP context from the UCX_* variables, HIXL_NET_DEV and, if asked,
  // hixl's TCP settings.
  Result<ucp_context_h> CreateContext(bool tune_tcp) const {
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) {
      return Err(Errc::kTransport, "ucx: cannot read the UCX configuration (UCX_* variables): {}",
                 ucs_status_string(st));
    }
    for (const UcxDefault& d : kTcpDefaults) {
      if (!tune_tcp || std::getenv(d.env[0]) != nullptr || std::getenv(d.env[1]) != nullptr) continue;
      st = ucp_config_modify(config, d.key, d.value);
      if (st != UCS_OK) HIXL_LOG_DEBUG("ucx: cannot set {}={}: {}", d.env[0], d.value, ucs_status_string(st));
    }
    // hixl's endpoints need peer-failure handling (a dead peer must be an
    // error, not a hang), which UCX's posix and sysv shared-memory transports
    // lack in UCX 1.13: they can never carry hixl's traffic, so unless
    // UCX_TLS says otherwise they are left out.  Opened, they would only take
    // memory (their receive FIFOs), and at an exit without finalize
    // LeakSanitizer reports UCX's descriptors, kept inside those FIFOs, as
    // leaked.
    if (std::getenv("UCX_TLS") == nullptr) {
      st = ucp_config_modify(config, "TLS", kDefaultTls);
      if (st != UCS_OK) HIXL_LOG_DEBUG("ucx: cannot set UCX_TLS={}: {}", kDefaultTls, ucs_status_string(st));
    }
    if (!options_.net_dev.empty()) {
      st = ucp_config_modify(config, "NET_DEVICES", options_.net_dev.c_str());
      if (st != UCS_OK) {
        ucp_config_release(config);
        return Err(Errc::kInvalidArg, "ucx: HIXL_NET_DEV={} is not a valid UCX device list: {}", options_.net_dev,
                   ucs_status_string(st));
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    params.name = "hixl";
    ucp_context_h context = nullptr;
    st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (st != UCS_OK) {
      return Err(Errc::kTransport, "ucx: ucp_init failed: {}{}", ucs_status_string(st),
                 options_.net_dev.empty() ? "" : fmt::format(" (HIXL_NET_DEV={})", options_.net_dev));
    }
    return context;
  }

  // Whether the context has a TCP resource: ucp_context_print_info lists
  // each as "resource N : md M dev D flags -- tcp/<device>".
  static bool HasTcpResource(ucp_context_h context) {
    char* text = nullptr;
    size_t size = 0;
    FILE* f = ::open_memstream(&text, &size);
    if (!f) return true;  // cannot tell: keep the settings
    ucp_context_print_info(context, f);
    std::fclose(f);
    const bool found = text && std::string_view(text, size).find("-- tcp/") != std::string_view::npos;
    std::free(text);
    return found;
  }

  std::string_view name() const override { return "ucx"; }
  const Capabilities& caps() const override { return kCaps; }

  std::string LocalAddress() const override {
    net::Writer w;
    w.PutBytes(kAddressMagic).PutBytes(host_name_).PutBytes(worker_address_);
    return std::move(w.str());
  }

  bool CanReach(std::string_view address) const override {
    std::string host, addr;
    return Parse(address, &host, &addr);
  }

  Status Connect(int peer, std::string_view address) override {
    std::string host, addr;
    if (!Parse(address, &host, &addr)) return Err(Errc::kTransport, "ucx: malformed address from rank {}", peer);
    if (peer < 0) return Err(Errc::kInvalidRank, "ucx: rank {} is invalid", peer);
    auto p = std::make_shared<Peer>(w_, peer, std::move(host), std::move(addr));
    std::shared_ptr<Peer> old;
    std::lock_guard lock(w_->mu);
    if (peers_.size() <= static_cast<size_t>(peer)) peers_.resize(static_cast<size_t>(peer) + 1);
    old = std::exchange(peers_[static_cast<size_t>(peer)], std::move(p));
    if (old) {
      // Not expected (the core connects once); let it go outside the lock.
      return Err(Errc::kInternal, "ucx: rank {} connected twice", peer);
    }
    return Status::Ok();
  }

  Result<std::string> RegisterRegion(const LocalRegion& region) override {
    if (region.kind != MemKind::kHost) {
      return Err(Errc::kUnsupported, "ucx: this transport moves host memory only");
    }
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = reinterpret_cast<void*>(region.base);
    mp.length = region.len;
    mp.memory_type = UCS_MEMORY_TYPE_HOST;
    std::lock_guard lock(w_->mu);
    ucp_mem_h memh = nullptr;
    ucs_status_t st = ucp_mem_map(w_->context, &mp, &memh);
    if (st != UCS_OK) {
      return Err(Errc::kTransport, "ucx: ucp_mem_map of {} bytes at {:#x} failed: {}", region.len, region.base,
                 ucs_status_string(st));
    }
    void* buf = nullptr;
    size_t size = 0;
    st = ucp_rkey_pack(w_->context, memh, &buf, &size);
    if (st != UCS_OK) {
      ucp_mem_unmap(w_->context, memh);
      return Err(Errc::kTransport, "ucx: ucp_rkey_pack of the region at {:#x} failed: {}", region.base,
                 ucs_status_string(st));
    }
    std::string blob(static_cast<const char*>(buf), size);
    ucp_rkey_buffer_release(buf);
    mapped_.emplace(region.base, Mapped{region.len, memh});
    return blob;
  }

  void DeregisterRegion(const LocalRegion& region) override {
    std::lock_guard lock(w_->mu);
    auto [first, last] = mapped_.equal_range(region.base);
    for (auto it = first; it != last; ++it) {
      if (it->second.len != region.len) continue;
      ucs_status_t st = ucp_mem_unmap(w_->context, it->second.memh);
      if (st != UCS_OK) {
        HIXL_LOG_WARN("ucx: ucp_mem_unmap of the region at {:#x} failed: {}", region.base, ucs_status_string(st));
      }
      mapped_.erase(it);
      return;
    }
  }

  Result<std::shared_ptr<RemoteKey>> UnpackKey(int peer, uint64_t base, uint64_t len,
                                               std::string_view key_blob) override {
    std::lock_guard lock(w_->mu);
    HIXL_ASSIGN_OR_RETURN(std::shared_ptr<Peer> p, PeerLocked(peer));
    HIXL_RETURN_IF_ERROR(EnsureEndpoint(p.get()));
    if (key_blob.empty()) {
      return Err(Errc::kTransport, "ucx: {} published no key for its region at {:#x}", p->Name(), base);
    }
    // ucp_ep_rkey_unpack reads the blob as a packed rkey; it checks the
    // framing itself.
    ucp_rkey_h rkey = nullptr;
    ucs_status_t st = ucp_ep_rkey_unpack(p->ep, key_blob.data(), &rkey);
    if (st != UCS_OK) {
      return Err(Errc::kTransport, "ucx: cannot unpack the key of the region [{:#x}, +{}) of {}: {}", base, len,
                 p->Name(), ucs_status_string(st));
    }
    return std::shared_ptr<RemoteKey>(std::make_shared<UcxKey>(std::move(p), rkey));
  }

  Status Put(int peer, const RemoteKey& key, const void* src, uint64_t dst, size_t n) override {
    const auto& k = static_cast<const UcxKey&>(key);
    Peer* p = k.peer.get();
    if (p->rank != peer) return Err(Errc::kInternal, "ucx: a key of rank {} used for rank {}", p->rank, peer);
    std::lock_guard lock(w_->mu);
    HIXL_RETURN_IF_ERROR(Usable(p));
    ucp_request_param_t param = OpParam(p);
    return Started(k.peer, ucp_put_nbx(p->ep, src, n, dst, k.rkey, &param), "put", dst, n);
  }

  Status Get(int peer, const RemoteKey& key, uint64_t src, void* dst, size_t n) override {
    const auto& k = static_cast<const UcxKey&>(key);
    Peer* p = k.peer.get();
    if (p->rank != peer) return Err(Errc::kInternal, "ucx: a key of rank {} used for rank {}", p->rank, peer);
    std::lock_guard lock(w_->mu);
    HIXL_RETURN_IF_ERROR(Usable(p));
    ucp_request_param_t param = OpParam(p);
    return Started(k.peer, ucp_get_nbx(p->ep, dst, n, src, k.rkey, &param), "get", src, n);
  }

  Status Flush() override {
    // One flush at a time: a second caller waits for the first and then
    // flushes what was started meanwhile, so neither returns early.
    std::lock_guard flush_lock(flush_mu_);
    const Deadline deadline = net::DeadlineIn(host_->timeout_ms());
    std::unique_lock lock(w_->mu);
    // Every peer used since the last flush gets an endpoint flush.
    std::vector<std::shared_ptr<Peer>> peers;
    peers.swap(dirty_);
    return FlushPeers(lock, std::move(peers), deadline);
  }

  Status Flush(int peer) override {
    std::lock_guard flush_lock(flush_mu_);  // as in Flush()
    const Deadline deadline = net::DeadlineIn(host_->timeout_ms());
    std::unique_lock lock(w_->mu);
    std::shared_ptr<Peer> p = FindPeerLocked(peer);
    if (!p || !p->dirty) return Status::Ok();  // nothing went to it through UCX since the last flush
    std::erase(dirty_, p);
    return FlushPeers(lock, {std::move(p)}, deadline);
  }

  void Disconnect(int peer) override {
    // No flush runs meanwhile (one may hold the peer, and would put it back
    // on dirty_ if it timed out).
    std::lock_guard flush_lock(flush_mu_);
    std::shared_ptr<Peer> p;  // released after the lock below: ~Peer takes it
    const Deadline deadline = net::DeadlineIn(host_->timeout_ms());
    std::unique_lock lock(w_->mu);
    p = FindPeerLocked(peer);
    if (!p) return;
    peers_[static_cast<size_t>(peer)].reset();
    std::erase(dirty_, p);
    p->dirty = false;
    p->closed = true;  // from here every call with its keys fails (under w_->mu)
    if (p->ep) {
      // Transfers in flight complete first (bounded), then the rkeys go
      // before their endpoint, as UCX requires; on a timeout or a failed
      // endpoint the forced close cancels what is left first.
      bool flushed = false;
      if (p->ep_error.load() == UCS_OK) {
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        param.cb.send = OnFlushDone;
        param.user_data = p.get();
        ucs_status_ptr_t r = ucp_ep_flush_nbx(p->ep, &param);
        if (UCS_PTR_IS_PTR(r)) ++p->flushing;
        flushed = !UCS_PTR_IS_ERR(r) && ProgressUntil(lock, deadline, [&] {
          return (p->flushing == 0 && p->outstanding == 0) || p->ep_error.load() != UCS_OK;
        });
        flushed = flushed && p->ep_error.load() == UCS_OK && p->op_error == UCS_OK;
      }
      if (flushed) DestroyKeys(p.get());
      // Flushed: a graceful close, which leaves the peer's endpoint to us
      // working (UCX pairs the two endpoints of two workers on one
      // connection; a forced close resets it, and the peer's transfers to us
      // would then fail).  Otherwise a forced close, local only: it never
      // waits for a peer that may be gone and cancels what is left.
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = flushed ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &param);
      if (UCS_PTR_IS_PTR(req)) {
        // A forced close completes locally: its bound is a safety net only.
        const Deadline close_deadline = flushed ? std::max(deadline, net::DeadlineIn(1000)) : net::DeadlineIn(5000);
        if (!ProgressUntil(lock, close_deadline,
                           [&] { return ucp_request_check_status(req) != UCS_INPROGRESS; })) {
          HIXL_LOG_INFO("ucx: closing the endpoint to {} did not complete in time; UCX finishes it later", p->Name());
        }
        ucp_request_free(req);  // released by UCX once complete
      }
      p->ep = nullptr;
      if (!flushed) DestroyKeys(p.get());
      if (p->outstanding > 0 || p->flushing > 0) {
        // UCX still owes completions that name the Peer: keep it for them.
        retired_.push_back(p);
      }
    }
    lock.unlock();
    Kick();  // our progress calls may have taken events the progress thread waited for
  }

  Status Atomic(int peer, const RemoteKey& key, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare,
                uint64_t* old) override {
    const auto& k = static_cast<const UcxKey&>(key);
    Peer* p = k.peer.get();
    if (p->rank != peer) return Err(Errc::kInternal, "ucx: a key of rank {} used for rank {}", p->rank, peer);
    // In ucp_atomic_op_nbx's terms: buffer X, remote word Y, reply Z.
    auto call = std::make_unique<AtomicCall>();
    call->w = w_.get();
    call->operand = operand;
    ucp_atomic_op_t uop = UCP_ATOMIC_OP_ADD;
    switch (op) {
      case AtomicOp::kFetch:  // Y |= 0
        uop = UCP_ATOMIC_OP_OR;
        call->operand = 0;
        break;
      case AtomicOp::kSet:  // Y = X
        uop = UCP_ATOMIC_OP_SWAP;
        break;
      case AtomicOp::kAdd:  // Y += X
        uop = UCP_ATOMIC_OP_ADD;
        break;
      case AtomicOp::kCompareSwap:  // if (Y == X) Y = Z; Z takes the new value in and Y's old one out
        uop = UCP_ATOMIC_OP_CSWAP;
        call->operand = compare;
        call->reply = operand;
        break;
    }
    const Deadline deadline = net::DeadlineIn(host_->timeout_ms());
    std::unique_lock lock(w_->mu);
    HIXL_RETURN_IF_ERROR(Usable(p));
    // After every put this process issued to the peer before it.
    ucs_status_t st = ucp_worker_fence(w_->worker);
    if (st != UCS_OK) return Failure(p, st, "a fence before an atomic");
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                         UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    param.cb.send = OnAtomicDone;
    param.user_data = call.get();
    param.datatype = ucp_dt_make_contig(sizeof(uint64_t));
    param.reply_buffer = &call->reply;
    ucs_status_ptr_t r = ucp_atomic_op_nbx(p->ep, uop, &call->operand, 1, addr, k.rkey, &param);
    if (UCS_PTR_IS_ERR(r)) return Failure(p, UCS_PTR_STATUS(r), fmt::format("an atomic at {:#x}", addr).c_str());
    if (r != nullptr && !ProgressUntil(lock, deadline, [&] { return call->done; })) {
      call.release()->abandoned = true;  // OnAtomicDone frees it
      lock.unlock();
      Kick();
      if (p->ep_error.load() != UCS_OK) return Failure(p, p->ep_error.load(), "an atomic");
      return Err(Errc::kTimeout, "ucx: an atomic on {} at {:#x} did not complete within HIXL_TIMEOUT_MS={}",
                 p->Name(), addr, host_->timeout_ms());
    }
    lock.unlock();
    if (r != nullptr) Kick();
    if (call->status != UCS_OK) return Failure(p, call->status, fmt::format("an atomic at {:#x}", addr).c_str());
    *old = call->reply;
    return Status::Ok();
  }

  void Shutdown() override {
    if (thread_.joinable()) {
      stop_.store(true);
      Kick();
      thread_.join();
    }
  }

 private:
  struct Mapped {
    uint64_t len = 0;
    ucp_mem_h memh = nullptr;
  };

  // Flushes the endpoints of `peers` (taken off dirty_) and waits for them
  // and for their transfers until the deadline; unlocks `lock` (w_->mu).
  Status FlushPeers(std::unique_lock<std::mutex>& lock, std::vector<std::shared_ptr<Peer>> peers, Deadline deadline) {
    Status first;
    auto note = [&first](Status s) {
      if (first.ok() && !s.ok()) first = std::move(s);
    };
    if (peers.empty()) return first;  // nothing went through UCX since the last flush
    // An endpoint flush completes (OnFlushDone) once everything started on
    // the endpoint before it has completed, at the target as well.
    for (auto& p : peers) {
      p->dirty = false;
      if (!p->ep || p->ep_error.load() != UCS_OK) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = OnFlushDone;
      param.user_data = p.get();
      ucs_status_ptr_t r = ucp_ep_flush_nbx(p->ep, &param);
      if (UCS_PTR_IS_ERR(r)) {
        note(Failure(p.get(), UCS_PTR_STATUS(r), "flush"));
      } else if (r != nullptr) {
        ++p->flushing;
      }
    }
    auto busy = [](const Peer& p) { return p.flushing > 0 || p.outstanding > 0; };
    ProgressUntil(lock, deadline,
                  [&] { return std::none_of(peers.begin(), peers.end(), [&](const auto& p) { return busy(*p); }); });
    for (auto& p : peers) {
      if (busy(*p)) {
        // Left to UCX; a later flush waits for this peer again.
        MarkDirty(p);
        if (p->ep_error.load() == UCS_OK) {
          note(Err(Errc::kTimeout, "ucx: transfers to {} did not complete within HIXL_TIMEOUT_MS={}", p->Name(),
                   host_->timeout_ms()));
        }
      }
      if (p->ep_error.load() != UCS_OK) note(Failure(p.get(), p->ep_error.load(), "connection"));
      if (p->op_error != UCS_OK) note(Failure(p.get(), std::exchange(p->op_error, UCS_OK), "transfer"));
    }
    lock.unlock();
    // We may have consumed events the progress thread was waiting for.
    Kick();
    return first;
  }

  // Destroys the rkeys of every key unpacked for p (w_->mu held); the keys
  // stay, unusable (p->closed).
  static void DestroyKeys(Peer* p) {
    for (UcxKey* k : p->keys) {
      ucp_rkey_destroy(k->rkey);
      k->rkey = nullptr;
    }
    p->keys.clear();
  }

  static bool Parse(std::string_view address, std::string* host, std::string* worker_address) {
    net::Reader r(address);
    std::string magic;
    return r.GetBytes(&magic) && magic == kAddressMagic && r.GetBytes(host) && r.GetBytes(worker_address) &&
           !worker_address->empty() && r.empty();
  }

  // The peer connected as `peer`, or null; w_->mu held.
  std::shared_ptr<Peer> FindPeerLocked(int peer) {
    if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) return nullptr;
    return peers_[static_cast<size_t>(peer)];
  }

  // w_->mu held.
  Result<std::shared_ptr<Peer>> PeerLocked(int peer) {
    std::shared_ptr<Peer> p = FindPeerLocked(peer);
    if (!p) return Err(Errc::kNotConnected, "ucx: rank {} is not connected", peer);
    return p;
  }

  // w_->mu held.
  Status EnsureEndpoint(Peer* p) {
    if (p->ep) return Usable(p);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(p->address.data());
    // A peer's failure must become an error rather than a hang.  This
    // process cannot fail towards itself, and its own endpoint may then use
    // UCX's `self` and shared-memory transports, which have no peer-failure
    // handling.
    ep.err_mode = p->rank == host_->rank() ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = OnEndpointError;
    ep.err_handler.arg = p;
    ucs_status_t st = ucp_ep_create(w_->worker, &ep, &p->ep);
    if (st != UCS_OK) {
      // Nothing has been sent yet: this is about the transports UCX has
      // here and there (UCX_TLS, HIXL_NET_DEV), not about the peer's health.
      p->ep = nullptr;
      return Err(Errc::kTransport, "ucx: no UCX transport here reaches {}: {}{}", p->Name(), ucs_status_string(st),
                 options_.net_dev.empty() ? "" : fmt::format(" (with HIXL_NET_DEV={})", options_.net_dev));
    }
    return Status::Ok();
  }

  // An endpoint that failed stays failed: the peer is gone.  w_->mu held.
  Status Usable(Peer* p) {
    if (p->closed) {
      return Err(Errc::kNotConnected, "ucx: {} has been disconnected (Connect it again, then unpack its keys again)",
                 p->Name());
    }
    ucs_status_t e = p->ep_error.load();
    if (e == UCS_OK) return Status::Ok();
    return Failure(p, e, "connection");
  }

  Status Failure(Peer* p, ucs_status_t st, const char* what) {
    const bool peer_gone = IsPeerFailure(st) || p->ep_error.load() != UCS_OK;
    return Err(peer_gone ? Errc::kPeerFailed : Errc::kTransport, "ucx: {} to {} failed: {}", what, p->Name(),
               ucs_status_string(st));
  }

  static ucp_request_param_t OpParam(Peer* p) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = OnOpDone;
    param.user_data = p;
    return param;
  }

  // Accounts for an operation just started.  w_->mu held.
  Status Started(const std::shared_ptr<Peer>& p, ucs_status_ptr_t r, const char* op, uint64_t remote, size_t n) {
    if (UCS_PTR_IS_ERR(r)) {
      ucs_status_t st = UCS_PTR_STATUS(r);
      const bool peer_gone = IsPeerFailure(st) || p->ep_error.load() != UCS_OK;
      return Err(peer_gone ? Errc::kPeerFailed : Errc::kTransport, "ucx: {} of {} bytes {} {:#x} on {} failed: {}", op,
                 n, op[0] == 'p' ? "to" : "from", remote, p->Name(), ucs_status_string(st));
    }
    if (r != nullptr) ++p->outstanding;
    MarkDirty(p);
    return Status::Ok();
  }

  // w_->mu held.
  void MarkDirty(const std::shared_ptr<Peer>& p) {
    if (p->dirty) return;
    p->dirty = true;
    dirty_.push_back(p);
  }

  void Kick() {
    uint64_t one = 1;
    ssize_t w = ::write(wake_.get(), &one, sizeof(one));
    (void)w;
  }

  // Progresses the worker until done() holds or the deadline passes (lock
  // holds w_->mu); returns done().  While progress finds work, this thread
  // does it; once it finds none for a while (the peer is working), it sleeps
  // until the progress thread completes something, rather than competing for
  // the CPU with the processes it waits on.  The caller kicks the progress
  // thread after releasing the lock: our progress calls may have taken
  // events it was armed for.
  template <typename Done>
  bool ProgressUntil(std::unique_lock<std::mutex>& lock, Deadline deadline, Done done) {
    for (int idle = 0;;) {
      if (ucp_worker_progress(w_->worker) != 0) idle = 0;
      if (done()) return true;
      if (net::Clock::now() >= deadline) return false;
      if (++idle < kSpinsBeforeSleep) {
        lock.unlock();  // let other threads start transfers meanwhile
        lock.lock();
        continue;
      }
      // The progress thread is kicked first, for the reason above; the bound
      // on the wait is a safety net only.
      ++flush_waiters_;
      Kick();
      progressed_.wait_for(lock, std::chrono::milliseconds(kFlushWaitMs));
      --flush_waiters_;
    }
  }

  // The progress thread: serves the network on the target side (needed
  // where UCX emulates RMA, as over TCP) and sleeps on the worker's event fd
  // whenever there is nothing to do.
  void Run() {
    bool warned = false;
    while (!stop_.load()) {
      ucs_status_t armed;
      {
        std::lock_guard lock(w_->mu);
        if (ucp_worker_progress(w_->worker) != 0) {
          if (flush_waiters_ > 0 && w_->completed.exchange(false, std::memory_order_relaxed)) {
            progressed_.notify_all();
          }
          continue;
        }
        armed = ucp_worker_arm(w_->worker);
      }
      if (armed == UCS_ERR_BUSY) continue;
      if (armed != UCS_OK && !warned) {
        HIXL_LOG_WARN("ucx: cannot arm the worker's event fd ({}); polling it every 10 ms instead",
                      ucs_status_string(armed));
        warned = true;
      }
      pollfd fds[2] = {{efd_, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      int r = ::poll(fds, 2, armed == UCS_OK ? -1 : 10);
      if (r > 0 && (fds[1].revents & POLLIN)) {
        uint64_t count;
        ssize_t n = ::read(wake_.get(), &count, sizeof(count));
        (void)n;
      }
    }
  }

  Host* const host_;
  const Options options_;
  // Device memory: RegisterRegion maps host memory only (UCS_MEMORY_TYPE_HOST).
  // Loopback: the endpoint to this process itself uses UCX's `self`
  // transport.  Atomics: the context asks for UCP_FEATURE_AMO64 and UCX
  // emulates them where the network has none.  Batch: no native batch; the
  // interface's default starts one put or get per piece.
  static constexpr Capabilities kCaps{.host_memory = true,
                                      .device_memory = false,
                                      .remote_hosts = true,
                                      .loopback = true,
                                      .atomics = true,
                                      .batch = false};
  std::shared_ptr<Worker> w_;
  std::string worker_address_;
  std::string host_name_;
  int efd_ = -1;  // owned by the worker
  Fd wake_;       // wakes the progress thread
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex flush_mu_;
  std::condition_variable progressed_;  // with w_->mu: the progress thread completed something
  int flush_waiters_ = 0;               // guarded by w_->mu: threads in ProgressUntil asleep

  // Guarded by w_->mu.  peers_ holds every Peer while the transport lives,
  // so no Peer (whose destructor takes w_->mu) is ever destroyed under it.
  std::vector<std::shared_ptr<Peer>> peers_;  // by rank
  std::vector<std::shared_ptr<Peer>> dirty_;  // peers with operations since the last flush
  std::vector<std::shared_ptr<Peer>> retired_;  // disconnected, with UCX completions still owed
  std::multimap<uint64_t, Mapped> mapped_;    // base -> mapping (one per registration)
};

}  // namespace

Result<std::unique_ptr<Transport>> CreateUcxTransport(Host* host, const Options& options) {
  auto t = std::make_unique<UcxTransport>(host, options);
  HIXL_RETURN_IF_ERROR(t->Start());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace hixl::transport::ucx
