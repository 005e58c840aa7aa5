// Raising hixl.errors exceptions from C++ (see errors.h), and the bindings
// that name error codes: strerror (hixl_strerror), _engine_status_name
// (hixl::EngineStatusName), and the one table itself (HIXL_ERROR_CODES,
// HIXL_ENGINE_STATUSES of hixl/hixl_errors.h) for hixl.errors.
#include "errors.h"

#include <hixl/hixl.h>
#include <hixl/hixl_errors.h>

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

void RaiseEngine(hixl::EngineStatus status, const std::string& message, int code) {
  RaiseObject(py::module_::import("hixl.errors").attr("engine_error_for")(status, message, code));
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
  m.def(
      "strerror", [](int code) { return std::string(hixl_strerror(code)); }, py::arg("code"),
      "The name and meaning of an HIXL_ERR_* code.");
  m.def(
      "_engine_status_name", [](hixl::EngineStatus status) { return std::string(hixl::EngineStatusName(status)); },
      py::arg("status"), "The name of an engine status number (e.g. 'PARAM_INVALID'), for tests.");
  m.def(
      "_error_table",
      [] {
        py::list rows;
#define HIXL_PY_ERROR_ROW_(c_name, cxx_name, value, desc, engine, py_class) \
  rows.append(py::make_tuple(value, #c_name, desc, #engine, #py_class));
        HIXL_ERROR_CODES(HIXL_PY_ERROR_ROW_)
#undef HIXL_PY_ERROR_ROW_
        return rows;
      },
      "HIXL_ERROR_CODES (hixl/hixl_errors.h), the one table of error codes: a list of (code, name, "
      "description, engine status name, exception class name).");
  m.def(
      "_engine_status_table",
      [] {
        py::list rows;
#define HIXL_PY_ENGINE_ROW_(name, value, desc, py_class) \
  rows.append(py::make_tuple(static_cast<hixl::EngineStatus>(value), #name, desc, #py_class));
        HIXL_ENGINE_STATUSES(HIXL_PY_ENGINE_ROW_)
#undef HIXL_PY_ENGINE_ROW_
        return rows;
      },
      "HIXL_ENGINE_STATUSES (hixl/hixl_errors.h): a list of (status, name, description, exception class name).");
}

}  // namespace hixl_py
