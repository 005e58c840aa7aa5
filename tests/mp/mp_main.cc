// The main of the multi-process gtest suites: joins the world, runs every
// test with fail-fast (a failed rank exits, and hixlrun stops the others),
// leaves the world.
#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>

#include "mp_util.h"

namespace hixl::test {
World* g_world = nullptr;
}  // namespace hixl::test

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(fail_fast, true);
  // For the test of the relay fallback: a process that is not dumpable can't
  // be reached with cross-memory attach by a process without CAP_SYS_PTRACE.
  if (std::getenv("HIXL_TEST_UNDUMPABLE")) ::prctl(PR_SET_DUMPABLE, 0);
  auto world = hixl::World::Init();
  if (!world.ok()) {
    std::fprintf(stderr, "hixl init failed: %s\n", world.status().ToString().c_str());
    return 2;
  }
  hixl::test::g_world = &world.value();
  int rc = RUN_ALL_TESTS();
  hixl::Status s = world->Finalize();
  if (!s.ok()) {
    std::fprintf(stderr, "hixl finalize failed: %s\n", s.ToString().c_str());
    return rc == 0 ? 3 : rc;
  }
  return rc;
}
