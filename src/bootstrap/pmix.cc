#include "bootstrap/pmix.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <charconv>

#ifdef HIXL_HAVE_PMIX
#include <pmix.h>
#endif

#include "base/log.h"

namespace hixl::bootstrap {

bool PmixBuiltIn() {
#ifdef HIXL_HAVE_PMIX
  return true;
#else
  return false;
#endif
}

bool UnderPmix(const GetEnv& env) { return env("PMIX_NAMESPACE").has_value() && env("PMIX_RANK").has_value(); }

namespace {

// This node's IPv4 address for peers on other nodes: the one on net_dev
// when it names an interface, else the first non-loopback interface that is
// up.  "" when there is none.
std::string NodeAddress(const std::string& net_dev) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string first, on_dev;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    if (first.empty()) first = text;
    if (!net_dev.empty() && net_dev == a->ifa_name && on_dev.empty()) on_dev = text;
  }
  freeifaddrs(list);
  return on_dev.empty() ? first : on_dev;
}

// "host:port" (the host may hold colons: IPv6) -> StoreAddress.
Result<StoreAddress> ParseHostPort(std::string_view s) {
  const size_t colon = s.rfind(':');
  StoreAddress a;
  if (colon == std::string_view::npos || colon == 0) {
    return Err(Errc::kBootstrap, "PMIx gave a malformed store address '{}'", s);
  }
  a.host.assign(s.substr(0, colon));
  const std::string_view p = s.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535) {
    return Err(Errc::kBootstrap, "PMIx gave a malformed store address '{}'", s);
  }
  a.port = static_cast<uint16_t>(port);
  return a;
}

#ifdef HIXL_HAVE_PMIX
constexpr char kStoreKey[] = "hixl.store";

// A job-level uint32 attribute (PMIX_JOB_SIZE, PMIX_LOCAL_SIZE); 0 when the
// server does not say.
uint32_t JobU32(const pmix_proc_t& job, const char* key) {
  pmix_value_t* v = nullptr;
  uint32_t out = 0;
  if (PMIx_Get(&job, key, nullptr, 0, &v) == PMIX_SUCCESS && v != nullptr) {
    if (v->type == PMIX_UINT32) out = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
  }
  return out;
}

Result<StoreAddress> Exchange(const pmix_proc_t& me, int rank, int world_size, const std::string& bind_host_hint,
                              const std::string& net_dev, int64_t timeout_ms, const HostStore& host_store) {
  if (static_cast<int64_t>(me.rank) != rank) {
    return Err(Errc::kBootstrap, "PMIx says this is rank {} of job {}, the environment says rank {}", me.rank,
               me.nspace, rank);
  }
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
  const uint32_t job_size = JobU32(job, PMIX_JOB_SIZE);
  if (job_size != 0 && job_size != static_cast<uint32_t>(world_size)) {
    return Err(Errc::kBootstrap, "PMIx job {} has {} processes, the environment says a world of {}", me.nspace,
               job_size, world_size);
  }

  StoreAddress addr;
  if (rank == 0) {
    std::string bind = bind_host_hint;
    if (bind.empty()) {
      const uint32_t local = JobU32(job, PMIX_LOCAL_SIZE);
      bind = local == static_cast<uint32_t>(world_size) ? "127.0.0.1" : NodeAddress(net_dev);
      if (bind.empty()) {
        return Err(Errc::kBootstrap,
                   "the job spans nodes but this node has no non-loopback IPv4 address for the store: set "
                   "MASTER_ADDR to an address of rank 0's node");
      }
    }
    HIXL_ASSIGN_OR_RETURN(addr, host_store(bind));
    std::string text = fmt::format("{}:{}", addr.host, addr.port);
    pmix_value_t val;
    PMIX_VALUE_LOAD(&val, text.c_str(), PMIX_STRING);
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, kStoreKey, &val);
    PMIX_VALUE_DESTRUCT(&val);
    if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) {
      return Err(Errc::kBootstrap, "rank 0 cannot publish the store address through PMIx: {}", PMIx_Error_string(rc));
    }
  }

  // Every process of the job: collect what was published.
  bool collect = true;
  int seconds = static_cast<int>(std::min<int64_t>((timeout_ms + 999) / 1000, 1 << 30));
  pmix_info_t info[2];
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  const pmix_status_t rc = PMIx_Fence(&job, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc == PMIX_ERR_TIMEOUT) {
    return Err(Errc::kTimeout, "rank {}: not every process of PMIx job {} reached hixl_init within {} ms", rank,
               me.nspace, timeout_ms);
  }
  if (rc != PMIX_SUCCESS) {
    return Err(Errc::kBootstrap, "rank {}: the PMIx fence of hixl_init failed: {}", rank, PMIx_Error_string(rc));
  }
  if (rank == 0) return addr;

  pmix_proc_t zero;
  PMIX_LOAD_PROCID(&zero, me.nspace, 0);
  pmix_value_t* v = nullptr;
  const pmix_status_t grc = PMIx_Get(&zero, kStoreKey, nullptr, 0, &v);
  if (grc != PMIX_SUCCESS || v == nullptr) {
    return Err(Errc::kBootstrap, "rank {}: rank 0 published no store address through PMIx ({})", rank,
               PMIx_Error_string(grc));
  }
  Result<StoreAddress> got =
      v->type == PMIX_STRING && v->data.string != nullptr
          ? ParseHostPort(v->data.string)
          : Result<StoreAddress>(
                Err(Errc::kBootstrap, "PMIx gave the store address as a value of type {}", static_cast<int>(v->type)));
  PMIX_VALUE_RELEASE(v);
  return got;
}
#endif

}  // namespace

Result<StoreAddress> PmixRendezvous(int rank, int world_size, const std::string& bind_host_hint,
                                    const std::string& net_dev, int64_t timeout_ms, const HostStore& host_store) {
#ifdef HIXL_HAVE_PMIX
  pmix_proc_t me;
  const pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    return Err(Errc::kBootstrap, "rank {}: PMIx_Init failed ({}): the PMIx server of the launcher is unreachable", rank,
               PMIx_Error_string(rc));
  }
  Result<StoreAddress> r = Exchange(me, rank, world_size, bind_host_hint, net_dev, timeout_ms, host_store);
  PMIx_Finalize(nullptr, 0);
  if (r.ok()) HIXL_LOG_DEBUG("rendezvous through PMIx: the store is at {}:{}", r.value().host, r.value().port);
  return r;
#else
  (void)world_size, (void)bind_host_hint, (void)net_dev, (void)timeout_ms, (void)host_store;
  (void)ParseHostPort;
  (void)NodeAddress;
  return Err(Errc::kUnsupported, "rank {}: this build of hixl has no PMIx support (Debian: libpmix-dev)", rank);
#endif
}

}  // namespace hixl::bootstrap
