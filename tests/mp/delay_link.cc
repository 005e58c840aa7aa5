// A network link with a delay, in user space: two TAP devices, every
// Ethernet frame that one of them sends comes out of the other DELAY_US
// microseconds later.  For tests and benchmarks across two network
// namespaces (tests/mp/netns_lib.sh) where tc netem is missing from the
// kernel: each namespace gets one device, and a half round trip between
// them grows by DELAY_US, as over a veth with netem on both ends.
//
//   delay_link DEV0 DEV1 DELAY_US
//
// Creates the devices (root; they go when it exits), prints "ready" on
// stdout once they exist (move them into their namespaces then), and
// forwards until SIGTERM or SIGINT or until a device goes (its namespace
// removed), then prints what it forwarded and dropped on stderr.  Frames
// wait in order in one queue per direction; a queue past kMaxQueued frames
// drops the newest, as a full link would.
// One thread: the devices and a timer (nanosecond timer slack) on epoll.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <vector>

namespace {

constexpr size_t kMaxFrame = 65536;
constexpr size_t kMaxQueued = 4096;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "delay_link: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

int64_t NowNs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

int OpenTap(const char* name) {
  if (std::strlen(name) >= IFNAMSIZ) {
    errno = ENAMETOOLONG;
    Die(std::string("device name ") + name);
  }
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) Die("open /dev/net/tun");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::memcpy(ifr.ifr_name, name, std::strlen(name));
  if (::ioctl(fd, TUNSETIFF, &ifr) != 0) Die(std::string("create TAP device ") + name);
  return fd;
}

struct Frame {
  int64_t due_ns;
  std::string bytes;
};

struct Direction {
  int from = -1, to = -1;
  std::deque<Frame> queue;
  uint64_t forwarded = 0, dropped = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: delay_link DEV0 DEV1 DELAY_US\n");
    return 2;
  }
  char* end = nullptr;
  const long delay_us = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || delay_us < 0 || delay_us > 10'000'000) {
    std::fprintf(stderr, "delay_link: DELAY_US must be 0..10000000, not %s\n", argv[3]);
    return 2;
  }
  const int64_t delay_ns = delay_us * 1000;
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // the timer fires on time, not up to 50 us late

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  if (::sigprocmask(SIG_BLOCK, &stop, nullptr) != 0) Die("sigprocmask");
  const int sfd = ::signalfd(-1, &stop, SFD_CLOEXEC);
  if (sfd < 0) Die("signalfd");
  const int tfd = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (tfd < 0) Die("timerfd_create");

  const int dev[2] = {OpenTap(argv[1]), OpenTap(argv[2])};
  Direction dir[2];
  for (int i = 0; i < 2; ++i) {
    dir[i].from = dev[i];
    dir[i].to = dev[1 - i];
  }
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) Die("epoll_create1");
  for (int fd : {dev[0], dev[1], tfd, sfd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) Die("epoll_ctl");
  }
  std::printf("ready\n");
  std::fflush(stdout);

  std::vector<char> buf(kMaxFrame);
  auto send = [](Direction& d, const char* p, size_t n) {
    // A device that is down or full drops the frame, as a wire would.
    if (::write(d.to, p, n) == static_cast<ssize_t>(n)) {
      ++d.forwarded;
    } else {
      ++d.dropped;
    }
  };
  auto arm = [&] {
    int64_t next = INT64_MAX;
    for (const auto& d : dir) {
      if (!d.queue.empty()) next = std::min(next, d.queue.front().due_ns);
    }
    itimerspec its{};  // all zero: disarmed
    if (next != INT64_MAX) {
      its.it_value.tv_sec = next / 1'000'000'000;
      its.it_value.tv_nsec = next % 1'000'000'000;
    }
    if (::timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr) != 0) Die("timerfd_settime");
  };

  for (;;) {
    epoll_event evs[4];
    const int n = ::epoll_wait(ep, evs, 4, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      Die("epoll_wait");
    }
    bool stopped = false, gone = false;
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == sfd) {
        stopped = true;
      } else if (fd == tfd) {
        uint64_t expirations;
        (void)!::read(tfd, &expirations, sizeof expirations);
      } else {
        Direction& d = dir[fd == dev[0] ? 0 : 1];
        if (evs[i].events & (EPOLLERR | EPOLLHUP)) gone = true;  // its namespace was removed
        for (;;) {
          const ssize_t k = ::read(fd, buf.data(), buf.size());
          if (k < 0 && errno == EINTR) continue;
          // EAGAIN: all read; EIO: the device is down.  Anything else (EBADFD):
          // the device is gone.
          if (k < 0 && errno != EAGAIN && errno != EIO) gone = true;
          if (k <= 0) break;
          if (delay_ns == 0 && d.queue.empty()) {
            send(d, buf.data(), static_cast<size_t>(k));
          } else if (d.queue.size() >= kMaxQueued) {
            ++d.dropped;
          } else {
            d.queue.push_back({NowNs() + delay_ns, std::string(buf.data(), static_cast<size_t>(k))});
          }
        }
      }
    }
    if (stopped || gone) break;
    const int64_t now = NowNs();
    for (auto& d : dir) {
      while (!d.queue.empty() && d.queue.front().due_ns <= now) {
        send(d, d.queue.front().bytes.data(), d.queue.front().bytes.size());
        d.queue.pop_front();
      }
    }
    arm();
  }
  std::fprintf(stderr, "delay_link: %s -> %s: %llu frames, %llu dropped; %s -> %s: %llu frames, %llu dropped\n",
               argv[1], argv[2], static_cast<unsigned long long>(dir[0].forwarded),
               static_cast<unsigned long long>(dir[0].dropped), argv[2], argv[1],
               static_cast<unsigned long long>(dir[1].forwarded), static_cast<unsigned long long>(dir[1].dropped));
  return 0;
}
