// Conformance of the ucx transport against a peer that breaks the rules:
// forged put_signal messages write nothing, and forged atomic requests (and
// replies) change nothing, while good messages after them still work.  The
// Forger, a UCX worker of the test's own, sends them.  Built only with UCX;
// the TEST_Ps run (and are skipped but for ucx) over every configuration.
#ifdef HIXL_TEST_HAVE_UCX
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/socket.h"
#include "transport/ucx/atomics.h"
#include "transport/ucx/signals.h"
#include "transport/ucx/worker.h"
#include "transport_fixture.h"

namespace hixl::transport::test {
namespace {

// A peer that breaks the rules: another worker, with an endpoint to a
// transport's worker, that sends hixl's messages as it likes and collects
// the atomic replies it gets.  Its worker is progressed by the test only.
class Forger {
 public:
  // To the transport whose LocalAddress() is `address`.
  explicit Forger(const std::string& address) {
    auto w = ucx::Worker::Create(ucx::UcxOptions{});
    EXPECT_TRUE(w.ok()) << w.status().message();
    if (!w.ok()) return;
    w_ = std::move(w).value();
    net::Reader r(address);
    std::string magic, host, worker_address;
    EXPECT_TRUE(r.GetBytes(&magic) && r.GetBytes(&host) && r.GetBytes(&worker_address));
    std::lock_guard lock(w_->mu);
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = ucx::kAtomicReplyId;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = [](void* arg, const void* header, size_t header_length, void*, size_t, const ucp_am_recv_param_t*) {
      ucx::AtomicReplyHeader h;
      if (header_length != sizeof(h)) return UCS_OK;
      std::memcpy(&h, header, sizeof(h));
      static_cast<Forger*>(arg)->replies.push_back(h);
      return UCS_OK;
    };
    hp.arg = this;
    EXPECT_EQ(ucp_worker_set_am_recv_handler(w_->worker, &hp), UCS_OK);
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
    EXPECT_EQ(ucp_ep_create(w_->worker, &ep_params, &ep_), UCS_OK);
  }
  ~Forger() {
    if (!ep_) return;
    std::lock_guard lock(w_->mu);
    ucp_request_param_t close{};
    close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close.flags = UCP_EP_CLOSE_FLAG_FORCE;
    (void)Wait(ucp_ep_close_nbx(ep_, &close));
  }
  Forger(const Forger&) = delete;
  Forger& operator=(const Forger&) = delete;

  bool ok() const { return ep_ != nullptr; }

  // Sends message `id`, eager; with `reply`, the target may answer.
  void Send(unsigned id, const void* header, size_t header_len, const void* data, size_t n, bool reply = false) {
    std::lock_guard lock(w_->mu);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
    EXPECT_EQ(Wait(ucp_am_send_nbx(ep_, id, header, header_len, data, n, &param)), UCS_OK);
  }

  // Progresses the worker until done() holds (20 s at most); returns done().
  template <typename Done>
  bool ProgressUntil(Done done) {
    std::lock_guard lock(w_->mu);
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
         !done() && std::chrono::steady_clock::now() < until;) {
      ucp_worker_progress(w_->worker);
    }
    return done();
  }

  std::vector<ucx::AtomicReplyHeader> replies;  // as they came

 private:
  ucs_status_t Wait(ucs_status_ptr_t req) {
    if (!UCS_PTR_IS_PTR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(w_->worker);
    ucp_request_free(req);
    return st;
  }

  std::shared_ptr<ucx::Worker> w_;
  ucp_ep_h ep_ = nullptr;
};

// Signal messages are untrusted input: forged ones (malformed headers,
// unknown operations, words or data outside the registered regions, ranges
// that wrap around) write nothing; a good one after them still works.
TEST_P(TransportTest, ForgedSignalMessagesWriteNothing) {
  if (GetParam().transport != "ucx") GTEST_SKIP() << "sends ucx's signal messages";
  Memory m(Backing::kPrivate, 1 << 16, 15);
  std::memset(m.data(), 0x11, m.len());
  ASSERT_TRUE(t_[1]->RegisterRegion(m.region()).ok());
  Forger forger(t_[1]->LocalAddress());
  ASSERT_TRUE(forger.ok());
  const uint64_t base = m.addr(), end = m.addr() + m.len();
  std::vector<uint8_t> payload(64, 0x77);
  using H = ucx::PutSignalHeader;
  const uint64_t set = static_cast<uint64_t>(AtomicOp::kSet);
  const std::vector<std::pair<H, size_t>> forged = {
      {H{.dst = base, .sig = end, .value = 1, .op = set}, 8},                // word just past the region
      {H{.dst = base, .sig = base + 1, .value = 1, .op = set}, 8},           // word not aligned
      {H{.dst = end - 4, .sig = base, .value = 1, .op = set}, 8},            // data past the end
      {H{.dst = ~uint64_t{0} - 7, .sig = base, .value = 1, .op = set}, 16},  // data range wraps around
      {H{.dst = base, .sig = base, .value = 1, .op = 7}, 8},                 // unknown operation
      {H{.dst = base - 64, .sig = base, .value = 1, .op = set}, 64},         // data before the region
      {H{.dst = base, .sig = 0, .value = 1, .op = set}, 0},                  // word at address 0
  };
  for (const auto& [h, n] : forged) forger.Send(ucx::kPutSignalId, &h, sizeof(h), payload.data(), n);
  const uint64_t short_header = base;
  forger.Send(ucx::kPutSignalId, &short_header, sizeof(short_header), nullptr, 0);
  // The good one, last: messages are handled in order, so once its word is
  // set every forged one has been handled.
  const H good{.dst = base + 256, .sig = base + 128, .value = 0x600d, .op = set};
  forger.Send(ucx::kPutSignalId, &good, sizeof(good), payload.data(), 64);
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(m.data() + 128));
  ASSERT_TRUE(forger.ProgressUntil([&] { return word.load() == 0x600d; }));
  EXPECT_EQ(FirstDifference(m.data() + 256, payload.data(), 64), 64u);
  for (size_t i = 0; i < m.len(); ++i) {
    if ((i >= 128 && i < 136) || (i >= 256 && i < 320)) continue;
    ASSERT_EQ(m.data()[i], 0x11) << "a forged message wrote byte " << i;
  }
}

// Atomic requests are untrusted input too: one on a word outside the
// registered regions (past the end, before the start, at address 0), not
// aligned, or with an unknown operation is answered with an error and
// changes nothing; one that cannot be answered (no reply endpoint), or is
// malformed (a short header, a payload), is dropped; forged replies that
// name no call in flight are dropped.  A good request after them all gets
// the old value, and the transport's own atomics still work.
TEST_P(TransportTest, ForgedAtomicRequestsChangeNothing) {
  if (GetParam().transport != "ucx") GTEST_SKIP() << "sends ucx's atomic messages";
  ConnectBoth();
  Memory m(Backing::kPrivate, 1 << 16, 17);
  std::memset(m.data(), 0x11, m.len());
  // The word the good request changes, in the transport's handler thread
  // (after a message ThreadSanitizer cannot see): atomic accesses here too.
  std::atomic_ref<uint64_t> target(*reinterpret_cast<uint64_t*>(m.data() + 64));
  target.store(0x1111111111111111u);
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  Forger forger(t_[1]->LocalAddress());
  ASSERT_TRUE(forger.ok());
  const uint64_t base = m.addr(), end = m.addr() + m.len();
  using H = ucx::AtomicHeader;
  using S = ucx::AtomicStatus;
  const uint64_t add = static_cast<uint64_t>(AtomicOp::kAdd);
  const std::vector<std::pair<H, S>> refused = {
      {H{.token = 1, .addr = end, .operand = 1, .compare = 0, .op = add}, S::kNotRegistered},       // just past the end
      {H{.token = 2, .addr = base - 8, .operand = 1, .compare = 0, .op = add}, S::kNotRegistered},  // just before
      {H{.token = 3, .addr = 0, .operand = 1, .compare = 0, .op = add}, S::kNotRegistered},         // address 0
      {H{.token = 4, .addr = base + 4, .operand = 1, .compare = 0, .op = add}, S::kMalformed},      // not aligned
      {H{.token = 5, .addr = base, .operand = 1, .compare = 0, .op = 4}, S::kMalformed},            // unknown operation
      {H{.token = 6, .addr = ~uint64_t{0} - 7, .operand = 1, .compare = 0, .op = add}, S::kNotRegistered},  // the top
  };
  for (const auto& [h, st] : refused) forger.Send(ucx::kAtomicId, &h, sizeof(h), nullptr, 0, /*reply=*/true);
  const H no_reply{.token = 7, .addr = base, .operand = 1, .compare = 0, .op = add};
  forger.Send(ucx::kAtomicId, &no_reply, sizeof(no_reply), nullptr, 0);  // no reply endpoint: dropped
  std::vector<uint8_t> payload(16, 0x77);
  forger.Send(ucx::kAtomicId, &no_reply, sizeof(no_reply), payload.data(), payload.size(), true);  // a payload
  forger.Send(ucx::kAtomicId, &base, sizeof(base), nullptr, 0, true);                              // a short header
  // Replies nobody asked for, to the transport itself.
  const ucx::AtomicReplyHeader stray{.token = 1, .old = 0, .status = 0};
  for (uint64_t t = 0; t < 4; ++t) {
    ucx::AtomicReplyHeader r = stray;
    r.token = t;
    forger.Send(ucx::kAtomicReplyId, &r, sizeof(r), nullptr, 0);
  }
  forger.Send(ucx::kAtomicReplyId, &stray, sizeof(stray), payload.data(), payload.size());
  forger.Send(ucx::kAtomicReplyId, &base, sizeof(base), nullptr, 0);
  // The good one, last: messages are handled in order.
  const H good{.token = 8, .addr = base + 64, .operand = 5, .compare = 0, .op = add};
  forger.Send(ucx::kAtomicId, &good, sizeof(good), nullptr, 0, true);
  ASSERT_TRUE(forger.ProgressUntil([&] { return !forger.replies.empty() && forger.replies.back().token == 8; }));
  ASSERT_EQ(forger.replies.size(), refused.size() + 1);
  for (size_t i = 0; i < refused.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(forger.replies[i].token, refused[i].first.token);
    EXPECT_EQ(forger.replies[i].status, static_cast<uint64_t>(refused[i].second));
  }
  EXPECT_EQ(forger.replies.back().status, static_cast<uint64_t>(S::kOk));
  EXPECT_EQ(forger.replies.back().old, 0x1111111111111111u);
  const uint64_t word = 0x1111111111111111u + 5;
  EXPECT_EQ(target.load(), word);
  for (size_t i = 0; i < m.len(); ++i) {
    if (i >= 64 && i < 72) continue;
    ASSERT_EQ(m.data()[i], 0x11) << "a forged request wrote byte " << i;
  }
  uint64_t old = 0;
  Status s = t_[0]->Atomic(1, *key, AtomicOp::kFetch, base + 64, 0, 0, &old);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(old, word);
  key.reset();
  Unexpose(1, m);
}

}  // namespace
}  // namespace hixl::transport::test
#endif  // HIXL_TEST_HAVE_UCX
