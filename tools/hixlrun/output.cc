// hixlrun: forwarding the ranks' output with --prefix-output: reading their
// pipes, prefixing every line with "[rank] ", and coping with a closed
// stdout/stderr.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <string>

#include "launcher.h"
#include "util.h"

namespace hixlrun {
namespace {

// A line longer than this is emitted in pieces (each piece gets its own
// prefix) so that a rank printing without newlines cannot exhaust memory.
constexpr std::size_t kMaxLine = 1 << 20;
constexpr std::size_t kReadChunk = 1 << 16;
// At most this much is read from a pipe once the job has ended.
constexpr std::size_t kMaxDrain = 16 << 20;

}  // namespace

void Launcher::dest_broken(int dest) {
  // Our stdout/stderr is gone (e.g. a closed pipe).  Close the matching pipe
  // of every rank, so that the ranks see EPIPE/SIGPIPE as they would have
  // without --prefix-output.
  dest_broken_[dest] = true;
  for (Rank &r : ranks_) {
    for (Stream *s : {&r.out, &r.err}) {
      if (s->dest == dest) {
        close_fd(s->fd);
        s->partial.clear();
      }
    }
  }
}

void Launcher::emit(const Rank &r, Stream &s, bool flush_partial) {
  if (dest_broken_[s.dest]) {
    s.partial.clear();
    return;
  }
  // Built by appends: g++ 12 at -O3 misreads "[" + std::string + "] " as an
  // overlapping copy (-Wrestrict, GCC bug 105329).
  std::string prefix = "[";
  prefix.append(std::to_string(r.index)).append("] ");
  std::string out;
  std::size_t pos = 0;
  while (true) {
    std::size_t nl = s.partial.find('\n', pos);
    if (nl == std::string::npos) break;
    out += prefix;
    out.append(s.partial, pos, nl + 1 - pos);
    pos = nl + 1;
  }
  s.partial.erase(0, pos);
  // Over-long lines are cut; a partial last line is completed with a newline
  // so that the next line of another rank starts on a line of its own.
  while (s.partial.size() >= kMaxLine || (flush_partial && !s.partial.empty())) {
    std::size_t take = std::min(s.partial.size(), kMaxLine);
    out += prefix;
    out.append(s.partial, 0, take);
    out += '\n';
    s.partial.erase(0, take);
  }
  if (!out.empty() && !write_all(s.dest, out.data(), out.size())) dest_broken(s.dest);
}

void Launcher::read_stream(Rank &r, Stream &s, bool until_eof) {
  char buf[kReadChunk];
  std::size_t total = 0;
  do {
    if (s.fd < 0) return;
    // Bound the final drain: a process that escaped its group could keep
    // the pipe full forever.
    if (total >= kMaxDrain) return;
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.partial.append(buf, static_cast<std::size_t>(n));
      total += static_cast<std::size_t>(n);
      emit(r, s, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF (or an error): flush what is left.
    emit(r, s, true);
    close_fd(s.fd);
    return;
  } while (until_eof);
}

void Launcher::final_drain() {
  for (Rank &r : ranks_) {
    for (Stream *s : {&r.out, &r.err}) {
      // All writers are gone, unless one escaped its process group: read
      // what is there without waiting for more.
      read_stream(r, *s, true);
      if (s->fd >= 0) {
        emit(r, *s, true);
        close_fd(s->fd);
      }
    }
  }
}

}  // namespace hixlrun
