// The `host` reference device: device memory is aligned host memory.
//
// Streams run work inline by default. With TORCH_INFINI_HOST_ASYNC=1 every
// stream owns a worker thread that executes submitted work in order, so
// stream, event and non_blocking semantics are real and missing
// synchronization shows up in tests as it would on a GPU.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini::runtime {

class HostEvent;

class HostStream {
 public:
  HostStream(int device, bool async);
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  int device() const { return device_; }
  bool async() const { return async_; }

  // Runs `work` in stream order: now when inline, on the worker otherwise.
  template <typename F>
  void submit(F&& work) {
    if (!async_) {
      work();
      return;
    }
    enqueue({std::function<void()>(std::forward<F>(work)), nullptr, 0});
  }

  // Marks `event` complete at `version` in stream order. The stream counts
  // the record as done in the same step, so a stream query right after the
  // event completes agrees with it.
  void submitRecord(HostEvent* event, uint64_t version);

  void synchronize();  // rethrows the first error raised by queued work
  bool query();

 private:
  struct Item {
    std::function<void()> work;
    HostEvent* event;  // non-null: an event record (the stream holds a reference)
    uint64_t version;
  };
  void enqueue(Item item);
  void run();
  void rethrowPending();

  const int device_;
  const bool async_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<Item> queue_;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

class HostEvent {
 public:
  HostEvent(int device, bool timing) : device_(device), timing_(timing) {}
  int device() const { return device_; }
  // Queued records and waits hold a reference, so destroying an event never
  // waits for them and never leaves them dangling.
  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  bool timing() const { return timing_; }

  // Returns the version this record will complete.
  uint64_t beginRecord();
  void complete(uint64_t version);
  void waitFor(uint64_t version);
  uint64_t recordedVersion();
  bool query();
  void synchronize();
  // Completion time of the last completed record; false when never recorded
  // or not yet complete.
  bool completionTime(std::chrono::steady_clock::time_point* out);

 private:
  const int device_;
  const bool timing_;
  std::atomic<int> refs_{1};
  std::mutex mutex_;
  std::condition_variable done_;
  uint64_t recorded_ = 0;
  uint64_t completed_ = 0;
  std::chrono::steady_clock::time_point time_{};
};

class HostRuntime final : public DeviceRuntime {
 public:
  HostRuntime(int devices, bool async, size_t memory_limit);
  ~HostRuntime() override;

  // Reads TORCH_INFINI_HOST_DEVICES, TORCH_INFINI_HOST_ASYNC,
  // TORCH_INFINI_HOST_MEMORY_LIMIT.
  static std::unique_ptr<HostRuntime> fromEnvironment();

  bool async() const { return async_; }
  static HostStream& stream(StreamHandle handle) { return *static_cast<HostStream*>(handle); }

  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override;
  int deviceCount() const noexcept override { return devices_; }
  std::string deviceName(int device) const override;
  void setDevice(int device) override;
  void synchronizeDevice(int device) override;
  std::pair<size_t, size_t> memGetInfo(int device) override;

  void* malloc(int device, size_t bytes) override;
  void free(int device, void* ptr) override;
  void* mallocHost(size_t bytes) override;
  void freeHost(void* ptr) override;
  void memcpy(void* dst, const void* src, size_t bytes, MemcpyKind kind) override;
  void memcpyAsync(void* dst, const void* src, size_t bytes, MemcpyKind kind,
                   StreamHandle stream) override;
  void memsetAsync(void* dst, int value, size_t bytes, StreamHandle stream) override;

  StreamHandle createStream(int device) override;
  void destroyStream(StreamHandle stream) override;
  void synchronizeStream(StreamHandle stream) override;
  bool queryStream(StreamHandle stream) override;
  void streamWaitEvent(StreamHandle stream, EventHandle event) override;

  EventHandle createEvent(int device, bool enable_timing) override;
  void destroyEvent(EventHandle event) override;
  void recordEvent(EventHandle event, StreamHandle stream) override;
  bool queryEvent(EventHandle event) override;
  void synchronizeEvent(EventHandle event) override;
  float elapsedTime(EventHandle start, EventHandle end) override;

 private:
  void checkDevice(int device) const;
  void synchronizeAll();

  const std::string name_ = "host";
  const int devices_;
  const bool async_;
  const size_t memory_limit_;  // per device; 0 = host memory size
  std::mutex mutex_;
  std::vector<std::unique_ptr<HostStream>> streams_;
  std::mutex memory_mutex_;
  std::vector<size_t> used_;                 // bytes in use per device
  std::unordered_map<void*, size_t> sizes_;  // live device allocations
};

}  // namespace torch_infini::runtime
