// The engine's public methods: each runs under the life lock, calls the
// implementation and turns its Status into an EngineStatus (the CANN
// numbers) and the calling thread's LastError().
#include <hixl/engine.hpp>

#include <string>

#include "engine/engine_impl.h"

namespace hixl {

namespace {

thread_local std::string t_last_error;

EngineStatus FromErrc(Errc c) {
  switch (c) {
    case Errc::kOk: return SUCCESS;
    case Errc::kInvalidArg:
    case Errc::kNotRegistered:
    case Errc::kInvalidRank: return PARAM_INVALID;
    case Errc::kTimeout: return TIMEOUT;
    case Errc::kUnsupported: return UNSUPPORTED;
    case Errc::kNoMemory:
    case Errc::kQueueFull: return RESOURCE_EXHAUSTED;
    case Errc::kNotConnected: return NOT_CONNECTED;
    default: return FAILED;
  }
}

// Sets the calling thread's last error and returns the code.
EngineStatus Fail(EngineStatus code, std::string message) {
  t_last_error = std::move(message);
  return code;
}
EngineStatus Fail(const Status& s) { return Fail(FromErrc(s.code()), s.message()); }
EngineStatus Done() {
  t_last_error.clear();
  return SUCCESS;
}

}  // namespace

const char* EngineStatusName(EngineStatus status) {
  switch (status) {
    case SUCCESS: return "SUCCESS";
    case PARAM_INVALID: return "PARAM_INVALID";
    case TIMEOUT: return "TIMEOUT";
    case NOT_CONNECTED: return "NOT_CONNECTED";
    case ALREADY_CONNECTED: return "ALREADY_CONNECTED";
    case UNSUPPORTED: return "UNSUPPORTED";
    case RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case FAILED: return "FAILED";
    default: return "UNKNOWN";
  }
}

// ------------------------------------------------------------------ Engine

Engine::Engine() : impl_(std::make_shared<Impl>()) {}

Engine::~Engine() { Finalize(); }

const char* Engine::LastError() { return t_last_error.c_str(); }

#define HIXL_ENGINE_LIVE(api)                                                                          \
  std::shared_lock life(impl_->life_mu);                                                             \
  if (impl_->state != Impl::State::kLive) {                                                          \
    return Fail(FAILED, fmt::format("{} called {}", api,                                             \
                                    impl_->state == Impl::State::kNew ? "before Engine::Initialize"  \
                                                                      : "after Engine::Finalize")); \
  }

EngineStatus Engine::Initialize(const std::string& local_engine, const std::map<std::string, std::string>& options) {
  std::unique_lock life(impl_->life_mu);
  if (impl_->state != Impl::State::kNew) {
    return Fail(FAILED, impl_->state == Impl::State::kLive ? "Engine::Initialize called twice"
                                                           : "Engine::Initialize called after Engine::Finalize; use a "
                                                             "new Engine");
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
  if (s.code() == Errc::kAlreadyInitialized) return Fail(ALREADY_CONNECTED, s.message());
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
  Status s = impl_->GetStatus(req, &status);
  if (s.ok()) return Done();
  // The transfer's own failure: the call worked, the status says FAILED or
  // TIMEOUT, and LastError() says why.
  if (s.code() == Errc::kTransport || s.code() == Errc::kTimeout) {
    t_last_error = s.message();
    return SUCCESS;
  }
  return Fail(s);
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
