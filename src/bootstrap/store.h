// The rendezvous store: a small key/value service with blocking waits, in the
// manner of torch's TCPStore.  Rank 0 hosts a TcpStoreServer; every rank
// (rank 0 included) talks to it through a TcpStoreClient.  A world of one
// uses a MemoryStore.  Keys and values are arbitrary bytes.
//
// Failure detection: a client says which rank it is when it connects and says
// goodbye in Close().  When a client's connection drops without a goodbye,
// the server marks that rank failed; from then on every wait that is pending
// or would block fails with kPeerFailed naming the rank, so no rank hangs on
// a dead peer.
//
// Thread safety: all methods of every class here are safe from any thread.
//
// Implemented in store_memory.cc, store_server.cc and store_client.cc; the
// client and the server speak the protocol of store_protocol.h, and
// MemoryStore and the server keep the key/value table of store_kv.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/auth.h"
#include "base/socket.h"
#include "base/status.h"

namespace hixl::bootstrap {

// The most bytes Store::Gather returns: its values and 4 bytes per value and
// 4 more.
constexpr uint64_t kMaxGatherBytes = 64u << 20;

// A key nobody sets: a WaitAtLeast on it ends only when the store knows a
// rank died (kPeerFailed, naming it) or at its timeout.  The world asks it
// whether a peer has died; the store's errors call it "news of a rank that
// died", not by its name.
inline constexpr char kDeathNewsKey[] = "hixl/death-news";

class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Waits (at most timeout_ms) until key exists and returns its value.
  // kTimeout when it does not appear in time.
  virtual Result<std::string> Get(const std::string& key, int64_t timeout_ms) = 0;
  // Atomically adds delta to the integer stored at key (absent counts as 0)
  // and returns the new value.  Integers are stored as decimal text.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Waits (at most timeout_ms) until the integer at key is >= target.
  virtual Status WaitAtLeast(const std::string& key, int64_t target, int64_t timeout_ms) = 0;
  // Removes key; absent keys are fine.
  virtual Status Delete(const std::string& key) = 0;
  // Waits (at most timeout_ms) until the keys prefix+"0" .. prefix+"<count-1>"
  // all exist and returns their values in that order: one request however
  // many keys (an allgather's "everyone's record" in one round trip).
  // kInvalidArg when count is outside [0, 2^20] or the values together are
  // larger than a reply may be (64 MiB).
  virtual Result<std::vector<std::string>> Gather(const std::string& prefix, int64_t count, int64_t timeout_ms) = 0;
};

// In-process store.
class MemoryStore final : public Store {
 public:
  MemoryStore();
  ~MemoryStore() override;
  Status Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key, int64_t timeout_ms) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  Status WaitAtLeast(const std::string& key, int64_t target, int64_t timeout_ms) override;
  Status Delete(const std::string& key) override;
  Result<std::vector<std::string>> Gather(const std::string& prefix, int64_t count, int64_t timeout_ms) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The server, run by rank 0 on the process's event loop (base/event_loop.h).
class TcpStoreServer {
 public:
  // Listens on host:port (port 0 picks a free port; see port()).
  // world_size is the number of ranks expected to connect.  With a secret,
  // a connection is served only after it proved the secret (base/auth.h);
  // one that fails is closed and logged.
  static Result<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, uint16_t port, int world_size,
                                                       const auth::MaybeSecret& secret = std::nullopt);
  // The same on a socket the caller bound and listens on (a launcher that
  // reserved the port): the server owns it from now on.
  static Result<std::unique_ptr<TcpStoreServer>> StartOn(net::Fd listening, int world_size,
                                                         const auth::MaybeSecret& secret = std::nullopt);
  ~TcpStoreServer();  // closes every socket
  uint16_t port() const;

 private:
  struct Impl;
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class TcpStoreClient final : public Store {
 public:
  // Connects (retrying until timeout_ms: the server may start later) and
  // introduces itself as `rank`, after the handshake of base/auth.h with
  // `secret` (which must match the server's, or both have none).
  static Result<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, uint16_t port, int rank,
                                                         int64_t timeout_ms,
                                                         const auth::MaybeSecret& secret = std::nullopt);
  ~TcpStoreClient() override;  // closes without goodbye unless Close() was called
  Status Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key, int64_t timeout_ms) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  Status WaitAtLeast(const std::string& key, int64_t target, int64_t timeout_ms) override;
  Status Delete(const std::string& key) override;
  Result<std::vector<std::string>> Gather(const std::string& prefix, int64_t count, int64_t timeout_ms) override;
  // Says goodbye (a clean leave, not a failure) and closes the connection.
  Status Close();

 private:
  struct Impl;
  explicit TcpStoreClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hixl::bootstrap
