#include "base/shared_file.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

namespace hixl::sharedmem {

namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

uint64_t NamespaceInode(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace

void Mapping::Reset() {
  if (p_) ::munmap(p_, n_);
  p_ = nullptr;
}

Result<Mapping> MapShared(int fd, size_t n) {
  // A mapping of 2 MiB or more starts on a 2 MiB boundary: its first 2 MiB
  // (a heap segment's barrier flags and first blocks) then lie under one
  // page-table page, made once, where a start just below a boundary would
  // need two (docs/scale.md, "First touch").  Placed inside a reservation
  // of 2 MiB more, whose slack is returned.
  constexpr size_t kAlign = size_t{2} << 20, kPage = 4096;
  if (n >= kAlign) {
    const size_t len = (n + kPage - 1) & ~(kPage - 1);
    void* r = ::mmap(nullptr, len + kAlign, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r != MAP_FAILED) {
      const auto base = reinterpret_cast<uintptr_t>(r);
      const uintptr_t start = (base + kAlign - 1) & ~uintptr_t{kAlign - 1};
      void* p = ::mmap(reinterpret_cast<void*>(start), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::munmap(r, len + kAlign);
        return Err(Errc::kNoMemory, "mmap of {} shared bytes failed: {}", n, std::strerror(e));
      }
      // The reservation's slack: before the start, and after the end.
      if (start > base) ::munmap(r, start - base);
      if (const uintptr_t tail = base + kAlign - start; tail > 0) ::munmap(reinterpret_cast<void*>(start + len), tail);
      return Mapping(p, n);
    }
  }
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Err(Errc::kNoMemory, "mmap of {} shared bytes failed: {}", n, std::strerror(errno));
  return Mapping(p, n);
}

Status SealSize(int memfd) {
  if (::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Err(Errc::kNoMemory, "cannot seal the size of a shared memory file: {}", std::strerror(errno));
  }
  return Status::Ok();
}

Result<Mapping> MapPeerFile(int fd, size_t n, const std::string& what) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    return Err(Errc::kTransport, "shm: refused {}: its file can shrink under the mapping (not sealed: {})", what,
               seals < 0 ? std::strerror(errno) : "no F_SEAL_SHRINK");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 0 || static_cast<uint64_t>(st.st_size) < n) {
    return Err(Errc::kTransport, "shm: refused {}: its file has {} bytes, not the {} claimed", what, st.st_size, n);
  }
  return MapShared(fd, n);
}

uint64_t FileInode(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

bool Exited(int pidfd) {
  if (pidfd < 0) return false;
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

std::string HostIdentity() {
  return fmt::format("{}/net:{}/pid:{}", ReadFirstLine("/proc/sys/kernel/random/boot_id"),
                     NamespaceInode("/proc/self/ns/net"), NamespaceInode("/proc/self/ns/pid"));
}

Result<net::Fd> OpenPeerFd(int pidfd, int32_t pid, int32_t fd, uint64_t ino, const std::string& what) {
  if (pid <= 0 || fd < 0 || ino == 0) {
    return Err(Errc::kTransport, "cannot open {}: it names no file (pid {}, descriptor {})", what, pid, fd);
  }
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
  net::Fd f(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!f.valid()) return Err(Errc::kTransport, "cannot open {} at {}: {}", what, path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_ino) != ino) {
    return Err(Errc::kTransport, "refused {}: {} is not the file it names (inode {}, not {})", what, path,
               static_cast<uint64_t>(st.st_ino), ino);
  }
  // Opened from the process the pidfd names only if that process is still
  // alive now.
  if (Exited(pidfd)) return Err(Errc::kPeerFailed, "cannot open {}: process {} has exited", what, pid);
  return f;
}

}  // namespace hixl::sharedmem
