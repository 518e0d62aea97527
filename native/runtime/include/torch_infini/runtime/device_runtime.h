// Seam 1: the device runtime.
//
// Everything above this interface (allocators, streams, events, copies,
// kernels) talks only to it. Providers: the built-in `host` reference device
// and InfiniRT (one instance per InfiniRT device type).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace torch_infini::runtime {

using StreamHandle = void*;
using EventHandle = void*;

enum class MemcpyKind { HostToHost, HostToDevice, DeviceToHost, DeviceToDevice };

// What a provider can do. Callers consult it instead of guessing, e.g. a
// non_blocking copy only returns early with async memcpy and pinned memory.
struct Capabilities {
  bool async_memcpy = false;  // memcpyAsync really overlaps the caller
  bool events = false;        // stream-ordered events
  bool event_timing = false;  // events can measure elapsed time
  bool pinned_host = false;   // page-locked host allocation
  bool async_malloc = false;  // stream-ordered malloc/free
  // Device memory is host memory: the CPU reads and writes it through plain
  // pointers (the CPU fallback then runs CPU kernels on it in place).
  bool host_addressable = false;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // Backend name as users select it: "host", "cpu", "nvidia", ...
  virtual const std::string& name() const = 0;
  virtual Capabilities capabilities() const = 0;

  // Devices. deviceCount() never throws; it reports 0 when nothing is usable.
  virtual int deviceCount() const noexcept = 0;
  virtual std::string deviceName(int device) const = 0;
  // Binds the calling thread to `device` for later runtime calls.
  virtual void setDevice(int device) = 0;
  virtual void synchronizeDevice(int device) = 0;
  // (free, total) bytes of device memory.
  virtual std::pair<size_t, size_t> memGetInfo(int device) = 0;

  // Memory. malloc returns nullptr when the device is out of memory.
  virtual void* malloc(int device, size_t bytes) = 0;
  virtual void free(int device, void* ptr) = 0;
  virtual void* mallocHost(size_t bytes) = 0;
  virtual void freeHost(void* ptr) = 0;
  // Synchronous copy: complete when it returns.
  virtual void memcpy(void* dst, const void* src, size_t bytes, MemcpyKind kind) = 0;
  // Stream-ordered copy and memset.
  virtual void memcpyAsync(void* dst, const void* src, size_t bytes, MemcpyKind kind,
                           StreamHandle stream) = 0;
  virtual void memsetAsync(void* dst, int value, size_t bytes, StreamHandle stream) = 0;
  // Runs `work` on the host's processors in stream order (a kernel compiled
  // for them: the compiler plug-in's cpu launch). Only where device memory
  // is host memory. By default it waits for the stream and runs `work` now;
  // an error it throws reaches the caller. A provider with queued streams
  // queues it, and its error is raised by the stream's next synchronize.
  virtual void launchHostFunction(StreamHandle stream, std::function<void()> work);

  // Streams.
  virtual StreamHandle createStream(int device) = 0;
  virtual void destroyStream(StreamHandle stream) = 0;
  virtual void synchronizeStream(StreamHandle stream) = 0;
  virtual bool queryStream(StreamHandle stream) = 0;
  virtual void streamWaitEvent(StreamHandle stream, EventHandle event) = 0;

  // Events.
  virtual EventHandle createEvent(int device, bool enable_timing) = 0;
  virtual void destroyEvent(EventHandle event) = 0;
  virtual void recordEvent(EventHandle event, StreamHandle stream) = 0;
  virtual bool queryEvent(EventHandle event) = 0;
  virtual void synchronizeEvent(EventHandle event) = 0;
  // Milliseconds between two completed, timing-enabled events.
  virtual float elapsedTime(EventHandle start, EventHandle end) = 0;
};

}  // namespace torch_infini::runtime
