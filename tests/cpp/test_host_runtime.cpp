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
  // An invalid ordinal is torch.AcceleratorError, as CUDA's.
  CHECK(throws<c10::AcceleratorError>([&] { rt.deviceName(3); }));
  CHECK(throws<c10::AcceleratorError>([&] { rt.setDevice(-1); }));
  CHECK(throws<c10::AcceleratorError>([&] { rt.memGetInfo(3); }));
  CHECK(throws<c10::AcceleratorError>([&] { rt.synchronizeDevice(3); }));
  CHECK(throws<c10::AcceleratorError>([&] { rt.createStream(3); }));
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

// Work that fails on an async stream never interrupts a release: free,
// freeHost and destroyStream wait for queued work without raising and give
// the memory back (an error escaping from their internal synchronize used to
// leave the bytes counted as used forever). The error is reported exactly
// once, as a c10::Error, by the next synchronize of its stream; work queued
// after the failure still runs.
void workErrorsNeverInterruptReleases() {
  constexpr size_t kLimit = 1 << 20;
  HostRuntime rt(1, true, kLimit);
  StreamHandle s = rt.createStream(0);
  void* dev = rt.malloc(0, 4096);
  void* host = rt.mallocHost(4096);
  CHECK(dev != nullptr && host != nullptr);
  CHECK(rt.memGetInfo(0).first == kLimit - 4096);
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  auto& stream = HostRuntime::stream(s);
  stream.submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    TORCH_CHECK(false, "queued work failed");
  });
  stream.submit([&] { ran.fetch_add(1); });  // queued behind the failure
  release = true;

  bool free_threw = false;
  try {
    rt.free(0, dev);  // waits for the queued work, which fails meanwhile
  } catch (...) {
    free_threw = true;
  }
  CHECK(!free_threw);
  CHECK(rt.memGetInfo(0).first == kLimit);  // every byte is back
  void* all = rt.malloc(0, kLimit);         // and usable
  CHECK(all != nullptr);
  bool free_host_threw = false;
  try {
    rt.freeHost(host);
  } catch (...) {
    free_host_threw = true;
  }
  CHECK(!free_host_threw);

  // Reported once, by the stream's next synchronize.
  bool raised = false;
  try {
    rt.synchronizeStream(s);
  } catch (const c10::Error& e) {
    raised = std::strstr(e.what(), "queued work failed") != nullptr;
  }
  CHECK(raised);
  CHECK(ran.load() == 1);
  rt.synchronizeStream(s);  // not again
  stream.submit([&] { ran.fetch_add(1); });
  rt.synchronizeStream(s);
  CHECK(ran.load() == 2);  // the stream still runs work

  // Through a device synchronize: once as well.
  stream.submit([] { TORCH_CHECK(false, "second failure"); });
  stream.submit([&] { ran.fetch_add(1); });
  raised = false;
  try {
    rt.synchronizeDevice(0);
  } catch (const c10::Error& e) {
    raised = std::strstr(e.what(), "second failure") != nullptr;
  }
  CHECK(raised);
  CHECK(ran.load() == 3);
  rt.synchronizeDevice(0);
  rt.synchronizeStream(s);

  // Freeing while another error is pending: no raise, and it stays pending.
  stream.submit([] { TORCH_CHECK(false, "third failure"); });
  bool free_threw_again = false;
  try {
    rt.free(0, all);
  } catch (...) {
    free_threw_again = true;
  }
  CHECK(!free_threw_again);
  CHECK(rt.memGetInfo(0).first == kLimit);
  CHECK(throws<c10::Error>([&] { rt.synchronizeStream(s); }));
  rt.synchronizeStream(s);
  rt.destroyStream(s);
}

// Destroying a stream whose queued work failed is a release too: it waits for
// the work and does not raise (documented in host_runtime.h: "Releasing
// memory and destroying streams wait for queued work without raising").
void destroyingAStreamWithAPendingErrorDoesNotRaise() {
  HostRuntime rt(1, true, 0);
  StreamHandle s = rt.createStream(0);
  std::atomic<bool> ran{false};
  HostRuntime::stream(s).submit([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    TORCH_CHECK(false, "queued work failed");
  });
  HostRuntime::stream(s).submit([&] { ran = true; });
  bool threw = false;
  try {
    rt.destroyStream(s);
  } catch (...) {
    threw = true;
  }
  CHECK(ran.load());  // waited for the queued work
  CHECK(!threw);
  rt.synchronizeDevice(0);  // the destroyed stream's error is not raised elsewhere either
}

// A wait holds the record that was the event's latest when it was queued,
// as cudaStreamWaitEvent: recording the event again on another (idle)
// stream must not release it. query() and synchronize() follow the latest
// record.
void reRecordingAnEventKeepsAnEarlierWait() {
  HostRuntime rt(1, true, 0);
  StreamHandle a = rt.createStream(0);
  StreamHandle b = rt.createStream(0);
  StreamHandle c = rt.createStream(0);
  EventHandle e = rt.createEvent(0, false);
  std::atomic<bool> release{false};
  std::atomic<int> value{0};
  std::atomic<int> seen{-1};
  HostRuntime::stream(a).submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    value = 7;
  });
  rt.recordEvent(e, a);      // record 1: behind the gate
  rt.streamWaitEvent(b, e);  // b waits for record 1
  rt.recordEvent(e, c);      // record 2: c is idle, done at once
  HostRuntime::stream(b).submit([&] { seen = value.load(); });
  rt.synchronizeStream(c);
  rt.synchronizeEvent(e);   // the latest record (2) is done: returns
  CHECK(rt.queryEvent(e));  // about record 2 only
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(seen.load() == -1);  // b still waits for record 1
  CHECK(!rt.queryStream(b));
  release = true;
  rt.synchronizeStream(b);
  CHECK(seen.load() == 7);
  rt.destroyEvent(e);
  rt.destroyStream(a);
  rt.destroyStream(b);
  rt.destroyStream(c);
}

// An async stream queues at most its depth: a submitter waits for room, as
// on a device's launch queue, and continues once the worker takes items.
void asyncQueueIsBoundedByItsDepth() {
  constexpr size_t kDepth = 4;
  HostRuntime rt(1, true, 0, kDepth);
  StreamHandle s = rt.createStream(0);
  auto& stream = HostRuntime::stream(s);
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  stream.submit([&] {  // taken by the worker at once, then blocks it
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::atomic<int> submitted{0};
  std::thread submitter([&] {
    for (int i = 0; i < 10; ++i) {
      stream.submit([&] { ran.fetch_add(1); });
      submitted.fetch_add(1);
    }
  });
  // The gate item may or may not have left the queue yet: at most depth
  // (plus that one) items go in, then the submitter waits.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int queued = submitted.load();
  CHECK(queued >= static_cast<int>(kDepth) - 1 && queued <= static_cast<int>(kDepth));
  CHECK(ran.load() == 0);
  release = true;
  submitter.join();
  rt.synchronizeStream(s);
  CHECK(submitted.load() == 10 && ran.load() == 10);
  rt.destroyStream(s);
}

// Work running on the stream's own worker may queue more work on it even
// when the queue is full (it would otherwise wait for itself).
void theWorkerNeverWaitsForRoom() {
  HostRuntime rt(1, true, 0, 1);
  StreamHandle s = rt.createStream(0);
  auto& stream = HostRuntime::stream(s);
  std::atomic<int> ran{0};
  stream.submit([&] {
    for (int i = 0; i < 5; ++i) stream.submit([&] { ran.fetch_add(1); });
  });
  rt.synchronizeStream(s);
  rt.synchronizeStream(s);
  CHECK(ran.load() == 5);
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
      {"work errors never interrupt releases", workErrorsNeverInterruptReleases},
      {"destroying a stream with a pending error does not raise",
       destroyingAStreamWithAPendingErrorDoesNotRaise},
      {"re-recording an event keeps an earlier wait", reRecordingAnEventKeepsAnEarlierWait},
      {"async queue is bounded by its depth", asyncQueueIsBoundedByItsDepth},
      {"the worker never waits for room", theWorkerNeverWaitsForRoom},
  });
}
