// Stream handles looked up to wait on a stream, not to queue work on it.
#pragma once

#include <c10/core/Stream.h>

#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini {

// The native handle of stream `id` of `device`, as nativeStreamUnchecked
// gives it, but not counted as a use by the profiler's device activity: a
// wait for the stream's queued work (allocateForHostAccess) launches
// nothing, and must not open an activity for the operator it happens in.
runtime::StreamHandle nativeStreamToWaitOn(int device, c10::StreamId id);

}  // namespace torch_infini
