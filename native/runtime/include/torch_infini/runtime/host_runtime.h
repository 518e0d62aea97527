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
class DiscreteMemory;

// One record of an event: done once its stream has run everything queued
// before it. A wait holds the record that was the event's latest when the
// wait was queued, as cudaStreamWaitEvent does, so recording the event again
// (on any stream) never releases an earlier wait.
struct HostEventRecord {
  bool done = false;                             // guarded by the event's mutex
  std::chrono::steady_clock::time_point time{};  // completion time (timing events)
};
using HostEventRecordPtr = std::shared_ptr<HostEventRecord>;

// Errors: work queued on an async stream is validated by its caller before
// it is submitted, so it is not expected to fail. If it does anyway, the
// first error is kept and raised once, by the next synchronize() or query()
// of that stream (also through a device synchronize); later work on the
// stream still runs. Releasing memory and destroying streams wait for queued
// work without raising, so an error never interrupts a release half-way (a
// destroyed stream's unreported error becomes a warning).
class HostStream {
 public:
  // An async stream queues at most `queue_depth` items; submitting more
  // waits for room, as a device's launch queue does.
  HostStream(int device, bool async, size_t queue_depth = kDefaultQueueDepth);
  static constexpr size_t kDefaultQueueDepth = 1024;
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
    enqueue({std::function<void()>(std::forward<F>(work)), nullptr, nullptr});
  }

  // Marks `record` of `event` done in stream order. The stream counts the
  // record as done in the same step, so a stream query right after the event
  // completes agrees with it.
  void submitRecord(HostEvent* event, HostEventRecordPtr record);

  void synchronize();              // waits, then raises the pending error (if any)
  void drain();                    // waits for queued work; raises nothing
  bool query();                    // raises the pending error (if any)
  std::exception_ptr takeError();  // the pending error (null if none), cleared

 private:
  struct Item {
    std::function<void()> work;
    HostEvent* event;  // non-null: an event record (the stream holds a reference)
    HostEventRecordPtr record;
  };
  void enqueue(Item item);
  void run();
  void rethrowPending();
  void waitIdle(std::unique_lock<std::mutex>& lock);

  const int device_;
  const bool async_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::condition_variable room_;  // the queue fell below its depth
  const size_t queue_depth_;
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

  // A new record, from now on the event's latest.
  HostEventRecordPtr beginRecord();
  void complete(const HostEventRecordPtr& record);
  void waitFor(const HostEventRecordPtr& record);
  // The latest record; null when never recorded.
  HostEventRecordPtr latest();
  // Whether the latest record is done (true when never recorded).
  bool query();
  void synchronize();
  // Completion time of the latest record; false when never recorded or not
  // yet complete.
  bool completionTime(std::chrono::steady_clock::time_point* out);

 private:
  const int device_;
  const bool timing_;
  std::atomic<int> refs_{1};
  std::mutex mutex_;
  std::condition_variable done_;
  HostEventRecordPtr latest_;
};

class HostRuntime final : public DeviceRuntime {
 public:
  HostRuntime(int devices, bool async, size_t memory_limit,
              size_t queue_depth = HostStream::kDefaultQueueDepth, bool discrete = false);
  ~HostRuntime() override;

  // TORCH_INFINI_HOST_DEVICES, TORCH_INFINI_HOST_ASYNC,
  // TORCH_INFINI_HOST_MEMORY_LIMIT, TORCH_INFINI_HOST_QUEUE_DEPTH,
  // TORCH_INFINI_HOST_MEMORY, parsed; a bad value raises naming its
  // variable. Creates nothing: `import torch_infini` checks them before it
  // registers anything.
  struct Settings {
    int devices = 1;
    bool async = false;
    size_t memory_limit = 0;
    size_t queue_depth = HostStream::kDefaultQueueDepth;
    // TORCH_INFINI_HOST_MEMORY=discrete: device memory the host cannot
    // touch (providers/host/discrete_memory.h); "shared" (default): device
    // memory is host memory.
    bool discrete = false;
  };
  static Settings settingsFromEnvironment();
  static std::unique_ptr<HostRuntime> fromEnvironment();

  bool async() const { return async_; }
  bool discrete() const { return discrete_memory_ != nullptr; }
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
  void launchHostFunction(StreamHandle stream, std::function<void()> work) override;

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

  // How many times a caller waited for queued work: device, stream and
  // event synchronizations (tests count them: a compiled graph queues its
  // kernels and returns).
  uint64_t synchronizations() const { return synchronizations_.load(std::memory_order_relaxed); }
  // Bytes copied host to device and device to host (memcpy and memcpyAsync
  // by their kind): what crossed the host boundary, as a bus would carry it
  // on an accelerator (benchmarks report it per training and decode step).
  uint64_t hostToDeviceBytes() const { return to_device_bytes_.load(std::memory_order_relaxed); }
  uint64_t deviceToHostBytes() const { return to_host_bytes_.load(std::memory_order_relaxed); }

 private:
  void checkDevice(int device) const;
  void drainDevice(int device);
  void drainAll();

  const std::string name_ = "host";
  const int devices_;
  const bool async_;
  const size_t memory_limit_;  // per device; 0 = host memory size
  const size_t queue_depth_;   // per async stream
  std::mutex mutex_;
  std::vector<std::unique_ptr<HostStream>> streams_;
  std::mutex memory_mutex_;
  std::vector<size_t> used_;                 // bytes in use per device
  std::unordered_map<void*, size_t> sizes_;  // live device allocations
  std::atomic<uint64_t> synchronizations_{0};
  std::atomic<uint64_t> to_device_bytes_{0};
  std::atomic<uint64_t> to_host_bytes_{0};
  void countTransfer(MemcpyKind kind, size_t bytes);
  std::unique_ptr<DiscreteMemory> discrete_memory_;  // discrete mode only
};

// The device addresses of discrete mode: [begin, begin + size), whose
// kernel view lies `size` bytes above (providers/host/discrete_memory.h);
// both 0 in shared mode. Inline below: the host provider asks per tensor of
// every kernel.
extern std::atomic<uintptr_t> discrete_device_begin;
extern std::atomic<uintptr_t> discrete_device_size;

// Where the host kernel provider and the copy engine reach the bytes of a
// device address: in discrete mode its kernel view (the same bytes at an
// address the host may touch); any other address, and every address in
// shared mode, as it is.
inline bool isDiscreteDeviceAddress(const void* address) noexcept {
  return reinterpret_cast<uintptr_t>(address) -
             discrete_device_begin.load(std::memory_order_relaxed) <
         discrete_device_size.load(std::memory_order_relaxed);
}

inline void* hostKernelView(const void* address) noexcept {
  if (!isDiscreteDeviceAddress(address)) return const_cast<void*>(address);
  return static_cast<char*>(const_cast<void*>(address)) +
         discrete_device_size.load(std::memory_order_relaxed);
}

}  // namespace torch_infini::runtime
