// Argument coercion (see coerce.h).
#include "coerce.h"

#include <hixl/hixl.h>

#include <fmt/format.h>

#include <algorithm>

#include "addresses.h"
#include "buffers.h"
#include "errors.h"

namespace hixl_py {

bool IsInt(py::handle h) {
  if (PyLong_Check(h.ptr())) return !PyBool_Check(h.ptr());
  // numpy integer scalars (e.g. addresses taken from a numpy array).
  PyObject* np = PyImport_GetModule(py::str("numpy").ptr());
  if (!np) {
    PyErr_Clear();
    return false;
  }
  py::object numpy = py::reinterpret_steal<py::object>(np);
  return py::isinstance(h, numpy.attr("integer"));
}

uint64_t ToAddress(py::handle h, const std::string& what) {
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!i) throw py::error_already_set();
  unsigned long long v = PyLong_AsUnsignedLongLong(i.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    RaiseInvalid(fmt::format("{}: {} is not an address (an int in [0, 2**64))", what, py::repr(h).cast<std::string>()));
  }
  return v;
}

size_t ToSize(py::handle h, const std::string& what) {
  if (PyBool_Check(h.ptr())) RaiseInvalid(fmt::format("{}: size must be an int, not bool", what));
  PyObject* i = PyNumber_Index(h.ptr());
  if (!i) {
    PyErr_Clear();
    RaiseInvalid(fmt::format("{}: size must be an int, not {}", what, TypeName(h)));
  }
  py::object idx = py::reinterpret_steal<py::object>(i);
  size_t v = PyLong_AsSize_t(idx.ptr());
  if (v == static_cast<size_t>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    RaiseInvalid(fmt::format("{}: size {} is negative or too large", what, py::repr(idx).cast<std::string>()));
  }
  return v;
}

namespace {

bool IsTensor(py::handle h) {
  return py::hasattr(h, "data_ptr") && py::hasattr(h, "element_size") && py::hasattr(h, "numel") &&
         py::hasattr(h, "is_contiguous");
}

}  // namespace

// The memory of a local object.  `writable`: it will be written (get's
// destination, registered memory).
Mem ResolveLocal(py::handle h, const std::string& what, bool writable) {
  Mem m;
  if (IsBuffer(h)) {
    BufferObject* b = AsBuffer(h);
    CheckLive(b, what.c_str());
    m.addr = reinterpret_cast<uintptr_t>(b->ptr);
    m.nbytes = b->nbytes;
    m.sized = true;
    PyObject* guard = NewGuard(b);
    if (!guard) throw py::error_already_set();
    m.keep.obj = py::reinterpret_steal<py::object>(guard);
    return m;
  }
  if (IsInt(h)) {
    m.addr = ToAddress(h, what);
    return m;
  }
  if (IsTensor(h)) {
    py::object device = h.attr("device");
    std::string type = py::str(device.attr("type"));
    if (type != "cpu") {
      Raise(HIXL_ERR_UNSUPPORTED, fmt::format("{}: a tensor on device '{}': only CPU memory is supported so far", what,
                                              py::str(device).cast<std::string>()));
    }
    if (!h.attr("is_contiguous")().cast<bool>()) {
      RaiseInvalid(fmt::format("{}: the tensor is not contiguous (use .contiguous(), which copies)", what));
    }
    m.addr = h.attr("data_ptr")().cast<uint64_t>();
    m.nbytes = h.attr("numel")().cast<size_t>() * h.attr("element_size")().cast<size_t>();
    m.sized = true;
    m.keep.obj = py::reinterpret_borrow<py::object>(h);
    return m;
  }
  if (PyObject_CheckBuffer(h.ptr())) {
    auto* view = new Py_buffer;
    if (PyObject_GetBuffer(h.ptr(), view, PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) != 0) {
      delete view;
      py::error_already_set e;  // fetches and clears the error
      RaiseInvalid(fmt::format("{}: cannot use the memory of a {}{}: {}", what, TypeName(h),
                               writable ? " for writing" : "", e.what()));
    }
    m.keep.view.reset(view);
    m.addr = reinterpret_cast<uintptr_t>(view->buf);
    m.nbytes = static_cast<size_t>(view->len);
    m.sized = true;
    return m;
  }
  RaiseInvalid(fmt::format(
      "{}: expected an int address, a torch tensor, a numpy array, a hixl.Buffer or another object with the buffer "
      "protocol, not {}",
      what, TypeName(h)));
}

// An address on a peer.  Objects are accepted only where their local address
// is valid on the peer too: symmetric memory (a hixl.Buffer or a view of one).
Mem ResolveRemote(py::handle h, const std::string& what) {
  Mem m;
  if (IsBuffer(h)) {
    BufferObject* b = AsBuffer(h);
    CheckLive(b, what.c_str());
    m.addr = reinterpret_cast<uintptr_t>(b->ptr);
    m.nbytes = b->nbytes;
    m.sized = true;
    return m;
  }
  if (IsInt(h)) {
    m.addr = ToAddress(h, what);
    return m;
  }
  Mem local = ResolveLocal(h, what, false);
  for (const BufferObject* b : S().buffers) {
    auto base = reinterpret_cast<uintptr_t>(b->ptr);
    if (local.addr >= base && local.addr + local.nbytes <= base + b->nbytes) {
      m.addr = local.addr;
      m.nbytes = local.nbytes;
      m.sized = true;
      return m;
    }
  }
  RaiseInvalid(fmt::format(
      "{}: a {} is memory of this process, and its address means nothing on a peer unless it is symmetric memory "
      "(a hixl.Buffer from hixl.alloc, or a view of one); pass the peer's address as an int (e.g. from "
      "hixl.allgather)",
      what, TypeName(h)));
}

size_t SizeFor(const char* api, const Mem& local, const char* local_name, const Mem& remote, const char* remote_name,
               py::handle size) {
  size_t n;
  if (size.is_none()) {
    if (local.sized) {
      n = local.nbytes;
    } else if (remote.sized) {
      n = remote.nbytes;
    } else {
      RaiseInvalid(
          fmt::format("{}: size is required when {} and {} are both int addresses", api, local_name, remote_name));
    }
  } else {
    n = ToSize(size, api);
  }
  if (local.sized && n > local.nbytes) {
    RaiseInvalid(fmt::format("{}: size {} is larger than {} ({} bytes)", api, n, local_name, local.nbytes));
  }
  if (remote.sized && n > remote.nbytes) {
    RaiseInvalid(fmt::format("{}: size {} is larger than {} ({} bytes)", api, n, remote_name, remote.nbytes));
  }
  return n;
}

// A 64-bit word's value: an int in [-2**63, 2**64); negative values wrap
// around (two's complement), so atomic_add(rank, addr, -1) subtracts one.
uint64_t ToWord(py::handle h, const char* api, const char* name) {
  if (PyBool_Check(h.ptr())) RaiseInvalid(fmt::format("{}: {} must be an int, not bool", api, name));
  PyObject* i = PyNumber_Index(h.ptr());
  if (!i) {
    PyErr_Clear();
    RaiseInvalid(fmt::format("{}: {} must be an int, not {}", api, name, TypeName(h)));
  }
  py::object idx = py::reinterpret_steal<py::object>(i);
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow == 0) return static_cast<uint64_t>(v);
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(idx.ptr());
    if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) return u;
    PyErr_Clear();
  }
  RaiseInvalid(fmt::format("{}: {} {} does not fit in a 64-bit word (ints in [-2**63, 2**64))", api, name,
                           py::repr(idx).cast<std::string>()));
}

// Beyond 2**40 ms (35 years) is forever enough, and keeps deadlines from
// overflowing; negative means HIXL_TIMEOUT_MS.
int64_t ClampTimeout(int64_t ms) { return std::min<int64_t>(ms, int64_t{1} << 40); }

void CheckLocal(const Mem& m, size_t n, const std::string& what, bool writable) {
  if (m.sized) return;
  std::string problem = LocalAddressProblem(m.addr, n, writable);
  if (!problem.empty()) RaiseInvalid(fmt::format("{}: {}", what, problem));
}

// A local 64-bit word: an int address (checked: 8 readable bytes), or an
// object exposing memory (its first 8 bytes).  The object is held (m.keep)
// while the call uses it.
Mem ResolveLocalWord(py::handle h, const std::string& what) {
  Mem m = ResolveLocal(h, what, /*writable=*/false);
  CheckLocal(m, 8, what, /*writable=*/false);
  if (m.sized && m.nbytes < 8) {
    RaiseInvalid(fmt::format("{}: a signal word is 8 bytes, and this {} has only {}", what, TypeName(h), m.nbytes));
  }
  return m;
}

// A word on a peer: an int address, or symmetric memory (its first 8 bytes).
uint64_t ResolveRemoteWord(py::handle h, const std::string& what) {
  Mem m = ResolveRemote(h, what);
  if (m.sized && m.nbytes < 8) {
    RaiseInvalid(fmt::format("{}: a word is 8 bytes, and this {} has only {}", what, TypeName(h), m.nbytes));
  }
  return m.addr;
}

}  // namespace hixl_py
