// Frame reading (net::RecvFrame and net::Reader) on any byte stream: the
// bytes go through a socket pair, then frames of at most 1 KiB are read
// until the stream fails.  No frame is longer than the limit, and a stream
// that ends early ends in an error, never a hang.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/socket.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // stays within the socket's buffer
  int fds[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  hixl::net::Fd writer(fds[0]), reader(fds[1]);
  FUZZ_CHECK(hixl::net::SendAll(writer.get(), data, size, hixl::net::DeadlineIn(1000)).ok());
  writer.Reset();
  constexpr uint32_t kMax = 1024;
  size_t consumed = 0;
  while (true) {
    auto f = hixl::net::RecvFrame(reader.get(), hixl::net::DeadlineIn(1000), kMax);
    if (!f.ok()) {
      FUZZ_CHECK(f.status().code() != hixl::Errc::kTimeout);
      break;
    }
    FUZZ_CHECK(f->size() <= kMax);
    consumed += 4 + f->size();
    FUZZ_CHECK(consumed <= size);
    // A payload is read as length-prefixed strings, as every decoder does.
    hixl::net::Reader rd(*f);
    std::string s;
    while (rd.GetBytes(&s, 256)) FUZZ_CHECK(s.size() <= 256);
  }
  return 0;
}
