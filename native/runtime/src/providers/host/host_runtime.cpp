// The `host` reference device: devices, memory, inline or threaded streams
// and events on the CPU (torch_infini/runtime/host_runtime.h).
#include "torch_infini/runtime/host_runtime.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "providers/host/discrete_memory.h"
#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini::runtime {
namespace {

// Device allocations are aligned like CUDA's so vectorized kernels and
// sub-allocators see the same guarantees on every backend.
constexpr size_t kDeviceAlignment = 256;
constexpr size_t kHostAlignment = 64;

long envInt(const char* name, long fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  TORCH_CHECK(end != nullptr && *end == '\0' && parsed >= 0, name,
              " must be a non-negative integer, got '", value, "'");
  return parsed;
}

size_t physicalMemory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * page_size : 0;
}

void* alignedAlloc(size_t bytes, size_t alignment) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
}

HostEvent& event(EventHandle handle) { return *static_cast<HostEvent*>(handle); }

}  // namespace

// ---------------------------------------------------------------- HostStream

HostStream::HostStream(int device, bool async, size_t queue_depth)
    : device_(device), async_(async), queue_depth_(queue_depth) {
  TORCH_CHECK(queue_depth_ >= 1, "infini: a host stream's queue depth must be at least 1");
  if (async_) worker_ = std::thread([this] { run(); });
}

HostStream::~HostStream() {
  if (!async_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  room_.notify_all();
  worker_.join();
}

void HostStream::enqueue(Item item) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // A full queue makes the caller wait; never the worker itself (work
    // that queues more work on its own stream would wait for itself).
    if (queue_.size() >= queue_depth_ && std::this_thread::get_id() != worker_.get_id())
      room_.wait(lock, [this] { return queue_.size() < queue_depth_ || stopping_; });
    queue_.push_back(std::move(item));
    ++submitted_;
  }
  work_ready_.notify_one();
}

void HostStream::submitRecord(HostEvent* event, HostEventRecordPtr record) {
  if (!async_) {
    event->complete(record);
    return;
  }
  event->retain();
  enqueue({nullptr, event, std::move(record)});
}

void HostStream::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping with nothing left to do
    Item item = std::move(queue_.front());
    queue_.pop_front();
    // Submitters waiting on a full queue resume once it is half empty: in
    // batches, not one thread switch per item.
    if (queue_.size() == queue_depth_ / 2) room_.notify_all();
    lock.unlock();
    std::exception_ptr failure;
    if (item.work) {
      try {
        item.work();
      } catch (...) {
        failure = std::current_exception();
      }
      item.work = nullptr;  // release captures outside the lock
    }
    lock.lock();
    if (failure && !error_) error_ = failure;
    // Event completion and the stream's count move together under the
    // stream's lock (lock order: stream, then event).
    if (item.event) item.event->complete(item.record);
    ++completed_;
    work_done_.notify_all();
    if (item.event) {
      lock.unlock();
      item.record.reset();
      item.event->release();
      lock.lock();
    }
  }
}

void HostStream::rethrowPending() {
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
}

void HostStream::waitIdle(std::unique_lock<std::mutex>& lock) {
  const uint64_t target = submitted_;
  work_done_.wait(lock, [&] { return completed_ >= target; });
}

void HostStream::synchronize() {
  if (!async_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  waitIdle(lock);
  rethrowPending();
}

void HostStream::drain() {
  if (!async_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  waitIdle(lock);
}

std::exception_ptr HostStream::takeError() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(error_, nullptr);
}

bool HostStream::query() {
  if (!async_) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  rethrowPending();
  return completed_ == submitted_;
}

// ----------------------------------------------------------------- HostEvent

HostEventRecordPtr HostEvent::beginRecord() {
  auto record = std::make_shared<HostEventRecord>();
  std::lock_guard<std::mutex> lock(mutex_);
  latest_ = record;
  return record;
}

void HostEvent::complete(const HostEventRecordPtr& record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    record->done = true;
    if (timing_) record->time = std::chrono::steady_clock::now();
  }
  done_.notify_all();
}

void HostEvent::waitFor(const HostEventRecordPtr& record) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return record->done; });
}

HostEventRecordPtr HostEvent::latest() {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

bool HostEvent::query() {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_ == nullptr || latest_->done;
}

void HostEvent::synchronize() {
  if (HostEventRecordPtr record = latest()) waitFor(record);
}

bool HostEvent::completionTime(std::chrono::steady_clock::time_point* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (latest_ == nullptr || !latest_->done) return false;
  *out = latest_->time;
  return true;
}

// --------------------------------------------------------------- HostRuntime

HostRuntime::HostRuntime(int devices, bool async, size_t memory_limit, size_t queue_depth,
                         bool discrete)
    : devices_(devices),
      async_(async),
      memory_limit_(memory_limit),
      queue_depth_(queue_depth),
      used_(static_cast<size_t>(devices), 0) {
  if (discrete) {
    const size_t per_device = memory_limit != 0 ? memory_limit : physicalMemory();
    discrete_memory_ = std::make_unique<DiscreteMemory>(per_device * static_cast<size_t>(devices));
  }
}

HostRuntime::~HostRuntime() = default;

HostRuntime::Settings HostRuntime::settingsFromEnvironment() {
  Settings settings;
  const long devices = envInt("TORCH_INFINI_HOST_DEVICES", 1);
  TORCH_CHECK(devices >= 1 && devices <= 64,
              "TORCH_INFINI_HOST_DEVICES must be between 1 and 64, got ", devices);
  settings.devices = static_cast<int>(devices);
  settings.async = envInt("TORCH_INFINI_HOST_ASYNC", 0) != 0;
  settings.memory_limit = static_cast<size_t>(envInt("TORCH_INFINI_HOST_MEMORY_LIMIT", 0));
  const long depth =
      envInt("TORCH_INFINI_HOST_QUEUE_DEPTH", static_cast<long>(HostStream::kDefaultQueueDepth));
  TORCH_CHECK(depth >= 1, "TORCH_INFINI_HOST_QUEUE_DEPTH must be at least 1, got ", depth);
  settings.queue_depth = static_cast<size_t>(depth);
  const char* memory = std::getenv("TORCH_INFINI_HOST_MEMORY");
  const std::string mode = memory == nullptr || *memory == '\0' ? "shared" : memory;
  TORCH_CHECK(mode == "shared" || mode == "discrete",
              "TORCH_INFINI_HOST_MEMORY must be shared or discrete, got '", mode, "'");
  settings.discrete = mode == "discrete";
  return settings;
}

std::unique_ptr<HostRuntime> HostRuntime::fromEnvironment() {
  const Settings s = settingsFromEnvironment();
  return std::make_unique<HostRuntime>(s.devices, s.async, s.memory_limit, s.queue_depth,
                                       s.discrete);
}

Capabilities HostRuntime::capabilities() const {
  Capabilities caps;
  caps.async_memcpy = async_;
  caps.events = true;
  caps.event_timing = true;
  caps.pinned_host = true;
  caps.async_malloc = false;
  caps.host_addressable = !discrete();
  return caps;
}

void HostRuntime::checkDevice(int device) const {
  if (device < 0 || device >= devices_) throwInvalidDevice(device, devices_, name_);
}

std::string HostRuntime::deviceName(int device) const {
  checkDevice(device);
  return std::string("Infini host reference device ") + std::to_string(device) +
         (async_ ? " (async streams)" : " (inline streams)");
}

void HostRuntime::setDevice(int device) { checkDevice(device); }

void HostRuntime::synchronizeDevice(int device) {
  checkDevice(device);
  synchronizations_.fetch_add(1, std::memory_order_relaxed);
  std::vector<HostStream*> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : streams_)
      if (s->device() == device) streams.push_back(s.get());
  }
  for (HostStream* s : streams) s->synchronize();
}

void HostRuntime::drainDevice(int device) {
  std::vector<HostStream*> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : streams_)
      if (s->device() == device) streams.push_back(s.get());
  }
  for (HostStream* s : streams) s->drain();
}

void HostRuntime::drainAll() {
  for (int d = 0; d < devices_; ++d) drainDevice(d);
}

std::pair<size_t, size_t> HostRuntime::memGetInfo(int device) {
  checkDevice(device);
  size_t total = memory_limit_ != 0 ? memory_limit_ : physicalMemory();
  size_t used;
  {
    std::lock_guard<std::mutex> lock(memory_mutex_);
    used = used_[device];
  }
  return {used < total ? total - used : 0, total};
}

void* HostRuntime::malloc(int device, size_t bytes) {
  checkDevice(device);
  std::lock_guard<std::mutex> lock(memory_mutex_);
  // Discrete memory maps pages lazily, so nothing else bounds it: a device
  // has the host's physical memory, as memGetInfo reports (shared mode's
  // allocations fail in the host allocator instead).
  const size_t capacity = memory_limit_ != 0 ? memory_limit_ : discrete() ? physicalMemory() : 0;
  if (capacity != 0 && used_[device] + bytes > capacity) return nullptr;
  void* ptr =
      discrete() ? discrete_memory_->allocate(bytes) : alignedAlloc(bytes, kDeviceAlignment);
  if (ptr == nullptr) return nullptr;
  used_[device] += bytes;
  sizes_.emplace(ptr, bytes);
  return ptr;
}

void HostRuntime::free(int device, void* ptr) {
  checkDevice(device);
  if (ptr == nullptr) return;
  // Like cudaFree, freeing waits for queued work that may still touch memory;
  // an error of that work stays pending for the stream's next synchronize.
  if (async_) drainDevice(device);
  std::lock_guard<std::mutex> lock(memory_mutex_);
  auto it = sizes_.find(ptr);
  TORCH_CHECK(it != sizes_.end(), "infini: free of a pointer the host device did not allocate");
  used_[device] -= it->second;
  sizes_.erase(it);
  if (discrete()) {
    discrete_memory_->release(ptr);
  } else {
    std::free(ptr);
  }
}

void* HostRuntime::mallocHost(size_t bytes) { return alignedAlloc(bytes, kHostAlignment); }

void HostRuntime::freeHost(void* ptr) {
  // Like cudaFreeHost: queued copies from or to the buffer finish first.
  if (async_) drainAll();
  std::free(ptr);
}

// The copy engine reaches device memory through its kernel view (discrete
// mode; in shared mode the view is the address itself).
void HostRuntime::countTransfer(MemcpyKind kind, size_t bytes) {
  if (kind == MemcpyKind::HostToDevice)
    to_device_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (kind == MemcpyKind::DeviceToHost) to_host_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void HostRuntime::memcpy(void* dst, const void* src, size_t bytes, MemcpyKind kind) {
  countTransfer(kind, bytes);
  if (bytes != 0) std::memcpy(hostKernelView(dst), hostKernelView(src), bytes);
}

void HostRuntime::memcpyAsync(void* dst, const void* src, size_t bytes, MemcpyKind kind,
                              StreamHandle s) {
  countTransfer(kind, bytes);
  if (bytes == 0) return;
  void* to = hostKernelView(dst);
  const void* from = hostKernelView(src);
  stream(s).submit([to, from, bytes] { std::memcpy(to, from, bytes); });
}

void HostRuntime::memsetAsync(void* dst, int value, size_t bytes, StreamHandle s) {
  if (bytes == 0) return;
  void* to = hostKernelView(dst);
  stream(s).submit([to, value, bytes] { std::memset(to, value, bytes); });
}

void HostRuntime::launchHostFunction(StreamHandle s, std::function<void()> work) {
  stream(s).submit(std::move(work));
}

StreamHandle HostRuntime::createStream(int device) {
  checkDevice(device);
  auto s = std::make_unique<HostStream>(device, async_, queue_depth_);
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.push_back(std::move(s));
  return streams_.back().get();
}

void HostRuntime::destroyStream(StreamHandle s) {
  std::unique_ptr<HostStream> owned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = streams_.begin(); it != streams_.end(); ++it) {
      if (it->get() == s) {
        owned = std::move(*it);
        streams_.erase(it);
        break;
      }
    }
  }
  TORCH_CHECK(owned != nullptr, "infini: destroyStream on an unknown stream");
  // A release: waits for the queued work without raising. An error nobody
  // synchronized for is not dropped silently: it becomes a warning.
  owned->drain();
  if (std::exception_ptr error = owned->takeError()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      TORCH_WARN("infini: a destroyed stream's queued work had failed: ", e.what());
    } catch (...) {
      TORCH_WARN("infini: a destroyed stream's queued work had failed");
    }
  }
}

void HostRuntime::synchronizeStream(StreamHandle s) {
  synchronizations_.fetch_add(1, std::memory_order_relaxed);
  stream(s).synchronize();
}

bool HostRuntime::queryStream(StreamHandle s) { return stream(s).query(); }

void HostRuntime::streamWaitEvent(StreamHandle s, EventHandle e) {
  HostEvent* ev = &event(e);
  HostEventRecordPtr record = ev->latest();
  if (record == nullptr) return;  // never recorded: nothing to wait for
  ev->retain();
  stream(s).submit([ev, record] {
    ev->waitFor(record);
    ev->release();
  });
}

EventHandle HostRuntime::createEvent(int device, bool enable_timing) {
  checkDevice(device);
  return new HostEvent(device, enable_timing);
}

void HostRuntime::destroyEvent(EventHandle e) { event(e).release(); }

void HostRuntime::recordEvent(EventHandle e, StreamHandle s) {
  HostEvent* ev = &event(e);
  TORCH_CHECK(ev->device() == stream(s).device(), "infini: event of device ", ev->device(),
              " cannot be recorded on a stream of device ", stream(s).device());
  stream(s).submitRecord(ev, ev->beginRecord());
}

bool HostRuntime::queryEvent(EventHandle e) { return event(e).query(); }

void HostRuntime::synchronizeEvent(EventHandle e) {
  synchronizations_.fetch_add(1, std::memory_order_relaxed);
  event(e).synchronize();
}

float HostRuntime::elapsedTime(EventHandle start, EventHandle end) {
  HostEvent& a = event(start);
  HostEvent& b = event(end);
  TORCH_CHECK(a.timing() && b.timing(),
              "Both events must be created with argument 'enable_timing=True'.");
  std::chrono::steady_clock::time_point ta, tb;
  TORCH_CHECK(a.latest() != nullptr && b.latest() != nullptr,
              "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(a.completionTime(&ta) && b.completionTime(&tb),
              "infini: elapsed_time needs both events to have completed; synchronize first");
  return std::chrono::duration<float, std::milli>(tb - ta).count();
}

}  // namespace torch_infini::runtime
