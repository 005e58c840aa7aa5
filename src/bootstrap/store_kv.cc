// The store's key/value table and the helpers shared by MemoryStore and the
// server (see store_kv.h).
#include "bootstrap/store_kv.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <system_error>

#include "bootstrap/store.h"

namespace hixl::bootstrap::detail {

net::Deadline After(int64_t ms) {
  return net::Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, kMaxTimeoutMs + kSlackMs));
}

std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 120;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out += '\'';
  if (s.size() > kMaxShown) out += fmt::format(" (cut, {} bytes in all)", s.size());
  return out;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

Status CheckTimeout(const char* what, const std::string& key, int64_t timeout_ms) {
  if (timeout_ms < 0) {
    return Err(Errc::kInvalidArg, "{} of key {}: timeout_ms must be >= 0, got {}", what, Quote(key), timeout_ms);
  }
  return Status::Ok();
}

Status CheckGatherCount(const std::string& prefix, int64_t count) {
  if (count < 0 || count > kMaxGather) {
    return Err(Errc::kInvalidArg, "Gather of keys {}0..: {} keys is outside [0, {}]", Quote(prefix), count, kMaxGather);
  }
  return Status::Ok();
}

std::string WaitWhat(Op op, const std::string& key, int64_t target, const std::string& missing) {
  if (op == Op::kWaitAtLeast && key == kDeathNewsKey) return "news of a rank that died";
  if (op == Op::kGet) return fmt::format("key {} to be set", Quote(key));
  if (op == Op::kGather) {
    return fmt::format("the {} keys {}0.. to be set ({} is not)", target, Quote(key), Quote(missing));
  }
  return fmt::format("key {} to reach at least {}", Quote(key), target);
}

Result<int64_t> Kv::Add(const std::string& key, int64_t delta) {
  int64_t old = 0;
  if (const std::string* v = Find(key)) {
    std::optional<int64_t> n = ParseInt(*v);
    if (!n) {
      return Err(Errc::kInvalidArg, "cannot add {} to key {}: its value {} is not a decimal integer", delta, Quote(key),
                 Quote(*v));
    }
    old = *n;
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(old, delta, &sum)) {
    return Err(Errc::kInvalidArg, "adding {} to key {} (value {}) overflows a 64-bit integer", delta, Quote(key), old);
  }
  map_[key] = std::to_string(sum);
  return sum;
}

Result<bool> Kv::AtLeast(const std::string& key, int64_t target) const {
  const std::string* v = Find(key);
  if (!v) return 0 >= target;
  std::optional<int64_t> n = ParseInt(*v);
  if (!n) {
    return Err(Errc::kInvalidArg, "cannot wait for key {} to reach {}: its value {} is not a decimal integer",
               Quote(key), target, Quote(*v));
  }
  return *n >= target;
}

std::string Kv::Describe(const std::string& key) const {
  const std::string* v = Find(key);
  return v ? fmt::format("its value is {}", Quote(*v)) : std::string("it is not set");
}

}  // namespace hixl::bootstrap::detail
