// The CPU fallback where device memory is host memory (capability
// host_addressable: `host`, InfiniRT `cpu`): the CPU kernel runs on the
// infini tensors' own memory, through CPU tensors that alias it. Inputs are
// not copied; in-place and out= arguments are written where they are. A
// functional call's CPU kernel allocates its results in device memory
// (cpu_allocation_redirect.h), which the infini results then own: no copy.
// Only a result something else still holds is copied to the device, once.
// Aliasing between arguments is kept (one CPU storage per infini storage), so
// the CPU kernel's own overlap checks see what they would see on the CPU.
#include "fallback/aliased_memory.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <optional>
#include <typeinfo>
#include <utility>
#include <vector>

#include "common/bridge.h"
#include "common/dims.h"
#include "fallback/arguments.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/cpu_allocation_redirect.h"

namespace torch_infini::ops {
namespace {

// Whether two tensors have the same sizes, strides and offset.
bool sameGeometry(const c10::TensorImpl& a, const c10::TensorImpl& b) {
  return a.storage_offset() == b.storage_offset() && sameDims(a.sizes(), b.sizes()) &&
         sameDims(a.strides(), b.strides());
}

// Whether one TensorImpl alone holds `storage` (no other strong or weak
// reference). The counts are read through a borrowed pointer (reclaimed,
// then released): no atomic increment and decrement for a read.
bool heldOnce(const c10::StorageImpl* storage) {
  auto borrowed =
      c10::intrusive_ptr<c10::StorageImpl>::reclaim(const_cast<c10::StorageImpl*>(storage));
  const bool once = borrowed.use_count() == 1 && borrowed.weak_use_count() == 1;
  borrowed.release();
  return once;
}

// Per thread, the CPU tensors the fallback made as aliases, reused from call
// to call: a TensorImpl and a StorageImpl for every argument are most of a
// small call's cost. One is reused only when nothing but the pool holds it
// and nothing but it holds its storage (no strong or weak reference left by
// a kernel); the pool keeps at most kMaxPooled.
class AliasPool {
 public:
  // A CPU tensor of `dtype` over `storage`, or (undefined `storage`) over a
  // CPU storage of `nbytes` at `data`, which `storage` is set to.
  at::Tensor take(c10::Storage& storage, void* data, size_t nbytes, caffe2::TypeMeta dtype) {
    for (at::Tensor& pooled : tensors_) {
      if (pooled.use_count() != 1 || pooled.weak_use_count() != 1) continue;
      c10::TensorImpl* impl = pooled.unsafeGetTensorImpl();
      if (!storage) {
        if (!heldOnce(impl->storage().unsafeGetStorageImpl())) continue;
        c10::StorageImpl* own = impl->storage().unsafeGetStorageImpl();
        own->set_data_ptr_noswap(c10::DataPtr(data, c10::Device(c10::kCPU)));
        own->set_nbytes(nbytes);
        storage = impl->storage();
        if (impl->dtype() != dtype) impl->set_storage_and_dtype(storage, dtype);
      } else {
        impl->set_storage_and_dtype(storage, dtype);
      }
      if (impl->is_conj()) impl->_set_conj(false);
      if (impl->is_neg()) impl->_set_neg(false);
      return pooled;
    }
    if (!storage) {
      storage = c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                             c10::DataPtr(data, c10::Device(c10::kCPU)),
                             /*allocator=*/nullptr, /*resizable=*/false);
    }
    at::Tensor fresh = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype);
    if (tensors_.size() < kMaxPooled) tensors_.push_back(fresh);
    return fresh;
  }

 private:
  static constexpr size_t kMaxPooled = 16;

  std::vector<at::Tensor> tensors_;
};

// What a thread's fallback calls keep, in one thread_local: each access to
// a thread_local of a shared library is a call (__tls_get_addr).
struct ThreadState {
  AliasPool aliases;
  // The operator this thread is running on the CPU (see RunningOperator).
  const c10::OperatorHandle* running = nullptr;
};
thread_local ThreadState thread_state;

class Aliaser {
 public:
  explicit Aliaser(AliasPool& pool) : pool_(pool) {}

  // t itself unless it is an infini tensor; then a CPU tensor over the same
  // memory, with the same geometry and view bits.
  at::Tensor toCpu(at::Tensor t) {
    if (!t.defined()) return t;
    if (!isInfini(t)) {
      noteKeys(t.key_set());
      return t;
    }
    requireStrided(t);
    noteDevice(t.device());
    c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    Entry* entry = nullptr;
    for (Entry& e : storages_)
      if (e.impl == impl) entry = &e;
    const at::Tensor* infini = &t;
    if (entry == nullptr) {
      entry = &storages_.emplace_back();  // (entry is not used past this call)
      entry->impl = impl;
      entry->infini = std::move(t);  // the stack's reference keeps the storage alive
      infini = &entry->infini;
    }
    const c10::TensorImpl& geometry = *infini->unsafeGetTensorImpl();
    at::Tensor alias =
        pool_.take(entry->cpu, impl->mutable_data(), impl->nbytes(), geometry.dtype());
    // A pooled alias often has the geometry already (the same call again).
    if (!sameGeometry(*alias.unsafeGetTensorImpl(), geometry)) {
      alias.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes(), geometry.strides(),
                                                         geometry.storage_offset());
    }
    if (geometry.is_conj()) alias._set_conj(true);
    if (geometry.is_neg()) alias._set_neg(true);
    noteKeys(alias.key_set());
    return alias;
  }

  // Whether every tensor argument is a dense CPU tensor (an alias or the
  // caller's) with no view bits: then the CPU kernel can be called directly.
  bool onlyPlainCpuTensors() const { return only_plain_cpu_; }

  void noteDevice(c10::Device device) { device_.note(device); }

  // A result of the CPU kernel as an infini tensor: memory it shares with an
  // argument stays that memory; device memory the kernel allocated becomes
  // the result's; other memory is copied once.
  at::Tensor toInfini(at::Tensor t, int64_t* bytes_copied) {
    if (!t.defined() || !device_.get()) return t;
    requireStrided(t);
    for (const Entry& entry : storages_) {
      if (t.storage().is_alias_of(entry.cpu)) {
        return entry.infini.as_strided(t.sizes(), t.strides(), t.storage_offset());
      }
    }
    if (at::Tensor adopted = adopt(t); adopted.defined()) return adopted;
    return resultToDevice(t, *device_.get(), bytes_copied);
  }

  const std::optional<c10::Device>& device() const { return device_.get(); }

  // After the CPU kernel: whether it gave `alias` (the CPU alias of the
  // mutable infini argument `target`) another storage, as set_ does. Then
  // `target` takes the matching storage (an argument's, or a new device
  // copy of the kernel's), and `alias` an empty storage of the pool's kind,
  // so that the pool never lends out a storage some kernel made.
  bool replacedStorage(const at::Tensor& target, const at::Tensor& alias) {
    const c10::StorageImpl* now = alias.storage().unsafeGetStorageImpl();
    const Entry* own = nullptr;
    const Entry* other = nullptr;
    for (const Entry& e : storages_) {
      if (e.impl == target.storage().unsafeGetStorageImpl()) own = &e;
      if (e.cpu.unsafeGetStorageImpl() == now) other = &e;
    }
    if (own != nullptr && other == own) {
      takeGrownMemory(*own);
      return false;
    }
    c10::TensorImpl* impl = target.unsafeGetTensorImpl();
    if (other != nullptr) {
      impl->set_storage_keep_dtype(other->infini.storage());
    } else {
      const size_t nbytes = alias.storage().nbytes();
      const int device = target.device().index();
      c10::DataPtr data = allocateForHostAccess(device, nbytes, currentStreamIdUnchecked(device));
      if (nbytes > 0) std::memcpy(data.get(), alias.storage().data(), nbytes);
      impl->set_storage_keep_dtype(c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                                                std::move(data), deviceAllocator(),
                                                /*resizable=*/true));
    }
    impl->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    alias.unsafeGetTensorImpl()->set_storage_keep_dtype(
        c10::Storage(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, c10::kCPU),
                     /*allocator=*/nullptr, /*resizable=*/false));
    return true;
  }

  // Before the CPU kernel: the alias of the mutable infini argument
  // `target` may grow as the infini tensor would (out= of another size, as
  // arange(..., out=torch.empty(0)) has): its CPU storage becomes resizable,
  // through the CPU allocator, which the call's RedirectCpuAllocations scope
  // sends to device memory. A storage the infini one could not grow stays
  // fixed, and the kernel's resize fails as it would there.
  void allowGrowth(const at::Tensor& target) {
    const c10::StorageImpl* infini = target.storage().unsafeGetStorageImpl();
    if (!infini->resizable()) return;
    for (Entry& e : storages_) {
      if (e.impl != infini || !e.cpu) continue;
      c10::StorageImpl* cpu = e.cpu.unsafeGetStorageImpl();
      if (cpu->resizable()) return;
      installCpuAllocationRedirect();  // GetCPUAllocator() is then the redirecting one
      cpu->set_allocator(c10::GetCPUAllocator());
      cpu->set_resizable(true);
      grown_.push_back(cpu);
    }
  }

  // After the call, kernel or exception: the storages allowGrowth made
  // resizable are fixed again (the pool lends them on), and any device
  // memory one still owns (the kernel grew it, then failed) is freed.
  ~Aliaser() {
    for (c10::StorageImpl* cpu : grown_) {
      if (isRedirectedAllocation(cpu->data_ptr())) {
        cpu->set_data_ptr_noswap(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
        cpu->set_nbytes(0);
      }
      cpu->set_resizable(false);
      cpu->set_allocator(nullptr);
    }
  }

  Aliaser(const Aliaser&) = delete;
  Aliaser& operator=(const Aliaser&) = delete;

  bool mayGrow() const { return !grown_.empty(); }

 private:
  // `t` as an infini tensor over the same memory, when the CPU kernel
  // allocated it in device memory and nothing but `t` holds it (a kernel
  // that kept a reference would see its memory change device); else
  // undefined. The device block moves to an infini storage whole, as if
  // at::empty had made it.
  at::Tensor adopt(at::Tensor& t) const {
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    c10::StorageImpl* cpu = impl->storage().unsafeGetStorageImpl();
    if (t.use_count() != 1 || t.weak_use_count() != 1 || !heldOnce(cpu) ||
        !isRedirectedAllocation(cpu->data_ptr())) {
      return {};
    }
    const c10::Device device = *device_.get();
    if (isPlainCpuTensor(*impl) && typeid(*cpu) == typeid(c10::StorageImpl)) {
      // Nothing else knows this tensor or its storage yet: both become the
      // infini ones (device memory and allocator, backend keys), as
      // at::empty would have made them.
      cpu->set_data_ptr_noswap(takeDeviceAllocation(cpu->set_data_ptr(c10::DataPtr())));
      cpu->set_allocator(deviceAllocator());
      impl->set_storage_keep_dtype(impl->storage());  // the tensor's device follows
      impl->_change_backend_component_keys(device);
      return std::move(t);
    }
    const size_t nbytes = cpu->nbytes();
    c10::DataPtr data =
        takeDeviceAllocation(cpu->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU))));
    cpu->set_nbytes(0);
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                         deviceAllocator(), /*resizable=*/true);
    at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t.dtype());
    out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) out._set_conj(true);
    if (t.is_neg()) out._set_neg(true);
    return out;
  }

  // A TensorImpl as at::empty makes it on the CPU: the CPU backend and only
  // the autograd and autocast keys PyTorch adds to every tensor (none of
  // conjugate, negative, Python, ...), of the plain TensorImpl class.
  static bool isPlainCpuTensor(const c10::TensorImpl& impl) {
    return onlyCpuKeys(impl.key_set()) && typeid(impl) == typeid(c10::TensorImpl);
  }

  // Whether `keys` are the CPU backend's and those PyTorch gives every
  // tensor (autograd, autocast): no conjugate or negative view, no sparse,
  // Python or other key.
  static bool onlyCpuKeys(c10::DispatchKeySet keys) {
    return keys - c10::getAutogradRelatedKeySetFromBackend(c10::BackendComponent::CPUBit) -
               c10::getAutocastRelatedKeySetFromBackend(c10::BackendComponent::CPUBit) ==
           c10::DispatchKeySet(c10::DispatchKey::CPU);
  }

  // Keys of a tensor the CPU kernel will get: any beyond onlyCpuKeys' (a
  // conjugate or negative view, a sparse or wrapper tensor) need the full
  // dispatch.
  void noteKeys(c10::DispatchKeySet keys) {
    if (!onlyCpuKeys(keys)) only_plain_cpu_ = false;
  }

  struct Entry {
    c10::StorageImpl* impl = nullptr;  // the infini storage
    c10::Storage cpu;                  // the CPU storage over the same memory
    at::Tensor infini;                 // a tensor of that storage (keeps it alive)
  };
  // An entry whose CPU storage the kernel grew (resize_bytes_cpu: new
  // device memory, the old contents copied): the infini storage takes that
  // memory, so every tensor of it sees the growth, as on the CPU; its old
  // memory returns to the device cache.
  void takeGrownMemory(const Entry& entry) {
    c10::StorageImpl* cpu = entry.cpu.unsafeGetStorageImpl();
    if (!isRedirectedAllocation(cpu->data_ptr())) return;
    void* data = cpu->mutable_data();
    const size_t nbytes = cpu->nbytes();
    entry.impl->set_data_ptr_noswap(
        takeDeviceAllocation(cpu->set_data_ptr(c10::DataPtr(data, c10::Device(c10::kCPU)))));
    entry.impl->set_nbytes(nbytes);
  }

  // A handful per call: a linear search beats hashing.
  c10::SmallVector<Entry, 4> storages_;
  CallDevice device_;
  AliasPool& pool_;
  bool only_plain_cpu_ = true;
  c10::SmallVector<c10::StorageImpl*, 2> grown_;  // allowGrowth
};

bool isResizeRefusal(const c10::Error& e) {
  return std::string(e.what_without_backtrace()).find("not resizable") != std::string::npos;
}

// Mutable tensor arguments and their CPU aliases, by argument index.
using MutableAliases = c10::SmallVector<std::pair<size_t, at::Tensor>, 4>;

// The mutable infini arguments (in-place self, out=) of a call whose
// arguments `original` held, with the CPU aliases the stack holds from
// `begin` on: a CPU kernel may give them a new shape within their memory (an
// out= of 0 elements resized to (1, 0, 3)), which the infini tensor must
// take too.
MutableAliases mutableAliases(const c10::FunctionSchema& schema, const Arguments& original,
                              const torch::jit::Stack& stack, size_t begin, Aliaser& aliaser) {
  MutableAliases aliases;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (writes(schema, i) && original[i].isTensor() && isInfini(original[i].toTensor())) {
      aliases.emplace_back(i, stack[begin + i].toTensor());
      // In-place operators keep self's size; out= arguments are resized.
      if (schema.arguments()[i].is_out()) aliaser.allowGrowth(original[i].toTensor());
    }
  }
  return aliases;
}

// Before the CPU reads and writes the memory of the call's device: the
// stream's pending work first. A functional call's CPU kernel allocates its
// results in device memory (on the current stream), which the infini results
// then take over, and so does the growth of a mutable argument's storage:
// `redirect` holds that scope.
void prepareDevice(const Aliaser& aliaser, bool functional,
                   std::optional<RedirectCpuAllocations>* redirect) {
  if (!aliaser.device()) return;
  const int device = aliaser.device()->index();
  const c10::StreamId stream = currentStreamIdUnchecked(device);
  runtime::selectedRuntime().synchronizeStream(nativeStreamUnchecked(device, stream));
  if (functional || aliaser.mayGrow()) redirect->emplace(device, stream);
}

// Marks `op` as the operator this thread runs on the CPU, for the scope.
// Every infini argument is a CPU alias by then, so the call cannot come back
// to the fallback; should an argument kind be missed, it refuses instead of
// recursing.
class RunningOperator {
 public:
  RunningOperator(const c10::OperatorHandle*& slot, const c10::OperatorHandle& op) : slot_(slot) {
    TORCH_CHECK_NOT_IMPLEMENTED(slot == nullptr || !(*slot == op),
                                "infini: the CPU fallback could not move every argument of '",
                                op.schema().operator_name(), "' to the CPU");
    outer_ = std::exchange(slot, &op);
  }
  ~RunningOperator() { slot_ = outer_; }
  RunningOperator(const RunningOperator&) = delete;
  RunningOperator& operator=(const RunningOperator&) = delete;

 private:
  const c10::OperatorHandle*& slot_;
  const c10::OperatorHandle* outer_ = nullptr;
};

// Whether the CPU kernel can be called straight, as at::native::cpu_fallback
// calls it (no second pass through the dispatch keys, which the infini call
// passed already): every argument is a plain CPU tensor. A profiler that
// records operators gets the full call, which it records nested in the
// infini one; view bits get it too, for their fallbacks (whose per-operator
// fallthroughs only a full dispatch skips).
bool callsKernelDirectly(const Aliaser& aliaser) {
  return aliaser.onlyPlainCpuTensors() &&
         !at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION).has_value();
}

// Calls the CPU kernel on the aliased arguments: directly where it can
// (callsKernelDirectly), else through the full dispatch. Either way CPU
// autocast stays out: it is for CPU tensors, and these are infini's.
void callCpuKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                   const Aliaser& aliaser) {
  if (callsKernelDirectly(aliaser)) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  } else {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    op.callBoxed(stack);
  }
}

// After the CPU kernel: each mutable infini argument takes the storage or
// the geometry the kernel gave its alias.
void updateMutableArguments(const MutableAliases& aliases, const Arguments& original,
                            Aliaser& aliaser) {
  for (const auto& [index, alias] : aliases) {
    const at::Tensor& target = original[index].toTensor();
    if (aliaser.replacedStorage(target, alias)) continue;
    if (!sameGeometry(*target.unsafeGetTensorImpl(), *alias.unsafeGetTensorImpl())) {
      // Same storage (grown, if it had to, by replacedStorage): the geometry
      // moved. Never a geometry past the storage's end.
      TORCH_INTERNAL_ASSERT(
          at::detail::computeStorageNbytes(alias.sizes(), alias.strides(), alias.itemsize(),
                                           alias.storage_offset()) <= target.storage().nbytes(),
          "infini: the CPU fallback lost the growth of an argument's storage");
      target.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(),
                                                          alias.storage_offset());
    }
  }
}

}  // namespace

std::optional<at::Tensor> runFunctionalOnCpuAliases(
    const c10::OperatorHandle& op, c10::ArrayRef<const at::Tensor*> args,
    c10::function_ref<at::Tensor(c10::ArrayRef<at::Tensor>)> kernel, int64_t* bytes_copied) {
  // CPU tensors, even 0-dim ones, are the device check's (runOnCpu).
  for (const at::Tensor* t : args)
    if (!t->defined() || !isInfini(*t)) return std::nullopt;
  ThreadState& thread = thread_state;
  Aliaser aliaser(thread.aliases);
  c10::SmallVector<at::Tensor, 2> cpu;
  for (const at::Tensor* t : args) cpu.push_back(aliaser.toCpu(*t));
  if (!callsKernelDirectly(aliaser)) return std::nullopt;  // the aliases only are undone
  std::optional<RedirectCpuAllocations> redirect;
  prepareDevice(aliaser, /*functional=*/true, &redirect);
  const RunningOperator running(thread.running, op);
  at::Tensor result = kernel(cpu);
  cpu.clear();  // the aliases back to the pool
  return aliaser.toInfini(std::move(result), bytes_copied);
}

bool runOnCpuAliases(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                     int64_t* bytes_copied) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t begin = stack->size() - schema.arguments().size();
  // What a call that writes arguments (in-place, out=) needs of them after
  // the CPU kernel ran; a functional call needs none (every argument is
  // kept alive by the aliaser).
  const bool functional = !writesAny(schema);
  const Arguments original = functional ? Arguments() : argumentsOf(*stack, begin);
  ThreadState& thread = thread_state;
  Aliaser aliaser(thread.aliases);
  argumentsToCpu(
      stack, begin, [&](const at::Tensor& t) { return aliaser.toCpu(t); },
      [&](c10::Device device) { aliaser.noteDevice(device); });
  const MutableAliases mutable_aliases =
      functional ? MutableAliases() : mutableAliases(schema, original, *stack, begin, aliaser);
  // The redirect and the running mark last to the return: over the results'
  // conversion to infini tensors too.
  std::optional<RedirectCpuAllocations> redirect;
  prepareDevice(aliaser, functional, &redirect);
  const RunningOperator running(thread.running, op);
  try {
    callCpuKernel(op, stack, aliaser);
  } catch (const c10::Error& e) {
    // Only an out= argument can be refused a resize; a functional call kept
    // no copy of its arguments to retry with.
    if (functional || !isResizeRefusal(e)) throw;
    // An out= argument of the wrong size: the CPU kernel resizes it, which
    // memory it does not own cannot do. The caller copies instead.
    stack->resize(begin);
    stack->insert(stack->end(), original.begin(), original.end());
    return false;
  }
  updateMutableArguments(mutable_aliases, original, aliaser);
  returnsToInfini(schema, stack, original,
                  [&](at::Tensor t) { return aliaser.toInfini(std::move(t), bytes_copied); });
  return true;
}

}  // namespace torch_infini::ops
