// The CPU fallback: every ATen operator without an infini kernel ends here,
// and every call a native kernel refuses (fallback/refusal.h).
//
// Under the policy (cpu_fallback.h) the operator runs on the CPU and its
// results land on the inputs' infini device; in-place and out= arguments are
// the given infini tensors (views included). Where device memory is host
// memory the CPU kernel runs on it in place (fallback/aliased_memory.cpp); elsewhere
// the arguments are staged through pinned memory (fallback/staged.cpp).
// Either way the current stream's pending work runs first. Otherwise, and
// always for random operators (no CPU generator stands in for a device generator) and
// view operators (views are native aliases), a NotImplementedError names the
// operator, dtype and backend.
#include "torch_infini/ops/cpu_fallback.h"

#include "common/bridge_registrar.h"
#include "fallback/aliased_memory.h"
#include "fallback/arguments.h"
#include "fallback/refusal.h"
#include "fallback/staged.h"
#include "torch_infini/ops/operator_table.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini::ops {
namespace {

thread_local std::string pending_refusal;

constexpr const char* kEnvVar = "TORCH_INFINI_CPU_FALLBACK";

// What the fallback knows of one operator, computed on its first call; the
// per-call fields are atomics, so a call takes no lock once it has the state.
struct OperatorState {
  std::string name;  // "aten::add.Tensor"
  std::string base;  // "aten::add"
  bool random = false;
  // A random operator whose only draws are its dropout (the attention
  // kernels): the index of its `dropout_p` argument; with 0 it draws nothing.
  int dropout_argument = -1;
  // A random operator that draws only when training (rrelu's `training`,
  // native_dropout's `train`): the index of that argument; false draws nothing.
  int training_argument = -1;
  bool view = false;
  DeviceCheck device_check = DeviceCheck::kNoCheck;  // CUDA's (device_checks.h)
  int tensor_operands = 0;                           // tensorOperands(schema)
  const CudaDtypes* cuda_dtypes = nullptr;           // cuda_dtypes.cpp
  std::atomic<bool> warned{false};
  std::atomic<int64_t> calls{0};
  std::atomic<uint64_t> ticks{0};  // of c10::getApproximateTime (see Policy::clock_origin)
  std::atomic<int64_t> bytes_copied{0};
};

struct Policy {
  std::atomic<FallbackMode> mode{FallbackMode::Warn};
  std::atomic<bool> has_lists{false};  // allowed or denied is not empty
  std::atomic<bool> force_staging{false};
  std::mutex mutex;  // everything below
  std::set<std::string> allowed;
  std::set<std::string> denied;
  // By the operator's schema (its address is stable); nodes never move.
  std::unordered_map<const c10::FunctionSchema*, OperatorState> operators;
  // A call is timed with PyTorch's approximate clock (the TSC where there is
  // one, as the profiler does): a steady_clock read costs 30 ns here, more
  // than a tenth of the fallback's own cost on a small call. Its ticks
  // become seconds at read time, by the rate since this (clock, ticks) pair.
  c10::ApproximateClockToUnixTimeConverter::UnixAndApproximateTimePair clock_origin =
      c10::ApproximateClockToUnixTimeConverter::measurePair();

  double secondsPerTick() const {
    const auto now = c10::ApproximateClockToUnixTimeConverter::measurePair();
    const auto ticks = static_cast<double>(now.approx_t_ - clock_origin.approx_t_);
    return ticks > 0 ? static_cast<double>(now.t_ - clock_origin.t_) * 1e-9 / ticks : 1e-9;
  }
};

Policy& policy() {
  static Policy* p = [] {
    auto* fresh = new Policy();  // leaked on purpose: outlives static destructors
    const char* env = std::getenv(kEnvVar);
    if (env != nullptr && *env != '\0') fresh->mode = parseFallbackMode(env);
    return fresh;
  }();
  return *p;
}

std::string backendName() {
  runtime::DeviceRuntime* rt = runtime::tryGet();
  return rt != nullptr ? rt->name() : std::string("uninitialized");
}

std::string qualifiedName(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool listed(const std::set<std::string>& names, const OperatorState& state) {
  return names.count(state.name) > 0 || names.count(state.base) > 0;
}

// A return that aliases an input without writing it: a view operator.
bool isView(const c10::FunctionSchema& schema) {
  for (const auto& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) return true;
  }
  return false;
}

// The state of `op`, through a small per-thread cache (by schema address)
// so that a call does not lock the policy's map.
OperatorState& stateFor(const c10::OperatorHandle& op) {
  constexpr size_t kSlots = 64;
  struct Slot {
    const c10::FunctionSchema* schema = nullptr;
    OperatorState* state = nullptr;
  };
  thread_local Slot cache[kSlots];
  const c10::FunctionSchema* schema = &op.schema();
  Slot& slot = cache[(reinterpret_cast<uintptr_t>(schema) >> 4) % kSlots];
  if (slot.schema == schema) return *slot.state;
  Policy& p = policy();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto [it, fresh] = p.operators.try_emplace(schema);
  OperatorState& state = it->second;
  if (fresh) {
    state.name = qualifiedName(op);
    state.base = schema->operator_name().name;
    state.random = op.hasTag(at::Tag::nondeterministic_seeded);
    if (state.random) {
      std::optional<int> dropout = schema->argumentIndexWithName("dropout_p");
      if (dropout.has_value()) state.dropout_argument = *dropout;
      for (const char* flag : {"training", "train"}) {
        if (std::optional<int> index = schema->argumentIndexWithName(flag)) {
          state.training_argument = *index;
          break;
        }
      }
    }
    state.view = isView(*schema);
    state.device_check = deviceCheckOf(state.name);
    state.tensor_operands = tensorOperands(*schema);
    state.cuda_dtypes = cudaDtypesOf(state.base);
  }
  slot = {schema, &state};
  return state;
}

bool hostAddressable() {
  // Fixed once the runtime exists, which it does before any infini tensor.
  static const bool addressable = runtime::selectedRuntime().capabilities().host_addressable;
  return addressable;
}

std::string firstDtype(const torch::jit::Stack& stack, size_t first, size_t count) {
  std::string dtype = "none";
  bool found = false;
  for (size_t i = first; i < first + count && i < stack.size(); ++i) {
    forEachTensor(stack[i], [&](const at::Tensor& t) {
      if (!found && t.defined()) {
        dtype = c10::toString(t.scalar_type());
        found = true;
      }
    });
  }
  return dtype;
}

// One call of the operator, for fallbackStats: from `start` to now.
void recordCall(OperatorState& state, c10::approx_time_t start, int64_t bytes_copied) {
  const c10::approx_time_t end = c10::getApproximateTime();
  state.calls.fetch_add(1, std::memory_order_relaxed);
  state.ticks.fetch_add(end > start ? static_cast<uint64_t>(end - start) : 0,
                        std::memory_order_relaxed);
  state.bytes_copied.fetch_add(bytes_copied, std::memory_order_relaxed);
}

// A random operator called so that it draws nothing: dropout with p = 0,
// or evaluation (training false: nn.RReLU in eval() is a leaky ReLU).
bool drawsNothing(const OperatorState& state, const torch::jit::Stack& stack, size_t args_begin) {
  if (state.dropout_argument >= 0 && stack[args_begin + state.dropout_argument].toDouble() == 0.0)
    return true;
  if (state.training_argument >= 0) {
    const c10::IValue& training = stack[args_begin + state.training_argument];
    return training.isBool() && !training.toBool();  // None (native_dropout): it draws
  }
  return false;
}

// `refusal`: empty when the operator has no infini kernel at all, else the
// message of the native kernel that refused this call.
void runOnCpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& refusal) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t args_begin = stack->size() - num_args;

  Policy& p = policy();
  const FallbackMode mode = p.mode.load(std::memory_order_relaxed);
  bool allowed = mode != FallbackMode::Off;
  bool warn = mode == FallbackMode::Warn;
  OperatorState* state = &stateFor(op);
  if (p.has_lists.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (listed(p.denied, *state)) {
      allowed = false;
    } else if (listed(p.allowed, *state)) {
      allowed = true;
    }
  }
  if (allowed && warn) {  // once per operator
    warn = !state->warned.load(std::memory_order_relaxed) && !state->warned.exchange(true);
  }
  const std::string& name = state->name;
  const bool draws = state->random && !drawsNothing(*state, *stack, args_begin);
  TORCH_CHECK_NOT_IMPLEMENTED(!draws, "The operator '", name,
                              "' draws random numbers and has no infini kernel (backend '",
                              backendName(),
                              "'); random operators never fall back to the CPU, whose generator "
                              "would decide the numbers (README, 'Random numbers').");
  TORCH_CHECK_NOT_IMPLEMENTED(!state->view, "The view operator '", name,
                              "' has no infini kernel (backend '", backendName(),
                              "'); views are never computed on the CPU.");
  checkArgumentDevices(schema, *stack, args_begin, state->device_check, state->tensor_operands);
  if (!allowed || warn) {
    const std::string reason = refusal.empty() ? "'" + name + "' has no infini kernel (dtype " +
                                                     firstDtype(*stack, args_begin, num_args) +
                                                     ", backend '" + backendName() + "')"
                                               : refusal;
    TORCH_CHECK_NOT_IMPLEMENTED(allowed, reason, ". The CPU fallback does not run it (", kEnvVar,
                                "=", fallbackModeName(mode), "); allow it with ", kEnvVar,
                                "=warn or torch_infini.cpu_fallback.set_mode('warn'), or move the "
                                "tensors to the CPU.");
    TORCH_WARN("infini: ", reason, "; '", name, "' ran on the CPU. Set ", kEnvVar,
               "=off (or torch_infini.cpu_fallback.set_mode('off')) to make this an error, "
               "or =silent to hide this warning.");
  }

  // A dtype the CPU kernel lacks and CUDA serves: as CUDA computes it (the
  // widened call comes back here, counted as its own call).
  if (state->cuda_dtypes != nullptr && runInCudaDtype(*state->cuda_dtypes, op, stack)) return;

  const c10::approx_time_t start = c10::getApproximateTime();
  int64_t bytes_copied = 0;
  const bool in_place = hostAddressable() && !p.force_staging.load(std::memory_order_relaxed) &&
                        runOnCpuAliases(op, stack, &bytes_copied);
  if (!in_place) {
    // Elsewhere (and for out= arguments the CPU kernel resizes): through
    // pinned copies on the current stream.
    runStaged(op, stack, &bytes_copied);
  }
  recordCall(*state, start, bytes_copied);
}

void noKernelFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runOnCpu(op, stack, std::string());
}

std::vector<std::string> sorted(const std::set<std::string>& names) {
  return {names.begin(), names.end()};
}

}  // namespace

void setPendingRefusal(std::string refusal) { pending_refusal = std::move(refusal); }

void runInCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runOnCpu(op, stack, std::string());
}

void refusedKernelFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runOnCpu(op, stack, std::exchange(pending_refusal, std::string()));
}

FallbackMode fallbackMode() { return policy().mode.load(); }

void setFallbackStagingForced(bool force) { policy().force_staging.store(force); }

bool fallbackStagingForced() { return policy().force_staging.load(); }

void setFallbackMode(FallbackMode mode) { policy().mode.store(mode); }

const char* fallbackModeName(FallbackMode mode) {
  switch (mode) {
    case FallbackMode::Warn:
      return "warn";
    case FallbackMode::Silent:
      return "silent";
    case FallbackMode::Off:
      return "off";
  }
  return "?";
}

FallbackMode parseFallbackMode(const std::string& name) {
  if (name == "warn") return FallbackMode::Warn;
  if (name == "silent") return FallbackMode::Silent;
  if (name == "off") return FallbackMode::Off;
  TORCH_CHECK_VALUE(false, kEnvVar, " (the CPU fallback mode) must be warn, silent or off, got '",
                    name, "'");
}

void setFallbackAllowed(const std::vector<std::string>& names) {
  Policy& p = policy();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.allowed = {names.begin(), names.end()};
  p.has_lists = !p.allowed.empty() || !p.denied.empty();
}

void setFallbackDenied(const std::vector<std::string>& names) {
  Policy& p = policy();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.denied = {names.begin(), names.end()};
  p.has_lists = !p.allowed.empty() || !p.denied.empty();
}

std::vector<std::string> fallbackAllowed() {
  Policy& p = policy();
  std::lock_guard<std::mutex> lock(p.mutex);
  return sorted(p.allowed);
}

std::vector<std::string> fallbackDenied() {
  Policy& p = policy();
  std::lock_guard<std::mutex> lock(p.mutex);
  return sorted(p.denied);
}

std::map<std::string, FallbackStats> fallbackStats() {
  Policy& p = policy();
  std::lock_guard<std::mutex> lock(p.mutex);
  std::map<std::string, FallbackStats> stats;
  const double seconds_per_tick = p.secondsPerTick();
  for (const auto& [schema, state] : p.operators) {
    const int64_t calls = state.calls.load(std::memory_order_relaxed);
    if (calls == 0) continue;
    stats[state.name] = {calls, static_cast<double>(state.ticks.load()) * seconds_per_tick,
                         state.bytes_copied.load()};
  }
  return stats;
}

void resetFallbackStats() {
  Policy& p = policy();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (auto& [schema, state] : p.operators) {  // warnings stay
    state.calls = 0;
    state.ticks = 0;
    state.bytes_copied = 0;
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&noKernelFallback>());
}

// infini tensors are strided and dense. Sparse, nested and quantized tensors
// can still be made with infini members (`sparse.to("infini")`); every
// operator without a kernel for them names what is unsupported.
template <const char* kKind>
void refuseTensorKind(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "'", qualifiedName(op),
                              "': infini supports strided (dense) tensors only, not ", kKind,
                              " tensors (backend '", backendName(), "').");
}
constexpr char kSparse[] = "sparse COO";
constexpr char kSparseCsr[] = "sparse compressed (CSR/CSC/BSR/BSC)";
constexpr char kNested[] = "nested";
constexpr char kQuantized[] = "quantized";

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuseTensorKind<kSparse>>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuseTensorKind<kSparseCsr>>());
}
TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuseTensorKind<kNested>>());
}
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuseTensorKind<kQuantized>>());
}

// Operators whose CPU kernel would not run under PyTorch's dispatch rules
// for a backend without a kernel of its own; each is registered for infini
// with the fallback, so the CPU kernel runs whole and results are the CPU's
// bit for bit. They are not infini kernels: torch_infini.operators() does not
// list them; cpu_fallback.routed_operators() does.
//
// 1. The CPU has its own kernel while other backends get a composite
//    decomposition (CompositeExplicitAutograd, or CompositeImplicitAutograd
//    with a derivative formula so autograd keeps working): native_layer_norm,
//    native_group_norm, addr, silu_backward, ... -- the decomposition rounds
//    differently. Found in the dispatcher, so a new PyTorch brings its own.
// 2. Convolutions: PyTorch sends a backend outside its list (CPU, CUDA,
//    MKLDNN, ...) to convolution_overrideable; the CPU's convolution runs
//    instead (where the seam's kernel refuses the forward,
//    aten/convolution.cpp), and autograd's convolution_backward with it.
// 3. Losses whose functional form other backends get as "allocate the
//    result, then call .out", while the CPU's .out kernel builds an
//    elementwise iterator over that (reduced) result: it resizes it and
//    warns "An output with one or more elements was resized". The CPU's
//    functional kernel runs instead. (Found by running every OpInfo.)
// 4. The functional and in-place forms of structured operators (atan2,
//    atan2_, ...), which other backends get as "meta function, allocate,
//    call .out": the CPU's own functional or in-place kernel runs instead,
//    so the output geometry is computed once, not twice. Where device
//    memory is host memory the CPU kernel allocates the result in device
//    memory itself (fallback/aliased_memory.cpp); elsewhere nothing is staged for an
//    output before the kernel runs. A 0-dim CPU tensor beside them (a
//    Python number) is taken where CUDA's TensorIterator takes it; calls
//    with other CPU tensor arguments (whose device errors the meta function
//    raises) take the default path. Those over one or two tensors that
//    return one (atan2, hypot, exp, div.Tensor, eq.Tensor, ...) are
//    registered unboxed (TypedStructuredForm): a call of plain infini
//    tensors skips the stack and goes straight to the CPU kernel.
// 5. The foreach operators (_foreach_add_, _foreach_lerp_, ...: what the
//    optimizers' steps are made of) without an infini kernel (the in-place
//    ones have one, aten/foreach.cpp, which hands here what its provider
//    does not take). Every backend without a kernel of its
//    own, the CPU included, runs their CompositeExplicitAutograd loop of
//    per-tensor calls; on infini each of those would be a call of its own
//    (most of them the fallback's). Routed whole: one call per tensor list,
//    the CPU's loop on the CPU side, when every tensor is on one infini
//    device; otherwise the per-tensor loop, as on CUDA (whose fast path
//    takes one device), each call accepting or raising as it does there.
namespace {

// The forward (aten::convolution, aten::_convolution) is the seam's kernel,
// which hands its refusals to fallback/convolution.cpp.
constexpr const char* kConvolutions[] = {"aten::convolution_backward"};
constexpr const char* kResizingOutLosses[] = {"aten::mse_loss", "aten::smooth_l1_loss"};

bool hasInfiniKernel(const std::string& name) {
  for (const OperatorEntry& entry : sealedOperatorTable())
    if (entry.name == name) return true;
  return false;
}

// Whether some overload of `base` ("aten::add") has an infini kernel.
bool hasInfiniKernelForAnyOverload(const std::string& base) {
  for (const OperatorEntry& entry : sealedOperatorTable()) {
    const std::string& name = entry.name;
    if (name.compare(0, base.size(), base) == 0 &&
        (name.size() == base.size() || name[base.size()] == '.'))
      return true;
  }
  return false;
}

bool cpuKernelIsBypassed(const c10::OperatorHandle& op) {
  using c10::DispatchKey;
  if (!op.hasSchema() || !op.hasKernelForDispatchKey(DispatchKey::CPU)) return false;
  const bool explicit_composite =
      op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutograd);
  const bool implicit_with_formula =
      op.hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd) &&
      op.hasKernelForDispatchKey(DispatchKey::Autograd);
  return (explicit_composite || implicit_with_formula) && !isView(op.schema()) &&
         !op.hasTag(at::Tag::nondeterministic_seeded);
}

const std::vector<std::string>& routedOperators();

// Category 4: a structured operator's functional or in-place form (the
// default backends' kernel for it is CompositeExplicitAutogradNonFunctional)
// of which no overload has an infini kernel: those served natively keep
// their meta + .out path.
bool isStructuredForm(const c10::OperatorHandle& op) {
  using c10::DispatchKey;
  return op.hasSchema() && op.hasKernelForDispatchKey(DispatchKey::CPU) &&
         op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutogradNonFunctional) &&
         !isView(op.schema()) && !op.hasTag(at::Tag::nondeterministic_seeded) &&
         !cpuKernelIsBypassed(op) &&  // routed already (category 1)
         !hasInfiniKernelForAnyOverload(op.schema().operator_name().name);
}

// The qualified names of the aten operators for which `select` holds.
template <typename Select>
std::vector<std::string> atenOperatorsWhere(Select select) {
  std::vector<std::string> found;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& op_name : dispatcher.getAllOpNames()) {
    if (op_name.name.rfind("aten::", 0) != 0) continue;
    auto op = dispatcher.findOp(op_name);
    if (op.has_value() && select(*op)) found.push_back(qualifiedName(*op));
  }
  return found;
}

const std::vector<std::string>& structuredForms() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> found = atenOperatorsWhere([](const c10::OperatorHandle& op) {
      return isStructuredForm(op) &&
             !std::binary_search(routedOperators().begin(), routedOperators().end(),
                                 qualifiedName(op));
    });
    std::sort(found.begin(), found.end());
    return found;
  }();
  return names;
}

// Whether the CPU kernel of a structured operator's functional or in-place
// form can run directly: every tensor argument is an infini tensor, or a
// 0-dim CPU tensor (a Python number: `x / 3`, `grad / n`) beside them where
// the operator is a TensorIterator one, which takes one CPU scalar on CUDA.
// The direct kernel then sees what the meta function would, and runOnCpu's
// device check raises what CUDA raises (two CPU scalars, a written one).
// Other CPU tensors take the default path, whose meta function raises.
bool directlyCallable(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  bool cpu_scalar = false;
  bool other = false;
  for (size_t i = stack.size() - schema.arguments().size(); i < stack.size() && !other; ++i) {
    forEachTensor(stack[i], [&](const at::Tensor& t) {
      if (!t.defined() || t.device().type() == c10::DeviceType::PrivateUse1) return;
      if (t.is_cpu() && t.dim() == 0) {
        cpu_scalar = true;
      } else {
        other = true;
      }
    });
  }
  return !other && (!cpu_scalar || stateFor(op).device_check == DeviceCheck::kTensorIterator);
}

bool isForeach(const c10::OperatorHandle& op) {
  return op.hasSchema() && op.schema().name().rfind("aten::_foreach_", 0) == 0 &&
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
}

// Every tensor argument is on one and the same infini device.
bool onOneInfiniDevice(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  std::optional<c10::Device> device;
  bool one = true;
  for (size_t i = stack.size() - schema.arguments().size(); i < stack.size() && one; ++i) {
    forEachTensor(stack[i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (t.device().type() != c10::DeviceType::PrivateUse1 || (device && *device != t.device()))
        one = false;
      device = t.device();
    });
  }
  return one && device.has_value();
}

void structuredFormFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (directlyCallable(op, *stack)) {
    runOnCpu(op, stack, std::string());
    return;
  }
  op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional, *stack);
}

// The state of `op` when runOnCpu would run it on CPU aliases without a
// word: the policy allows it quietly (mode silent, or warned already; no
// allow or deny lists), device memory is host memory, nothing forces
// staging, and no dtype is widened as CUDA computes it. Else nullptr.
OperatorState* quietlyAliasedState(const c10::OperatorHandle& op) {
  Policy& p = policy();
  const FallbackMode mode = p.mode.load(std::memory_order_relaxed);
  if (mode == FallbackMode::Off || p.has_lists.load(std::memory_order_relaxed) ||
      !hostAddressable() || p.force_staging.load(std::memory_order_relaxed)) {
    return nullptr;
  }
  OperatorState& state = stateFor(op);
  if ((mode == FallbackMode::Warn && !state.warned.load(std::memory_order_relaxed)) ||
      state.cuda_dtypes != nullptr || state.random || state.view) {
    return nullptr;
  }
  return &state;
}

// The typed entry of a structured operator's functional form over one or
// two tensors (atan2, hypot, erfinv, ...): most of what such a small call
// costs beyond the CPU's is boxing and the generic argument walk. A call of
// plain infini tensors on one device that runOnCpu would run quietly on
// aliases goes straight to the CPU kernel, unboxed; every other call takes
// structuredFormFallback, boxed, which raises, warns, widens, stages or
// profiles as it always does.
template <typename... Tensors>
class TypedStructuredForm {
 public:
  using Signature = at::Tensor(const Tensors&...);

  explicit TypedStructuredForm(const c10::OperatorHandle& op) : op_(op.typed<Signature>()) {}

  at::Tensor operator()(const Tensors&... args) const {
    if (OperatorState* state = quietlyAliasedState(op_)) {
      const c10::approx_time_t start = c10::getApproximateTime();
      int64_t bytes_copied = 0;
      const at::Tensor* pointers[] = {&args...};
      std::optional<at::Tensor> result = runFunctionalOnCpuAliases(
          op_, pointers,
          [this](c10::ArrayRef<at::Tensor> cpu) {
            return callCpu(cpu, std::index_sequence_for<Tensors...>());
          },
          &bytes_copied);
      if (result.has_value()) {
        recordCall(*state, start, bytes_copied);
        return *std::move(result);
      }
    }
    torch::jit::Stack stack{args...};
    structuredFormFallback(op_, &stack);
    return std::move(stack.back()).toTensor();
  }

 private:
  template <size_t... I>
  at::Tensor callCpu(c10::ArrayRef<at::Tensor> cpu, std::index_sequence<I...>) const {
    return op_.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), cpu[I]...);
  }

  c10::TypedOperatorHandle<Signature> op_;
};

// Whether the schema is `(Tensor a[, Tensor b]) -> Tensor` with no alias
// annotation: a functional form TypedStructuredForm serves. The number of
// tensor arguments, else 0.
size_t typedTensorArguments(const c10::FunctionSchema& schema) {
  auto plainTensor = [](const c10::Argument& a) {
    return a.type()->kind() == c10::TypeKind::TensorType && a.alias_info() == nullptr;
  };
  if (schema.returns().size() != 1 || !plainTensor(schema.returns()[0]) || schema.is_vararg() ||
      schema.is_varret()) {
    return 0;
  }
  const size_t n = schema.arguments().size();
  if (n < 1 || n > 2) return 0;
  for (const c10::Argument& a : schema.arguments())
    if (!plainTensor(a)) return 0;
  return n;
}

const std::vector<std::string>& routedOperators() {
  // Computed after this library loaded (registerFallbackRoutes or a
  // query): ATen's registrations (libtorch_cpu) are complete by then, and so
  // are infini's own (the operator table).
  static const std::vector<std::string> names = [] {
    std::vector<std::string> found(std::begin(kConvolutions), std::end(kConvolutions));
    for (const char* name : kResizingOutLosses)
      if (!hasInfiniKernel(name)) found.emplace_back(name);
    for (std::string& name : atenOperatorsWhere([](const c10::OperatorHandle& op) {
           return (cpuKernelIsBypassed(op) || isForeach(op)) && !hasInfiniKernel(qualifiedName(op));
         })) {
      found.push_back(std::move(name));
    }
    std::sort(found.begin(), found.end());
    return found;
  }();
  return names;
}

}  // namespace

void foreachFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string refusal = std::exchange(pending_refusal, std::string());
  if (onOneInfiniDevice(op.schema(), *stack)) {
    runOnCpu(op, stack, refusal);
    return;
  }
  op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
}

namespace {

// The routes, registered once. They read the operator table: every infini
// kernel registered by then, which a static initializer here could not rely
// on (it would run in link order), so the library's users call this after
// loading: torch_infini::init() and the Python module's import.
void registerRoutes(torch::Library& m) {
  for (const std::string& name : routedOperators()) {
    // Convolutions and a few more register their own wrapper
    // (fallback/convolution.cpp, fallback/layouts.cpp).
    if (std::find(std::begin(kConvolutions), std::end(kConvolutions), name) !=
            std::end(kConvolutions) ||
        isLayoutWrapped(name))
      continue;
    if (name.rfind("aten::_foreach_", 0) == 0) {
      m.impl(name.substr(std::strlen("aten::")).c_str(),
             torch::CppFunction::makeFromBoxedFunction<&foreachFallback>());
      continue;
    }
    m.impl(name.substr(std::strlen("aten::")).c_str(),
           torch::CppFunction::makeFromBoxedFunction<&noKernelFallback>());
  }
  for (const std::string& name : structuredForms()) {
    if (isLayoutWrapped(name)) continue;
    const std::string unqualified = name.substr(std::strlen("aten::"));
    const size_t dot = unqualified.find('.');
    const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
        ("aten::" + unqualified.substr(0, dot)).c_str(),
        dot == std::string::npos ? "" : unqualified.substr(dot + 1).c_str());
    switch (typedTensorArguments(op.schema())) {
      case 1:
        m.impl(unqualified.c_str(), torch::CppFunction(TypedStructuredForm<at::Tensor>(op)));
        break;
      case 2:
        m.impl(unqualified.c_str(),
               torch::CppFunction(TypedStructuredForm<at::Tensor, at::Tensor>(op)));
        break;
      default:
        m.impl(unqualified.c_str(),
               torch::CppFunction::makeFromBoxedFunction<&structuredFormFallback>());
    }
  }
}

}  // namespace

void registerFallbackRoutes() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Kept for the process: a Library's registrations end with it.
    static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                  __FILE__, __LINE__);
    registerRoutes(library);
  });
}

std::vector<std::string> fallbackRoutedOperators() {
  std::vector<std::string> names = routedOperators();
  names.insert(names.end(), structuredForms().begin(), structuredForms().end());
  const std::vector<std::string>& wrapped = layoutWrappedOperators();
  names.insert(names.end(), wrapped.begin(), wrapped.end());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace torch_infini::ops
