// hixlrun: exit codes and small helpers shared by the launcher's parts
// (writing to a descriptor, messages to stderr, signal names).
#pragma once

#include <cstddef>
#include <string>

namespace hixlrun {

constexpr int kExitUsage = 2;
constexpr int kExitInternal = 1;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;

// Writes all of [data, data+len) to fd.  Copes with EINTR, short writes and a
// non-blocking descriptor inherited from the caller.  Returns false on error.
bool write_all(int fd, const char *data, std::size_t len);

// Prints "hixlrun: <msg>\n" to stderr as a single write.
void message(const std::string &msg);

std::string errno_text(int err);

// "SIGINT", or "signal N" for a signal without a name.
std::string signal_name(int sig);

// "2 (SIGINT: Interrupt)".
std::string signal_text(int sig);

// "%g" of s.
std::string format_seconds(double s);

// A fresh random job secret, 64 hex digits (libsodium's randombytes_buf).
std::string new_secret_hex();

// Closes fd if it is open and sets it to -1.
void close_fd(int &fd);

// Make sure descriptors 0, 1 and 2 are open, so that pipes created later can
// never land on them.
void ensure_std_fds();

}  // namespace hixlrun
