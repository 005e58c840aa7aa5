#include "base/event_loop.h"

#include <pthread.h>
#include <unistd.h>
#include <uv.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "base/log.h"

namespace hixl::ev {

// Everything the loop thread uses.  The thread holds it too, so that a
// loop released on its own thread (detached) still has its state.
struct EventLoop::State {
  uv_loop_t loop{};
  uv_async_t wake{};
  std::thread thread;
  std::thread::id thread_id;
  std::mutex mu;
  std::deque<std::function<void()>> queue;  // guarded by mu
  bool stop = false;                        // guarded by mu

  // On the loop thread: runs what was posted; on stop, closes the wake
  // handle, after which uv_run returns (the servers closed theirs before
  // they released the loop).
  void Drain() {
    while (true) {
      std::function<void()> fn;
      {
        std::lock_guard lock(mu);
        if (queue.empty()) {
          if (stop && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&wake))) {
            uv_close(reinterpret_cast<uv_handle_t*>(&wake), nullptr);
          }
          return;
        }
        fn = std::move(queue.front());
        queue.pop_front();
      }
      fn();
    }
  }
};

namespace {
std::mutex g_mu;
std::weak_ptr<EventLoop> g_loop;  // guarded by g_mu
pid_t g_pid = 0;                  // the process that made g_loop; guarded by g_mu
}  // namespace

Result<std::shared_ptr<EventLoop>> EventLoop::Acquire() {
  std::lock_guard lock(g_mu);
  if (g_pid == ::getpid()) {
    if (std::shared_ptr<EventLoop> l = g_loop.lock()) return l;
  } else if (g_pid != 0) {
    // A child of fork(): the parent's loop has no thread here.  Its state is
    // left alone (freeing it would run the parent's destructors here).
    new std::weak_ptr<EventLoop>(std::move(g_loop));
    g_loop.reset();
  }
  auto s = std::make_shared<State>();
  if (int rc = uv_loop_init(&s->loop); rc != 0) {
    return Err(Errc::kInternal, "cannot make the event loop: uv_loop_init: {}", uv_strerror(rc));
  }
  s->wake.data = s.get();
  if (int rc = uv_async_init(&s->loop, &s->wake, [](uv_async_t* a) { static_cast<State*>(a->data)->Drain(); });
      rc != 0) {
    uv_loop_close(&s->loop);
    return Err(Errc::kInternal, "cannot make the event loop: uv_async_init: {}", uv_strerror(rc));
  }
  try {
    s->thread = std::thread([s] {
      uv_run(&s->loop, UV_RUN_DEFAULT);
      if (uv_loop_close(&s->loop) != 0) HIXL_LOG_WARN("hixl event loop: a handle was left open at its end");
    });
  } catch (const std::system_error& e) {
    uv_close(reinterpret_cast<uv_handle_t*>(&s->wake), nullptr);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    return Err(Errc::kInternal, "cannot start the event loop's thread: {}", e.what());
  }
  s->thread_id = s->thread.get_id();
  // Named before anyone can look (tests count the process's loop threads).
  ::pthread_setname_np(s->thread.native_handle(), "hixl-loop");
  std::shared_ptr<EventLoop> l(new EventLoop(std::move(s)));
  g_loop = l;
  g_pid = ::getpid();
  return l;
}

EventLoop::~EventLoop() {
  {
    // The wake-up goes out under the lock that Drain reads stop under: a
    // wake already pending (a Post whose work an earlier turn ran) may run
    // Drain at any moment, and once Drain sees stop the loop closes its
    // pipe, into which uv_async_send then writes (libuv aborts there).
    std::lock_guard lock(s_->mu);
    s_->stop = true;
    uv_async_send(&s_->wake);
  }
  if (OnLoopThread()) {
    s_->thread.detach();  // it ends once this callback returns
  } else if (s_->thread.joinable()) {
    s_->thread.join();
  }
}

void EventLoop::Post(std::function<void()> fn) {
  {
    std::lock_guard lock(s_->mu);
    s_->queue.push_back(std::move(fn));
  }
  uv_async_send(&s_->wake);
}

void EventLoop::Call(const std::function<void()>& fn) {
  if (OnLoopThread()) return fn();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Post([&] {
    fn();
    std::lock_guard lock(mu);
    done = true;
    cv.notify_one();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
}

bool EventLoop::OnLoopThread() const { return std::this_thread::get_id() == s_->thread_id; }

uv_loop_s* EventLoop::uv() const { return &s_->loop; }

}  // namespace hixl::ev
