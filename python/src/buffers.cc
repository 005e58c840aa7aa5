// hixl.Buffer and its guard type (see buffers.h): the CPython type slots,
// freeing, and the rescue of blocks that views outlive finalize() with.
#include "buffers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <hixl/hixl.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "errors.h"
#include "state.h"

namespace hixl_py {

namespace {

struct GuardObject {
  PyObject_HEAD BufferObject* owner;
};

PyTypeObject* g_buffer_type = nullptr;
PyTypeObject* g_guard_type = nullptr;

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

}  // namespace

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
  S().known.Remove(reinterpret_cast<uintptr_t>(b->ptr), b->nbytes);
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Free(b->ptr);
  }
  if (!s.ok()) {
    b->state = kLive;
    S().buffers.insert(b);
    S().known.Add(reinterpret_cast<uintptr_t>(b->ptr), b->nbytes);
    Check(s);
  }
}

namespace {

void BufferDealloc(PyObject* self) {
  auto* b = reinterpret_cast<BufferObject*>(self);
  if (b->state == kLive) {
    // The last reference is gone (every view holds one): the block goes too.
    S().buffers.erase(b);
    S().known.Remove(reinterpret_cast<uintptr_t>(b->ptr), b->nbytes);
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
    {"free", BufferFree, METH_NOARGS, "Frees the block now (as hixl.free(buf)).  Refused while views of it exist."},
    {"numpy", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BufferNumpy)), METH_VARARGS | METH_KEYWORDS,
     "numpy(dtype=numpy.uint8): a numpy array over the block, without a copy."},
    {"tensor", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(BufferTensor)), METH_VARARGS | METH_KEYWORDS,
     "tensor(dtype=torch.uint8): a torch tensor over the block, without a copy."},
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
    "hixl._BufferView", sizeof(GuardObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, g_guard_slots,
};

}  // namespace

bool IsBuffer(py::handle h) { return PyObject_TypeCheck(h.ptr(), g_buffer_type); }
BufferObject* AsBuffer(py::handle h) { return reinterpret_cast<BufferObject*>(h.ptr()); }

PyObject* NewGuard(BufferObject* b) {
  GuardObject* g = PyObject_New(GuardObject, g_guard_type);
  if (!g) return nullptr;
  Py_INCREF(b);
  g->owner = b;
  ++b->views;
  return reinterpret_cast<PyObject*>(g);
}

BufferObject* NewBuffer(void* ptr, size_t nbytes) {
  BufferObject* b = PyObject_New(BufferObject, g_buffer_type);
  if (!b) return nullptr;
  b->ptr = ptr;
  b->nbytes = nbytes;
  b->views = 0;
  b->state = kLive;
  b->rescued = -1;
  S().buffers.insert(b);
  S().known.Add(reinterpret_cast<uintptr_t>(ptr), nbytes);
  return b;
}

void AddBufferTypes(py::module_& m) {
  g_buffer_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_buffer_spec));
  if (!g_buffer_type) throw py::error_already_set();
  g_guard_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_guard_spec));
  if (!g_guard_type) throw py::error_already_set();
  m.add_object("Buffer", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_buffer_type)));
  m.add_object("_BufferView", py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(g_guard_type)));
}

std::vector<Snapshot> ReleaseBlocks() {
  std::vector<BufferObject*> blocks(S().buffers.begin(), S().buffers.end());
  S().buffers.clear();
  for (BufferObject* b : blocks) {
    b->state = kReleased;
    S().known.Remove(reinterpret_cast<uintptr_t>(b->ptr), b->nbytes);
  }
  std::vector<Snapshot> saved;
  for (BufferObject* b : blocks) {
    if (b->views > 0) {
      saved.push_back({b, py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(b)),
                       std::string(static_cast<const char*>(b->ptr), b->nbytes)});
    }
  }
  return saved;
}

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

}  // namespace hixl_py
