// hixlrun: the Launcher's run and its poll() loop (timeouts, stopping,
// leftover processes), and the choice of a free MASTER_PORT.
#include "launcher.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "util.h"

namespace hixlrun {
namespace {

// How often leftover processes are looked for once all ranks have exited.
constexpr Millis kLeftoverPoll{20};
// How long to wait for processes that survive SIGKILL (e.g. stuck in D state).
constexpr Millis kAfterKillWait{3000};

// Binds and listens on addr:port (port 0: a free one) for rank 0's store.
// The socket stays open and is handed to rank 0 (HIXL_STORE_FD), so no
// other process can take the port between this choice and rank 0's start.
// Returns the descriptor (close-on-exec) and sets *port; -1 and prints a
// message on failure.
int bind_store_socket(const std::string &addr, int *port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo *res = nullptr;
  const std::string service = std::to_string(*port);
  int gai = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) {
    message("cannot resolve MASTER_ADDR '" + addr + "': " + ::gai_strerror(gai));
    return -1;
  }
  int fd = -1;
  int last_err = 0;
  for (addrinfo *ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) {
      last_err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(s, 128) == 0 &&
        ::getsockname(s, reinterpret_cast<sockaddr *>(&ss), &len) == 0) {
      fd = s;
      if (ss.ss_family == AF_INET) {
        *port = ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
      } else if (ss.ss_family == AF_INET6) {
        *port = ntohs(reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port);
      }
    } else {
      last_err = errno;
      ::close(s);
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    message("cannot listen on MASTER_ADDR:MASTER_PORT '" + addr + ":" + service + "' for rank 0's store: " +
            errno_text(last_err) + (*port == 0 ? "" : " (choose another --master-port, or none)"));
  }
  return fd;
}

}  // namespace

int Launcher::run() {
  if (!setup_signals()) return kExitInternal;

  int port = opts_.master_port;
  store_fd_ = bind_store_socket(opts_.master_addr, &port);
  if (store_fd_ < 0) return kExitInternal;

  if (opts_.timeout_s) {
    auto ms = static_cast<int64_t>(std::ceil(*opts_.timeout_s * 1000.0));
    deadline_ = Clock::now() + Millis(ms);
  }

  start_ranks(port);
  close_fd(store_fd_);  // rank 0 has it now (or never will)
  if (launch_error_ != 0 && !ranks_.empty()) start_stopping(SIGTERM);
  main_loop();
  final_drain();

  // The ranks were left as zombies until now so that their pids (and with
  // them the process group ids we signal) could not be reused.
  for (Rank &r : ranks_) {
    while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

  if (launch_error_ != 0) return launch_error_;
  if (timed_out_) return kExitTimeout;
  if (first_failure_ != 0) return first_failure_;
  if (forwarded_signal_ != 0) return 128 + forwarded_signal_;
  return 0;
}

void Launcher::main_loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank *, Stream *>> owners;
  while (true) {
    const auto now = Clock::now();
    if (!stopping_ && deadline_ && now >= *deadline_) {
      timed_out_ = true;
      message("timeout of " + format_seconds(*opts_.timeout_s) + " s expired; stopping all ranks");
      start_stopping(SIGTERM);
    }
    if (stopping_ && !killed_ && now >= kill_at_) {
      signal_all(SIGKILL);
      killed_ = true;
      killed_at_ = now;
    }

    bool periodic = false;
    if (all_exited()) {
      // Processes the ranks left behind in their groups are stopped too.
      if (!any_group_alive(groups())) break;
      if (!stopping_) {
        if (!leftovers_reported_) {
          message("the ranks have exited but left processes running; stopping them");
          leftovers_reported_ = true;
        }
        start_stopping(SIGTERM);
      }
      if (killed_ && now - killed_at_ >= kAfterKillWait) {
        message("some processes of the ranks did not die after SIGKILL; giving up on them");
        break;
      }
      periodic = true;
    }

    // Sleep until something happens or the next deadline.
    std::optional<Clock::time_point> wake;
    auto earliest = [&](Clock::time_point t) {
      if (!wake || t < *wake) wake = t;
    };
    if (!stopping_ && deadline_) earliest(*deadline_);
    if (stopping_ && !killed_) earliest(kill_at_);
    if (periodic) earliest(now + kLeftoverPoll);
    int timeout_ms = -1;
    if (wake) {
      auto ms = std::chrono::ceil<Millis>(*wake - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, std::numeric_limits<int>::max()));
    }

    fds.clear();
    owners.clear();
    fds.push_back({sigfd_, POLLIN, 0});
    owners.emplace_back(nullptr, nullptr);
    for (Rank &r : ranks_) {
      for (Stream *s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.emplace_back(&r, s);
        }
      }
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      message(std::string("poll: ") + errno_text(errno));
      // Do not leave the ranks behind.
      signal_all(SIGKILL);
      launch_error_ = kExitInternal;
      while (!all_exited()) {
        ::usleep(10000);
        check_children();
      }
      return;
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*owners[i].first, *owners[i].second, false);
    }
    if (fds[0].revents != 0) handle_signalfd();
  }
}

}  // namespace hixlrun
