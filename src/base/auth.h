// The job secret and the proof of it that every connection to one of
// hixl's own listeners gives before any other byte is read (the store, the
// control servers, the shm transport's Unix socket).  See docs/security.md.
//
// The handshake, on a fresh stream connection (the secret is never sent):
//   server -> client  greeting: "HXA1", kind, mode (0: no secret, 1: secret),
//                     2 zero bytes, nonce_s (32 random bytes; zero in mode 0)
//   mode 0: nothing more.  Mode 1:
//   client -> server  nonce_c, HMAC-SHA256(secret, "hixl-c" kind nonce_s nonce_c)
//   server -> client  HMAC-SHA256(secret, "hixl-s" kind nonce_c nonce_s)
// Both MACs are checked in constant time.  The kind (which listener) is in
// every MAC, so a transcript of one listener proves nothing to another, and
// fresh nonces on both sides make a recorded transcript worthless.  A client
// with a secret refuses a server without one (mode 0), and one without a
// secret refuses a server that asks for one, each with a clear error.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/socket.h"
#include "base/status.h"

namespace hixl::auth {

inline constexpr size_t kSecretBytes = 32;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kGreetingBytes = 8 + kNonceBytes;
inline constexpr size_t kResponseBytes = kNonceBytes + kMacBytes;

struct Secret {
  std::array<uint8_t, kSecretBytes> key{};
  bool operator==(const Secret& o) const;  // constant time
};
using MaybeSecret = std::optional<Secret>;

// Which listener a handshake is for (domain separation).
enum class Kind : uint8_t { kStore = 1, kControl = 2, kShm = 3 };
const char* KindName(Kind k);

// Parses 64 hex digits.  `shown` names the source in errors ("HIXL_SECRET").
Result<Secret> ParseSecretHex(std::string_view hex, std::string_view shown);
// Reads a secret (64 hex digits, surrounding white space allowed) from a
// file that only its owner may read.
Result<Secret> LoadSecretFile(const std::string& path);
// The secret from HIXL_SECRET or HIXL_SECRET_FILE (nullopt when neither is
// set; an error when both are, or when the value is malformed).  `get` reads
// a variable (nullopt when unset).
template <typename GetEnv>
Result<MaybeSecret> SecretFromEnv(const GetEnv& get);
Result<MaybeSecret> SecretFromVariables(const std::optional<std::string>& hex, const std::optional<std::string>& file);
// 64 hex digits of a fresh random secret (for launchers).
std::string NewSecretHex();
// Logs once per process, at warn level, that this job has no secret.
void WarnUnauthenticatedOnce();

// The pure steps, for the socket code below and for tests.
std::string MakeGreeting(const MaybeSecret& secret, Kind kind, std::array<uint8_t, kNonceBytes>* nonce_s);
// Client: checks the greeting and makes the response (empty in mode 0).
Result<std::string> RespondToGreeting(const MaybeSecret& secret, Kind kind, std::string_view greeting,
                                      std::array<uint8_t, kNonceBytes>* nonce_c,
                                      std::array<uint8_t, kNonceBytes>* nonce_s, std::string_view server);
// Server: checks the client's response; on success returns its proof.
Result<std::string> CheckResponse(const Secret& secret, Kind kind, const std::array<uint8_t, kNonceBytes>& nonce_s,
                                  std::string_view response);
// Client: checks the server's proof.
Status CheckServerProof(const Secret& secret, Kind kind, const std::array<uint8_t, kNonceBytes>& nonce_c,
                        const std::array<uint8_t, kNonceBytes>& nonce_s, std::string_view proof,
                        std::string_view server);

// The client half, blocking until the deadline.  `server` names the peer
// in errors ("the store at 10.0.0.1:29500").
Status ClientHandshake(int fd, const MaybeSecret& secret, Kind kind, net::Deadline deadline, std::string_view server);

// The server half for a poll loop: Start sends the greeting; OnReadable
// reads what it needs (never a byte more) without blocking.  Not
// thread-safe; one per accepted connection.
class ServerHandshake {
 public:
  enum class Step { kWaiting, kDone, kFailed };
  ServerHandshake(const MaybeSecret& secret, Kind kind, int64_t timeout_ms = 10000);
  Step Start(int fd);
  Step OnReadable(int fd);
  bool done() const { return step_ == Step::kDone; }
  net::Deadline deadline() const { return deadline_; }
  // Why it failed, in words.
  const std::string& error() const { return error_; }

 private:
  Step Fail(std::string why);
  MaybeSecret secret_;
  Kind kind_;
  net::Deadline deadline_;
  Step step_ = Step::kWaiting;
  std::array<uint8_t, kNonceBytes> nonce_s_{};
  std::string in_;
  std::string error_;
};

// For Unix sockets without a secret: OK when the process at the other end
// of fd runs as this process's user (SO_PEERCRED); otherwise an error
// naming `who` and both users.
Status CheckSameUser(int fd, std::string_view who);

// The peer address of a socket, for log lines ("10.0.0.2:40112", "uid 1000 pid 7").
std::string PeerName(int fd);

template <typename GetEnv>
Result<MaybeSecret> SecretFromEnv(const GetEnv& get) {
  return SecretFromVariables(get("HIXL_SECRET"), get("HIXL_SECRET_FILE"));
}

}  // namespace hixl::auth
