// Process-level behaviour that needs whole processes: what a rank leaves
// behind, and what the others see when a rank dies.
//
//   lifecycle clean        init, transfer, finalize; then check that no
//                          thread, socket or shared-memory mapping remains
//   lifecycle no-finalize  transfer and exit without finalize
//   lifecycle peer-dies    rank 1 exits without finalize; the others' next
//                          barrier fails with HIXL_ERR_PEER_FAILED (on rank 0,
//                          which hosts the store, naming rank 1)
//   lifecycle dereg-peer-dies  rank 1, which holds rank 0's region table,
//                          exits; rank 0's deregistration then says
//                          HIXL_ERR_PEER_FAILED naming rank 1, and the next
//                          one no longer waits for it
//   lifecycle dereg-peer-stops  rank 1, which holds rank 0's region table,
//                          stops (SIGSTOP); rank 0's deregistration then says
//                          HIXL_ERR_TIMEOUT within HIXL_TIMEOUT_MS, naming
//                          rank 1; once rank 1 continues, the next one
//                          succeeds
//   lifecycle exit-early   rank 1 exits with code 3 at once; the others wait
//                          for a signal that never comes (hixlrun must stop them)
#include <dirent.h>
#include <unistd.h>

#include <hixl/hixl.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "rank %d: FAILED: %s (last error: %s)\n", hixl_rank(), what, hixl_last_error());
  return 1;
}

int CountEntries(const char* dir, const char* must_contain_link) {
  int n = 0;
  DIR* d = opendir(dir);
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (!must_contain_link) {
      ++n;
      continue;
    }
    char link[256] = {};
    std::string path = std::string(dir) + "/" + e->d_name;
    if (readlink(path.c_str(), link, sizeof link - 1) > 0 && std::strstr(link, must_contain_link)) ++n;
  }
  closedir(d);
  return n;
}

bool MapsMention(const char* what) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(what) != std::string::npos) return true;
  }
  return false;
}

int Traffic() {
  const int me = hixl_rank(), n = hixl_world_size();
  char* sym = static_cast<char*>(hixl_alloc(1 << 20));
  std::vector<char> reg(1 << 20, 0);
  if (!sym || hixl_register_memory(reg.data(), reg.size()) != HIXL_SUCCESS) return Fail("memory set-up");
  uint64_t mine = reinterpret_cast<uint64_t>(reg.data());
  std::vector<uint64_t> addrs(static_cast<size_t>(n));
  if (hixl_allgather(&mine, addrs.data(), sizeof mine) != HIXL_SUCCESS) return Fail("allgather");
  std::vector<char> buf(1 << 20, static_cast<char>(me));
  for (int r = 0; r < n; ++r) {
    if (hixl_put(r, buf.data(), reinterpret_cast<uint64_t>(sym), buf.size()) != HIXL_SUCCESS) return Fail("put");
    if (hixl_put(r, buf.data(), addrs[static_cast<size_t>(r)], buf.size()) != HIXL_SUCCESS) return Fail("put reg");
  }
  if (hixl_barrier() != HIXL_SUCCESS) return Fail("barrier");
  if (hixl_deregister_memory(reg.data()) != HIXL_SUCCESS) return Fail("deregister");
  if (hixl_free(sym) != HIXL_SUCCESS) return Fail("free");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int threads_before = CountEntries("/proc/self/task", nullptr);
  // Rank 0 starts with the store's socket that hixlrun bound for it
  // (HIXL_STORE_FD): hixl's from init on, closed at finalize.
  const int sockets_before = CountEntries("/proc/self/fd", "socket:") - (std::getenv("HIXL_STORE_FD") ? 1 : 0);
  if (hixl_init() != HIXL_SUCCESS) return Fail("init");
  const int me = hixl_rank();

  if (mode == "clean" || mode == "no-finalize") {
    if (Traffic() != 0) return 1;
    if (mode == "no-finalize") return 0;  // exit with everything still running
    if (hixl_finalize() != HIXL_SUCCESS) return Fail("finalize");
    if (CountEntries("/proc/self/task", nullptr) != threads_before) return Fail("threads remain after finalize");
    if (CountEntries("/proc/self/fd", "socket:") != sockets_before) return Fail("sockets remain after finalize");
    if (CountEntries("/proc/self/fd", "memfd:") != 0) return Fail("shared-memory files remain open");
    if (MapsMention("memfd:hixl")) return Fail("shared memory remains mapped");
    std::printf("rank %d: finalize left no thread, socket or shared memory behind\n", me);
    return 0;
  }
  if (mode == "peer-dies") {
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("first barrier");
    if (me == 1) _exit(0);  // gone, without finalize
    int rc = hixl_barrier();
    if (rc != HIXL_ERR_PEER_FAILED) return Fail("barrier after a peer died did not fail with PEER_FAILED");
    // Rank 0 hosts the store and sees rank 1 go; another survivor may instead
    // see rank 0 leave first (it returns as soon as it has checked).
    if (me == 0 && !std::strstr(hixl_last_error(), "rank 1")) return Fail("the error does not name rank 1");
    std::printf("rank %d: barrier failed as it should: %s\n", me, hixl_last_error());
    return 0;
  }
  // Rank 0 registers buf; rank 1 puts into it, so it holds rank 0's table.
  static uint64_t buf[8];
  std::vector<uint64_t> bases(static_cast<size_t>(hixl_world_size()));
  const auto mine = reinterpret_cast<uint64_t>(buf);
  auto hold_rank0s_table = [&]() -> const char* {
    if (me == 0 && hixl_register_memory(buf, sizeof buf) != HIXL_SUCCESS) return "register";
    if (hixl_allgather(&mine, bases.data(), sizeof mine) != HIXL_SUCCESS) return "allgather";
    if (me == 1 && (hixl_put(0, &mine, bases[0], sizeof mine) != HIXL_SUCCESS || hixl_fence() != HIXL_SUCCESS)) {
      return "put into rank 0";
    }
    return nullptr;
  };
  if (mode == "dereg-peer-dies") {
    if (const char* failed = hold_rank0s_table()) return Fail(failed);
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("first barrier");
    if (me == 1) _exit(0);  // gone, without finalize
    // The barrier fails once rank 1 is gone (rank 0 hosts the store).
    if (hixl_barrier() != HIXL_ERR_PEER_FAILED) return Fail("barrier after a peer died did not fail");
    if (me == 0) {
      // Deregistration cannot hear from rank 1: it says so (the region is
      // released all the same), and the next one no longer waits for it.
      int rc = hixl_deregister_memory(buf);
      if (rc != HIXL_ERR_PEER_FAILED) return Fail("deregistration with a dead subscriber did not say PEER_FAILED");
      if (!std::strstr(hixl_last_error(), "rank 1")) return Fail("the deregistration's error does not name rank 1");
      std::printf("rank 0: deregistration said: %s\n", hixl_last_error());
      if (hixl_register_memory(buf, sizeof buf) != HIXL_SUCCESS || hixl_deregister_memory(buf) != HIXL_SUCCESS) {
        return Fail("a deregistration after the dead subscriber was dropped");
      }
    }
    return 0;  // without finalize: the world lost a rank
  }
  if (mode == "dereg-peer-stops") {
    const uint64_t pid = static_cast<uint64_t>(::getpid());
    std::vector<uint64_t> pids(static_cast<size_t>(hixl_world_size()));
    if (hixl_allgather(&pid, pids.data(), sizeof pid) != HIXL_SUCCESS) return Fail("allgather of pids");
    if (const char* failed = hold_rank0s_table()) return Fail(failed);
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("first barrier");
    if (me == 1) {
      ::raise(SIGSTOP);  // rank 0 continues us once its deregistration has given up on us
    } else {
      // Rank 1 has stopped once its state in /proc says so.
      for (int i = 0; i < 100000; ++i) {
        std::ifstream st("/proc/" + std::to_string(pids[1]) + "/stat");
        std::string line;
        std::getline(st, line);
        const size_t close = line.rfind(')');
        if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T') break;
        ::usleep(1000);
      }
      const int rc = hixl_deregister_memory(buf);
      const std::string why = hixl_last_error();
      std::printf("rank 0: deregistration said: %s\n", why.c_str());
      ::kill(static_cast<pid_t>(pids[1]), SIGCONT);
      if (rc != HIXL_ERR_TIMEOUT) return Fail("deregistration with a stopped subscriber did not say TIMEOUT");
      if (why.find("rank 1") == std::string::npos || why.find("may still reach") == std::string::npos) {
        return Fail("the deregistration's error does not name rank 1 as one that may still reach the memory");
      }
      if (hixl_register_memory(buf, sizeof buf) != HIXL_SUCCESS) return Fail("register again");
    }
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("barrier after rank 1 continued");
    if (me == 1 && (hixl_put(0, &mine, bases[0], sizeof mine) != HIXL_SUCCESS || hixl_fence() != HIXL_SUCCESS)) {
      return Fail("put into rank 0 after continuing");
    }
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("barrier after the second put");
    if (me == 0 && hixl_deregister_memory(buf) != HIXL_SUCCESS) {
      return Fail("a deregistration once rank 1 answers again");
    }
    return hixl_finalize() == HIXL_SUCCESS ? 0 : Fail("finalize");
  }
  if (mode == "exit-early") {
    if (me == 1) return 3;
    // Wait for something that never comes, as a rank blocked on a dead
    // peer's signal would: only hixlrun stopping us ends this.
    static uint64_t never = 0;
    (void)hixl_wait_until(&never, HIXL_CMP_NE, 0, -1);
    return 1;
  }
  std::fprintf(stderr, "usage: lifecycle clean|no-finalize|peer-dies|dereg-peer-dies|exit-early\n");
  return 2;
}
