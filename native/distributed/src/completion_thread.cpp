// Completes the "infini" backend's Work futures on a thread of their own,
// each callback under its caller's thread-local state (completion_thread.h).
#include "completion_thread.h"

#include <c10/util/thread_name.h>
#include <pthread.h>

#include <atomic>
#include <utility>

namespace torch_infini::distributed {
namespace {

std::atomic<CompletionThread*> g_instance{nullptr};
std::mutex g_create;

}  // namespace

CompletionThread& CompletionThread::get() {
  if (auto* existing = g_instance.load()) return *existing;
  std::lock_guard<std::mutex> lock(g_create);
  if (!g_instance.load()) {
    // A forked child has no copy of the thread: it starts its own.
    static const bool registered = [] {
      pthread_atfork(nullptr, nullptr, [] { g_instance.store(nullptr); });
      return true;
    }();
    (void)registered;
    g_instance.store(new CompletionThread());  // leaked: see the header
  }
  return *g_instance.load();
}

bool CompletionThread::started() { return g_instance.load() != nullptr; }

CompletionThread::CompletionThread() : thread_([this] { run(); }) { thread_.detach(); }

void CompletionThread::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

bool CompletionThread::drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_for(lock, timeout, [this] { return tasks_.empty() && !busy_; });
}

void CompletionThread::run() {
  c10::setThreadName("infini_c10d");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return !tasks_.empty(); });
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    task = nullptr;  // the callbacks it ran are freed here, still "busy"
    lock.lock();
    busy_ = false;
    if (tasks_.empty()) idle_.notify_all();
  }
}

}  // namespace torch_infini::distributed
