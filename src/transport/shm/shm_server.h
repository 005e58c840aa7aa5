// The target side of the shm transport: its Unix socket, served on the
// process's event loop (base/frame_server.h), and the `hixl-shm` thread
// that serves the relay channels origins open over it.
//
// The socket answers an origin's fixed-size requests (fd_channel.h): a heap
// segment's memfd, or the opening of a relay channel.  Serving them on the
// loop, it never looks inside a descriptor a peer passed: the relay thread
// checks, maps and serves a channel (a stranger's file could block or raise
// SIGBUS), and closes every descriptor it was passed and did not keep.
// What a request asks for is decided from its bytes alone (shm_request.h).
// Caps and timeouts: those of the frame server (docs/limits.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/auth.h"
#include "base/status.h"
#include "transport/transport.h"

namespace hixl::transport::shm {

class ShmServer {
 public:
  // Listens at the abstract name and starts the relay thread.  Without a
  // secret only processes of this user are let in.
  static Result<std::unique_ptr<ShmServer>> Start(const Host* host, const auth::MaybeSecret& secret,
                                                  const std::string& sock_name);
  ~ShmServer();  // Stop()
  ShmServer(const ShmServer&) = delete;
  ShmServer& operator=(const ShmServer&) = delete;

  // Closes the socket and its connections, then ends the relay thread
  // (whose channels are unmapped).  Idempotent.
  void Stop();

  // Serves heap segment `id` (a copy of backing_fd is kept) to origins
  // that ask; once per id.
  Status AddSegment(uint32_t id, int backing_fd, uint64_t size);
  // Stops serving segment `id` (a promoted range deregistered); origins
  // that mapped it keep their mappings.
  void RemoveSegment(uint32_t id);

  struct State;

 private:
  explicit ShmServer(std::shared_ptr<State> s) : s_(std::move(s)) {}
  std::shared_ptr<State> s_;
};

}  // namespace hixl::transport::shm
