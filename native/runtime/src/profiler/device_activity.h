// Device activity for torch.profiler's Kineto path. While a profiling
// session records, the first stream handle an operator looks up (to launch
// work, copy, wait or synchronize) opens a timed segment on that stream;
// the segment closes when the operator returns or a nested operator starts.
// Segments are timed with the runtime's events and reported as device
// activities linked to the operator (kineto_activity_profiler.cpp).
#pragma once

#include <c10/core/Stream.h>

#include <atomic>

#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini::device_activity {

extern std::atomic<bool> recording;

void noteStreamUse(int device, c10::StreamId stream, runtime::StreamHandle handle);

inline void onStreamUse(int device, c10::StreamId stream, runtime::StreamHandle handle) {
  if (recording.load(std::memory_order_relaxed)) noteStreamUse(device, stream, handle);
}

}  // namespace torch_infini::device_activity
