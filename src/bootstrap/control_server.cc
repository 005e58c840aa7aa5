// ControlServer (bootstrap/control.h) on the process's event loop, through
// the framed-connection server of base/frame_server.h: a client that sends
// half a request, or nothing, or does not read its replies, holds up no
// other client, and costs at most one of a listener's capped connections.
//
// Request frame: [u8 type][i64 from][payload].
// Reply frame:   [i32 code][payload, or the error message when code != 0].
//
// Identity: a connection is bound to the `from` of its first request.  A
// later request on it that claims another, or a second live connection of
// the same listener that claims a `from` already bound, is dropped with a
// warning.  `from` -1 (anonymous: an engine's HELLO dial) may be on any
// number of connections.
//
// Deferred answers (ControlAnswer::Later): the connection is paused (the
// frame server hands over none of its frames), the work is queued for the
// server's workers, and its result is posted back to the loop, which sends
// it and resumes the connection.  A connection that closes first has its
// queued work dropped, and a result that comes after its close is dropped.
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "base/frame_server.h"
#include "base/log.h"
#include "bootstrap/control.h"

namespace hixl::bootstrap {

namespace {
constexpr size_t kRequestHeader = 1 + 8;
constexpr int64_t kAnonymous = -1;
using ConnId = net::FrameServer::ConnId;

struct Front;

// The server's threads for deferred work: at most kControlWorkers, started
// as work comes, kept until the server ends.  Thread-safe.
class Workers {
 public:
  struct Job {
    std::shared_ptr<Front> front;
    ConnId conn = 0;
    ControlAnswer::Work work;
  };
  Workers() = default;
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;
  ~Workers() { Stop(); }

  // Queues the job; an error when no thread could be started for it, or
  // the server is closing.
  Status Submit(Job job);
  // The connection closed: its job, if still queued, is dropped unrun.
  void Drop(const Front* front, ConnId conn);
  // The listener is going: its queued jobs are dropped unrun.
  void Cancel(const Front* front);
  // Cancel, then waits until none of the listener's jobs runs.
  void Retire(const Front* front);
  // Drops every queued job and joins the threads.
  void Stop();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or stop_
  std::condition_variable done_cv_;  // a job ended
  std::deque<Job> queue_;            // guarded by mu_, as is everything below
  std::map<const Front*, size_t> running_;
  size_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

std::string EncodeReply(const Result<std::string>& r) {
  net::Writer reply;
  if (r.ok()) {
    reply.Put<int32_t>(0).str().append(r.value());
  } else {
    reply.Put<int32_t>(r.status().raw_code()).str().append(r.status().message());
  }
  return std::move(reply.str());
}

// One listener's state; on the loop thread only, but for `closed`.
struct Front : std::enable_shared_from_this<Front> {
  ControlHandler handler;
  net::FrameServer* fs = nullptr;
  ev::EventLoop* loop = nullptr;
  Workers* workers = nullptr;
  // RemoveListener began: no deferred answer is sent any more (the frame
  // server may be gone when one arrives).
  std::atomic<bool> closed{false};
  std::map<ConnId, int64_t> from_of;  // bound connections
  std::map<int64_t, ConnId> owner;    // who is bound to a `from` (not -1)
  std::set<ConnId> waiting;           // paused until their deferred answer

  void OnFrame(ConnId id, std::string_view p) {
    if (p.size() < kRequestHeader) {
      return fs->Drop(id, fmt::format("a request of {} bytes, shorter than its header", p.size()));
    }
    const uint8_t type = static_cast<uint8_t>(p[0]);
    int64_t from = 0;
    std::memcpy(&from, p.data() + 1, 8);
    auto bound = from_of.find(id);
    if (bound == from_of.end()) {
      if (from != kAnonymous) {
        auto o = owner.find(from);
        // A client that reconnects closed its old connection first: its
        // end may not have been seen yet.
        if (o != owner.end() && o->second != id && fs->Gone(o->second)) o = owner.find(from);
        if (o != owner.end() && o->second != id) {
          return fs->Drop(id, fmt::format("it claimed to be {} on a connection that is new, while another live "
                                          "connection ({}) is {}",
                                          from, fs->Peer(o->second), from));
        }
        owner[from] = id;
      }
      from_of.emplace(id, from);
      fs->Bind(id);
    } else if (bound->second != from) {
      return fs->Drop(id, fmt::format("it claimed to be {} on a connection that is {}", from, bound->second));
    }
    ControlAnswer answer = handler(from, type, p.substr(kRequestHeader));
    if (!answer.later()) {
      fs->Send(id, EncodeReply(answer.now()));
      return;
    }
    // Its next request waits for this answer; the others' do not.
    fs->Pause(id, true);
    waiting.insert(id);
    Status queued = workers->Submit({shared_from_this(), id, std::move(answer.work())});
    if (!queued.ok()) {
      waiting.erase(id);
      fs->Pause(id, false);
      fs->Send(id, EncodeReply(queued));
    }
  }

  // On a worker: hands the answer to the loop.
  void Deliver(ConnId id, Result<std::string> r) {
    loop->Post([self = shared_from_this(), id, r = std::move(r)] { self->Answered(id, r); });
  }

  // On the loop: sends a deferred answer, unless its connection closed or
  // the listener is going, and resumes the connection.
  void Answered(ConnId id, const Result<std::string>& r) {
    if (closed.load(std::memory_order_acquire) || waiting.erase(id) == 0) return;
    if (fs->Send(id, EncodeReply(r))) fs->Pause(id, false);
  }

  void OnClose(ConnId id) {
    if (waiting.erase(id) != 0) workers->Drop(this, id);
    auto it = from_of.find(id);
    if (it == from_of.end()) return;
    auto o = owner.find(it->second);
    if (o != owner.end() && o->second == id) owner.erase(o);
    from_of.erase(it);
  }
};

Status Workers::Submit(Job job) {
  std::lock_guard lock(mu_);
  if (stop_) return Err(Errc::kPeerFailed, "the control server is closing");
  queue_.push_back(std::move(job));
  if (queue_.size() > idle_ && threads_.size() < kControlWorkers) {
    try {
      threads_.emplace_back([this] { Run(); });
      ::pthread_setname_np(threads_.back().native_handle(), "hixl-deferred");
    } catch (const std::system_error& e) {
      if (threads_.empty()) {
        queue_.pop_back();
        return Err(Errc::kInternal, "cannot start a control worker thread: {}", e.what());
      }
      // The threads there are take it in turn.
    }
  }
  work_cv_.notify_one();
  return Status::Ok();
}

void Workers::Drop(const Front* front, ConnId conn) {
  Job gone;  // destroyed outside the lock
  std::lock_guard lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->front.get() == front && it->conn == conn) {
      gone = std::move(*it);
      queue_.erase(it);
      return;
    }
  }
}

void Workers::Cancel(const Front* front) {
  std::deque<Job> gone;  // destroyed outside the lock
  std::lock_guard lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->front.get() == front) {
      gone.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void Workers::Retire(const Front* front) {
  Cancel(front);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return running_.count(front) == 0; });
}

void Workers::Stop() {
  std::deque<Job> gone;
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    gone.swap(queue_);
    threads.swap(threads_);
  }
  work_cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

void Workers::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    ++idle_;
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    --idle_;
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    const Front* front = job.front.get();
    ++running_[front];
    lock.unlock();
    Result<std::string> r = Status(Errc::kInternal, "deferred control work did not run");
    try {
      r = job.work();
    } catch (const std::exception& e) {
      r = Err(Errc::kInternal, "deferred control work failed: {}", e.what());
    } catch (...) {
      r = Err(Errc::kInternal, "deferred control work failed (an exception of unknown type)");
    }
    job.work = nullptr;  // what it holds goes before Retire may return
    job.front->Deliver(job.conn, std::move(r));
    job.front.reset();
    lock.lock();
    if (--running_[front] == 0) running_.erase(front);
    done_cv_.notify_all();
  }
}
}  // namespace

struct ControlServer::Impl {
  std::unique_ptr<net::FrameServer> fs;
  Workers workers;  // after fs: its threads, which post to fs's loop, end first
  mutable std::mutex mu;
  uint16_t first_port = 0;                       // guarded by mu
  std::map<int, std::shared_ptr<Front>> fronts;  // by listener id; guarded by mu
};

Result<std::unique_ptr<ControlServer>> ControlServer::Create(const auth::MaybeSecret& secret) {
  net::FrameServerOptions o;
  o.name = "hixl control listener";
  o.secret = secret;
  o.kind = auth::Kind::kControl;
  // A peer may connect ahead of its first request (ControlClient::Connect),
  // so there is no limit on the wait for it; the cap makes room by closing
  // the oldest connection that never sent one.
  o.unbound_ms = 0;
  o.max_out = size_t{kMaxControlReply} + (size_t{1} << 20);
  HIXL_RETURN_IF_ERROR(o.ApplyEnv());
  auto impl = std::make_unique<Impl>();
  HIXL_ASSIGN_OR_RETURN(impl->fs, net::FrameServer::Create(std::move(o)));
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& host, ControlHandler handler,
                                                            uint16_t port, const auth::MaybeSecret& secret) {
  HIXL_ASSIGN_OR_RETURN(std::unique_ptr<ControlServer> s, Create(secret));
  HIXL_RETURN_IF_ERROR(s->AddListener(host, port, std::move(handler)).status());
  return s;
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() {
  std::vector<int> ids;
  {
    std::lock_guard lock(impl_->mu);
    for (const auto& [id, front] : impl_->fronts) ids.push_back(id);
  }
  for (int id : ids) RemoveListener(id);
  impl_->workers.Stop();
  // The frame server closes every other socket as it goes.
}

Result<ControlServer::Listener> ControlServer::AddListener(const std::string& host, uint16_t port,
                                                           ControlHandler handler) {
  HIXL_ASSIGN_OR_RETURN(net::Fd fd, net::Listen(host, port));
  auto front = std::make_shared<Front>();
  front->handler = std::move(handler);
  front->fs = impl_->fs.get();
  front->loop = &impl_->fs->loop();
  front->workers = &impl_->workers;
  net::FrameServer::Handlers h;
  h.max_frame = [](const uint8_t*) { return kMaxControlRequest; };
  h.on_frame = [front](net::FrameServer::ConnId id, std::string_view p) { front->OnFrame(id, p); };
  h.on_close = [front](net::FrameServer::ConnId id, const std::string&) { front->OnClose(id); };
  HIXL_ASSIGN_OR_RETURN(net::FrameServer::Listener l, impl_->fs->AddListener(std::move(fd), std::move(h)));
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->first_port == 0) impl_->first_port = l.port;
    impl_->fronts.emplace(l.id, front);
  }
  return Listener{l.id, l.port};
}

void ControlServer::RemoveListener(int id) {
  std::shared_ptr<Front> front;
  {
    std::lock_guard lock(impl_->mu);
    if (auto it = impl_->fronts.find(id); it != impl_->fronts.end()) {
      front = std::move(it->second);
      impl_->fronts.erase(it);
    }
  }
  // First no answer goes out (one that comes from now on is dropped) and
  // the work queued is dropped, then no handler runs and the connections
  // close, then no deferred work of theirs (a handler may have queued some
  // meanwhile) waits or runs.
  if (front) {
    front->closed.store(true, std::memory_order_release);
    impl_->workers.Cancel(front.get());
  }
  impl_->fs->RemoveListener(id);
  if (front) impl_->workers.Retire(front.get());
}

uint16_t ControlServer::port() const {
  std::lock_guard lock(impl_->mu);
  return impl_->first_port;
}

}  // namespace hixl::bootstrap
