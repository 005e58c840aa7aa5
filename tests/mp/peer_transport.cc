// hixl_peer_transport and World::PeerTransport, through the public API only
// (this program links libhixl.so, which exports nothing else).
//
//   peer_transport [EXPECTED]
//
// Before init both fail with HIXL_ERR_NOT_INITIALIZED; after init every rank
// of the world is served by EXPECTED (default "shm": all ranks of a hixlrun
// world share this host), this rank itself included; ranks outside the
// world fail with HIXL_ERR_INVALID_RANK and a message naming the rank.
// After finalize, a name returned earlier is still readable.
#include <hixl/hixl.h>

#include <hixl/hixl.hpp>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED: %s (last error: %s)\n", hixl_rank(), what.c_str(), hixl_last_error());
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void CheckBadRank(hixl::World& world, int r) {
  const std::string rank = std::to_string(r);
  Check(hixl_peer_transport(r) == nullptr, "hixl_peer_transport(" + rank + ") returns NULL");
  Check(Contains(hixl_last_error(), "hixl_peer_transport: rank " + rank + " is outside the world"),
        std::string("hixl_peer_transport(") + rank + ") explains itself, got: " + hixl_last_error());
  hixl::Result<std::string> t = world.PeerTransport(r);
  Check(!t.ok() && t.status().code() == hixl::Errc::kInvalidRank,
        "World::PeerTransport(" + rank + ") fails with kInvalidRank");
  Check(!t.ok() && Contains(t.status().message(), "rank " + rank + " is outside the world"),
        "World::PeerTransport(" + rank + ")'s message names the rank, got: " + t.status().ToString());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string expected = argc > 1 ? argv[1] : "shm";

  Check(hixl_peer_transport(0) == nullptr, "hixl_peer_transport before hixl_init returns NULL");
  Check(Contains(hixl_last_error(), "hixl_peer_transport called before hixl_init"),
        std::string("the message says init has not happened, got: ") + hixl_last_error());

  hixl::Result<hixl::World> world = hixl::World::Init();
  if (!world.ok()) {
    std::fprintf(stderr, "FAILED: init: %s\n", world.status().ToString().c_str());
    return 1;
  }
  const int me = world->rank(), n = world->size();
  const char* first = nullptr;
  for (int r = 0; r < n; ++r) {
    const char* c_name = hixl_peer_transport(r);
    Check(c_name != nullptr, "hixl_peer_transport(" + std::to_string(r) + ") succeeds");
    if (!c_name) continue;
    if (r == 0) first = c_name;
    Check(expected == c_name, "rank " + std::to_string(r) + " is served by " + c_name + " (want " + expected + ")");
    Check(c_name == hixl_peer_transport(r), "the same name comes back as the same pointer");
    hixl::Result<std::string> cxx_name = world->PeerTransport(r);
    Check(cxx_name.ok() && *cxx_name == c_name,
          "World::PeerTransport(" + std::to_string(r) + ") agrees with hixl_peer_transport");
  }
  CheckBadRank(*world, -1);
  CheckBadRank(*world, n);
  Check(world->Finalize().ok(), "finalize");

  Check(first != nullptr && expected == first, "a name returned before finalize stays valid after it");
  Check(hixl_peer_transport(0) == nullptr, "hixl_peer_transport after hixl_finalize returns NULL");
  Check(Contains(hixl_last_error(), "after hixl_finalize"),
        std::string("the message says finalize has happened, got: ") + hixl_last_error());
  hixl::Result<std::string> t = world->PeerTransport(0);
  Check(!t.ok() && t.status().code() == hixl::Errc::kNotInitialized,
        "World::PeerTransport after finalize fails with kNotInitialized");

  if (failures == 0) std::printf("rank %d of %d: peer_transport passed (%s)\n", me, n, expected.c_str());
  return failures == 0 ? 0 : 1;
}
