// hixl._hixl: the native half of the hixl Python package, over the C++ API
// (hixl::World).
//
// * Addresses are ints or objects that expose memory: torch tensors (CPU,
//   contiguous), numpy arrays and anything else with the buffer protocol,
//   and hixl.Buffer (from hixl.alloc).  With such an object the size defaults
//   to its size in bytes and a larger size is refused.
// * The objects a put/get reads or writes are kept alive (and buffer-protocol
//   exports held) until the fence or barrier that completes the transfer;
//   objects registered with register_memory are kept alive until they are
//   deregistered.
// * hixl.Buffer owns a block of symmetric memory and exports it, zero-copy,
//   through the buffer protocol.  Every export and every transfer in flight
//   holds a small guard object, so the block knows how many views still use
//   it: Buffer.free() refuses while any does, and finalize() gives the views
//   that survive it a private copy of their contents instead of leaving them
//   pointing at unmapped memory.
// * Failures raise hixl.HixlError subclasses (hixl/_errors.py) carrying the
//   library's code and message.
// * The GIL is released around every call that may wait.
#include <pybind11/pybind11.h>
#include <sys/mman.h>
#include <unistd.h>

#include <hixl/engine.hpp>
#include <hixl/hixl.hpp>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------- errors

[[noreturn]] void Raise(int code, const std::string& message) {
  py::object exc = py::module_::import("hixl._errors").attr("error_for")(code, message);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

[[noreturn]] void RaiseInvalid(const std::string& message) { Raise(HIXL_ERR_INVALID_ARG, message); }

void Check(const hixl::Status& s) {
  if (!s.ok()) Raise(s.raw_code(), s.message());
}

// Sets the Python error for a C slot that must return -1 / NULL.
void SetError(int code, const std::string& message) {
  try {
    Raise(code, message);
  } catch (py::error_already_set& e) {
    e.restore();
  }
}

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

std::string TypeName(py::handle h) { return Py_TYPE(h.ptr())->tp_name; }

// ---------------------------------------------------------------- state

// Memory a transfer or a registration keeps alive: an object reference and,
// for buffer-protocol objects, the export itself.  Destroyed with the GIL.
struct ViewRelease {
  void operator()(Py_buffer* v) const {
    PyBuffer_Release(v);
    delete v;
  }
};
struct Keep {
  py::object obj;
  std::unique_ptr<Py_buffer, ViewRelease> view;  // released first (declared last)
  bool empty() const { return !view && !obj; }
};

struct BufferObject;

// Address ranges that used to be symmetric memory and now hold private
// copies for views that outlived finalize().  Unmapped when their last
// Buffer goes.
struct Rescued {
  uintptr_t begin = 0, end = 0;  // page-aligned
  int users = 0;
};

struct State {
  hixl::World* world = nullptr;  // never deleted: a World is only a token
  bool finalized = false;
  bool exiting = false;
  std::set<BufferObject*> buffers;  // blocks from alloc() that are still allocated
  struct Pending {
    uint64_t seq;
    Keep keep;
  };
  std::deque<Pending> pending;  // memory of transfers not yet fenced, by seq
  uint64_t next_seq = 1;
  std::map<uint64_t, std::vector<Keep>> registered;  // address -> one Keep per registration
  std::vector<Rescued> rescued;
};

// Deliberately leaked: nothing here may be destroyed after the interpreter.
State& S() {
  static State* s = new State;
  return *s;
}

hixl::World& WorldOrRaise(const char* api) {
  if (!S().world) {
    Raise(HIXL_ERR_NOT_INITIALIZED,
          fmt::format("{} called {}", api, S().finalized ? "after hixl.finalize()" : "before hixl.init()"));
  }
  return *S().world;
}

uint64_t Track(Keep keep) {
  if (keep.empty()) return 0;
  uint64_t seq = S().next_seq++;
  S().pending.push_back({seq, std::move(keep)});
  return seq;
}

void Untrack(uint64_t seq) {
  if (seq == 0) return;
  auto& p = S().pending;
  for (auto it = p.rbegin(); it != p.rend(); ++it) {
    if (it->seq == seq) {
      p.erase(std::next(it).base());
      return;
    }
  }
}

// Every transfer started before `mark` was taken is complete.
void Completed(uint64_t mark) {
  auto& p = S().pending;
  while (!p.empty() && p.front().seq < mark) p.pop_front();
}

// ---------------------------------------------------------------- hixl.Buffer

enum BlockState : int { kLive = 0, kFreed = 1, kReleased = 2 };

struct BufferObject {
  PyObject_HEAD
  void* ptr;
  size_t nbytes;
  Py_ssize_t views;  // live guards: exports, and transfers or registrations in flight
  int state;
  int rescued;  // index into State::rescued, or -1
};

struct GuardObject {
  PyObject_HEAD
  BufferObject* owner;
};

PyTypeObject* g_buffer_type = nullptr;
PyTypeObject* g_guard_type = nullptr;

bool IsBuffer(py::handle h) { return PyObject_TypeCheck(h.ptr(), g_buffer_type); }
BufferObject* AsBuffer(py::handle h) { return reinterpret_cast<BufferObject*>(h.ptr()); }

// A new reference to a guard holding a view of b, or NULL with an error set.
PyObject* NewGuard(BufferObject* b) {
  GuardObject* g = PyObject_New(GuardObject, g_guard_type);
  if (!g) return nullptr;
  Py_INCREF(b);
  g->owner = b;
  ++b->views;
  return reinterpret_cast<PyObject*>(g);
}

void GuardDealloc(PyObject* self) {
  auto* g = reinterpret_cast<GuardObject*>(self);
  --g->owner->views;
  Py_DECREF(reinterpret_cast<PyObject*>(g->owner));
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

std::string Describe(const BufferObject* b) {
  if (b->state == kFreed) return "this block was already freed";
  return "this block was released by hixl.finalize()";
}

void CheckLive(const BufferObject* b, const char* api) {
  if (b->state == kLive) return;
  Raise(b->state == kFreed ? HIXL_ERR_INVALID_ARG : HIXL_ERR_NOT_INITIALIZED, fmt::format("{}: {}", api, Describe(b)));
}

void FreeBuffer(BufferObject* b, const char* api) {
  CheckLive(b, api);
  if (b->views > 0) {
    RaiseInvalid(fmt::format(
        "{}: {} view(s) still use this block (numpy arrays, torch tensors or memoryviews of it, registrations, or "
        "puts/gets not yet completed by hixl.fence()); delete them first, since they would otherwise point at freed "
        "memory",
        api, b->views));
  }
  hixl::World& w = WorldOrRaise(api);
  b->state = kFreed;
  S().buffers.erase(b);
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Free(b->ptr);
  }
  if (!s.ok()) {
    b->state = kLive;
    S().buffers.insert(b);
    Check(s);
  }
}

void BufferDealloc(PyObject* self) {
  auto* b = reinterpret_cast<BufferObject*>(self);
  if (b->state == kLive) {
    // The last reference is gone (every view holds one): the block goes too.
    S().buffers.erase(b);
    if (S().world && !S().exiting) (void)S().world->Free(b->ptr);
  }
  if (b->rescued >= 0) {
    Rescued& r = S().rescued[static_cast<size_t>(b->rescued)];
    if (--r.users == 0) ::munmap(reinterpret_cast<void*>(r.begin), r.end - r.begin);
  }
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

int BufferGetBuffer(PyObject* self, Py_buffer* view, int flags) {
  auto* b = reinterpret_cast<BufferObject*>(self);
  if (b->state != kLive) {
    SetError(b->state == kFreed ? HIXL_ERR_INVALID_ARG : HIXL_ERR_NOT_INITIALIZED,
             "hixl.Buffer: cannot export its memory: " + Describe(b));
    view->obj = nullptr;
    return -1;
  }
  PyObject* guard = NewGuard(b);
  if (!guard) {
    view->obj = nullptr;
    return -1;
  }
  // The guard, not the Buffer, is the export's owner: whoever keeps the
  // export (numpy) or a reference to its owner (torch.frombuffer) keeps the
  // guard, so b->views counts them all.
  int rc = PyBuffer_FillInfo(view, guard, b->ptr, static_cast<Py_ssize_t>(b->nbytes), 0, flags);
  Py_DECREF(guard);
  return rc;
}

// Never called (the guard owns every export), but its presence makes numpy
// keep a memoryview, hence the export and its guard, rather than a bare
// reference to the Buffer.
void BufferReleaseBuffer(PyObject*, Py_buffer*) {}

PyObject* BufferGetAddr(PyObject* self, void*) {
  return Protect([&] {
    auto* b = AsBuffer(self);
    CheckLive(b, "hixl.Buffer.addr");
    return py::object(py::int_(reinterpret_cast<uintptr_t>(b->ptr)));
  });
}

PyObject* BufferGetNbytes(PyObject* self, void*) { return PyLong_FromSize_t(AsBuffer(self)->nbytes); }
PyObject* BufferGetViews(PyObject* self, void*) { return PyLong_FromSsize_t(AsBuffer(self)->views); }
PyObject* BufferGetFreed(PyObject* self, void*) { return PyBool_FromLong(AsBuffer(self)->state != kLive); }

Py_ssize_t BufferLen(PyObject* self) { return static_cast<Py_ssize_t>(AsBuffer(self)->nbytes); }

PyObject* BufferRepr(PyObject* self) {
  auto* b = AsBuffer(self);
  const char* st = b->state == kLive ? "" : b->state == kFreed ? " freed" : " released";
  return PyUnicode_FromString(
      fmt::format("<hixl.Buffer addr={} nbytes={} views={}{}>", b->ptr, b->nbytes, b->views, st).c_str());
}

PyObject* BufferFree(PyObject* self, PyObject*) {
  return Protect([&] {
    FreeBuffer(AsBuffer(self), "hixl.Buffer.free");
    return py::object(py::none());
  });
}

// numpy(dtype=numpy.uint8) / tensor(dtype=torch.uint8): zero-copy views.
PyObject* BufferNumpy(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"dtype", nullptr};
  PyObject* dtype = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:numpy", const_cast<char**>(kw), &dtype)) return nullptr;
  return Protect([&] {
    py::module_ np = py::module_::import("numpy");
    py::object dt = dtype == Py_None ? np.attr("uint8") : py::reinterpret_borrow<py::object>(dtype);
    return np.attr("frombuffer")(py::handle(self), py::arg("dtype") = dt);
  });
}

PyObject* BufferTensor(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kw[] = {"dtype", nullptr};
  PyObject* dtype = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:tensor", const_cast<char**>(kw), &dtype)) return nullptr;
  return Protect([&] {
    py::module_ torch = py::module_::import("torch");
    py::object dt = dtype == Py_None ? torch.attr("uint8") : py::reinterpret_borrow<py::object>(dtype);
    return torch.attr("frombuffer")(py::handle(self), py::arg("dtype") = dt);
  });
}

PyObject* BufferEnter(PyObject* self, PyObject*) { return Py_NewRef(self); }

PyObject* BufferExit(PyObject* self, PyObject*) {
  return Protect([&] {
    if (AsBuffer(self)->state == kLive) FreeBuffer(AsBuffer(self), "hixl.Buffer.__exit__");
    return py::object(py::bool_(false));
  });
}

PyGetSetDef g_buffer_getset[] = {
    {"addr", BufferGetAddr, nullptr, "The block's address: the same on every rank (symmetric memory).", nullptr},
    {"nbytes", BufferGetNbytes, nullptr, "The block's size in bytes.", nullptr},
    {"views", BufferGetViews, nullptr,
     "How many views (exports, transfers in flight, registrations) use the block now.", nullptr},
    {"freed", BufferGetFreed, nullptr, "True once freed (or released by hixl.finalize()).", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMethodDef g_buffer_methods[] = {
    {"free", BufferFree, METH_NOARGS,
     "Frees the block now (as hixl.free(buf)).  Refused while views of it exist."},
    {"numpy", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BufferNumpy)), METH_VARARGS | METH_KEYWORDS,
     "numpy(dtype=numpy.uint8): a numpy array over the block, without a copy."},
    {"tensor", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BufferTensor)),
     METH_VARARGS | METH_KEYWORDS, "tensor(dtype=torch.uint8): a torch tensor over the block, without a copy."},
    {"__enter__", BufferEnter, METH_NOARGS, nullptr},
    {"__exit__", BufferExit, METH_VARARGS, "Frees the block unless it was freed already."},
    {nullptr, nullptr, 0, nullptr},
};

const char* kBufferDoc =
    "A block of symmetric memory from hixl.alloc(n).\n\n"
    "Exposes the buffer protocol: numpy.frombuffer(buf, dtype), torch.frombuffer(buf, dtype=...) and memoryview(buf)\n"
    "view the block without a copy.  buf.addr is its address on every rank.  The block is freed by hixl.free(buf),\n"
    "buf.free(), leaving a `with` block, or when the Buffer and every view of it are gone.  Freeing explicitly while\n"
    "views exist raises hixl.InvalidArgumentError.";

PyType_Slot g_buffer_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(BufferDealloc)},
    {Py_tp_repr, reinterpret_cast<void*>(BufferRepr)},
    {Py_tp_getset, g_buffer_getset},
    {Py_tp_methods, g_buffer_methods},
    {Py_tp_doc, const_cast<char*>(kBufferDoc)},
    {Py_sq_length, reinterpret_cast<void*>(BufferLen)},
    {Py_bf_getbuffer, reinterpret_cast<void*>(BufferGetBuffer)},
    {Py_bf_releasebuffer, reinterpret_cast<void*>(BufferReleaseBuffer)},
    {0, nullptr},
};

PyType_Spec g_buffer_spec = {
    "hixl.Buffer", sizeof(BufferObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, g_buffer_slots,
};

PyType_Slot g_guard_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(GuardDealloc)},
    {Py_tp_doc, const_cast<char*>("Keeps a hixl.Buffer's block in use while a view of it exists.")},
    {0, nullptr},
};

PyType_Spec g_guard_spec = {
    "hixl._BufferView", sizeof(GuardObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    g_guard_slots,
};

// ---------------------------------------------------------------- memory arguments

struct Mem {
  uint64_t addr = 0;
  size_t nbytes = 0;
  bool sized = false;  // nbytes is known (an object, not an int)
  Keep keep;
};

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

bool IsTensor(py::handle h) {
  return py::hasattr(h, "data_ptr") && py::hasattr(h, "element_size") && py::hasattr(h, "numel") &&
         py::hasattr(h, "is_contiguous");
}

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
      RaiseInvalid(fmt::format("{}: size is required when {} and {} are both int addresses", api, local_name,
                               remote_name));
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

// ---------------------------------------------------------------- the API

void Init() {
  if (S().world) Raise(HIXL_ERR_ALREADY_INITIALIZED, "hixl.init() called twice");
  std::optional<hixl::Result<hixl::World>> r;
  {
    py::gil_scoped_release nogil;
    r.emplace(hixl::World::Init());
  }
  if (!r->ok()) Check(r->status());
  S().world = new hixl::World(std::move(*r).value());
  S().finalized = false;
}

// Gives every block that still has views after finalize a private copy of
// its last contents at the same address, so that the views stay valid.
// Returns how many blocks it could not save.
struct Snapshot {
  BufferObject* b;
  py::object ref;  // keeps b alive
  std::string bytes;
};

int Rescue(std::vector<Snapshot>& saved) {
  if (saved.empty()) return 0;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::sort(saved.begin(), saved.end(), [](const Snapshot& a, const Snapshot& b) { return a.b->ptr < b.b->ptr; });
  int lost = 0;
  size_t i = 0;
  while (i < saved.size()) {
    // A run of blocks whose page ranges touch is one mapping.
    uintptr_t begin = reinterpret_cast<uintptr_t>(saved[i].b->ptr) & ~(page - 1);
    uintptr_t end = (reinterpret_cast<uintptr_t>(saved[i].b->ptr) + saved[i].b->nbytes + page - 1) & ~(page - 1);
    size_t j = i + 1;
    while (j < saved.size() && (reinterpret_cast<uintptr_t>(saved[j].b->ptr) & ~(page - 1)) < end) {
      end = std::max(end, (reinterpret_cast<uintptr_t>(saved[j].b->ptr) + saved[j].b->nbytes + page - 1) & ~(page - 1));
      ++j;
    }
    void* p = ::mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || p != reinterpret_cast<void*>(begin)) {
      if (p != MAP_FAILED) ::munmap(p, end - begin);
      lost += static_cast<int>(j - i);
    } else {
      int index = static_cast<int>(S().rescued.size());
      S().rescued.push_back({begin, end, static_cast<int>(j - i)});
      for (size_t k = i; k < j; ++k) {
        std::memcpy(saved[k].b->ptr, saved[k].bytes.data(), saved[k].bytes.size());
        saved[k].b->rescued = index;
      }
    }
    i = j;
  }
  return lost;
}

void Finalize() {
  hixl::World* w = S().world;
  if (!w) {
    Raise(HIXL_ERR_NOT_INITIALIZED,
          S().finalized ? "hixl.finalize() called twice" : "hixl.finalize() called before hixl.init()");
  }
  S().world = nullptr;
  S().finalized = true;
  // Every block is released by finalize.  Blocks that views still use are
  // copied first and put back, as private memory at the same address, after
  // finalize unmapped the heap: those views keep the contents the block had
  // when finalize() was called.
  std::vector<BufferObject*> blocks(S().buffers.begin(), S().buffers.end());
  S().buffers.clear();
  for (BufferObject* b : blocks) b->state = kReleased;
  std::vector<Snapshot> saved;
  for (BufferObject* b : blocks) {
    if (b->views > 0) {
      saved.push_back({b, py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(b)),
                       std::string(static_cast<const char*>(b->ptr), b->nbytes)});
    }
  }
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w->Finalize();
  }
  const int viewed = static_cast<int>(saved.size());
  const int lost = Rescue(saved);
  S().pending.clear();
  S().registered.clear();
  if (viewed > 0) {
    std::string msg =
        lost == 0
            ? fmt::format("hixl.finalize: {} block(s) from hixl.alloc still had views (numpy arrays, torch tensors, "
                          "memoryviews); they now hold a private copy of the block's last contents, which no peer "
                          "can reach",
                          viewed)
            : fmt::format("hixl.finalize: {} block(s) from hixl.alloc still had views, and {} of them could not be "
                          "kept mapped: those views now point at unmapped memory and must not be used",
                          viewed, lost);
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) != 0) throw py::error_already_set();
  }
  Check(s);
}

int Rank() { return WorldOrRaise("hixl.rank").rank(); }
int WorldSize() { return WorldOrRaise("hixl.world_size").size(); }

py::object Alloc(py::handle size) {
  hixl::World& w = WorldOrRaise("hixl.alloc");
  size_t n = ToSize(size, "hixl.alloc");
  std::optional<hixl::Result<void*>> r;
  {
    py::gil_scoped_release nogil;
    r.emplace(w.Alloc(n));
  }
  if (!r->ok()) Check(r->status());
  BufferObject* b = PyObject_New(BufferObject, g_buffer_type);
  if (!b) {
    (void)w.Free(r->value());
    throw py::error_already_set();
  }
  b->ptr = r->value();
  b->nbytes = n;
  b->views = 0;
  b->state = kLive;
  b->rescued = -1;
  S().buffers.insert(b);
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(b));
}

void Free(py::handle what) {
  if (IsBuffer(what)) return FreeBuffer(AsBuffer(what), "hixl.free");
  hixl::World& w = WorldOrRaise("hixl.free");
  if (!IsInt(what)) {
    RaiseInvalid(fmt::format("hixl.free: expected a hixl.Buffer or an int address, not {}", TypeName(what)));
  }
  uint64_t addr = ToAddress(what, "hixl.free");
  for (BufferObject* b : S().buffers) {
    if (reinterpret_cast<uintptr_t>(b->ptr) == addr) return FreeBuffer(b, "hixl.free");
  }
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Free(reinterpret_cast<void*>(addr));
  }
  Check(s);
}

void RegisterMemory(py::handle addr, py::handle size) {
  hixl::World& w = WorldOrRaise("hixl.register_memory");
  Mem m = ResolveLocal(addr, "hixl.register_memory: addr", /*writable=*/true);
  size_t n;
  if (size.is_none()) {
    if (!m.sized) RaiseInvalid("hixl.register_memory: size is required with an int address");
    n = m.nbytes;
  } else {
    n = ToSize(size, "hixl.register_memory");
    if (m.sized && n > m.nbytes) {
      RaiseInvalid(fmt::format("hixl.register_memory: size {} is larger than the object ({} bytes)", n, m.nbytes));
    }
  }
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.RegisterMemory(reinterpret_cast<void*>(m.addr), n);
  }
  Check(s);
  if (!m.keep.empty()) S().registered[m.addr].push_back(std::move(m.keep));
}

void DeregisterMemory(py::handle addr) {
  hixl::World& w = WorldOrRaise("hixl.deregister_memory");
  uint64_t a = IsInt(addr) ? ToAddress(addr, "hixl.deregister_memory: addr")
                           : ResolveLocal(addr, "hixl.deregister_memory: addr", false).addr;
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.DeregisterMemory(reinterpret_cast<void*>(a));
  }
  Check(s);
  auto it = S().registered.find(a);
  if (it != S().registered.end()) {
    it->second.pop_back();
    if (it->second.empty()) S().registered.erase(it);
  }
}

void Put(int dst_rank, py::handle src_addr, py::handle dst_addr, py::handle size) {
  hixl::World& w = WorldOrRaise("hixl.put");
  Mem local = ResolveLocal(src_addr, "hixl.put: src_addr", false);
  Mem remote = ResolveRemote(dst_addr, "hixl.put: dst_addr");
  size_t n = SizeFor("hixl.put", local, "src_addr", remote, "dst_addr", size);
  uint64_t seq = Track(std::move(local.keep));
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Put(dst_rank, reinterpret_cast<const void*>(local.addr), remote.addr, n);
  }
  if (!s.ok()) Untrack(seq);
  Check(s);
}

void Get(int src_rank, py::handle src_addr, py::handle dst_addr, py::handle size) {
  hixl::World& w = WorldOrRaise("hixl.get");
  Mem remote = ResolveRemote(src_addr, "hixl.get: src_addr");
  Mem local = ResolveLocal(dst_addr, "hixl.get: dst_addr", true);
  size_t n = SizeFor("hixl.get", local, "dst_addr", remote, "src_addr", size);
  uint64_t seq = Track(std::move(local.keep));
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Get(src_rank, remote.addr, reinterpret_cast<void*>(local.addr), n);
  }
  if (!s.ok()) Untrack(seq);
  Check(s);
}

void Fence() {
  hixl::World& w = WorldOrRaise("hixl.fence");
  const uint64_t mark = S().next_seq;
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Fence();
  }
  Check(s);
  Completed(mark);
}

void Barrier() {
  hixl::World& w = WorldOrRaise("hixl.barrier");
  const uint64_t mark = S().next_seq;
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Barrier();
  }
  Check(s);
  Completed(mark);
}

// One collective round of allgather over raw bytes.
std::vector<char> AllgatherRound(hixl::World& w, const char* send, size_t bytes_per_rank) {
  std::vector<char> recv(bytes_per_rank * static_cast<size_t>(w.size()));
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Allgather(send, recv.data(), bytes_per_rank);
  }
  Check(s);
  return recv;
}

// allgather(int) -> [int per rank]; allgather(bytes-like) -> [bytes per rank]
// (lengths may differ).  Round one exchanges a 16-byte header per rank (the
// kind, and the int itself or the length), so every rank sees the same
// mismatch, if any, and raises; round two (bytes only) the padded payloads.
py::list Allgather(py::handle value) {
  hixl::World& w = WorldOrRaise("hixl.allgather");
  enum : char { kInt = 1, kBytes = 2 };
  char hdr[16] = {};
  std::string payload;
  if (PyLong_Check(value.ptr()) || IsInt(value)) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    uint64_t bits;
    if (overflow == 0) {
      bits = static_cast<uint64_t>(v);
      hdr[1] = v < 0 ? 1 : 0;
    } else {
      unsigned long long u = overflow > 0 ? PyLong_AsUnsignedLongLong(i.ptr()) : 0;
      if (overflow < 0 || (u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
        PyErr_Clear();
        RaiseInvalid("hixl.allgather: the int does not fit in 64 bits");
      }
      bits = u;
    }
    hdr[0] = kInt;
    std::memcpy(hdr + 8, &bits, 8);
  } else if (PyObject_CheckBuffer(value.ptr())) {
    Py_buffer view;
    if (PyObject_GetBuffer(value.ptr(), &view, PyBUF_ANY_CONTIGUOUS) != 0) {
      py::error_already_set e;
      RaiseInvalid(fmt::format("hixl.allgather: cannot read the {}: {}", TypeName(value), e.what()));
    }
    payload.assign(static_cast<const char*>(view.buf), static_cast<size_t>(view.len));
    PyBuffer_Release(&view);
    hdr[0] = kBytes;
    uint64_t len = payload.size();
    std::memcpy(hdr + 8, &len, 8);
  } else {
    RaiseInvalid(fmt::format("hixl.allgather: expected an int or a bytes-like object, not {}", TypeName(value)));
  }

  const size_t n = static_cast<size_t>(w.size());
  std::vector<char> all = AllgatherRound(w, hdr, sizeof hdr);
  auto field = [&](size_t r) {
    uint64_t x;
    std::memcpy(&x, all.data() + r * 16 + 8, 8);
    return x;
  };
  for (size_t r = 0; r < n; ++r) {
    if (all[r * 16] != hdr[0]) {
      RaiseInvalid(fmt::format(
          "hixl.allgather: the ranks passed different kinds of value (rank {} {}, rank {} {}): every rank must pass "
          "an int, or every rank a bytes-like object",
          w.rank(), hdr[0] == kInt ? "an int" : "bytes", r, all[r * 16] == kInt ? "an int" : "bytes"));
    }
  }
  py::list out;
  if (hdr[0] == kInt) {
    for (size_t r = 0; r < n; ++r) {
      uint64_t bits = field(r);
      if (all[r * 16 + 1]) {
        out.append(py::int_(static_cast<int64_t>(bits)));
      } else {
        out.append(py::int_(bits));
      }
    }
    return out;
  }
  size_t longest = 0;
  for (size_t r = 0; r < n; ++r) longest = std::max<size_t>(longest, field(r));
  std::vector<char> data;
  if (longest > 0) {
    payload.resize(longest, '\0');
    data = AllgatherRound(w, payload.data(), longest);
  }
  for (size_t r = 0; r < n; ++r) out.append(py::bytes(data.data() + r * longest, field(r)));
  return out;
}

// ---------------------------------------------------------------- signals, atomics, notifications

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

// A local 64-bit word: an int address, or an object exposing memory (its
// first 8 bytes).  The object is held (m.keep) while the call uses it.
Mem ResolveLocalWord(py::handle h, const std::string& what) {
  Mem m = ResolveLocal(h, what, /*writable=*/false);
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

void PutSignal(int dst_rank, py::handle src_addr, py::handle dst_addr, py::handle size, py::handle sig_addr,
               py::handle value, int op) {
  hixl::World& w = WorldOrRaise("hixl.put_signal");
  if (sig_addr.is_none()) RaiseInvalid("hixl.put_signal: sig_addr (the signal word on dst_rank) is required");
  if (value.is_none()) RaiseInvalid("hixl.put_signal: value (what the signal word is set to, or gains) is required");
  const uint64_t v = ToWord(value, "hixl.put_signal", "value");
  const uint64_t sig = ResolveRemoteWord(sig_addr, "hixl.put_signal: sig_addr");
  Mem local = ResolveLocal(src_addr, "hixl.put_signal: src_addr", false);
  Mem remote = ResolveRemote(dst_addr, "hixl.put_signal: dst_addr");
  size_t n = SizeFor("hixl.put_signal", local, "src_addr", remote, "dst_addr", size);
  // Like a put, the source is kept until the fence that completes it; also
  // after a failure, which may come after the data went out.
  Track(std::move(local.keep));
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.PutSignal(dst_rank, reinterpret_cast<const void*>(local.addr), remote.addr, n, sig, v,
                    static_cast<hixl::SignalOp>(op));
  }
  Check(s);
}

void WaitUntil(py::handle sig_addr, int cmp, py::handle value, int64_t timeout_ms) {
  hixl::World& w = WorldOrRaise("hixl.wait_until");
  const uint64_t v = ToWord(value, "hixl.wait_until", "value");
  const int64_t t = ClampTimeout(timeout_ms);
  Mem m = ResolveLocalWord(sig_addr, "hixl.wait_until: sig_addr");  // held until the wait is over
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.WaitUntil(reinterpret_cast<const uint64_t*>(m.addr), static_cast<hixl::Cmp>(cmp), v, t);
  }
  Check(s);
}

// Like hixl_test, needs no world.
bool Test(py::handle sig_addr, int cmp, py::handle value) {
  const uint64_t v = ToWord(value, "hixl.test", "value");
  Mem m = ResolveLocalWord(sig_addr, "hixl.test: sig_addr");
  int rc = hixl_test(reinterpret_cast<const uint64_t*>(m.addr), cmp, v);
  if (rc < 0) Raise(rc, hixl_last_error());
  return rc == 1;
}

// The remote atomics.  Each completes before it returns (no fence needed).
enum class AtomicKind { kFetch, kSet, kAdd, kFetchAdd, kSwap, kCompareSwap };

// Returns the old value (0 for set and add).
uint64_t Atomic(AtomicKind kind, const char* api, int rank, py::handle addr_h, py::handle a_h, py::handle b_h) {
  hixl::World& w = WorldOrRaise(api);
  const uint64_t addr = ResolveRemoteWord(addr_h, std::string(api) + ": addr");
  const uint64_t a = a_h ? ToWord(a_h, api, kind == AtomicKind::kCompareSwap ? "expected" : "value") : 0;
  const uint64_t b = b_h ? ToWord(b_h, api, "desired") : 0;
  std::optional<hixl::Result<uint64_t>> r;
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    switch (kind) {
      case AtomicKind::kFetch: r.emplace(w.AtomicFetch(rank, addr)); break;
      case AtomicKind::kSet: s = w.AtomicSet(rank, addr, a); break;
      case AtomicKind::kAdd: s = w.AtomicAdd(rank, addr, a); break;
      case AtomicKind::kFetchAdd: r.emplace(w.AtomicFetchAdd(rank, addr, a)); break;
      case AtomicKind::kSwap: r.emplace(w.AtomicSwap(rank, addr, a)); break;
      case AtomicKind::kCompareSwap: r.emplace(w.AtomicCompareSwap(rank, addr, a, b)); break;
    }
  }
  if (!r) {
    Check(s);
    return 0;
  }
  if (!r->ok()) Check(r->status());
  return r->value();
}

void Notify(int dst_rank, py::handle data) {
  hixl::World& w = WorldOrRaise("hixl.notify");
  if (PyUnicode_Check(data.ptr())) {
    RaiseInvalid("hixl.notify: data must be a bytes-like object, not str (encode it, e.g. text.encode())");
  }
  if (!PyObject_CheckBuffer(data.ptr())) {
    RaiseInvalid(fmt::format("hixl.notify: data must be a bytes-like object (bytes, bytearray, memoryview, a numpy "
                             "array), not {}",
                             TypeName(data)));
  }
  std::string bytes;
  {
    Py_buffer view;
    if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_ANY_CONTIGUOUS) != 0) {
      py::error_already_set e;
      RaiseInvalid(fmt::format("hixl.notify: cannot read the {}: {}", TypeName(data), e.what()));
    }
    bytes.assign(static_cast<const char*>(view.buf), static_cast<size_t>(view.len));
    PyBuffer_Release(&view);
  }
  // A notification is sent after a fence: every transfer started before it
  // is complete once it is delivered.
  const uint64_t mark = S().next_seq;
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Notify(dst_rank, bytes.data(), bytes.size());
  }
  Check(s);
  Completed(mark);
}

py::tuple NotificationTuple(const hixl::Notification& n) {
  return py::make_tuple(n.src_rank, py::bytes(n.data));
}

py::list GetNotifications() {
  hixl::World& w = WorldOrRaise("hixl.get_notifications");
  std::optional<hixl::Result<std::vector<hixl::Notification>>> r;
  {
    py::gil_scoped_release nogil;
    r.emplace(w.GetNotifications());
  }
  if (!r->ok()) Check(r->status());
  py::list out;
  for (const hixl::Notification& n : r->value()) out.append(NotificationTuple(n));
  return out;
}

py::tuple WaitNotification(int64_t timeout_ms) {
  hixl::World& w = WorldOrRaise("hixl.wait_notification");
  const int64_t t = ClampTimeout(timeout_ms);
  std::optional<hixl::Result<hixl::Notification>> r;
  {
    py::gil_scoped_release nogil;
    r.emplace(w.WaitNotification(t));
  }
  if (!r->ok()) Check(r->status());
  return NotificationTuple(r->value());
}

py::dict Stats() {
  py::dict d;
  d["pending_transfers"] = S().pending.size();
  size_t regs = 0;
  for (const auto& [addr, keeps] : S().registered) regs += keeps.size();
  d["registered_objects"] = regs;
  d["live_blocks"] = S().buffers.size();
  return d;
}


// ---------------------------------------------------------------- engine
//
// hixl.Engine: the engine API (include/hixl/engine.hpp) in Python style.
// Failures raise hixl.EngineError subclasses (hixl/_errors.py) carrying the
// CANN-compatible status number and the library's explanation.

[[noreturn]] void RaiseEngine(hixl::EngineStatus status, const std::string& message) {
  py::object exc = py::module_::import("hixl._errors").attr("engine_error_for")(status, message);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

// Runs an engine call without the GIL; raises on failure.  The message is
// read on the same thread, right after the call.
template <typename F>
void EngineCall(F&& f) {
  hixl::EngineStatus st;
  std::string why;
  {
    py::gil_scoped_release nogil;
    st = f();
    if (st != hixl::SUCCESS) why = hixl::Engine::LastError();
  }
  if (st != hixl::SUCCESS) RaiseEngine(st, why);
}

hixl::TransferOp ToOp(py::handle op) {
  if (py::isinstance<py::str>(op)) {
    std::string s = py::str(op);
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    if (s == "read") return hixl::READ;
    if (s == "write") return hixl::WRITE;
    RaiseEngine(hixl::PARAM_INVALID, fmt::format("op '{}' is not 'read' or 'write' (or hixl.READ, hixl.WRITE)", s));
  }
  try {
    return op.cast<hixl::TransferOp>();
  } catch (const py::cast_error&) {
    RaiseEngine(hixl::PARAM_INVALID, fmt::format("op must be hixl.READ, hixl.WRITE, 'read' or 'write', not {}",
                                                 TypeName(op)));
  }
}

struct PyTransferReq {
  hixl::TransferReq req = nullptr;
  std::vector<Keep> keep;  // the local memory, alive until the final status
  bool done = false;
  hixl::TransferStatus status = hixl::TransferStatus::WAITING;
  std::string error;
};

class PyEngine {
 public:
  ~PyEngine() {
    py::gil_scoped_release nogil;
    engine_.Finalize();
  }

  void Initialize(const std::string& local_engine, py::handle options) {
    std::map<std::string, std::string> opts;
    if (!options.is_none()) {
      if (!py::isinstance<py::dict>(options)) {
        RaiseEngine(hixl::PARAM_INVALID, fmt::format("Engine.initialize: options must be a dict, not {}",
                                                     TypeName(options)));
      }
      for (auto [k, v] : py::reinterpret_borrow<py::dict>(options)) {
        opts[py::str(k)] = py::isinstance<py::bool_>(v) ? (v.cast<bool>() ? "1" : "0") : std::string(py::str(v));
      }
    }
    EngineCall([&] { return engine_.Initialize(local_engine, opts); });
  }

  void Finalize() {
    {
      py::gil_scoped_release nogil;
      engine_.Finalize();
    }
    registered_.clear();
  }

  uint64_t RegisterMem(py::handle addr, py::handle size, py::handle mem_type) {
    hixl::MemType type = hixl::MEM_HOST;
    if (py::isinstance<py::str>(mem_type)) {
      std::string t = py::str(mem_type);
      if (t == "device") type = hixl::MEM_DEVICE;
      else if (t != "host") RaiseEngine(hixl::PARAM_INVALID, fmt::format("Engine.register_mem: mem_type '{}' is not 'host' or 'device'", t));
    } else {
      type = mem_type.cast<hixl::MemType>();
    }
    Mem m = ResolveLocal(addr, "Engine.register_mem: addr", /*writable=*/true);
    size_t n;
    if (size.is_none()) {
      if (!m.sized) RaiseEngine(hixl::PARAM_INVALID, "Engine.register_mem: size is required with an int address");
      n = m.nbytes;
    } else {
      n = ToSize(size, "Engine.register_mem");
      if (m.sized && n > m.nbytes) {
        RaiseEngine(hixl::PARAM_INVALID,
                    fmt::format("Engine.register_mem: size {} is larger than the object ({} bytes)", n, m.nbytes));
      }
    }
    hixl::MemHandle h = nullptr;
    EngineCall([&] { return engine_.RegisterMem({m.addr, n}, type, h); });
    const auto handle = reinterpret_cast<uint64_t>(h);
    registered_[handle].push_back(std::move(m.keep));
    return handle;
  }

  void DeregisterMem(py::handle handle) {
    uint64_t h = IsInt(handle) ? ToAddress(handle, "Engine.deregister_mem: handle")
                               : ResolveLocal(handle, "Engine.deregister_mem: handle", false).addr;
    EngineCall([&] { return engine_.DeregisterMem(reinterpret_cast<hixl::MemHandle>(h)); });
    auto it = registered_.find(h);
    if (it != registered_.end()) {
      it->second.pop_back();
      if (it->second.empty()) registered_.erase(it);
    }
  }

  void Connect(const std::string& remote, int32_t timeout_ms) {
    EngineCall([&] { return engine_.Connect(remote, timeout_ms); });
  }
  void Disconnect(const std::string& remote, int32_t timeout_ms) {
    EngineCall([&] { return engine_.Disconnect(remote, timeout_ms); });
  }

  // descs: an iterable of (local, remote_addr[, size]) or hixl.TransferOpDesc.
  std::vector<hixl::TransferOpDesc> Descs(const char* api, hixl::TransferOp op, py::handle descs,
                                          std::vector<Keep>* keep) {
    std::vector<hixl::TransferOpDesc> out;
    if (py::hasattr(descs, "__len__")) out.reserve(py::len(descs));
    size_t i = 0;
    for (py::handle d : py::iter(descs)) {
      const std::string what = fmt::format("{}: block {}", api, i++);
      if (py::isinstance<hixl::TransferOpDesc>(d)) {
        out.push_back(d.cast<hixl::TransferOpDesc>());
        continue;
      }
      if (!py::isinstance<py::tuple>(d) && !py::isinstance<py::list>(d)) {
        RaiseEngine(hixl::PARAM_INVALID, fmt::format("{}: expected (local, remote_addr[, size]) or a "
                                                     "hixl.TransferOpDesc, not {}", what, TypeName(d)));
      }
      py::sequence t = py::reinterpret_borrow<py::sequence>(d);
      if (t.size() != 2 && t.size() != 3) {
        RaiseEngine(hixl::PARAM_INVALID, fmt::format("{}: expected (local, remote_addr[, size]), got {} items", what,
                                                     t.size()));
      }
      Mem m = ResolveLocal(t[0], what + " local", /*writable=*/op == hixl::READ);
      const uint64_t remote = ToAddress(t[1], what + " remote_addr");
      size_t n;
      if (t.size() == 3 && !t[2].is_none()) {
        n = ToSize(t[2], what);
        if (m.sized && n > m.nbytes) {
          RaiseEngine(hixl::PARAM_INVALID, fmt::format("{}: size {} is larger than the local object ({} bytes)", what,
                                                       n, m.nbytes));
        }
      } else {
        if (!m.sized) RaiseEngine(hixl::PARAM_INVALID, fmt::format("{}: size is required with an int address", what));
        n = m.nbytes;
      }
      out.push_back({m.addr, remote, n});
      if (!m.keep.empty()) keep->push_back(std::move(m.keep));
    }
    return out;
  }

  void TransferSync(const std::string& remote, py::handle op, py::handle descs, int32_t timeout_ms) {
    const hixl::TransferOp o = ToOp(op);
    std::vector<Keep> keep;
    auto d = Descs("Engine.transfer_sync", o, descs, &keep);
    EngineCall([&] { return engine_.TransferSync(remote, o, d, timeout_ms); });
  }

  std::shared_ptr<PyTransferReq> TransferAsync(const std::string& remote, py::handle op, py::handle descs,
                                               int32_t timeout_ms) {
    const hixl::TransferOp o = ToOp(op);
    auto r = std::make_shared<PyTransferReq>();
    auto d = Descs("Engine.transfer_async", o, descs, &r->keep);
    hixl::TransferArgs args;
    args.timeout_ms = timeout_ms;
    EngineCall([&] { return engine_.TransferAsync(remote, o, d, args, r->req); });
    return r;
  }

  hixl::TransferStatus GetTransferStatus(PyTransferReq& r) {
    if (r.done) return r.status;  // asked again: the same answer
    hixl::TransferStatus st = hixl::TransferStatus::WAITING;
    EngineCall([&] { return engine_.GetTransferStatus(r.req, st); });
    if (st != hixl::TransferStatus::WAITING) {
      r.done = true;
      r.status = st;
      if (st != hixl::TransferStatus::COMPLETED) r.error = hixl::Engine::LastError();
      r.keep.clear();
    }
    return st;
  }

  void SendNotify(const std::string& remote, const std::string& name, py::handle msg, int32_t timeout_ms) {
    hixl::NotifyDesc n;
    n.name = name;
    if (py::isinstance<py::str>(msg)) {
      n.notify_msg = msg.cast<std::string>();
    } else if (py::isinstance<py::bytes>(msg)) {
      n.notify_msg = msg.cast<std::string>();
    } else {
      RaiseEngine(hixl::PARAM_INVALID, fmt::format("Engine.send_notify: msg must be str or bytes, not {}",
                                                   TypeName(msg)));
    }
    EngineCall([&] { return engine_.SendNotify(remote, n, timeout_ms); });
  }

  std::vector<hixl::NotifyDesc> GetNotifies() {
    std::vector<hixl::NotifyDesc> out;
    EngineCall([&] { return engine_.GetNotifies(out); });
    return out;
  }

  std::vector<hixl::NotifyDesc> WaitNotifies(int32_t timeout_ms) {
    std::vector<hixl::NotifyDesc> out;
    EngineCall([&] { return engine_.WaitNotifies(out, timeout_ms); });
    return out;
  }

 private:
  hixl::Engine engine_;
  std::map<uint64_t, std::vector<Keep>> registered_;  // handle -> one Keep per registration
};

void BindEngine(py::module_& m) {
  py::enum_<hixl::TransferOp>(m, "TransferOp").value("READ", hixl::READ).value("WRITE", hixl::WRITE).export_values();
  py::enum_<hixl::MemType>(m, "MemType").value("DEVICE", hixl::MEM_DEVICE).value("HOST", hixl::MEM_HOST);
  py::enum_<hixl::TransferStatus>(m, "TransferStatus")
      .value("WAITING", hixl::TransferStatus::WAITING)
      .value("COMPLETED", hixl::TransferStatus::COMPLETED)
      .value("TIMEOUT", hixl::TransferStatus::TIMEOUT)
      .value("FAILED", hixl::TransferStatus::FAILED);
  py::class_<hixl::TransferOpDesc>(m, "TransferOpDesc")
      .def(py::init([](uint64_t local_addr, uint64_t remote_addr, size_t len) {
             return hixl::TransferOpDesc{local_addr, remote_addr, len};
           }),
           py::arg("local_addr"), py::arg("remote_addr"), py::arg("len"))
      .def_readwrite("local_addr", &hixl::TransferOpDesc::local_addr)
      .def_readwrite("remote_addr", &hixl::TransferOpDesc::remote_addr)
      .def_readwrite("len", &hixl::TransferOpDesc::len)
      .def("__repr__", [](const hixl::TransferOpDesc& d) {
        return fmt::format("TransferOpDesc(local_addr={:#x}, remote_addr={:#x}, len={})", d.local_addr, d.remote_addr,
                           d.len);
      });
  py::class_<hixl::NotifyDesc>(m, "NotifyDesc")
      .def(py::init([](std::string name, std::string msg) { return hixl::NotifyDesc{std::move(name), std::move(msg)}; }),
           py::arg("name"), py::arg("notify_msg"))
      .def_property_readonly("name", [](const hixl::NotifyDesc& n) { return py::str(n.name); })
      .def_property_readonly("notify_msg",
                             [](const hixl::NotifyDesc& n) {
                               PyObject* s = PyUnicode_DecodeUTF8(n.notify_msg.data(),
                                                                  static_cast<Py_ssize_t>(n.notify_msg.size()),
                                                                  "surrogateescape");
                               if (!s) throw py::error_already_set();
                               return py::reinterpret_steal<py::str>(s);
                             })
      .def_property_readonly("data", [](const hixl::NotifyDesc& n) { return py::bytes(n.notify_msg); })
      .def("__repr__", [](const hixl::NotifyDesc& n) {
        return fmt::format("NotifyDesc(name={}, notify_msg={})", py::repr(py::str(n.name)).cast<std::string>(),
                           py::repr(py::bytes(n.notify_msg)).cast<std::string>());
      });
  py::class_<PyTransferReq, std::shared_ptr<PyTransferReq>>(m, "TransferReq")
      .def_property_readonly("error", [](const PyTransferReq& r) { return r.error; },
                             "Why it ended FAILED or TIMEOUT ('' otherwise).")
      .def_property_readonly("done", [](const PyTransferReq& r) { return r.done; });
  py::class_<PyEngine>(m, "Engine",
                       "An engine: starts on its own, registers memory, connects to other engines by 'ip:port' and "
                       "moves batches of blocks into or out of their registered memory (see docs/engine.md).")
      .def(py::init<>())
      .def("initialize", &PyEngine::Initialize, py::arg("local_engine"), py::arg("options") = py::none(),
           "local_engine: 'ip', 'ip:port', '[ipv6]' or '[ipv6]:port' (a port > 0 listens for peers).  options: a "
           "dict (timeout_ms, transport, net_dev, shm_cma, shm_thp, notify_queue_depth).")
      .def("finalize", &PyEngine::Finalize, "Releases everything; connected engines see this one gone.")
      .def("register_mem", &PyEngine::RegisterMem, py::arg("addr"), py::arg("size") = py::none(),
           py::arg("mem_type") = "host",
           "Makes memory reachable by connected engines: a tensor, numpy array or buffer (kept alive until "
           "deregister_mem), or an int address with a size.  Returns the handle (an int).")
      .def("deregister_mem", &PyEngine::DeregisterMem, py::arg("handle"), "Drops one registration.")
      .def("connect", &PyEngine::Connect, py::arg("remote_engine"), py::arg("timeout_ms") = 1000)
      .def("disconnect", &PyEngine::Disconnect, py::arg("remote_engine"), py::arg("timeout_ms") = 1000)
      .def("transfer_sync", &PyEngine::TransferSync, py::arg("remote_engine"), py::arg("op"), py::arg("descs"),
           py::arg("timeout_ms") = 1000,
           "Moves a batch: descs is a list of (local, remote_addr[, size]) (local: tensor, array or int address; "
           "size defaults to the local object's bytes) or hixl.TransferOpDesc.  op: hixl.READ or hixl.WRITE.  "
           "Returns when the batch is complete.  Releases the GIL.")
      .def("transfer_async", &PyEngine::TransferAsync, py::arg("remote_engine"), py::arg("op"), py::arg("descs"),
           py::arg("timeout_ms") = 0,
           "As transfer_sync, in the background: returns a TransferReq for get_transfer_status.  The local objects "
           "are kept alive until the final status.  timeout_ms 0: the engine's timeout_ms.")
      .def("get_transfer_status", &PyEngine::GetTransferStatus, py::arg("req"),
           "WAITING, COMPLETED, TIMEOUT or FAILED (then req.error says why).")
      .def("send_notify", &PyEngine::SendNotify, py::arg("remote_engine"), py::arg("name"), py::arg("msg"),
           py::arg("timeout_ms") = 1000,
           "Queues (name, msg) at the remote engine, after the transfers completed to it before.")
      .def("get_notifies", &PyEngine::GetNotifies, "Every queued notification (a list of NotifyDesc), without waiting.")
      .def("wait_notifies", &PyEngine::WaitNotifies, py::arg("timeout_ms"),
           "Waits up to timeout_ms for at least one notification, then takes them all.  Releases the GIL.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyEngine& e, py::args) { e.Finalize(); });
}

}  // namespace

PYBIND11_MODULE(_hixl, m) {
  m.doc() = "The native half of the hixl package: use `import hixl`.";
  g_buffer_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_buffer_spec));
  if (!g_buffer_type) throw py::error_already_set();
  g_guard_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_guard_spec));
  if (!g_guard_type) throw py::error_already_set();
  m.add_object("Buffer", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_buffer_type)));
  m.add_object("_BufferView", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_guard_type)));
  m.attr("__version__") = HIXL_VERSION;

  m.def("init", &Init,
        "Joins the world the environment describes (hixlrun, torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/"
        "MASTER_PORT, Open MPI, PMI or Slurm variables); a world of one without them.  Collective.");
  m.def("finalize", &Finalize, "Leaves the world: fences, waits for every rank, releases everything.  Collective.");
  m.def("is_initialized", [] { return S().world != nullptr; }, "True between init() and finalize().");
  m.def("rank", &Rank, "This process's rank.");
  m.def("world_size", &WorldSize, "The number of ranks.");
  m.def("alloc", &Alloc, py::arg("size"),
        "Symmetric memory: a hixl.Buffer of `size` bytes whose address is the same on every rank that makes the "
        "same alloc calls in the same order.  numpy/torch view it without a copy.");
  m.def("free", &Free, py::arg("buffer"),
        "Frees a block from alloc() (a hixl.Buffer, or its address).  Refused while views of it exist.");
  m.def("register_memory", &RegisterMemory, py::arg("addr"), py::arg("size") = py::none(),
        "Makes memory reachable by peers: an int address with a size, or an object (tensor, numpy array, buffer) "
        "whose size is the default.  The object is kept alive until deregister_memory.");
  m.def("deregister_memory", &DeregisterMemory, py::arg("addr"),
        "Drops one registration of the region starting at addr (an int or the registered object).");
  m.def("put", &Put, py::arg("dst_rank"), py::arg("src_addr"), py::arg("dst_addr"), py::arg("size") = py::none(),
        "Starts writing `size` bytes from local src_addr into dst_rank's registered memory at dst_addr.  Complete "
        "after fence() or barrier().");
  m.def("get", &Get, py::arg("src_rank"), py::arg("src_addr"), py::arg("dst_addr"), py::arg("size") = py::none(),
        "Starts reading `size` bytes from src_rank's registered memory at src_addr into local dst_addr.  Complete "
        "after fence() or barrier().");
  m.def("fence", &Fence, "Waits until every put/get this process started is complete.");
  m.def("barrier", &Barrier, "Collective: every rank has arrived, and every rank's transfers are complete.");
  m.def("allgather", &Allgather, py::arg("value"),
        "Collective: every rank's int (-> list of ints) or bytes-like object (-> list of bytes), in rank order.");
  m.def("put_signal", &PutSignal, py::arg("dst_rank"), py::arg("src_addr"), py::arg("dst_addr"),
        py::arg("size") = py::none(), py::arg("sig_addr") = py::none(), py::arg("value") = py::none(),
        py::arg("op") = HIXL_SIGNAL_SET,
        "Writes `size` bytes from local src_addr into dst_rank's memory at dst_addr, then updates the 64-bit signal "
        "word at sig_addr on dst_rank (op SIGNAL_SET: set to value; SIGNAL_ADD: add value).  Whoever sees the new "
        "signal sees the data.  sig_addr: an int, or symmetric memory.  The source is kept until fence().");
  m.def("wait_until", &WaitUntil, py::arg("sig_addr"), py::arg("cmp"), py::arg("value"),
        py::arg("timeout_ms") = -1,
        "Waits until the local 64-bit word at sig_addr (an int address, or an object exposing memory: its first 8 "
        "bytes) compares true against value (cmp: CMP_EQ, CMP_NE, CMP_GT, CMP_GE, CMP_LT, CMP_LE): spins briefly, "
        "then sleeps.  HixlTimeoutError after timeout_ms (negative: HIXL_TIMEOUT_MS).  Releases the GIL.");
  m.def("test", &Test, py::arg("sig_addr"), py::arg("cmp"), py::arg("value"),
        "True if the local 64-bit word at sig_addr compares true against value now; never waits.");
  m.def(
      "atomic_fetch",
      [](int rank, py::handle addr) -> py::int_ {
        return py::int_(Atomic(AtomicKind::kFetch, "hixl.atomic_fetch", rank, addr, nullptr, nullptr));
      },
      py::arg("rank"), py::arg("addr"), "Reads the 64-bit word at addr on rank, atomically.");
  m.def(
      "atomic_set",
      [](int rank, py::handle addr, py::handle value) {
        (void)Atomic(AtomicKind::kSet, "hixl.atomic_set", rank, addr, value, nullptr);
      },
      py::arg("rank"), py::arg("addr"), py::arg("value"), "Sets the 64-bit word at addr on rank to value, atomically.");
  m.def(
      "atomic_add",
      [](int rank, py::handle addr, py::handle value) {
        (void)Atomic(AtomicKind::kAdd, "hixl.atomic_add", rank, addr, value, nullptr);
      },
      py::arg("rank"), py::arg("addr"), py::arg("value"),
      "Adds value (modulo 2**64: -1 subtracts one) to the 64-bit word at addr on rank, atomically.");
  m.def(
      "atomic_fetch_add",
      [](int rank, py::handle addr, py::handle value) -> py::int_ {
        return py::int_(Atomic(AtomicKind::kFetchAdd, "hixl.atomic_fetch_add", rank, addr, value, nullptr));
      },
      py::arg("rank"), py::arg("addr"), py::arg("value"), "As atomic_add; returns the value before.");
  m.def(
      "atomic_swap",
      [](int rank, py::handle addr, py::handle value) -> py::int_ {
        return py::int_(Atomic(AtomicKind::kSwap, "hixl.atomic_swap", rank, addr, value, nullptr));
      },
      py::arg("rank"), py::arg("addr"), py::arg("value"), "Sets the word to value; returns the value before.");
  m.def(
      "atomic_compare_swap",
      [](int rank, py::handle addr, py::handle expected, py::handle desired) -> py::int_ {
        return py::int_(Atomic(AtomicKind::kCompareSwap, "hixl.atomic_compare_swap", rank, addr, expected, desired));
      },
      py::arg("rank"), py::arg("addr"), py::arg("expected"), py::arg("desired"),
      "Sets the word to desired if it equals expected; returns the value seen (== expected: it swapped).");
  m.def("notify", &Notify, py::arg("dst_rank"), py::arg("data"),
        "Delivers data (bytes-like, up to NOTIFY_MAX_BYTES) to dst_rank's notification queue, after every put and "
        "get this process started (it fences first).  QueueFullError when the queue is full (nothing is dropped).");
  m.def("get_notifications", &GetNotifications,
        "Every queued notification, without waiting: a list of (src_rank, bytes), oldest first.");
  m.def("wait_notification", &WaitNotification, py::arg("timeout_ms") = -1,
        "Waits for one notification: (src_rank, bytes).  HixlTimeoutError after timeout_ms (negative: "
        "HIXL_TIMEOUT_MS).  Releases the GIL.");
  m.attr("SIGNAL_SET") = HIXL_SIGNAL_SET;
  m.attr("SIGNAL_ADD") = HIXL_SIGNAL_ADD;
  m.attr("CMP_EQ") = HIXL_CMP_EQ;
  m.attr("CMP_NE") = HIXL_CMP_NE;
  m.attr("CMP_GT") = HIXL_CMP_GT;
  m.attr("CMP_GE") = HIXL_CMP_GE;
  m.attr("CMP_LT") = HIXL_CMP_LT;
  m.attr("CMP_LE") = HIXL_CMP_LE;
  m.attr("NOTIFY_MAX_BYTES") = HIXL_NOTIFY_MAX_BYTES;
  m.def("strerror", [](int code) { return std::string(hixl_strerror(code)); }, py::arg("code"),
        "The name and meaning of an HIXL_ERR_* code.");
  m.def("_at_exit", [] { S().exiting = true; }, "Called at interpreter exit: blocks are no longer freed one by one.");
  m.def("_stats", &Stats, "Bookkeeping counters, for tests.");
  BindEngine(m);
}
