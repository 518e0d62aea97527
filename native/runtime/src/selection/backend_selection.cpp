// Selects, once, the DeviceRuntime provider that serves `infini`
// (torch_infini/runtime/backend_selection.h).
#include "torch_infini/runtime/backend_selection.h"

#include <c10/util/Exception.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "selection/provider_registry.h"
#include "torch_infini/runtime/device_types.h"
#include "torch_infini/runtime/host_runtime.h"

namespace torch_infini::runtime {
namespace {

struct State {
  std::mutex mutex;
  std::string requested;  // empty: not yet read from the environment
  std::unique_ptr<DeviceRuntime> runtime;
  std::atomic<DeviceRuntime*> ready{nullptr};
};

State& state() {
  static State* s = new State();  // leaked on purpose: outlives static destructors
  return *s;
}

std::atomic<bool> in_bad_fork{false};
std::atomic<int> device_count_at_fork{0};

// In a forked child of an initialized process: the runtime is unusable.
// Clearing `ready` sends every selectedRuntime() to the slow path, which raises.
// The parent's device count is kept: the child may still ask how many
// devices there are (CUDA answers that in a forked child too).
void markForkedChild() {
  State& s = state();
  DeviceRuntime* runtime = s.ready.load(std::memory_order_relaxed);
  if (runtime == nullptr) return;                      // never initialized
  device_count_at_fork.store(runtime->deviceCount());  // a stored count, no device call
  in_bad_fork.store(true);
  s.ready.store(nullptr);
}

std::string requestedLocked(State& s) {
  if (s.requested.empty()) {
    const char* env = std::getenv("TORCH_INFINI_BACKEND");
    s.requested = (env != nullptr && *env != '\0') ? env : "auto";
  }
  return s.requested;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::unique_ptr<DeviceRuntime> create(const std::string& name) {
  const auto& providers = externalProviders();
  if (name == "host") return HostRuntime::fromEnvironment();
  if (name == "auto") {
    // First accelerator type with a device, else the Infini CPU backend,
    // else the built-in host device.
    for (const auto& p : providers)
      if (p.accelerator && p.probe() > 0) return p.make();
    for (const auto& p : providers)
      if (!p.accelerator && p.probe() > 0) return p.make();
    return HostRuntime::fromEnvironment();
  }
  for (const auto& p : providers) {
    if (p.name != name) continue;
    TORCH_CHECK(p.probe() > 0, "infini: backend '", name,
                "': InfiniRT reports no device of this type (no device, or no driver)");
    return p.make();
  }
  TORCH_CHECK(
      false, "infini: backend '", name,
      "' is not a backend of this build; choose auto or one of: ", joined(compiledBackends()));
}

}  // namespace

void selectBackend(const std::string& name) {
  auto names = compiledBackends();
  const bool compiled = std::find(names.begin(), names.end(), name) != names.end();
  TORCH_CHECK(name == "auto" || compiled || !isInfiniDeviceType(name), "infini: backend '", name,
              "' (an InfiniRT device type) is not compiled into this build; available: auto, ",
              joined(names));
  TORCH_CHECK(name == "auto" || compiled, "infini: unknown backend '", name,
              "'; choose auto or one of: ", joined(names));
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.runtime) {
    TORCH_CHECK(name == s.runtime->name() || (name == "auto" && requestedLocked(s) == "auto"),
                "infini: the backend is already initialized as '", s.runtime->name(),
                "' and cannot change to '", name, "'");
    return;
  }
  s.requested = name;
}

DeviceRuntime& selectedRuntime() {
  State& s = state();
  if (DeviceRuntime* r = s.ready.load(std::memory_order_acquire)) return *r;
  // Checked before locking: the fork may have copied the mutex locked.
  TORCH_CHECK(!in_bad_fork.load(),
              "Cannot re-initialize infini in forked subprocess. To use infini with "
              "multiprocessing, you must use the 'spawn' start method");
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.runtime) {
    static const int registered = pthread_atfork(nullptr, nullptr, markForkedChild);
    (void)registered;
    s.runtime = create(requestedLocked(s));
    s.ready.store(s.runtime.get(), std::memory_order_release);
  }
  return *s.runtime;
}

DeviceRuntime* tryGet() noexcept {
  try {
    return &selectedRuntime();
  } catch (...) {
    return nullptr;
  }
}

bool isInitialized() noexcept { return state().ready.load() != nullptr; }

bool isInBadFork() noexcept { return in_bad_fork.load(); }

int deviceCountAtFork() noexcept { return device_count_at_fork.load(); }

void throwInvalidDevice(int device, int count, const std::string& backend) {
  // 101: the CUDA runtime's code for the same error (cudaErrorInvalidDevice).
  throw c10::AcceleratorError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, 101,
      "infini error: invalid device ordinal " + std::to_string(device) + "; the '" + backend +
          "' backend has " + std::to_string(count) + " device(s)" +
          // torch.device keeps its index in 8 bits.
          (device < -1 && device >= -128 ? " (an index from 128 to 254 reaches PyTorch as " +
                                               std::to_string(device) + ": it stores 8 bits)"
                                         : ""));
}

std::string requestedBackend() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.runtime ? s.runtime->name() : requestedLocked(s);
}

std::vector<std::string> compiledBackends() {
  std::vector<std::string> names{"host"};
  for (const auto& p : externalProviders()) names.push_back(p.name);
  return names;
}

}  // namespace torch_infini::runtime
