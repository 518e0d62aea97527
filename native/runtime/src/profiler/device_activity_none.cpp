// PyTorch built without Kineto (or without its PrivateUse1 profiler
// registry): no session ever records device activity.
#include "profiler/device_activity.h"

namespace torch_infini::device_activity {

std::atomic<bool> recording{false};

void noteStreamUse(int, c10::StreamId, runtime::StreamHandle) {}

}  // namespace torch_infini::device_activity
