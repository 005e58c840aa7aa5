/* hixl: the one table of error codes.  Plain C (and C++).
 *
 * Every error hixl reports is one row of HIXL_ERROR_CODES.  Everything else
 * follows from it: the C codes of hixl.h (HIXL_ERR_*, kept there as literal
 * #defines for #if and switch, checked against this table at compile time
 * in src/base/status.cc), the C++ enum hixl::Errc (hixl.hpp),
 * hixl_strerror / Status::ToString, the engine's CANN status for each code
 * (engine.hpp), and Python's hixl.errors constants and exception classes
 * (built from this table as the native module exports it).
 *
 * HIXL_ERROR_CODES(X) calls X once per code, in order, as
 *   X(C_NAME, CxxName, value, "description", ENGINE_STATUS, PythonClass)
 *   C_NAME         the hixl.h name (HIXL_SUCCESS, HIXL_ERR_INVALID_ARG, ...)
 *   CxxName        the hixl::Errc enumerator (kOk, kInvalidArg, ...)
 *   value          the number: 0, then -1, -2, ... without gaps
 *   description    what it means, in words (hixl_strerror's text after "NAME: ")
 *   ENGINE_STATUS  the row of HIXL_ENGINE_STATUSES the engine API returns for it
 *   PythonClass    the hixl.errors exception class (None for success)
 *
 * A new code: the next free number, a row here, a #define in hixl.h and an
 * exception class in python/hixl/errors.py; the build and the unit and
 * Python table tests fail until all of them exist. */
#ifndef HIXL_HIXL_ERRORS_H_
#define HIXL_HIXL_ERRORS_H_

/* clang-format off */
#define HIXL_ERROR_CODES(X)                                                                                         \
  X(HIXL_SUCCESS, kOk, 0, "success", SUCCESS, None)                                                                 \
  X(HIXL_ERR_INVALID_ARG, kInvalidArg, -1, "invalid argument (null pointer, bad size or range)", PARAM_INVALID,     \
    InvalidArgumentError)                                                                                           \
  X(HIXL_ERR_NOT_INITIALIZED, kNotInitialized, -2, "called before hixl_init or after hixl_finalize", FAILED,        \
    NotInitializedError)                                                                                            \
  X(HIXL_ERR_NOT_REGISTERED, kNotRegistered, -3, "remote memory not registered", PARAM_INVALID, NotRegisteredError) \
  X(HIXL_ERR_INVALID_RANK, kInvalidRank, -4, "rank outside the world", PARAM_INVALID, InvalidRankError)             \
  X(HIXL_ERR_TIMEOUT, kTimeout, -5, "timed out (HIXL_TIMEOUT_MS)", TIMEOUT, HixlTimeoutError)                       \
  X(HIXL_ERR_PEER_FAILED, kPeerFailed, -6, "a peer process failed or left", FAILED, PeerFailedError)                \
  X(HIXL_ERR_NO_MEMORY, kNoMemory, -7, "out of memory or address space", RESOURCE_EXHAUSTED, NoMemoryError)         \
  X(HIXL_ERR_TRANSPORT, kTransport, -8, "transport failure", FAILED, TransportError)                                \
  X(HIXL_ERR_UNSUPPORTED, kUnsupported, -9, "not supported by this build or setting", UNSUPPORTED, UnsupportedError) \
  X(HIXL_ERR_ALREADY_INITIALIZED, kAlreadyInitialized, -10, "hixl_init called twice", FAILED,                       \
    AlreadyInitializedError)                                                                                        \
  X(HIXL_ERR_BOOTSTRAP, kBootstrap, -11, "environment or rendezvous problem", FAILED, BootstrapError)               \
  X(HIXL_ERR_INTERNAL, kInternal, -12, "internal error in hixl", FAILED, InternalError)                             \
  X(HIXL_ERR_QUEUE_FULL, kQueueFull, -13, "the target's notification queue is full", RESOURCE_EXHAUSTED,            \
    QueueFullError)                                                                                                 \
  X(HIXL_ERR_NOT_CONNECTED, kNotConnected, -14, "no live connection to that engine", NOT_CONNECTED,                 \
    HixlNotConnectedError)                                                                                          \
  X(HIXL_ERR_ALREADY_CONNECTED, kAlreadyConnected, -15, "already connected to that engine", ALREADY_CONNECTED,      \
    HixlAlreadyConnectedError)

/* The engine API's status numbers (those of the CANN library's engine, so
 * code written for it compares unchanged), as
 *   X(NAME, value, "description", PythonClass)
 * NAME is the hixl::EngineStatus constant of engine.hpp; PythonClass the
 * hixl.errors class hixl.Engine raises (None for success). */
#define HIXL_ENGINE_STATUSES(X)                                                                                     \
  X(SUCCESS, 0, "success", None)                                                                                    \
  X(PARAM_INVALID, 103900, "a bad argument, address, range or handle", ParamInvalidError)                           \
  X(TIMEOUT, 103901, "the call's timeout passed", EngineTimeoutError)                                               \
  X(NOT_CONNECTED, 103902, "no live connection to that engine", NotConnectedError)                                  \
  X(ALREADY_CONNECTED, 103903, "already connected to that engine", AlreadyConnectedError)                           \
  X(UNSUPPORTED, 103905, "not supported (device memory, a transport not built)", EngineUnsupportedError)            \
  X(RESOURCE_EXHAUSTED, 203900, "a queue or memory ran out", ResourceExhaustedError)                                \
  X(FAILED, 503900, "the call failed", EngineFailedError)
/* clang-format on */

#endif /* HIXL_HIXL_ERRORS_H_ */
