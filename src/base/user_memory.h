#pragma once

// UserMemory: a scope in which this thread's accesses to a user's
// registered memory on behalf of a remote peer are left out of
// ThreadSanitizer's view.  Without TSan it does nothing.
//
// A transport's progress thread writes the user's registered memory for a
// peer's put (the shm relay's copy, a UCX put-with-signal's active
// message), reads it for a peer's get, and updates a word of it for a
// peer's atomic.  What orders those accesses against the user's own threads
// is the one-sided protocol between processes: the origin's flush (or wait)
// sees the transfer done, then tells the target (a barrier, a signal, a
// notification, a message of its own, through a socket) that the bytes are
// there or may be reused.  TSan sees one process, and no socket as an
// ordering, so it would report every such transfer as a race with the
// user's next access, where the same transfer made by the kernel
// (cross-memory attach) or by UCX's own uninstrumented code is not seen at
// all.  So while a UserMemory lives, this thread's reads and writes are
// ignored; keep the scope to the user access alone (a memcpy whose other
// side only this thread touches, or the atomic on the user's word): the
// transports' own fields stay checked, ordered by their atomics and locks.

// HIXL_UNDER_TSAN: 1 in a ThreadSanitizer build, else 0 (also for code
// that only needs to know, such as the symmetric heap).
#if defined(__SANITIZE_THREAD__)
#define HIXL_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HIXL_UNDER_TSAN 1
#endif
#endif
#ifndef HIXL_UNDER_TSAN
#define HIXL_UNDER_TSAN 0
#endif

#if HIXL_UNDER_TSAN
// The dynamic annotations the TSan runtime exports.
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace hixl::base {

class UserMemory {
 public:
#if HIXL_UNDER_TSAN
  UserMemory() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~UserMemory() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  UserMemory() = default;
#endif
  UserMemory(const UserMemory&) = delete;
  UserMemory& operator=(const UserMemory&) = delete;
};

}  // namespace hixl::base
