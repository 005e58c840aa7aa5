// Test support shared by tests/mp and tests/transport: whether a thread of
// this process is asleep in the kernel, for tests that wake a sleeper.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>

#include <cstdio>
#include <string>

namespace hixl::testing_support {

// Whether thread `tid` of this process is inside the futex system call
// (/proc/self/task/TID/syscall starts with its number); true where that
// cannot be read (then the test still checks its data, and may test less).
inline bool InFutex(pid_t tid) {
  FILE* f = std::fopen(("/proc/self/task/" + std::to_string(tid) + "/syscall").c_str(), "r");
  if (!f) return true;
  long nr = -1;
  const int got = std::fscanf(f, "%ld", &nr);
  std::fclose(f);
  return got != 1 || nr == SYS_futex;
}

}  // namespace hixl::testing_support
