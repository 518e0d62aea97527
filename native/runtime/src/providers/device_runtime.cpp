// What every provider shares unless it does better.
#include "torch_infini/runtime/device_runtime.h"

#include <c10/util/Exception.h>

namespace torch_infini::runtime {

void DeviceRuntime::launchHostFunction(StreamHandle stream, std::function<void()> work) {
  TORCH_CHECK_NOT_IMPLEMENTED(capabilities().host_addressable, "the ", name(),
                              " runtime cannot run host functions on its streams: its device "
                              "memory is not host memory");
  synchronizeStream(stream);
  work();
}

}  // namespace torch_infini::runtime
