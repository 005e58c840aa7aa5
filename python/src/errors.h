// The one error model of the native module: every failure becomes a
// hixl.errors exception (python/hixl/errors.py maps a code to its class),
// raised here and nowhere else.  World calls raise by HIXL_ERR_* code
// (hixl.HixlError subclasses), engine calls by the engine's status number
// (hixl.EngineError subclasses); both carry the library's message.
#pragma once

#include <pybind11/pybind11.h>

#include <hixl/engine.hpp>
#include <hixl/hixl.hpp>

#include <exception>
#include <string>

namespace hixl_py {

namespace py = pybind11;

// Raise the exception hixl.errors.error_for(code, message) as the current
// Python error (throws py::error_already_set).
[[noreturn]] void Raise(int code, const std::string& message);
[[noreturn]] void RaiseInvalid(const std::string& message);  // HIXL_ERR_INVALID_ARG
// The same for an engine status: hixl.errors.engine_error_for(status,
// message, code), where code is the failure's precise HIXL_ERR_* code
// (hixl::Engine::LastErrorCode(); the binding's own argument checks are
// HIXL_ERR_INVALID_ARG).
[[noreturn]] void RaiseEngine(hixl::EngineStatus status, const std::string& message, int code = HIXL_ERR_INVALID_ARG);

// Raises unless s is ok.
void Check(const hixl::Status& s);

// Sets the Python error for a C slot that must return -1 / NULL.
void SetError(int code, const std::string& message);

// Runs f (which returns a py::object) for a C slot: exceptions become the
// Python error and NULL.
template <typename F>
PyObject* Protect(F&& f) {
  try {
    return f().release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// The Python type name of an object, for messages.
std::string TypeName(py::handle h);

// strerror, the engine status names, and the one table of error codes
// (hixl/hixl_errors.h) that hixl.errors builds its constants and classes
// from: _error_table() and _engine_status_table().
void BindErrors(py::module_& m);

}  // namespace hixl_py
