// The engine's address strings and options.
#include <sodium.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include <unistd.h>

#include "engine/engine_impl.h"
#include "transport/transport.h"

namespace hixl::engine {

Result<HostPort> ParseEngine(const char* what, const std::string& s) {
  HostPort hp;
  std::string port;
  if (s.empty())
    return Err(Errc::kInvalidArg, "{}: the engine address is empty (expected ip, ip:port, [ipv6] or [ipv6]:port)",
               what);
  if (s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close == 1) {
      return Err(Errc::kInvalidArg, "{}: '{}' is not [ipv6] or [ipv6]:port", what, s);
    }
    hp.host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') return Err(Errc::kInvalidArg, "{}: '{}' is not [ipv6] or [ipv6]:port", what, s);
      port = s.substr(close + 2);
      if (port.empty()) return Err(Errc::kInvalidArg, "{}: '{}' has an empty port", what, s);
    }
  } else {
    auto colon = s.find(':');
    if (colon != std::string::npos && s.find(':', colon + 1) != std::string::npos) {
      return Err(Errc::kInvalidArg, "{}: '{}': write an IPv6 address in brackets, [ipv6] or [ipv6]:port", what, s);
    }
    hp.host = s.substr(0, colon);
    if (colon != std::string::npos) {
      port = s.substr(colon + 1);
      if (port.empty()) return Err(Errc::kInvalidArg, "{}: '{}' has an empty port", what, s);
    }
    if (hp.host.empty()) return Err(Errc::kInvalidArg, "{}: '{}' has no address before the port", what, s);
  }
  if (!port.empty()) {
    int v = -1;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || p != port.data() + port.size() || v < 0 || v > 65535) {
      return Err(Errc::kInvalidArg, "{}: the port of '{}' is not a number in [0, 65535]", what, s);
    }
    hp.port = static_cast<uint16_t>(v);
  }
  return hp;
}

namespace {

// The shared options and every transport's switches, each once.
std::vector<std::string> KnownOptions() {
  std::vector<std::string> known;
  for (const bootstrap::SharedSwitch& sw : bootstrap::kSharedSwitches) known.emplace_back(sw.option);
  known.emplace_back("secret");
  for (const transport::Switch& sw : transport::AllSwitches()) {
    if (std::find(known.begin(), known.end(), sw.option) == known.end()) known.emplace_back(sw.option);
  }
  return known;
}

}  // namespace

// Options override the environment; the shared ones are parsed by the one
// parser of the shared switches, so a value means the same as an option and
// as a variable (and as the world's variable).  The transports' switches
// are passed on as given, for each transport to parse (a switch not given
// is read by its transport from its variable).
Result<bootstrap::SharedOptions> ParseOptions(const std::map<std::string, std::string>& options) {
  const std::vector<std::string> known = KnownOptions();
  for (const auto& [k, v] : options) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string list;
      for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
      return Err(Errc::kInvalidArg, "Engine::Initialize: unknown option '{}' (known: {})", k, list);
    }
  }
  bootstrap::SharedOptions c;
  for (const transport::Switch& sw : transport::AllSwitches()) {
    if (auto it = options.find(sw.option); it != options.end()) c.transport_settings[sw.option] = it->second;
  }
  for (const bootstrap::SharedSwitch& sw : bootstrap::kSharedSwitches) {
    Status s;
    if (auto it = options.find(sw.option); it != options.end()) {
      s = bootstrap::ParseSharedOption(sw.option, std::string("option ") + sw.option, it->second, &c);
    } else if (const char* v = std::getenv(sw.variable)) {
      s = bootstrap::ParseSharedOption(sw.option, sw.variable, v, &c);
    }
    if (!s.ok()) return Err(Errc::kInvalidArg, "Engine::Initialize: {}", s.message());
  }
  // The job secret: the option, else HIXL_SECRET / HIXL_SECRET_FILE.
  if (auto it = options.find("secret"); it != options.end()) {
    Result<auth::Secret> s = auth::ParseSecretHex(it->second, "option secret");
    if (!s.ok()) return Err(Errc::kInvalidArg, "Engine::Initialize: {}", s.status().message());
    c.secret = *s;
  } else {
    Result<auth::MaybeSecret> s = auth::SecretFromEnv(bootstrap::ProcessEnv());
    if (!s.ok()) return Err(Errc::kInvalidArg, "Engine::Initialize: {}", s.status().message());
    c.secret = *s;
  }
  const bool given = options.count("transport") > 0;
  if (Status s = transport::CheckName(given ? "option transport" : "HIXL_TRANSPORT", c.transport); !s.ok()) {
    return Err(Errc::kInvalidArg, "Engine::Initialize: {}", s.message());
  }
  return c;
}

uint64_t RandomId() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
}

int64_t NewConnectionId() {
  // A 4-round Feistel network over 64 bits, its round function SipHash
  // (crypto_shorthash) under keys drawn once: a bijection, so the counter
  // never gives an id twice, and without the keys one id tells nothing of
  // another.
  static std::mutex mu;
  static uint64_t counter = 0;
  static unsigned char keys[4][crypto_shorthash_KEYBYTES];
  static bool keyed = false;
  std::lock_guard lock(mu);
  if (!keyed) {
    if (::sodium_init() < 0) std::abort();  // no CSPRNG: nothing here can be made safe
    ::randombytes_buf(keys, sizeof(keys));
    keyed = true;
  }
  while (true) {
    const uint64_t x = counter++;
    uint32_t l = static_cast<uint32_t>(x >> 32), r = static_cast<uint32_t>(x);
    for (const auto& key : keys) {
      unsigned char in[4], out[crypto_shorthash_BYTES];
      std::memcpy(in, &r, sizeof(in));
      ::crypto_shorthash(out, in, sizeof(in), key);
      uint32_t f = 0;
      std::memcpy(&f, out, sizeof(f));
      const uint32_t next = l ^ f;
      l = r;
      r = next;
    }
    const int64_t id = static_cast<int64_t>((static_cast<uint64_t>(l) << 32) | r);
    if (id != -1) return id;
  }
}

}  // namespace hixl::engine
