// peer_killed: a peer that stops answering, then is killed (SIGKILL)
// mid-run; the survivor's operations to it must end in errors within
// HIXL_TIMEOUT_MS, naming it, never hang.  Run by peer_killed_test.sh with
// two ranks (and HIXL_TRANSPORT=ucx there).
//
// Rank 1 takes part in some traffic and a barrier, then waits.  Rank 0:
//   1. stops rank 1 (SIGSTOP): a put + fence must end in HIXL_ERR_TIMEOUT
//      after HIXL_TIMEOUT_MS; after SIGCONT the next fence succeeds;
//   2. kills rank 1 (SIGKILL) and waits for it to be gone (a pidfd): a
//      wait_notification and a wait_until of 15 s end in
//      HIXL_ERR_PEER_FAILED naming rank 1 well before that; a put +
//      fence (into its registered memory and into its heap), a get +
//      fence, an atomic, and finalize must each fail with
//      HIXL_ERR_PEER_FAILED (HIXL_ERR_TIMEOUT accepted for the fences),
//      naming rank 1, within HIXL_TIMEOUT_MS; its own memory still works.
//
// Exit status: 0 when rank 0 saw what it should; 1 otherwise; rank 1 dies
// by SIGKILL (status 137 in the shell).
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <hixl/hixl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int g_failures = 0;
int g_rank = -1;

void Check(bool ok, const std::string& what) {
  std::printf("rank %d: %s: %s\n", g_rank, ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Waits until process `pid` has exited (it need not be our child).
bool WaitForExit(pid_t pid, int timeout_ms) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // already gone
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  ::close(fd);
  return r == 1;
}

// Waits until process `pid` is in state `state` (as /proc/PID/stat shows it).
bool WaitForState(pid_t pid, char state, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  while (Clock::now() < deadline) {
    std::ifstream f(path);
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t paren = stat.rfind(") ");  // the command name may hold anything
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == state) return true;
    std::this_thread::yield();
  }
  return false;
}

}  // namespace

int main() {
  const char* t = std::getenv("HIXL_TIMEOUT_MS");
  const int64_t timeout_ms = t ? std::atoll(t) : 60000;
  if (hixl_init() != HIXL_SUCCESS) {
    std::fprintf(stderr, "peer_killed: hixl_init failed: %s\n", hixl_last_error());
    return 1;
  }
  const int me = g_rank = hixl_rank();
  if (hixl_world_size() != 2) {
    std::fprintf(stderr, "peer_killed: run with 2 ranks\n");
    return 2;
  }
  std::vector<char> mem(1 << 20, 0), buf(1 << 20, static_cast<char>(me + 1));
  if (hixl_register_memory(mem.data(), mem.size()) != HIXL_SUCCESS) {
    std::fprintf(stderr, "peer_killed: register failed: %s\n", hixl_last_error());
    return 1;
  }
  // A block of the symmetric heap (hixl_alloc: the same address on both ranks): on one
  // host the peer's heap is mapped, and a put there is a plain copy.
  void* heap = hixl_alloc(4096);
  if (heap == nullptr) {
    std::fprintf(stderr, "peer_killed: hixl_alloc failed: %s\n", hixl_last_error());
    return 1;
  }
  struct Info {
    uint64_t addr;
    int64_t pid;
  } mine{reinterpret_cast<uint64_t>(mem.data()), ::getpid()}, all[2];
  if (hixl_allgather(&mine, all, sizeof mine) != HIXL_SUCCESS) {
    std::fprintf(stderr, "peer_killed: allgather failed: %s\n", hixl_last_error());
    return 1;
  }
  // Traffic both ways first: the endpoint is up and the peer's region
  // table is cached, so what follows reaches the transport at once.
  const int peer = 1 - me;
  Check(hixl_put(peer, buf.data(), all[peer].addr, 4096) == HIXL_SUCCESS && hixl_fence() == HIXL_SUCCESS,
        "a put and fence to the live peer");
  Check(hixl_put(peer, buf.data(), reinterpret_cast<uint64_t>(heap), 4096) == HIXL_SUCCESS &&
            hixl_fence() == HIXL_SUCCESS,
        "a put and fence into the live peer's heap");
  Check(hixl_barrier() == HIXL_SUCCESS, "barrier");
  if (me == 1) {
    // Wait here, serving nothing but the network (hixl's progress thread),
    // until rank 0 stops, resumes and kills us.
    for (;;) ::pause();
  }
  const auto victim = static_cast<pid_t>(all[1].pid);

  // A stopped peer does not answer: the fence must end with
  // HIXL_ERR_TIMEOUT after HIXL_TIMEOUT_MS, not hang; once the peer runs
  // again, the next fence completes the transfer.
  ::kill(victim, SIGSTOP);
  if (!WaitForState(victim, 'T', 30000)) {
    std::fprintf(stderr, "peer_killed: rank 1 (pid %d) did not stop\n", victim);
    return 1;
  }
  auto start = Clock::now();
  int rc = hixl_put(1, buf.data(), all[1].addr, buf.size());
  if (rc == HIXL_SUCCESS) rc = hixl_fence();
  int64_t ms = MsSince(start);
  Check(rc == HIXL_ERR_TIMEOUT && std::strstr(hixl_last_error(), "rank 1"),
        "put + fence to the stopped rank timed out (" + std::string(hixl_strerror(rc)) + "): " + hixl_last_error());
  Check(ms >= timeout_ms && ms <= timeout_ms + 5000,
        "after " + std::to_string(ms) + " ms (HIXL_TIMEOUT_MS=" + std::to_string(timeout_ms) + ")");
  ::kill(victim, SIGCONT);
  rc = hixl_fence();
  Check(rc == HIXL_SUCCESS, std::string("once resumed, the next fence completes (") + hixl_strerror(rc) + ")");

  // A killed peer: the next operation fails at once, naming it.
  ::kill(victim, SIGKILL);
  if (!WaitForExit(victim, 30000)) {
    std::fprintf(stderr, "peer_killed: rank 1 (pid %d) did not die\n", victim);
    return 1;
  }

  // Waits for something only the dead peer would send learn of its death
  // as barrier does (the store), not at the end of their own timeout.
  constexpr int kLongWaitMs = 15000;
  start = Clock::now();
  hixl_notification_t note{};
  rc = hixl_wait_notification(&note, kLongWaitMs);
  ms = MsSince(start);
  Check(rc == HIXL_ERR_PEER_FAILED && std::strstr(hixl_last_error(), "rank 1"),
        "wait_notification with the only peer dead failed (" + std::string(hixl_strerror(rc)) +
            "): " + hixl_last_error());
  Check(ms < kLongWaitMs / 3, "it failed after " + std::to_string(ms) + " ms (its timeout: 15000 ms)");
  uint64_t word = 0;  // a signal word that rank 1 was to set
  start = Clock::now();
  rc = hixl_wait_until(&word, HIXL_CMP_GE, 1, kLongWaitMs);
  ms = MsSince(start);
  Check(rc == HIXL_ERR_PEER_FAILED && std::strstr(hixl_last_error(), "rank 1"),
        "wait_until on a word only the dead peer writes failed (" + std::string(hixl_strerror(rc)) +
            "): " + hixl_last_error());
  Check(ms < kLongWaitMs / 3, "it failed after " + std::to_string(ms) + " ms (its timeout: 15000 ms)");

  start = Clock::now();
  rc = hixl_put(1, buf.data(), all[1].addr, buf.size());
  if (rc == HIXL_SUCCESS) rc = hixl_fence();
  ms = MsSince(start);
  std::string err = hixl_last_error();
  Check(rc == HIXL_ERR_PEER_FAILED || rc == HIXL_ERR_TIMEOUT,
        "put + fence to the killed rank failed (" + std::string(hixl_strerror(rc)) + "): " + err);
  Check(rc != HIXL_ERR_PEER_FAILED || err.find("rank 1") != std::string::npos, "the error names rank 1");
  Check(ms <= timeout_ms,
        "it failed after " + std::to_string(ms) + " ms (HIXL_TIMEOUT_MS=" + std::to_string(timeout_ms) + ")");

  // Its heap too, which this rank may still map: the fence asks whether
  // the peer is alive.
  rc = hixl_put(1, buf.data(), reinterpret_cast<uint64_t>(heap), 4096);
  if (rc == HIXL_SUCCESS) rc = hixl_fence();
  err = hixl_last_error();
  Check(rc == HIXL_ERR_PEER_FAILED || rc == HIXL_ERR_TIMEOUT,
        "put + fence into the killed rank's heap failed (" + std::string(hixl_strerror(rc)) + "): " + err);
  Check(rc != HIXL_ERR_PEER_FAILED || err.find("rank 1") != std::string::npos, "the error names rank 1");

  start = Clock::now();
  rc = hixl_get(1, all[1].addr, buf.data(), 4096);
  if (rc == HIXL_SUCCESS) rc = hixl_fence();
  ms = MsSince(start);
  Check(rc == HIXL_ERR_PEER_FAILED || rc == HIXL_ERR_TIMEOUT,
        "get + fence from the killed rank failed (" + std::string(hixl_strerror(rc)) + "): " + hixl_last_error());
  Check(ms <= timeout_ms, "it failed after " + std::to_string(ms) + " ms");

  start = Clock::now();
  uint64_t old = 0;
  rc = hixl_atomic_fetch_add(1, all[1].addr, 1, &old);
  ms = MsSince(start);
  Check(rc == HIXL_ERR_PEER_FAILED && std::strstr(hixl_last_error(), "rank 1"),
        "an atomic on the killed rank failed (" + std::string(hixl_strerror(rc)) + "): " + hixl_last_error());
  Check(ms <= timeout_ms, "it failed after " + std::to_string(ms) + " ms");

  // The rank's own memory still works.
  Check(hixl_put(0, buf.data(), all[0].addr, 4096) == HIXL_SUCCESS && hixl_fence() == HIXL_SUCCESS,
        "a put to itself still works");

  start = Clock::now();
  rc = hixl_finalize();
  ms = MsSince(start);
  Check(rc != HIXL_SUCCESS, std::string("finalize reports the dead peer (") + hixl_strerror(rc) + ")");
  Check(ms <= timeout_ms, "finalize returned after " + std::to_string(ms) + " ms");
  std::printf("rank 0: %s\n", g_failures == 0 ? "all checks passed" : "some checks FAILED");
  return g_failures == 0 ? 0 : 1;
}
