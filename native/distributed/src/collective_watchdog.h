// Bounds the time a device engine's collectives may take: the process
// group's timeout, as NCCL's watchdog does for ProcessGroupNCCL.
//
// A collective is watched from the moment the engine calls into its library
// (a launch can itself block, waiting for peers) until the event recorded
// after it on the stream completes. One that outlives the timeout makes the
// watchdog call the engine's abort (which tears its communicator down, so a
// call blocked in the library returns) once; from then on every watched and
// later collective fails with the reason.
#pragma once

#include <c10/core/Event.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace torch_infini::distributed {

class CollectiveWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // Called once, on the watchdog's thread (or abort()'s caller), with the reason.
  using Abort = std::function<void(const std::string& reason)>;

  struct Collective {
    std::string what;  // "all_reduce of 4 float elements on infini:0"
    Clock::time_point start;
    std::optional<c10::Event> event;  // completion on the stream; none while in the library
  };

  CollectiveWatchdog(std::chrono::milliseconds timeout, Abort abort);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  void setTimeout(std::chrono::milliseconds timeout);

  // The collective enters the library: watched from now. Raises the abort
  // reason (DistBackendError) where the engine was aborted.
  std::shared_ptr<Collective> begin(std::string what);
  // It left the library: done once `event` (recorded after it) completes.
  void enqueued(const std::shared_ptr<Collective>& c, c10::Event event);
  // It left the library without enqueuing anything (not supported, failed).
  void finished(const std::shared_ptr<Collective>& c);

  // Aborts now (ProcessGroup.abort(), shutdown()): the abort callback runs
  // with `reason` unless a timeout already ran it.
  void abort(const std::string& reason);
  // Raises DistBackendError with the abort reason where there is one.
  void throwIfAborted() const;

 private:
  void run();
  void abortLocked(std::unique_lock<std::mutex>& lock, const std::string& reason);

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::chrono::milliseconds timeout_;
  Abort abort_;
  std::vector<std::shared_ptr<Collective>> watched_;
  std::optional<std::string> aborted_;
  bool stop_ = false;
  std::thread thread_;  // started on the first begin()
};

}  // namespace torch_infini::distributed
