#include "base/auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <mutex>

#include "base/log.h"

namespace hixl::auth {

namespace {

constexpr char kMagic[4] = {'H', 'X', 'A', '1'};
using Nonce = std::array<uint8_t, kNonceBytes>;

bool SodiumReady() {
  static const bool ok = ::sodium_init() >= 0;
  return ok;
}

// HMAC-SHA256(secret, label || kind || a || b).
std::string Mac(const Secret& s, const char* label, Kind kind, const Nonce& a, const Nonce& b) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, s.key.data(), s.key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), std::strlen(label));
  const auto k = static_cast<unsigned char>(kind);
  crypto_auth_hmacsha256_update(&st, &k, 1);
  crypto_auth_hmacsha256_update(&st, a.data(), a.size());
  crypto_auth_hmacsha256_update(&st, b.data(), b.size());
  std::string out(kMacBytes, '\0');
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(out.data()));
  sodium_memzero(&st, sizeof(st));
  return out;
}

bool SameMac(std::string_view a, std::string_view b) {
  return a.size() == kMacBytes && b.size() == kMacBytes && ::sodium_memcmp(a.data(), b.data(), kMacBytes) == 0;
}

Nonce RandomNonce() {
  Nonce n{};
  ::randombytes_buf(n.data(), n.size());
  return n;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

bool Secret::operator==(const Secret& o) const { return ::sodium_memcmp(key.data(), o.key.data(), key.size()) == 0; }

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kStore: return "store";
    case Kind::kControl: return "control";
    case Kind::kShm: return "shm";
  }
  return "unknown";
}

Result<Secret> ParseSecretHex(std::string_view hex, std::string_view shown) {
  if (!SodiumReady()) return Err(Errc::kInternal, "libsodium failed to initialize");
  if (hex.size() != 2 * kSecretBytes) {
    return Err(Errc::kInvalidArg, "{}: the job secret must be {} hex digits ({} bytes), got {} characters", shown,
               2 * kSecretBytes, kSecretBytes, hex.size());
  }
  Secret s;
  size_t n = 0;
  if (::sodium_hex2bin(s.key.data(), s.key.size(), hex.data(), hex.size(), nullptr, &n, nullptr) != 0 ||
      n != kSecretBytes) {
    return Err(Errc::kInvalidArg, "{}: the job secret is not {} hex digits", shown, 2 * kSecretBytes);
  }
  return s;
}

Result<Secret> LoadSecretFile(const std::string& path) {
  const std::string shown = "HIXL_SECRET_FILE " + path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err(Errc::kInvalidArg, "{}: cannot open: {}", shown, std::strerror(errno));
  net::Fd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Err(Errc::kInvalidArg, "{}: cannot stat: {}", shown, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Err(Errc::kInvalidArg, "{}: not a regular file", shown);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return Err(Errc::kInvalidArg, "{}: the file is accessible by group or others (mode {:o}); chmod 600 it", shown,
               st.st_mode & 07777);
  }
  char buf[256];
  ssize_t k = ::read(fd, buf, sizeof(buf));
  if (k < 0) return Err(Errc::kInvalidArg, "{}: cannot read: {}", shown, std::strerror(errno));
  Result<Secret> s = ParseSecretHex(Trim(std::string_view(buf, static_cast<size_t>(k))), shown);
  sodium_memzero(buf, sizeof(buf));
  return s;
}

Result<MaybeSecret> SecretFromVariables(const std::optional<std::string>& hex, const std::optional<std::string>& file) {
  if (hex && file) {
    return Err(Errc::kInvalidArg, "both HIXL_SECRET and HIXL_SECRET_FILE are set; set one of them");
  }
  if (hex) {
    HIXL_ASSIGN_OR_RETURN(Secret s, ParseSecretHex(Trim(*hex), "HIXL_SECRET"));
    return MaybeSecret(s);
  }
  if (file) {
    HIXL_ASSIGN_OR_RETURN(Secret s, LoadSecretFile(*file));
    return MaybeSecret(s);
  }
  return MaybeSecret();
}

std::string NewSecretHex() {
  if (!SodiumReady()) return {};
  std::array<uint8_t, kSecretBytes> key{};
  ::randombytes_buf(key.data(), key.size());
  char hex[2 * kSecretBytes + 1];
  ::sodium_bin2hex(hex, sizeof(hex), key.data(), key.size());
  sodium_memzero(key.data(), key.size());
  return hex;
}

void WarnUnauthenticatedOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    HIXL_LOG_WARN(
        "hixl: this job has no secret, so its connections are not authenticated (Unix sockets admit only this "
        "user; TCP listeners admit anyone who can reach them). Set HIXL_SECRET to 64 hex digits (the same in "
        "every process; hixlrun does this) or HIXL_SECRET_FILE; see docs/security.md");
  });
}

std::string MakeGreeting(const MaybeSecret& secret, Kind kind, Nonce* nonce_s) {
  std::string g(kGreetingBytes, '\0');
  std::memcpy(g.data(), kMagic, 4);
  g[4] = static_cast<char>(kind);
  g[5] = secret ? 1 : 0;
  if (secret) {
    SodiumReady();
    *nonce_s = RandomNonce();
    std::memcpy(g.data() + 8, nonce_s->data(), kNonceBytes);
  }
  return g;
}

Result<std::string> RespondToGreeting(const MaybeSecret& secret, Kind kind, std::string_view greeting, Nonce* nonce_c,
                                      Nonce* nonce_s, std::string_view server) {
  if (greeting.size() != kGreetingBytes || std::memcmp(greeting.data(), kMagic, 4) != 0) {
    return Err(Errc::kBootstrap, "{} is not a hixl {} listener (it sent no hixl greeting)", server, KindName(kind));
  }
  const auto got = static_cast<Kind>(static_cast<uint8_t>(greeting[4]));
  if (got != kind) {
    return Err(Errc::kBootstrap, "{} is a hixl {} listener, not a {} listener", server, KindName(got), KindName(kind));
  }
  const auto mode = static_cast<uint8_t>(greeting[5]);
  if (mode > 1) return Err(Errc::kBootstrap, "{} asked for an unknown authentication mode {}", server, mode);
  if (mode == 0 && secret) {
    return Err(Errc::kBootstrap,
               "{} does not authenticate (it has no job secret) but this process has one (HIXL_SECRET); refusing "
               "it: are both in the same job?",
               server);
  }
  if (mode == 1 && !secret) {
    return Err(Errc::kBootstrap,
               "{} requires the job secret and this process has none: set HIXL_SECRET or HIXL_SECRET_FILE as in "
               "the rest of the job (hixlrun sets it for its ranks)",
               server);
  }
  if (mode == 0) return std::string();
  if (!SodiumReady()) return Err(Errc::kInternal, "libsodium failed to initialize");
  std::memcpy(nonce_s->data(), greeting.data() + 8, kNonceBytes);
  *nonce_c = RandomNonce();
  std::string r(reinterpret_cast<const char*>(nonce_c->data()), kNonceBytes);
  r += Mac(*secret, "hixl-c", kind, *nonce_s, *nonce_c);
  return r;
}

Result<std::string> CheckResponse(const Secret& secret, Kind kind, const Nonce& nonce_s, std::string_view response) {
  if (response.size() != kResponseBytes) {
    return Err(Errc::kBootstrap, "the authentication response has {} bytes, not {}", response.size(), kResponseBytes);
  }
  Nonce nonce_c{};
  std::memcpy(nonce_c.data(), response.data(), kNonceBytes);
  if (!SameMac(Mac(secret, "hixl-c", kind, nonce_s, nonce_c), response.substr(kNonceBytes))) {
    return Err(Errc::kBootstrap, "wrong proof of the job secret (another job, or no HIXL_SECRET)");
  }
  return Mac(secret, "hixl-s", kind, nonce_c, nonce_s);
}

Status CheckServerProof(const Secret& secret, Kind kind, const Nonce& nonce_c, const Nonce& nonce_s,
                        std::string_view proof, std::string_view server) {
  if (!SameMac(Mac(secret, "hixl-s", kind, nonce_c, nonce_s), proof)) {
    return Err(Errc::kBootstrap, "{} gave a wrong proof of the job secret (is it another job's?)", server);
  }
  return Status::Ok();
}

Status ClientHandshake(int fd, const MaybeSecret& secret, Kind kind, net::Deadline deadline, std::string_view server) {
  std::string greeting(kGreetingBytes, '\0');
  if (Status s = net::RecvAll(fd, greeting.data(), greeting.size(), deadline); !s.ok()) {
    return Err(s.code() == Errc::kTimeout ? Errc::kTimeout : Errc::kPeerFailed,
               "authenticating with {}: no greeting: {}", server, s.message());
  }
  Nonce nonce_c{}, nonce_s{};
  HIXL_ASSIGN_OR_RETURN(std::string response, RespondToGreeting(secret, kind, greeting, &nonce_c, &nonce_s, server));
  if (response.empty()) return Status::Ok();
  if (Status s = net::SendAll(fd, response.data(), response.size(), deadline); !s.ok()) {
    return Err(s.code(), "authenticating with {}: {}", server, s.message());
  }
  std::string proof(kMacBytes, '\0');
  if (Status s = net::RecvAll(fd, proof.data(), proof.size(), deadline); !s.ok()) {
    return Err(s.code() == Errc::kTimeout ? Errc::kTimeout : Errc::kPeerFailed,
               "{} refused this process's proof of the job secret (is HIXL_SECRET the same in both?): {}", server,
               s.message());
  }
  return CheckServerProof(*secret, kind, nonce_c, nonce_s, proof, server);
}

ServerHandshake::ServerHandshake(const MaybeSecret& secret, Kind kind, int64_t timeout_ms)
    : secret_(secret), kind_(kind), deadline_(net::DeadlineIn(timeout_ms)) {}

ServerHandshake::Step ServerHandshake::Fail(std::string why) {
  error_ = std::move(why);
  step_ = Step::kFailed;
  return step_;
}

ServerHandshake::Step ServerHandshake::Start(int fd) {
  const std::string g = MakeGreeting(secret_, kind_, &nonce_s_);
  // A fresh socket's send buffer is empty: the greeting goes at once.
  ssize_t k = 0;
  do {
    k = ::send(fd, g.data(), g.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (k < 0 && errno == EINTR);
  if (k != static_cast<ssize_t>(g.size())) {
    return Fail(fmt::format("cannot send the greeting: {}", k < 0 ? std::strerror(errno) : "short write"));
  }
  step_ = secret_ ? Step::kWaiting : Step::kDone;
  return step_;
}

ServerHandshake::Step ServerHandshake::OnReadable(int fd) {
  if (step_ != Step::kWaiting) return step_;
  while (in_.size() < kResponseBytes) {
    char buf[kResponseBytes];
    ssize_t k = ::recv(fd, buf, kResponseBytes - in_.size(), MSG_DONTWAIT);
    if (k > 0) {
      in_.append(buf, static_cast<size_t>(k));
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return step_;
    return Fail(k == 0 ? fmt::format("it closed the connection after {} bytes of the handshake", in_.size())
                       : fmt::format("recv failed: {}", std::strerror(errno)));
  }
  Result<std::string> proof = CheckResponse(*secret_, kind_, nonce_s_, in_);
  if (!proof.ok()) return Fail(proof.status().message());
  ssize_t k = 0;
  do {
    k = ::send(fd, proof->data(), proof->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (k < 0 && errno == EINTR);
  if (k != static_cast<ssize_t>(proof->size())) {
    return Fail(fmt::format("cannot send the proof: {}", k < 0 ? std::strerror(errno) : "short write"));
  }
  step_ = Step::kDone;
  return step_;
}

Status CheckSameUser(int fd, std::string_view who) {
  ucred c{};
  socklen_t cl = sizeof(c);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &cl) != 0) {
    return Err(Errc::kTransport, "cannot learn who {} is (SO_PEERCRED): {}", who, std::strerror(errno));
  }
  if (c.uid != ::getuid()) {
    return Err(Errc::kPeerFailed,
               "{} runs as uid {}, not this process's uid {}; without a job secret only the same user is admitted "
               "(set HIXL_SECRET in both to allow it)",
               who, c.uid, ::getuid());
  }
  return Status::Ok();
}

std::string PeerName(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown peer";
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, ntohs(in->sin_port));
  }
  if (a.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, ntohs(in->sin6_port));
  }
  if (a.ss_family == AF_UNIX) {
    ucred c{};
    socklen_t cl = sizeof(c);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &cl) == 0) return fmt::format("pid {} uid {}", c.pid, c.uid);
  }
  return "an unknown peer";
}

}  // namespace hixl::auth
