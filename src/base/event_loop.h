// The process's one event loop (libuv), on one thread named "hixl-loop".
//
// The store server, the control servers of every front door and any other
// socket service of the process share it, so that however many worlds and
// engines a process has it serves their sockets from one thread, and no
// service can starve another by blocking: code run on the loop must never
// block (base/frame_server.h reads and writes as bytes come).
//
// The loop starts on the first Acquire() and stops (its thread joined)
// when the last holder releases it.  A child made by fork() gets a loop of
// its own on its first Acquire (the parent's thread does not exist there).
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"

struct uv_loop_s;

namespace hixl::ev {

class EventLoop {
 public:
  // The process's loop, started if nobody holds it.
  static Result<std::shared_ptr<EventLoop>> Acquire();
  ~EventLoop();  // stops the loop and joins its thread (detaches it when run on it)
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs fn on the loop thread soon.  Thread-safe; never blocks on the loop.
  void Post(std::function<void()> fn);
  // Runs fn on the loop thread and waits for it to return; runs it inline
  // when called on the loop thread.
  void Call(const std::function<void()>& fn);
  bool OnLoopThread() const;
  // The libuv loop, for handles (uv_poll_t, uv_timer_t) made and used on
  // the loop thread only.
  uv_loop_s* uv() const;

  struct State;

 private:
  explicit EventLoop(std::shared_ptr<State> s) : s_(std::move(s)) {}
  std::shared_ptr<State> s_;
};

}  // namespace hixl::ev
