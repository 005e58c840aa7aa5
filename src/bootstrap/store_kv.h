// The key/value table that MemoryStore and the store server both keep, and
// the small helpers their messages share: printable keys, timeout checks,
// deadlines and what a wait was waiting for.  Internal to the store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/socket.h"
#include "base/status.h"
#include "bootstrap/store_protocol.h"

namespace hixl::bootstrap::detail {

// Now plus ms, with ms cut to [0, kMaxTimeoutMs + kSlackMs].
net::Deadline After(int64_t ms);

// A key (arbitrary bytes) made printable for messages: quoted, with
// non-printable bytes escaped and very long keys cut.
std::string Quote(std::string_view s);

// A decimal integer, or nullopt when s is anything else.
std::optional<int64_t> ParseInt(std::string_view s);

// kInvalidArg when timeout_ms is negative ("<what> of key ...").
Status CheckTimeout(const char* what, const std::string& key, int64_t timeout_ms);
// kInvalidArg when a Gather's count is outside [0, kMaxGather].
Status CheckGatherCount(const std::string& prefix, int64_t count);

// "key 'k' to be set" (GET) / "key 'k' to reach at least 3" (WAIT_AT_LEAST)
// / "the 4 keys 'p/'0.. to be set ('p/2' is not)" (GATHER; missing: the
// first key not set).
std::string WaitWhat(Op op, const std::string& key, int64_t target, const std::string& missing = {});

// The key/value state shared by MemoryStore and the server (not thread-safe:
// callers lock).
class Kv {
 public:
  void Set(const std::string& key, std::string value) { map_[key] = std::move(value); }
  const std::string* Find(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  void Erase(const std::string& key) { map_.erase(key); }

  // Adds delta to the integer at key (absent = 0) and returns the sum; an
  // error when the value is not an integer or the sum overflows.
  Result<int64_t> Add(const std::string& key, int64_t delta);

  // Whether the integer at key (absent = 0) is >= target; an error when the
  // value is not an integer.
  Result<bool> AtLeast(const std::string& key, int64_t target) const;

  // "its value is 3" / "it is not set", for timeout messages.
  std::string Describe(const std::string& key) const;

 private:
  std::unordered_map<std::string, std::string> map_;
};

}  // namespace hixl::bootstrap::detail
