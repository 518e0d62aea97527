// torch.profiler's device activity on infini: a Kineto activity profiler
// registered for PrivateUse1. torch.profiler uses it when
// ProfilerActivity.PrivateUse1 is requested (PyTorch's KINETO_PRIVATEUSE1
// state); use_kineto=False keeps the legacy stubs (profiler_stubs.cpp).
//
// Kineto hands every session the correlation id of each operator it
// records, on the operator's thread. Inside an operator, the first stream
// handle looked up (device_activity.h) opens a segment: a timing event
// recorded on that stream. The operator's return closes it with a second
// event, and so does a nested operator that uses a stream itself or a use
// of another stream. So segments never overlap on a thread and belong to
// the innermost operator that used the stream, as a CUDA kernel belongs to
// the operator that launched it; CPU operators a kernel calls inside (the
// `host` provider's, the CPU fallback's) count as that kernel's time.
// Times are infini event times, placed on the host clock by one reference
// event per device recorded when the session starts, after the device is
// synchronized. Device activities are named "[infini] <operator>".
#include <c10/util/Exception.h>
#include <libkineto.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "profiler/device_activity.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::device_activity {

std::atomic<bool> recording{false};

namespace {

using libkineto::ActivityType;

struct Segment {
  int device;
  c10::StreamId stream;
  runtime::EventHandle start;
  runtime::EventHandle end;
  uint64_t correlation;
};

class Session;

// The recording session (at most one: Kineto runs one trace at a time) and
// a generation that tells threads their state is from an earlier session.
std::mutex g_mutex;
Session* g_active = nullptr;
std::atomic<uint64_t> g_generation{0};

struct ThreadState {
  uint64_t generation = 0;
  std::vector<uint64_t> correlations;  // the thread's operators, innermost last
  bool open = false;
  int device = 0;
  c10::StreamId stream = 0;
  runtime::StreamHandle handle = nullptr;
  runtime::EventHandle start = nullptr;
  uint64_t correlation = 0;
};

thread_local ThreadState tls;

void destroyEvent(runtime::EventHandle event) {
  if (runtime::isInitialized()) runtime::selectedRuntime().destroyEvent(event);
}

void closeOpen(ThreadState& t);

ThreadState& threadState() {
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (tls.generation != generation) {
    if (tls.open) destroyEvent(tls.start);
    tls = ThreadState{};
    tls.generation = generation;
  }
  return tls;
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  ~Session() override {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_active == this) {
      recording.store(false);
      g_active = nullptr;
    }
    for (const Segment& s : segments_) {
      destroyEvent(s.start);
      destroyEvent(s.end);
    }
    for (runtime::EventHandle e : references_) destroyEvent(e);
  }

  void start() override {
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    const int devices = deviceCount();
    for (int d = 0; d < devices; ++d) {
      synchronizeDevice(d);
      runtime::EventHandle reference = rt.createEvent(d, /*enable_timing=*/true);
      rt.recordEvent(reference, nativeStreamUnchecked(d, 0));
      rt.synchronizeEvent(reference);
      references_.push_back(reference);
      reference_ns_.push_back(nowNs());
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    g_active = this;
    g_generation.fetch_add(1, std::memory_order_acq_rel);
    recording.store(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(g_mutex);
    recording.store(false);
    if (g_active == this) g_active = nullptr;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linkedActivity, int64_t start_time,
                    int64_t end_time) override {
    std::vector<Segment> segments;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      segments.swap(segments_);
    }
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "infini");
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    for (const Segment& s : segments) {
      // A segment whose events cannot be timed (its stream's work failed)
      // is left out and reported, never thrown through Kineto.
      int64_t begin_ns = 0;
      int64_t end_ns = 0;
      bool timed = false;
      try {
        rt.synchronizeEvent(s.end);
        begin_ns = deviceTimeNs(s.device, s.start);
        end_ns = deviceTimeNs(s.device, s.end);
        timed = true;
      } catch (const std::exception& e) {
        errors_.push_back(std::string("infini: a device activity was not timed: ") + e.what());
      }
      destroyEvent(s.start);
      destroyEvent(s.end);
      if (!timed) continue;
      const libkineto::ITraceActivity* op = linkedActivity(static_cast<int32_t>(s.correlation));
      buffer_->emplace_activity(buffer_->span, ActivityType::CONCURRENT_KERNEL,
                                "[infini] " + (op != nullptr ? op->name() : std::string("work")));
      libkineto::GenericTraceActivity& activity = *buffer_->activities.back();
      activity.startTime = begin_ns;
      activity.endTime = std::max(begin_ns, end_ns);
      activity.id = static_cast<int32_t>(s.correlation);
      activity.device = s.device;
      activity.resource = static_cast<int32_t>(s.stream);
      activity.linked = op;
      activity.flow.id = static_cast<uint32_t>(s.correlation);
      activity.flow.type = libkineto::kLinkAsyncCpuGpu;
      activity.flow.start = false;
      activity.addMetadata("device", s.device);
      activity.addMetadata("stream", s.stream);
      activity.addMetadata("correlation", s.correlation);
      streams_.insert({s.device, s.stream});
      activity.log(logger);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (streams_.empty()) return nullptr;
    const int device = streams_.begin()->first;
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        device, device, "infini:" + std::to_string(device), runtime::selectedRuntime().name()});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [device, stream] : streams_)
      infos.push_back({stream, stream, device, "infini stream " + std::to_string(stream)});
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override { threadState().correlations.push_back(id); }

  void popCorrelationId() override {
    ThreadState& t = threadState();
    if (t.correlations.empty()) return;
    if (t.open && t.correlation == t.correlations.back()) closeOpen(t);
    t.correlations.pop_back();
  }

  // Called with g_mutex held.
  void addLocked(const Segment& segment) { segments_.push_back(segment); }

 private:
  // An event's time on the host clock, in nanoseconds.
  int64_t deviceTimeNs(int device, runtime::EventHandle event) const {
    const float ms = runtime::selectedRuntime().elapsedTime(references_[device], event);
    return reference_ns_[device] + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

  std::vector<runtime::EventHandle> references_;
  std::vector<int64_t> reference_ns_;
  std::vector<Segment> segments_;  // guarded by g_mutex
  std::set<std::pair<int, c10::StreamId>> streams_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::vector<std::string> errors_;
};

void closeOpen(ThreadState& t) {
  if (!t.open) return;
  t.open = false;
  runtime::DeviceRuntime& rt = runtime::selectedRuntime();
  runtime::EventHandle end = rt.createEvent(t.device, /*enable_timing=*/true);
  rt.recordEvent(end, t.handle);
  const Segment segment{t.device, t.stream, t.start, end, t.correlation};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_active != nullptr && t.generation == g_generation.load()) {
      g_active->addLocked(segment);
      return;
    }
  }
  destroyEvent(segment.start);
  destroyEvent(segment.end);
}

class InfiniActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config& /*config*/) override {
    if (activity_types.count(ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    runtime::DeviceRuntime* rt = runtime::tryGet();
    if (rt == nullptr) return nullptr;
    if (!rt->capabilities().event_timing) {
      TORCH_WARN_ONCE("torch.profiler: the infini backend '", rt->name(),
                      "' has no timing events, so no infini device time is recorded");
      return nullptr;
    }
    return std::make_unique<Session>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"infini"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL};
};

REGISTER_PRIVATEUSE1_PROFILER(InfiniActivityProfiler);

}  // namespace

void noteStreamUse(int device, c10::StreamId stream, runtime::StreamHandle handle) {
  ThreadState& t = threadState();
  if (t.correlations.empty()) return;  // not inside an operator
  const uint64_t op = t.correlations.back();
  if (t.open && t.device == device && t.stream == stream && t.correlation == op) return;
  closeOpen(t);
  runtime::DeviceRuntime& rt = runtime::selectedRuntime();
  runtime::EventHandle start = rt.createEvent(device, /*enable_timing=*/true);
  rt.recordEvent(start, handle);
  t.open = true;
  t.device = device;
  t.stream = stream;
  t.handle = handle;
  t.start = start;
  t.correlation = op;
}

}  // namespace torch_infini::device_activity
