// A peer that sends a notification longer than HIXL_NOTIFY_MAX_BYTES (by
// speaking the control protocol itself) is refused by the receiver; the C
// waiter never sees it, and later notifications arrive whole.  Run by
// hixlrun with two ranks: rank 0 waits, rank 1 forges.
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <hixl/hixl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/auth.h"
#include "bootstrap/control.h"
#include "core/control_protocol.h"

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "rank %d: FAILED: %s (last error: %s)\n", hixl_rank(), what, hixl_last_error());
  return 1;
}

// The TCP port this process listens on other than the store's (MASTER_PORT):
// the world's control endpoint.
uint16_t ControlPort() {
  const char* mp = std::getenv("MASTER_PORT");
  const int master = mp ? std::atoi(mp) : -1;
  uint16_t found = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage ss{};
    len = sizeof(ss);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    uint16_t port = 0;
    if (ss.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    if (ss.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    if (port != 0 && port != master) found = port;
  }
  closedir(d);
  return found;
}

}  // namespace

int main() {
  if (hixl_init() != HIXL_SUCCESS) return Fail("hixl_init");
  if (hixl_world_size() != 2) return Fail("run with two ranks");
  const int me = hixl_rank();
  // The port goes through rank 0's store: an allgather too large for the
  // collectives' scratch (64 KiB a round) takes that path.  A small one
  // would put into rank 0's memory, and so open this rank's own control
  // connection to rank 0, which the forger below must not find open (rank 0
  // refuses a second live connection claiming the same rank).
  constexpr size_t kPart = 40000;
  std::string mine(kPart, '\0'), all(2 * kPart, '\0');
  const uint16_t port = me == 0 ? ControlPort() : 0;
  std::memcpy(mine.data(), &port, sizeof port);
  if (hixl_allgather(mine.data(), all.data(), kPart) != HIXL_SUCCESS) return Fail("hixl_allgather");
  uint16_t ports[2] = {0, 0};
  std::memcpy(&ports[0], all.data(), sizeof port);
  if (ports[0] == 0) return Fail("rank 0 found no control port");
  if (me == 1) {
    // A rank of the job (it holds the job's secret) that sends more than any
    // notification may hold.
    auto secret = hixl::auth::SecretFromEnv([](const std::string& k) -> std::optional<std::string> {
      const char* v = std::getenv(k.c_str());
      return v ? std::optional<std::string>(v) : std::nullopt;
    });
    if (!secret.ok()) return Fail(secret.status().ToString().c_str());
    hixl::bootstrap::ControlClient forger(1, 0, "127.0.0.1", ports[0], secret.value());
    auto r = forger.Call(hixl::core::Wire(hixl::core::ControlMsg::kNotify), std::string(20000, 'x'), 30000);
    // The connection holds the id 1 while it is open (the control server
    // refuses a second live one): the rank's own connection comes next.
    forger.Close();
    if (r.ok()) return Fail("a 20000-byte notification was accepted");
    if (r.status().code() != hixl::Errc::kInvalidArg) return Fail(r.status().ToString().c_str());
    if (r.status().message().find("HIXL_NOTIFY_MAX_BYTES") == std::string::npos) {
      return Fail(r.status().ToString().c_str());
    }
    // Closed first: rank 0 binds a connection to the rank it claims, and
    // refuses a second live one claiming the same (bootstrap/control.h).
    forger.Close();
    if (hixl_notify(0, "ok", 2) != HIXL_SUCCESS) return Fail("hixl_notify");
  } else {
    hixl_notification_t n;
    std::memset(&n, 0, sizeof(n));
    if (hixl_wait_notification(&n, 60000) != HIXL_SUCCESS) return Fail("hixl_wait_notification");
    if (n.src_rank != 1 || n.len != 2 || std::memcmp(n.data, "ok", 2) != 0) return Fail("the wrong notification");
    int count = -1;
    if (hixl_get_notifications(&n, 1, &count) != HIXL_SUCCESS || count != 0) return Fail("an extra notification");
  }
  if (hixl_finalize() != HIXL_SUCCESS) return Fail("hixl_finalize");
  std::printf("rank %d: ok\n", me);
  return 0;
}
