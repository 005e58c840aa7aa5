// Helpers for the multi-process tests: deterministic data patterns that
// both sides can compute without talking, and a gtest main that joins the
// world.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <hixl/hixl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hixl::test {

// The world of this rank (set by mp_main.cc before the tests run).
extern World* g_world;

inline uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Byte i of the pattern `seed` is byte (i % 8) of Mix(seed * K + i / 8).
inline uint8_t PatternByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>(Mix(seed * 0x100000001B3ull + (i >> 3)) >> ((i & 7) * 8));
}

// Fills buf with bytes [first, first+n) of pattern seed.
inline void Fill(void* buf, size_t n, uint64_t seed, uint64_t first = 0) {
  auto* p = static_cast<uint8_t*>(buf);
  // Head up to the next 8-byte boundary of the pattern, whole words, tail;
  // each bound is computed from n so none can run past it.
  const size_t head = std::min<size_t>(n, (8 - (first & 7)) & 7);
  const size_t words = (n - head) / 8;
  for (size_t i = 0; i < head; ++i) p[i] = PatternByte(seed, first + i);
  for (size_t k = 0; k < words; ++k) {
    const size_t i = head + k * 8;
    uint64_t w = Mix(seed * 0x100000001B3ull + ((first + i) >> 3));
    std::memcpy(p + i, &w, 8);
  }
  for (size_t i = head + words * 8; i < n; ++i) p[i] = PatternByte(seed, first + i);
}

// The index of the first byte that differs from the pattern, or -1.
inline int64_t FirstMismatch(const void* buf, size_t n, uint64_t seed, uint64_t first = 0) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t i = 0;
  for (; i < n && ((first + i) & 7) != 0; ++i) {
    if (p[i] != PatternByte(seed, first + i)) return static_cast<int64_t>(i);
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w = Mix(seed * 0x100000001B3ull + ((first + i) >> 3));
    if (std::memcmp(p + i, &w, 8) != 0) {
      for (size_t j = i; j < i + 8; ++j) {
        if (p[j] != PatternByte(seed, first + j)) return static_cast<int64_t>(j);
      }
    }
  }
  for (; i < n; ++i) {
    if (p[i] != PatternByte(seed, first + i)) return static_cast<int64_t>(i);
  }
  return -1;
}

inline int64_t FirstNot(const void* buf, size_t n, uint8_t v) {
  const auto* p = static_cast<const uint8_t*>(buf);
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != v) return static_cast<int64_t>(i);
  }
  return -1;
}

// A transfer size and offset that every rank derives from the same inputs:
// sizes log-uniform in [1, max_size], offsets anywhere in [0, room - size].
struct Shape {
  size_t size;
  size_t offset;
};
inline Shape RandomShape(uint64_t a, uint64_t b, uint64_t c, size_t max_size, size_t room) {
  std::mt19937_64 rng(Mix(Mix(Mix(a) ^ b) ^ c));
  std::uniform_real_distribution<double> lg(0.0, std::log(static_cast<double>(max_size)));
  size_t size = std::max<size_t>(1, std::min<size_t>(max_size, static_cast<size_t>(std::exp(lg(rng)))));
  size_t offset = std::uniform_int_distribution<size_t>(0, room - size)(rng);
  return {size, offset};
}

#define HIXL_ASSERT_OK(expr)                                  \
  do {                                                        \
    ::hixl::Status _s = (expr);                               \
    ASSERT_TRUE(_s.ok()) << #expr << " -> " << _s.ToString(); \
  } while (0)

inline int Rank() { return g_world->rank(); }
inline int Size() { return g_world->size(); }

// Memory that peers can reach: symmetric (hixl_alloc) or registered (mmap).
enum class Kind { kSymmetric, kRegistered };

class Remote {
 public:
  // Collective: every rank makes `bytes` of `kind` memory; base(r) is rank
  // r's address of it.
  Remote(Kind kind, size_t bytes) : kind_(kind), bytes_(bytes) {
    if (kind == Kind::kSymmetric) {
      auto p = g_world->Alloc(bytes);
      EXPECT_TRUE(p.ok()) << p.status().ToString();
      ptr_ = p.ok() ? static_cast<uint8_t*>(p.value()) : nullptr;
    } else {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      EXPECT_NE(p, MAP_FAILED);
      ptr_ = static_cast<uint8_t*>(p);
      Status s = g_world->RegisterMemory(ptr_, bytes);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    auto all = g_world->Allgather(reinterpret_cast<uint64_t>(ptr_));
    EXPECT_TRUE(all.ok());
    if (all.ok()) bases_ = all.value();
    if (kind == Kind::kSymmetric) {
      for (uint64_t b : bases_) EXPECT_EQ(b, bases_[0]) << "symmetric memory must have one address everywhere";
    }
  }
  ~Remote() {
    if (kind_ == Kind::kSymmetric) {
      EXPECT_TRUE(g_world->Free(ptr_).ok());
    } else {
      EXPECT_TRUE(g_world->DeregisterMemory(ptr_).ok());
      ::munmap(ptr_, bytes_);
    }
  }
  uint8_t* local() const { return ptr_; }
  uint64_t base(int r) const { return bases_.at(static_cast<size_t>(r)); }
  size_t bytes() const { return bytes_; }

 private:
  Kind kind_;
  size_t bytes_;
  uint8_t* ptr_ = nullptr;
  std::vector<uint64_t> bases_;
};

inline std::string KindName(const testing::TestParamInfo<Kind>& info) {
  return info.param == Kind::kSymmetric ? "Symmetric" : "Registered";
}

}  // namespace hixl::test
