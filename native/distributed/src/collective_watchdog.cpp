// The device engines' watchdog (collective_watchdog.h).
#include "collective_watchdog.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace torch_infini::distributed {

CollectiveWatchdog::CollectiveWatchdog(std::chrono::milliseconds timeout, Abort abort)
    : timeout_(timeout), abort_(std::move(abort)) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::setTimeout(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout_ = timeout;
  }
  wake_.notify_all();
}

std::shared_ptr<CollectiveWatchdog::Collective> CollectiveWatchdog::begin(std::string what) {
  auto c = std::make_shared<Collective>();
  c->what = std::move(what);
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) C10_THROW_ERROR(DistBackendError, *aborted_);
  c->start = Clock::now();
  watched_.push_back(c);
  // (Not woken per call: it polls every tenth of the timeout.)
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  return c;
}

void CollectiveWatchdog::enqueued(const std::shared_ptr<Collective>& c, c10::Event event) {
  std::lock_guard<std::mutex> lock(mutex_);
  c->event.emplace(std::move(event));
}

void CollectiveWatchdog::finished(const std::shared_ptr<Collective>& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  watched_.erase(std::remove(watched_.begin(), watched_.end(), c), watched_.end());
}

void CollectiveWatchdog::abort(const std::string& reason) {
  std::unique_lock<std::mutex> lock(mutex_);
  abortLocked(lock, reason);
}

void CollectiveWatchdog::throwIfAborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) C10_THROW_ERROR(DistBackendError, *aborted_);
}

// Marks the engine aborted and runs the abort callback (without the lock:
// it may block while the library tears its communicator down, and calls
// returning from the library take the lock).
void CollectiveWatchdog::abortLocked(std::unique_lock<std::mutex>& lock,
                                     const std::string& reason) {
  if (aborted_) return;
  aborted_ = reason;
  watched_.clear();
  lock.unlock();
  abort_(reason);
  lock.lock();
}

void CollectiveWatchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    // Poll often enough to notice a timeout within a tenth of it (10 ms to 1 s).
    const auto period =
        std::clamp(timeout_ / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    wake_.wait_for(lock, period);
    if (stop_ || aborted_) continue;
    const auto now = Clock::now();
    std::shared_ptr<Collective> late;
    for (auto it = watched_.begin(); it != watched_.end();) {
      const auto& c = *it;
      if (c->event && c->event->query()) {
        it = watched_.erase(it);
        continue;
      }
      if (!late && now - c->start > timeout_) late = c;
      ++it;
    }
    if (late) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - late->start);
      abortLocked(lock,
                  c10::str("ProcessGroup backend 'infini': ", late->what, " timed out after ",
                           waited.count(), " ms (the process group's timeout is ", timeout_.count(),
                           " ms); its InfiniCCL communicator was torn down, and this "
                           "group's collectives on infini tensors now fail"));
    }
  }
}

}  // namespace torch_infini::distributed
