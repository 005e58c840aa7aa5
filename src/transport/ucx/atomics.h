// Remote 64-bit atomics over UCX (ucp_atomic_op_nbx, after a worker fence
// so that they are ordered behind the puts issued before them).
#pragma once

#include <cstdint>

#include "transport/transport.h"
#include "transport/ucx/memory.h"

namespace hixl::transport::ucx {

// Applies op to the word at addr in the key's region; complete when it
// returns (bounded by timeout_ms); *old receives the value before.  Takes
// the worker's mutex.
Status RemoteAtomic(const UcxKey& k, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare, uint64_t* old,
                    int64_t timeout_ms);

// Remote atomics whose state is still allocated in this process (in flight,
// or given up on and awaiting UCX's completion or the worker's end): tests
// check that it returns to zero.
int64_t LiveAtomicCalls();

}  // namespace hixl::transport::ucx
