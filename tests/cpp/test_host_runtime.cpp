// Unit tests of the host reference device (seam 1 provider), inline and
// async, without PyTorch tensors.
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"
#include "torch_infini/runtime/host_runtime.h"

using namespace torch_infini::runtime;

namespace {

void devicesAndNames() {
  HostRuntime rt(3, false, 0);
  CHECK(rt.deviceCount() == 3);
  CHECK(rt.name() == "host");
  CHECK(!rt.deviceName(2).empty());
  CHECK(throws<c10::IndexError>([&] { rt.deviceName(3); }));
  CHECK(throws<c10::IndexError>([&] { rt.setDevice(-1); }));
}

void memoryIsAlignedAndLimited() {
  HostRuntime rt(1, false, 4096);
  void* a = rt.malloc(0, 1000);
  CHECK(a != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(a) % 256 == 0);
  auto [free_bytes, total] = rt.memGetInfo(0);
  CHECK(total == 4096 && free_bytes == 3096);
  CHECK(rt.malloc(0, 4000) == nullptr);  // over the limit: nullptr, no throw
  rt.free(0, a);
  CHECK(rt.memGetInfo(0).first == 4096);
  void* b = rt.malloc(0, 4000);
  CHECK(b != nullptr);
  rt.free(0, b);
}

void asyncStreamRunsInOrderOffThread() {
  HostRuntime rt(1, true, 0);
  StreamHandle s = rt.createStream(0);
  std::vector<int> order;
  std::atomic<bool> release{false};
  auto& stream = HostRuntime::stream(s);
  stream.submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    order.push_back(1);
  });
  stream.submit([&] { order.push_back(2); });
  CHECK(!rt.queryStream(s));  // work is pending behind the gate
  release = true;
  rt.synchronizeStream(s);
  CHECK(rt.queryStream(s));
  CHECK(order.size() == 2 && order[0] == 1 && order[1] == 2);
  rt.destroyStream(s);
}

void memcpyAsyncCompletesAtSynchronize() {
  HostRuntime rt(1, true, 0);
  StreamHandle s = rt.createStream(0);
  std::atomic<bool> release{false};
  HostRuntime::stream(s).submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  int src = 42, dst = 0;
  rt.memcpyAsync(&dst, &src, sizeof(int), MemcpyKind::HostToHost, s);
  CHECK(dst == 0);  // still queued
  release = true;
  rt.synchronizeStream(s);
  CHECK(dst == 42);
  rt.destroyStream(s);
}

void eventsOrderStreamsAndTime() {
  HostRuntime rt(1, true, 0);
  StreamHandle a = rt.createStream(0);
  StreamHandle b = rt.createStream(0);
  EventHandle start = rt.createEvent(0, true);
  EventHandle end = rt.createEvent(0, true);
  CHECK(rt.queryEvent(start));  // never recorded: complete
  std::atomic<bool> release{false};
  std::atomic<int> value{0};
  rt.recordEvent(start, a);
  HostRuntime::stream(a).submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    value = 7;
  });
  rt.recordEvent(end, a);
  CHECK(!rt.queryEvent(end));
  // b waits for `end`, so it observes the value written before it.
  rt.streamWaitEvent(b, end);
  int seen = -1;
  HostRuntime::stream(b).submit([&] { seen = value.load(); });
  release = true;
  rt.synchronizeStream(b);
  CHECK(seen == 7);
  rt.synchronizeEvent(end);
  CHECK(rt.queryEvent(end));
  float ms = rt.elapsedTime(start, end);
  CHECK(ms >= 15.0f);
  rt.destroyEvent(start);
  rt.destroyEvent(end);
  rt.destroyStream(a);
  rt.destroyStream(b);
}

void elapsedTimeNeedsTimingAndRecords() {
  HostRuntime rt(1, false, 0);
  StreamHandle s = rt.createStream(0);
  EventHandle timed = rt.createEvent(0, true);
  EventHandle untimed = rt.createEvent(0, false);
  CHECK(throws<c10::Error>([&] { rt.elapsedTime(timed, timed); }));  // not recorded
  rt.recordEvent(timed, s);
  rt.recordEvent(untimed, s);
  CHECK(throws<c10::Error>([&] { rt.elapsedTime(timed, untimed); }));
  CHECK(rt.elapsedTime(timed, timed) == 0.0f);
  rt.destroyEvent(timed);
  rt.destroyEvent(untimed);
  rt.destroyStream(s);
}

void eventOfOtherDeviceIsRejected() {
  HostRuntime rt(2, false, 0);
  StreamHandle s1 = rt.createStream(1);
  EventHandle e0 = rt.createEvent(0, false);
  CHECK(throws<c10::Error>([&] { rt.recordEvent(e0, s1); }));
  rt.destroyEvent(e0);
  rt.destroyStream(s1);
}

void workErrorsSurfaceAtSynchronize() {
  HostRuntime rt(1, true, 0);
  StreamHandle s = rt.createStream(0);
  HostRuntime::stream(s).submit([] { TORCH_CHECK(false, "kernel failed"); });
  bool raised = false;
  try {
    rt.synchronizeStream(s);
  } catch (const c10::Error& e) {
    raised = std::strstr(e.what(), "kernel failed") != nullptr;
  }
  CHECK(raised);
  rt.synchronizeStream(s);  // the error is reported once
  rt.destroyStream(s);
}

}  // namespace

int main() {
  return runTests({
      {"devices and names", devicesAndNames},
      {"memory is aligned and limited", memoryIsAlignedAndLimited},
      {"async stream runs in order off thread", asyncStreamRunsInOrderOffThread},
      {"memcpyAsync completes at synchronize", memcpyAsyncCompletesAtSynchronize},
      {"events order streams and time", eventsOrderStreamsAndTime},
      {"elapsed time needs timing and records", elapsedTimeNeedsTimingAndRecords},
      {"event of other device is rejected", eventOfOtherDeviceIsRejected},
      {"work errors surface at synchronize", workErrorsSurfaceAtSynchronize},
  });
}
