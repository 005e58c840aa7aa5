// Signals, remote atomics and notifications over hixl::World: put_signal,
// wait_until/test on local 64-bit words, the atomic_* calls on a peer's
// words, and notify/get_notifications/wait_notification.  The GIL is
// released around every call that may wait.
#include <hixl/hixl.h>
#include <hixl/hixl.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "coerce.h"
#include "errors.h"
#include "state.h"

namespace hixl_py {

namespace {

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
  CheckLocal(local, n, "hixl.put_signal: src_addr", /*writable=*/false);
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
    RaiseInvalid(
        fmt::format("hixl.notify: data must be a bytes-like object (bytes, bytearray, memoryview, a numpy "
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

py::tuple NotificationTuple(const hixl::Notification& n) { return py::make_tuple(n.src_rank, py::bytes(n.data)); }

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

}  // namespace

void BindSignals(py::module_& m) {
  m.def("put_signal", &PutSignal, py::arg("dst_rank"), py::arg("src_addr"), py::arg("dst_addr"),
        py::arg("size") = py::none(), py::arg("sig_addr") = py::none(), py::arg("value") = py::none(),
        py::arg("op") = HIXL_SIGNAL_SET,
        "Writes `size` bytes from local src_addr into dst_rank's memory at dst_addr, then updates the 64-bit signal "
        "word at sig_addr on dst_rank (op SIGNAL_SET: set to value; SIGNAL_ADD: add value).  Whoever sees the new "
        "signal sees the data.  sig_addr: an int, or symmetric memory.  The source is kept until fence().");
  m.def("wait_until", &WaitUntil, py::arg("sig_addr"), py::arg("cmp"), py::arg("value"), py::arg("timeout_ms") = -1,
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
        "get this process started to dst_rank (it fences them first).  QueueFullError when the queue is full "
        "(nothing is dropped).");
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
}

}  // namespace hixl_py
