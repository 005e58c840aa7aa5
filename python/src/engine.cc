// hixl.Engine: the engine API (include/hixl/engine.hpp) in Python style,
// with TransferOp, MemType, TransferStatus, TransferOpDesc, NotifyDesc and
// TransferReq.  Failures raise hixl.EngineError subclasses (hixl/errors.py)
// carrying the CANN-compatible status number and the library's explanation.
// The local objects of a transfer are kept alive until its final status,
// registered objects until deregister_mem; the GIL is released around every
// engine call.
#include <pybind11/stl.h>
#include <hixl/engine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "addresses.h"
#include "bindings.h"
#include "coerce.h"
#include "errors.h"
#include "state.h"

namespace hixl_py {

namespace {

// Runs an engine call without the GIL; raises on failure.  The message and
// the precise code are read on the same thread, right after the call.
template <typename F>
void EngineCall(F&& f) {
  hixl::EngineStatus st;
  std::string why;
  int code = HIXL_SUCCESS;
  {
    py::gil_scoped_release nogil;
    st = f();
    if (st != hixl::SUCCESS) {
      why = hixl::Engine::LastError();
      code = hixl::Engine::LastErrorCode();
    }
  }
  if (st != hixl::SUCCESS) RaiseEngine(st, why, code);
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
    RaiseEngine(hixl::PARAM_INVALID,
                fmt::format("op must be hixl.READ, hixl.WRITE, 'read' or 'write', not {}", TypeName(op)));
  }
}

// Raises ParamInvalidError unless [addr, addr + len) is local memory the
// engine may read (and write, with `writable`); see addresses.h.
void CheckLocalAddr(uint64_t addr, size_t len, const std::string& what, bool writable) {
  std::string problem = LocalAddressProblem(addr, len, writable);
  if (!problem.empty()) RaiseEngine(hixl::PARAM_INVALID, fmt::format("{}: {}", what, problem));
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
    {
      py::gil_scoped_release nogil;
      engine_.Finalize();
    }
    ForgetKnown();
  }

  void Initialize(const std::string& local_engine, py::handle options) {
    std::map<std::string, std::string> opts;
    if (!options.is_none()) {
      if (!py::isinstance<py::dict>(options)) {
        RaiseEngine(hixl::PARAM_INVALID,
                    fmt::format("Engine.initialize: options must be a dict, not {}", TypeName(options)));
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
    ForgetKnown();
  }

  uint64_t RegisterMem(py::handle addr, py::handle size, py::handle mem_type) {
    hixl::MemType type = hixl::MEM_HOST;
    if (py::isinstance<py::str>(mem_type)) {
      std::string t = py::str(mem_type);
      if (t == "device")
        type = hixl::MEM_DEVICE;
      else if (t != "host")
        RaiseEngine(hixl::PARAM_INVALID,
                    fmt::format("Engine.register_mem: mem_type '{}' is not 'host' or 'device'", t));
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
    // Host memory at an int must be readable; it becomes known memory
    // (addresses.h) only if it is writable too.  Objects are both.
    bool known = false;
    if (type == hixl::MEM_HOST) {
      if (!m.sized) CheckLocalAddr(m.addr, n, "Engine.register_mem: addr", /*writable=*/false);
      known = n > 0 && (m.sized || MappedWritable(m.addr, n));
    }
    hixl::MemHandle h = nullptr;
    EngineCall([&] { return engine_.RegisterMem({m.addr, n}, type, h); });
    const auto handle = reinterpret_cast<uint64_t>(h);
    registered_[handle].push_back(std::move(m.keep));
    if (known) {
      S().known.Add(m.addr, n);
      known_[handle].push_back({m.addr, n});
    }
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
    auto k = known_.find(h);
    if (k != known_.end()) {
      S().known.Remove(k->second.back().first, k->second.back().second);
      k->second.pop_back();
      if (k->second.empty()) known_.erase(k);
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
        const auto desc = d.cast<hixl::TransferOpDesc>();
        CheckLocalAddr(desc.local_addr, desc.len, what + " local_addr", /*writable=*/op == hixl::READ);
        out.push_back(desc);
        continue;
      }
      if (!py::isinstance<py::tuple>(d) && !py::isinstance<py::list>(d)) {
        RaiseEngine(hixl::PARAM_INVALID, fmt::format("{}: expected (local, remote_addr[, size]) or a "
                                                     "hixl.TransferOpDesc, not {}",
                                                     what, TypeName(d)));
      }
      py::sequence t = py::reinterpret_borrow<py::sequence>(d);
      if (t.size() != 2 && t.size() != 3) {
        RaiseEngine(hixl::PARAM_INVALID,
                    fmt::format("{}: expected (local, remote_addr[, size]), got {} items", what, t.size()));
      }
      Mem m = ResolveLocal(t[0], what + " local", /*writable=*/op == hixl::READ);
      const uint64_t remote = ToAddress(t[1], what + " remote_addr");
      size_t n;
      if (t.size() == 3 && !t[2].is_none()) {
        n = ToSize(t[2], what);
        if (m.sized && n > m.nbytes) {
          RaiseEngine(hixl::PARAM_INVALID,
                      fmt::format("{}: size {} is larger than the local object ({} bytes)", what, n, m.nbytes));
        }
      } else {
        if (!m.sized) RaiseEngine(hixl::PARAM_INVALID, fmt::format("{}: size is required with an int address", what));
        n = m.nbytes;
      }
      if (!m.sized) CheckLocalAddr(m.addr, n, what + " local", /*writable=*/op == hixl::READ);
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
    hixl::EngineStatus ret = hixl::SUCCESS;
    std::string why;
    int code = HIXL_SUCCESS;
    {
      py::gil_scoped_release nogil;
      ret = engine_.GetTransferStatus(r.req, st);
      why = hixl::Engine::LastError();
      code = hixl::Engine::LastErrorCode();
    }
    // A transfer that ended FAILED or TIMEOUT is an answer, not a failure of
    // this call: the engine returns FAILED / TIMEOUT with status set, and
    // Python returns the status with req.error saying why.
    const bool ended_badly = (st == hixl::TransferStatus::FAILED && ret == hixl::FAILED) ||
                             (st == hixl::TransferStatus::TIMEOUT && ret == hixl::TIMEOUT);
    if (ret != hixl::SUCCESS && !ended_badly) RaiseEngine(ret, why, code);
    if (st != hixl::TransferStatus::WAITING) {
      r.done = true;
      r.status = st;
      if (st != hixl::TransferStatus::COMPLETED) r.error = why;
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
      RaiseEngine(hixl::PARAM_INVALID,
                  fmt::format("Engine.send_notify: msg must be str or bytes, not {}", TypeName(msg)));
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
  // Drops every range this engine added to the known ranges.
  void ForgetKnown() {
    for (const auto& [handle, ranges] : known_) {
      for (const auto& [addr, n] : ranges) S().known.Remove(addr, n);
    }
    known_.clear();
  }

  hixl::Engine engine_;
  std::map<uint64_t, std::vector<Keep>> registered_;  // handle -> one Keep per registration
  // handle -> the ranges added to S().known, one per registration
  std::map<uint64_t, std::vector<std::pair<uint64_t, size_t>>> known_;
};

}  // namespace

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
      .def(py::init([](std::string name, std::string msg) {
             return hixl::NotifyDesc{std::move(name), std::move(msg)};
           }),
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
      .def_property_readonly(
          "error", [](const PyTransferReq& r) { return r.error; }, "Why it ended FAILED or TIMEOUT ('' otherwise).")
      .def_property_readonly("done", [](const PyTransferReq& r) { return r.done; });
  py::class_<PyEngine>(m, "Engine",
                       "An engine: starts on its own, registers memory, connects to other engines by 'ip:port' and "
                       "moves batches of blocks into or out of their registered memory (see docs/engine.md).")
      .def(py::init<>())
      .def("initialize", &PyEngine::Initialize, py::arg("local_engine"), py::arg("options") = py::none(),
           "local_engine: 'ip', 'ip:port', '[ipv6]' or '[ipv6]:port' (a port > 0 listens for peers).  options: a "
           "dict (timeout_ms, transport, net_dev, shm_cma, shm_thp, notify_queue_depth, secret: the job secret as 64 "
           "hex "
           "digits, default HIXL_SECRET or HIXL_SECRET_FILE).")
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

}  // namespace hixl_py
