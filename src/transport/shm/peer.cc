#include "transport/shm/peer.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/shared_file.h"
#include "transport/shm/promotion.h"

namespace hixl::transport::shm {

Status NotConnected(const Peer& p) {
  return Err(Errc::kNotConnected, "shm: rank {} has been disconnected (Connect it again, then unpack its keys again)",
             p.rank);
}

std::string EncodeKey(const KeyFields& k) {
  net::Writer w;
  w.Put<uint32_t>(k.segment).Put<uint64_t>(k.offset).Put<uint64_t>(k.size).Put<int32_t>(k.fd).Put<uint64_t>(k.ino);
  return std::move(w.str());
}

Result<KeyFields> ParseKey(std::string_view blob, uint64_t len, int peer) {
  net::Reader r(blob);
  KeyFields k;
  if (!r.Get(&k.segment) || !r.Get(&k.offset) || !r.Get(&k.size) || !r.Get(&k.fd) || !r.Get(&k.ino) || !r.empty()) {
    return Err(Errc::kTransport, "shm: malformed key from rank {} ({} bytes, not {})", peer, blob.size(), kKeyBytes);
  }
  if (k.offset > k.size || len > k.size - k.offset) {
    return Err(Errc::kTransport, "shm: the key of rank {} puts {} bytes at offset {} of a segment of {}", peer, len,
               k.offset, k.size);
  }
  return k;
}

Status Peer::CheckAlive() const {
  const int64_t now = NowNs();
  if (now - alive_at_ns.load(std::memory_order_relaxed) < kAliveWindowNs) return Status::Ok();
  if (sharedmem::Exited(pidfd.get())) return Err(Errc::kPeerFailed, "rank {} (pid {}) has exited", rank, pid);
  alive_at_ns.store(now, std::memory_order_relaxed);
  return Status::Ok();
}

Status Peer::CheckAlive(const std::vector<std::shared_ptr<Peer>>& peers) {
  if (peers.size() == 1) return peers[0]->CheckAlive();
  const int64_t now = NowNs();
  std::vector<pollfd> fds;
  std::vector<const Peer*> asked;
  for (const auto& p : peers) {
    if (now - p->alive_at_ns.load(std::memory_order_relaxed) < kAliveWindowNs || !p->pidfd.valid()) continue;
    fds.push_back({p->pidfd.get(), POLLIN, 0});
    asked.push_back(p.get());
  }
  if (fds.empty()) return Status::Ok();
  int n;
  do {
    n = ::poll(fds.data(), fds.size(), 0);
  } while (n < 0 && errno == EINTR);
  // A failed poll (ENOMEM) proves nothing: ask each, as CheckAlive does.
  if (n < 0) {
    for (const Peer* p : asked) HIXL_RETURN_IF_ERROR(p->CheckAlive());
    return Status::Ok();
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    const Peer& p = *asked[i];
    if (fds[i].revents != 0) return Err(Errc::kPeerFailed, "rank {} (pid {}) has exited", p.rank, p.pid);
    p.alive_at_ns.store(now, std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status Peer::Request(const Msg& m, int fd_to_pass, Msg* reply, net::Fd* reply_fd, int64_t timeout_ms) {
  if (closed.load(std::memory_order_acquire)) return NotConnected(*this);
  net::Deadline deadline = net::DeadlineIn(timeout_ms);
  if (!conn.valid()) {
    auto s = ConnectTo(sock_name);
    if (!s.ok())
      return Err(Errc::kPeerFailed, "shm: cannot connect to rank {} (pid {}): {}", rank, pid, s.status().message());
    const std::string who = fmt::format("the shm socket of rank {} (pid {})", rank, pid);
    Status admitted = secret ? Status::Ok() : auth::CheckSameUser(s->get(), who);
    if (admitted.ok()) admitted = auth::ClientHandshake(s->get(), secret, auth::Kind::kShm, deadline, who);
    if (!admitted.ok()) return Err(Errc::kPeerFailed, "shm: {}", admitted.message());
    conn = std::move(s.value());
  }
  Status s = SendMsg(conn.get(), m, fd_to_pass, deadline);
  if (s.ok()) s = RecvMsg(conn.get(), reply, reply_fd, deadline);
  if (!s.ok()) {
    conn.Reset();
    return Err(s.code(), "shm: rank {} (pid {}) did not answer: {}", rank, pid, s.message());
  }
  if (reply->status != 0) return Err(static_cast<Errc>(reply->status), "shm: rank {} refused the request", rank);
  return Status::Ok();
}

Result<std::shared_ptr<Mapping>> Peer::MapSegment(uint32_t seg, uint64_t size, int32_t seg_fd, uint64_t ino,
                                                  int64_t timeout_ms) {
  std::lock_guard lock(conn_mu);
  // A promoted range's mapping belongs to the keys of its region (it goes
  // when they do, after the owner deregisters it); heap segments stay.
  const bool cached = !(seg & kPromotedSegmentBit);
  auto it = cached ? segments.find(seg) : segments.end();
  if (it != segments.end()) {
    if (it->second->size() < size) {
      return Err(Errc::kTransport, "shm: a key of rank {} says its heap segment {} has {} bytes, not {}", rank, seg,
                 size, it->second->size());
    }
    return it->second;
  }
  net::Fd fd;
  if (cached && seg_fd >= 0) {
    // No message: the owner's descriptor, where this process may open it.
    Result<net::Fd> opened =
        sharedmem::OpenPeerFd(pidfd.get(), pid, seg_fd, ino, fmt::format("heap segment {} of rank {}", seg, rank));
    if (opened.ok()) {
      fd = std::move(opened.value());
    } else {
      HIXL_LOG_DEBUG("shm: {}; asking rank {} for it over its socket", opened.status().message(), rank);
    }
  }
  if (!fd.valid()) {
    Msg m, reply;
    m.type = kGetSegment;
    m.a = seg;
    HIXL_RETURN_IF_ERROR(Request(m, -1, &reply, &fd, timeout_ms));
    if (!fd.valid()) return Err(Errc::kTransport, "shm: rank {} sent no fd for heap segment {}", rank, seg);
  }
  // The size comes from a key blob: untrusted, and so is the file.  Mapped
  // past its end, or truncated later by its owner, an access would raise
  // SIGBUS instead of failing here.
  HIXL_ASSIGN_OR_RETURN(
      Mapping map, MapPeerFile(fd.get(), size, fmt::format("heap segment {} of rank {} ({} bytes)", seg, rank, size)));
  auto mapping = std::make_shared<Mapping>(std::move(map));
  if (cached) segments.emplace(seg, mapping);
  return mapping;
}

void ShmKey::Prefault(uint64_t addr, uint64_t len) const {
  if (!segment || !mapped || len == 0) return;
  constexpr uint64_t kPage = 4096;
  // The segment's first byte, here and in the peer's address space.
  const auto here = reinterpret_cast<uint64_t>(segment->get());
  const uint64_t there = base - (reinterpret_cast<uint64_t>(mapped) - here);
  const uint64_t end = len > UINT64_MAX - addr ? UINT64_MAX : addr + len;
  const uint64_t lo = std::max(addr, there);
  const uint64_t hi = std::min(end, there + segment->size());
  if (lo >= hi) return;
  const uint64_t from = here + ((lo - there) & ~(kPage - 1));
  const uint64_t to = here + (hi - there);
  // Read, which is enough for memory shared with the owner: the entry is
  // made writable (no dirty tracking on it).  The owner's memory grows by
  // the pages that were holes.  A failure (a kernel without
  // MADV_POPULATE_READ) leaves the faults to the first accesses.
#ifdef MADV_POPULATE_READ
  (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_READ);
#else
  (void)from;
  (void)to;
#endif
}

void Peer::CloseConnection() {
  std::lock_guard lock(conn_mu);
  conn.Reset();
  segments.clear();
}

}  // namespace hixl::transport::shm
