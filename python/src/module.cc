// hixl._hixl: the native half of the hixl Python package, over the public
// C++ API (include/hixl: hixl::World, hixl::Engine) and nothing else.  This
// file is only the module's entry point; the parts are:
//
//   errors.*    every failure raised as a hixl.errors exception (one place);
//               strerror, _engine_status_name
//   state.*     global state: the World, live blocks, objects kept alive by
//               transfers in flight and by registrations
//   buffers.*   hixl.Buffer, a raw CPython type exporting symmetric memory
//   coerce.*    Python arguments -> addresses, sizes, words, timeouts
//   addresses.* local int addresses checked before use: the known ranges
//               (registered, allocated), else what the kernel says
//   world.cc    init/finalize, alloc/free, register, put/get, fence/barrier,
//               allgather, broadcast
//   signals.cc  put_signal, wait_until/test, remote atomics, notifications
//   engine.cc   hixl.Engine (the CANN-shaped engine API)
//
// Throughout:
// * Addresses are ints or objects that expose memory: torch tensors (CPU,
//   contiguous), numpy arrays and anything else with the buffer protocol,
//   and hixl.Buffer (from hixl.alloc).  With such an object the size defaults
//   to its size in bytes and a larger size is refused.
// * The objects a put/get reads or writes are kept alive (and buffer-protocol
//   exports held) until the fence or barrier that completes the transfer;
//   objects registered with register_memory are kept alive until they are
//   deregistered.
// * Failures raise hixl.HixlError subclasses (hixl/errors.py) carrying the
//   library's code and message.
// * The GIL is released around every call that may wait.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "buffers.h"
#include "errors.h"

PYBIND11_MODULE(_hixl, m) {
  m.doc() = "The native half of the hixl package: use `import hixl`.";
  hixl_py::AddBufferTypes(m);
  m.attr("__version__") = HIXL_VERSION;
  hixl_py::BindWorld(m);
  hixl_py::BindSignals(m);
  hixl_py::BindErrors(m);
  hixl_py::BindEngine(m);
}
