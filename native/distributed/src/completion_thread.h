// The thread that completes the futures of the "infini" backend's Works.
//
// Callers chain work on those futures (DDP's reducer does, from the autograd
// thread): each callback carries a copy of its caller's thread-local state,
// and since PyTorch 2.13 that state can hold Python objects. Whichever thread
// completes a future runs those callbacks and frees them, so it may need the
// GIL. Completing on one thread of ours (instead of inside the engine's
// threads) lets the process drain it, with the GIL released, before the
// interpreter finalizes (drain(), called at exit); a thread that needs the
// GIL during finalization is made to exit and aborts the process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace torch_infini::distributed {

class CompletionThread {
 public:
  // The process's one instance; never destroyed (its thread idles to the end).
  static CompletionThread& get();
  static bool started();

  void post(std::function<void()> task);
  // Waits until every posted task has run, at most `timeout`; true if so.
  bool drain(std::chrono::milliseconds timeout);

 private:
  CompletionThread();
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;
  std::thread thread_;
};

}  // namespace torch_infini::distributed
