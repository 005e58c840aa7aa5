// The world API of hixl._hixl over hixl::World: init/finalize, symmetric
// memory (alloc/free), registration, put/get, fence/barrier, allgather and broadcast.
// Transfers keep their local objects alive until the fence or barrier that
// completes them (state.h); the GIL is released around every call that may
// wait.
#include <hixl/hixl.h>
#include <hixl/hixl.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "addresses.h"
#include "bindings.h"
#include "buffers.h"
#include "coerce.h"
#include "errors.h"
#include "state.h"

namespace hixl_py {

namespace {

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
  std::vector<Snapshot> saved = ReleaseBlocks();
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w->Finalize();
  }
  const int viewed = static_cast<int>(saved.size());
  const int lost = Rescue(saved);
  S().pending.clear();
  S().registered.clear();
  for (const auto& [addr, sizes] : S().world_known) {
    for (size_t n : sizes) S().known.Remove(addr, n);
  }
  S().world_known.clear();
  if (viewed > 0) {
    std::string msg =
        lost == 0 ? fmt::format(
                        "hixl.finalize: {} block(s) from hixl.alloc still had views (numpy arrays, torch tensors, "
                        "memoryviews); they now hold a private copy of the block's last contents, which no peer "
                        "can reach",
                        viewed)
                  : fmt::format(
                        "hixl.finalize: {} block(s) from hixl.alloc still had views, and {} of them could not be "
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
  BufferObject* b = NewBuffer(r->value(), n);
  if (!b) {
    (void)w.Free(r->value());
    throw py::error_already_set();
  }
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
  // An int must be readable memory (peers may read it); it becomes known
  // memory (addresses.h) only if it is writable too.  Objects are both.
  CheckLocal(m, n, "hixl.register_memory: addr", /*writable=*/false);
  const bool known = m.sized || MappedWritable(m.addr, n);
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.RegisterMemory(reinterpret_cast<void*>(m.addr), n);
  }
  Check(s);
  if (!m.keep.empty()) S().registered[m.addr].push_back(std::move(m.keep));
  if (known && n > 0) {
    S().known.Add(m.addr, n);
    S().world_known[m.addr].push_back(n);
  }
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
  // Which of several registrations at `a` went is not said: forget the
  // largest, so that the known ranges never outgrow the registered ones.
  auto k = S().world_known.find(a);
  if (k != S().world_known.end()) {
    auto largest = std::max_element(k->second.begin(), k->second.end());
    S().known.Remove(a, *largest);
    k->second.erase(largest);
    if (k->second.empty()) S().world_known.erase(k);
  }
}

void Put(int dst_rank, py::handle src_addr, py::handle dst_addr, py::handle size) {
  hixl::World& w = WorldOrRaise("hixl.put");
  Mem local = ResolveLocal(src_addr, "hixl.put: src_addr", false);
  Mem remote = ResolveRemote(dst_addr, "hixl.put: dst_addr");
  size_t n = SizeFor("hixl.put", local, "src_addr", remote, "dst_addr", size);
  CheckLocal(local, n, "hixl.put: src_addr", /*writable=*/false);
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
  CheckLocal(local, n, "hixl.get: dst_addr", /*writable=*/true);
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

// broadcast(buf, root=0): the root's bytes of a writable bytes-like object
// (tensor, numpy array, bytearray) copied into buf at every rank, in place;
// every rank passes a buffer of the same size.
void Broadcast(py::handle buf, int root) {
  hixl::World& w = WorldOrRaise("hixl.broadcast");
  if (IsInt(buf)) {
    RaiseInvalid(
        "hixl.broadcast: buf must be an object that holds its memory (a tensor, a numpy array, a "
        "bytearray, a hixl.Buffer), not an address");
  }
  Mem m = ResolveLocal(buf, "hixl.broadcast: buf", true);
  hixl::Status s;
  {
    py::gil_scoped_release nogil;
    s = w.Broadcast(root, reinterpret_cast<void*>(m.addr), m.nbytes);
  }
  Check(s);
}

py::dict Stats() {
  py::dict d;
  d["pending_transfers"] = S().pending.size();
  size_t regs = 0;
  for (const auto& [addr, keeps] : S().registered) regs += keeps.size();
  d["registered_objects"] = regs;
  d["live_blocks"] = S().buffers.size();
  d["known_ranges"] = S().known.size();
  d["address_slow_checks"] = S().address_slow_checks;
  return d;
}

}  // namespace

void BindWorld(py::module_& m) {
  m.def("init", &Init,
        "Joins the world the environment describes (hixlrun, torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/"
        "MASTER_PORT, Open MPI, PMI or Slurm variables); a world of one without them.  Collective.");
  m.def("finalize", &Finalize, "Leaves the world: fences, waits for every rank, releases everything.  Collective.");
  m.def(
      "is_initialized", [] { return S().world != nullptr; }, "True between init() and finalize().");
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
  m.def("broadcast", &Broadcast, py::arg("buf"), py::arg("root") = 0,
        "Collective: root's bytes of buf (a writable bytes-like object: tensor, numpy array, bytearray) copied "
        "into buf at every rank; every rank passes the same root and a buffer of the same size.");
  m.def(
      "_at_exit", [] { S().exiting = true; }, "Called at interpreter exit: blocks are no longer freed one by one.");
  m.def("_stats", &Stats, "Bookkeeping counters, for tests.");
}

}  // namespace hixl_py
