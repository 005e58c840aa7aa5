// The parts of hixl._hixl, each adding its functions to the module (called
// by PYBIND11_MODULE in module.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace hixl_py {

namespace py = pybind11;

// The world API (world.cc): init/finalize, alloc/free, register_memory,
// put/get, fence/barrier, allgather.
void BindWorld(py::module_& m);
// Signals, remote atomics and notifications (signals.cc).
void BindSignals(py::module_& m);
// hixl.Engine and its types (engine.cc).
void BindEngine(py::module_& m);

}  // namespace hixl_py
