// OpenSHMEM point-to-point synchronisation (shmem.h): wait_until and test
// on this PE's own symmetric variables, which peers' puts and atomics
// change.  Waits are runtime.h's WaitFor: spin briefly, then yield, bounded
// by HIXL_TIMEOUT_MS and failing when a peer dies.
#include <fmt/format.h>

#include "shmem/runtime.h"

namespace hixl::shmem {
namespace {

template <typename T>
T Load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

template <typename T>
bool Compare(const char* api, T a, int cmp, T b) {
  switch (cmp) {
    case SHMEM_CMP_EQ: return a == b;
    case SHMEM_CMP_NE: return a != b;
    case SHMEM_CMP_GT: return a > b;
    case SHMEM_CMP_GE: return a >= b;
    case SHMEM_CMP_LT: return a < b;
    case SHMEM_CMP_LE: return a <= b;
    default: Fail(api, fmt::format("unknown comparison {}", cmp));
  }
}

bool Included(const int* status, size_t i) { return status == nullptr || status[i] == 0; }

// The checks of the _all/_any/_some forms, with one value or a vector.
template <typename T>
T Value(const T* values, T value, size_t i) {
  return values ? values[i] : value;
}

template <typename T>
bool AllMet(const char* api, T* ivars, size_t n, const int* status, int cmp, const T* values, T value) {
  for (size_t i = 0; i < n; ++i) {
    if (Included(status, i) && !Compare(api, Load(&ivars[i]), cmp, Value(values, value, i))) return false;
  }
  return true;
}

template <typename T>
size_t AnyMet(const char* api, T* ivars, size_t n, const int* status, int cmp, const T* values, T value) {
  for (size_t i = 0; i < n; ++i) {
    if (Included(status, i) && Compare(api, Load(&ivars[i]), cmp, Value(values, value, i))) return i;
  }
  return SIZE_MAX;
}

template <typename T>
size_t SomeMet(const char* api, T* ivars, size_t n, size_t* indices, const int* status, int cmp, const T* values,
               T value) {
  size_t found = 0;
  for (size_t i = 0; i < n; ++i) {
    if (Included(status, i) && Compare(api, Load(&ivars[i]), cmp, Value(values, value, i))) indices[found++] = i;
  }
  return found;
}

bool AnyIncluded(size_t n, const int* status) {
  for (size_t i = 0; i < n; ++i) {
    if (Included(status, i)) return true;
  }
  return false;
}

template <typename T>
void WaitUntil(const char* api, T* ivar, int cmp, T value) {
  (void)W(api);
  WaitFor(api, "the awaited change of the variable", [&] { return Compare(api, Load(ivar), cmp, value); });
}

template <typename T>
void WaitAll(const char* api, T* ivars, size_t n, const int* status, int cmp, const T* values, T value) {
  (void)W(api);
  WaitFor(api, "the awaited change of the variables",
          [&] { return AllMet(api, ivars, n, status, cmp, values, value); });
}

template <typename T>
size_t WaitAny(const char* api, T* ivars, size_t n, const int* status, int cmp, const T* values, T value) {
  (void)W(api);
  if (!AnyIncluded(n, status)) return SIZE_MAX;
  size_t found = SIZE_MAX;
  WaitFor(api, "the awaited change of a variable", [&] {
    found = AnyMet(api, ivars, n, status, cmp, values, value);
    return found != SIZE_MAX;
  });
  return found;
}

template <typename T>
size_t WaitSome(const char* api, T* ivars, size_t n, size_t* indices, const int* status, int cmp, const T* values,
                T value) {
  (void)W(api);
  if (!AnyIncluded(n, status)) return 0;
  size_t found = 0;
  WaitFor(api, "the awaited change of some variable", [&] {
    found = SomeMet(api, ivars, n, indices, status, cmp, values, value);
    return found > 0;
  });
  return found;
}

}  // namespace
}  // namespace hixl::shmem

using hixl::shmem::AllMet;
using hixl::shmem::AnyMet;
using hixl::shmem::Compare;
using hixl::shmem::Load;
using hixl::shmem::SomeMet;
using hixl::shmem::W;
using hixl::shmem::WaitAll;
using hixl::shmem::WaitAny;
using hixl::shmem::WaitSome;
using hixl::shmem::WaitUntil;

extern "C" {

#define HIXL_SHMEM_DEF_P2P(T, N)                                                                                     \
  void shmem_##N##_wait_until(T* ivar, int cmp, T cmp_value) {                                                       \
    WaitUntil<T>("shmem_" #N "_wait_until", ivar, cmp, cmp_value);                                                   \
  }                                                                                                                  \
  void shmem_##N##_wait_until_all(T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {                \
    WaitAll<T>("shmem_" #N "_wait_until_all", ivars, nelems, status, cmp, nullptr, cmp_value);                       \
  }                                                                                                                  \
  size_t shmem_##N##_wait_until_any(T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {              \
    return WaitAny<T>("shmem_" #N "_wait_until_any", ivars, nelems, status, cmp, nullptr, cmp_value);                \
  }                                                                                                                  \
  size_t shmem_##N##_wait_until_some(T* ivars, size_t nelems, size_t* indices, const int* status, int cmp,           \
                                     T cmp_value) {                                                                  \
    return WaitSome<T>("shmem_" #N "_wait_until_some", ivars, nelems, indices, status, cmp, nullptr, cmp_value);     \
  }                                                                                                                  \
  void shmem_##N##_wait_until_all_vector(T* ivars, size_t nelems, const int* status, int cmp, T* cmp_values) {       \
    WaitAll<T>("shmem_" #N "_wait_until_all_vector", ivars, nelems, status, cmp, cmp_values, static_cast<T>(0));     \
  }                                                                                                                  \
  size_t shmem_##N##_wait_until_any_vector(T* ivars, size_t nelems, const int* status, int cmp, T* cmp_values) {     \
    return WaitAny<T>("shmem_" #N "_wait_until_any_vector", ivars, nelems, status, cmp, cmp_values,                  \
                      static_cast<T>(0));                                                                            \
  }                                                                                                                  \
  size_t shmem_##N##_wait_until_some_vector(T* ivars, size_t nelems, size_t* indices, const int* status, int cmp,    \
                                            T* cmp_values) {                                                         \
    return WaitSome<T>("shmem_" #N "_wait_until_some_vector", ivars, nelems, indices, status, cmp, cmp_values,       \
                       static_cast<T>(0));                                                                           \
  }                                                                                                                  \
  int shmem_##N##_test(T* ivar, int cmp, T cmp_value) {                                                              \
    (void)W("shmem_" #N "_test");                                                                                    \
    return Compare("shmem_" #N "_test", Load(ivar), cmp, cmp_value) ? 1 : 0;                                         \
  }                                                                                                                  \
  int shmem_##N##_test_all(T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {                       \
    (void)W("shmem_" #N "_test_all");                                                                                \
    return AllMet<T>("shmem_" #N "_test_all", ivars, nelems, status, cmp, nullptr, cmp_value) ? 1 : 0;               \
  }                                                                                                                  \
  size_t shmem_##N##_test_any(T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {                    \
    (void)W("shmem_" #N "_test_any");                                                                                \
    return AnyMet<T>("shmem_" #N "_test_any", ivars, nelems, status, cmp, nullptr, cmp_value);                       \
  }                                                                                                                  \
  size_t shmem_##N##_test_some(T* ivars, size_t nelems, size_t* indices, const int* status, int cmp, T cmp_value) {  \
    (void)W("shmem_" #N "_test_some");                                                                               \
    return SomeMet<T>("shmem_" #N "_test_some", ivars, nelems, indices, status, cmp, nullptr, cmp_value);            \
  }                                                                                                                  \
  int shmem_##N##_test_all_vector(T* ivars, size_t nelems, const int* status, int cmp, T* cmp_values) {              \
    (void)W("shmem_" #N "_test_all_vector");                                                                         \
    return AllMet<T>("shmem_" #N "_test_all_vector", ivars, nelems, status, cmp, cmp_values, static_cast<T>(0)) ? 1  \
                                                                                                                : 0; \
  }                                                                                                                  \
  size_t shmem_##N##_test_any_vector(T* ivars, size_t nelems, const int* status, int cmp, T* cmp_values) {           \
    (void)W("shmem_" #N "_test_any_vector");                                                                         \
    return AnyMet<T>("shmem_" #N "_test_any_vector", ivars, nelems, status, cmp, cmp_values, static_cast<T>(0));     \
  }                                                                                                                  \
  size_t shmem_##N##_test_some_vector(T* ivars, size_t nelems, size_t* indices, const int* status, int cmp,          \
                                      T* cmp_values) {                                                               \
    (void)W("shmem_" #N "_test_some_vector");                                                                        \
    return SomeMet<T>("shmem_" #N "_test_some_vector", ivars, nelems, indices, status, cmp, cmp_values,              \
                      static_cast<T>(0));                                                                            \
  }                                                                                                                  \
  void shmem_##N##_wait(T* ivar, T cmp_value) { WaitUntil<T>("shmem_" #N "_wait", ivar, SHMEM_CMP_NE, cmp_value); }
HIXL_SHMEM_P2P_TYPES(HIXL_SHMEM_DEF_P2P)

void shmem_wait(long* ivar, long cmp_value) { WaitUntil<long>("shmem_wait", ivar, SHMEM_CMP_NE, cmp_value); }
void shmem_wait_until(long* ivar, int cmp, long cmp_value) {
  WaitUntil<long>("shmem_wait_until", ivar, cmp, cmp_value);
}

}  // extern "C"
