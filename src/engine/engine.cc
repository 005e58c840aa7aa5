// The engine's public methods: each runs under the life lock, calls the
// implementation and turns its Status into an EngineStatus (the CANN
// numbers, by the one table: engine/engine_status.h) and the calling
// thread's LastError() / LastErrorCode().  Codes travel as hixl::Errc up to
// here; nothing is recovered from a message.
#include <hixl/engine.hpp>

#include <string>

#include "engine/engine_impl.h"
#include "engine/engine_status.h"

namespace hixl {

namespace {

thread_local std::string t_last_error;
thread_local int t_last_code = HIXL_SUCCESS;

// Sets the calling thread's last error and returns `code`.
EngineStatus Fail(EngineStatus code, const Status& s) {
  t_last_error = s.message();
  t_last_code = s.raw_code();
  return code;
}
EngineStatus Fail(const Status& s) { return Fail(engine::StatusFor(s.code()), s); }
EngineStatus Done() {
  t_last_error.clear();
  t_last_code = HIXL_SUCCESS;
  return SUCCESS;
}

}  // namespace

const char* EngineStatusName(EngineStatus status) {
  switch (status) {
#define HIXL_ENGINE_NAME_CASE_(name, value, desc, py) \
  case value: return #name;
    HIXL_ENGINE_STATUSES(HIXL_ENGINE_NAME_CASE_)
#undef HIXL_ENGINE_NAME_CASE_
    default: return "UNKNOWN";
  }
}

// ------------------------------------------------------------------ Engine

Engine::Engine() : impl_(std::make_shared<Impl>()) {}

Engine::~Engine() { Finalize(); }

const char* Engine::LastError() { return t_last_error.c_str(); }
int Engine::LastErrorCode() { return t_last_code; }

#define HIXL_ENGINE_LIVE(api)                                                                                     \
  std::shared_lock life(impl_->life_mu);                                                                          \
  if (impl_->state != Impl::State::kLive) {                                                                       \
    return Fail(Err(Errc::kNotInitialized, "{} called {}", api,                                                   \
                    impl_->state == Impl::State::kNew ? "before Engine::Initialize" : "after Engine::Finalize")); \
  }

EngineStatus Engine::Initialize(const std::string& local_engine, const std::map<std::string, std::string>& options) {
  // The lock is on this Impl: a failed start replaces impl_, and `held`
  // keeps the old one (with the mutex the lock releases) alive until then.
  const std::shared_ptr<Impl> held = impl_;
  std::unique_lock life(held->life_mu);
  if (impl_->state != Impl::State::kNew) {
    return Fail(Status(Errc::kAlreadyInitialized, impl_->state == Impl::State::kLive
                                                      ? "Engine::Initialize called twice"
                                                      : "Engine::Initialize called after Engine::Finalize; use a "
                                                        "new Engine"));
  }
  Status s = impl_->Start(local_engine, options);
  if (!s.ok()) {
    impl_->Teardown();
    impl_ = std::make_shared<Impl>();  // a clean one: Initialize may be tried again
    return Fail(s);
  }
  impl_->state = Impl::State::kLive;
  return Done();
}

void Engine::Finalize() {
  // Wake a WaitNotifies first: it holds the life lock shared.
  impl_->notifies.Close();
  std::unique_lock life(impl_->life_mu);
  if (impl_->state != Impl::State::kLive) {
    if (impl_->state == Impl::State::kNew) impl_->notifies.Reopen();
    return;
  }
  impl_->state = Impl::State::kFinalized;
  impl_->Teardown();
}

EngineStatus Engine::RegisterMem(const MemDesc& mem, MemType type, MemHandle& handle) {
  HIXL_ENGINE_LIVE("Engine::RegisterMem");
  Status s = impl_->Register(mem, type);
  if (!s.ok()) return Fail(s);
  handle = reinterpret_cast<MemHandle>(mem.addr);
  return Done();
}

EngineStatus Engine::DeregisterMem(MemHandle handle) {
  HIXL_ENGINE_LIVE("Engine::DeregisterMem");
  Status s = impl_->Deregister(handle);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::Connect(const std::string& remote_engine, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::Connect");
  Status s = impl_->Connect(remote_engine, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::Disconnect(const std::string& remote_engine, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::Disconnect");
  Status s = impl_->Disconnect(remote_engine, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::TransferSync(const std::string& remote_engine, TransferOp operation,
                                  const std::vector<TransferOpDesc>& op_descs, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::TransferSync");
  Status s = impl_->TransferSync(remote_engine, operation, op_descs, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::TransferAsync(const std::string& remote_engine, TransferOp operation,
                                   const std::vector<TransferOpDesc>& op_descs, const TransferArgs& optional_args,
                                   TransferReq& req) {
  HIXL_ENGINE_LIVE("Engine::TransferAsync");
  auto r = impl_->TransferAsync(remote_engine, operation, op_descs, optional_args);
  if (!r.ok()) return Fail(r.status());
  req = reinterpret_cast<TransferReq>(r.value());
  return Done();
}

EngineStatus Engine::GetTransferStatus(const TransferReq& req, TransferStatus& status) {
  HIXL_ENGINE_LIVE("Engine::GetTransferStatus");
  TransferStatus st = TransferStatus::WAITING;
  Status s = impl_->GetStatus(req, &st);
  if (s.ok()) {
    status = st;
    return Done();
  }
  // The transfer's own end, FAILED or TIMEOUT: reported as that status, with
  // its cause (code and words) in LastError() / LastErrorCode().
  if (st == TransferStatus::FAILED || st == TransferStatus::TIMEOUT) {
    status = st;
    return Fail(st == TransferStatus::FAILED ? FAILED : TIMEOUT, s);
  }
  return Fail(s);  // the call itself failed (an unknown req): status unchanged
}

EngineStatus Engine::SendNotify(const std::string& remote_engine, const NotifyDesc& notify, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::SendNotify");
  Status s = impl_->SendNotify(remote_engine, notify, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::GetNotifies(std::vector<NotifyDesc>& notifies) {
  HIXL_ENGINE_LIVE("Engine::GetNotifies");
  Status s = impl_->TakeNotifies(&notifies, false, 0);
  return s.ok() ? Done() : Fail(s);
}

EngineStatus Engine::WaitNotifies(std::vector<NotifyDesc>& notifies, int32_t timeout_ms) {
  HIXL_ENGINE_LIVE("Engine::WaitNotifies");
  Status s = impl_->TakeNotifies(&notifies, true, timeout_ms);
  return s.ok() ? Done() : Fail(s);
}

}  // namespace hixl
