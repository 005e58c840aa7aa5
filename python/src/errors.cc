// Raising hixl.errors exceptions from C++ (see errors.h), and the bindings
// that name error codes: strerror (hixl_strerror) and _engine_status_name
// (hixl::EngineStatusName).
#include "errors.h"

#include <hixl/hixl.h>

namespace hixl_py {

namespace {

[[noreturn]] void RaiseObject(py::object exc) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

}  // namespace

void Raise(int code, const std::string& message) {
  RaiseObject(py::module_::import("hixl.errors").attr("error_for")(code, message));
}

void RaiseInvalid(const std::string& message) { Raise(HIXL_ERR_INVALID_ARG, message); }

void RaiseEngine(hixl::EngineStatus status, const std::string& message) {
  RaiseObject(py::module_::import("hixl.errors").attr("engine_error_for")(status, message));
}

void Check(const hixl::Status& s) {
  if (!s.ok()) Raise(s.raw_code(), s.message());
}

void SetError(int code, const std::string& message) {
  try {
    Raise(code, message);
  } catch (py::error_already_set& e) {
    e.restore();
  }
}

std::string TypeName(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

void BindErrors(py::module_& m) {
  m.def("strerror", [](int code) { return std::string(hixl_strerror(code)); }, py::arg("code"),
        "The name and meaning of an HIXL_ERR_* code.");
  m.def("_engine_status_name", [](hixl::EngineStatus status) { return std::string(hixl::EngineStatusName(status)); },
        py::arg("status"), "The name of an engine status number (e.g. 'PARAM_INVALID'), for tests.");
}

}  // namespace hixl_py
