// The CPU fallback where device memory is host memory (capability
// host_addressable: `host`, InfiniRT `cpu`): the CPU kernel runs on the
// infini tensors' own memory, through CPU tensors that alias it. Inputs are
// not copied; in-place and out= arguments are written where they are; only
// results the CPU kernel allocates itself are copied to the device, once.
// Aliasing between arguments is kept (one CPU storage per infini storage), so
// the CPU kernel's own overlap checks see what they would see on the CPU.
#include "host_fallback.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <utility>
#include <vector>

#include "bridge.h"
#include "fallback_arguments.h"

namespace torch_infini::ops {
namespace {

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
        if (!soleOwner(impl->storage())) continue;
        c10::StorageImpl* own = impl->storage().unsafeGetStorageImpl();
        own->set_data_ptr_noswap(c10::DataPtr(data, c10::Device(c10::kCPU)));
        own->set_nbytes(nbytes);
        storage = impl->storage();
        impl->set_storage_and_dtype(storage, dtype);
      } else {
        impl->set_storage_and_dtype(storage, dtype);
      }
      impl->_set_conj(false);
      impl->_set_neg(false);
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

  // Only the pooled tensor's own reference (the caller's copy is the second).
  static bool soleOwner(const c10::Storage& storage) {
    auto strong = c10::intrusive_ptr<c10::StorageImpl>::unsafe_reclaim_from_nonowning(
        storage.unsafeGetStorageImpl());
    return strong.use_count() == 2 && strong.weak_use_count() == 1;
  }

  std::vector<at::Tensor> tensors_;
};

thread_local AliasPool alias_pool;

class Aliaser {
 public:
  // t itself unless it is an infini tensor; then a CPU tensor over the same
  // memory, with the same geometry and view bits.
  at::Tensor toCpu(const at::Tensor& t) {
    if (!t.defined() || !isInfini(t)) return t;
    requireStrided(t);
    noteDevice(t.device());
    c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    Entry* entry = nullptr;
    for (Entry& e : storages_)
      if (e.impl == impl) entry = &e;
    if (entry == nullptr) {
      entry = &storages_.emplace_back();  // (entry is not used past this call)
      entry->impl = impl;
      entry->infini = t;
    }
    at::Tensor alias = alias_pool.take(entry->cpu, impl->mutable_data(), impl->nbytes(), t.dtype());
    alias.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) alias._set_conj(true);
    if (t.is_neg()) alias._set_neg(true);
    return alias;
  }

  void noteDevice(c10::Device device) { device_.note(device); }

  // A result of the CPU kernel as an infini tensor: memory it shares with an
  // argument stays that memory; memory the kernel allocated is copied once.
  at::Tensor toInfini(const at::Tensor& t, int64_t* bytes_copied) {
    if (!t.defined() || !device_.get()) return t;
    requireStrided(t);
    for (const Entry& entry : storages_) {
      if (t.storage().is_alias_of(entry.cpu)) {
        return entry.infini.as_strided(t.sizes(), t.strides(), t.storage_offset());
      }
    }
    *bytes_copied += static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
    return t.to(*device_.get());
  }

  const std::optional<c10::Device>& device() const { return device_.get(); }

 private:
  struct Entry {
    c10::StorageImpl* impl = nullptr;  // the infini storage
    c10::Storage cpu;                  // the CPU storage over the same memory
    at::Tensor infini;                 // a tensor of that storage (keeps it alive)
  };
  // A handful per call: a linear search beats hashing.
  c10::SmallVector<Entry, 4> storages_;
  CallDevice device_;
};

bool isResizeRefusal(const c10::Error& e) {
  return std::string(e.what_without_backtrace()).find("not resizable") != std::string::npos;
}

}  // namespace

bool runOnHostAliases(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                      int64_t* bytes_copied) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;
  const Arguments original = argumentsOf(*stack, begin);
  Aliaser aliaser;
  argumentsToCpu(
      stack, begin, [&](const at::Tensor& t) { return aliaser.toCpu(t); },
      [&](c10::Device device) { aliaser.noteDevice(device); });
  // Mutable tensor arguments (in-place self, out=) and their CPU aliases: a
  // CPU kernel may give them a new shape within their memory (an out= of 0
  // elements resized to (1, 0, 3)), which the infini tensor must take too.
  c10::SmallVector<std::pair<size_t, at::Tensor>, 4> mutable_aliases;
  for (size_t i = 0; i < num_args; ++i) {
    if (writes(schema, i) && original[i].isTensor() && isInfini(original[i].toTensor()))
      mutable_aliases.emplace_back(i, (*stack)[begin + i].toTensor());
  }
  if (aliaser.device()) {
    // The CPU reads and writes the memory now: the stream's pending work first.
    const int device = aliaser.device()->index();
    runtime::get().synchronizeStream(currentNativeStreamUnchecked(device));
  }
  // Every infini argument is a CPU alias now, so the call cannot come back
  // here; should an argument kind be missed, refuse instead of recursing.
  thread_local const c10::OperatorHandle* running = nullptr;
  TORCH_CHECK_NOT_IMPLEMENTED(running == nullptr || !(*running == op),
                              "infini: the CPU fallback could not move every argument of '",
                              schema.operator_name(), "' to the CPU");
  const c10::OperatorHandle* outer = std::exchange(running, &op);
  struct Restore {
    const c10::OperatorHandle*& slot;
    const c10::OperatorHandle* value;
    ~Restore() { slot = value; }
  } restore{running, outer};
  try {
    op.callBoxed(stack);
  } catch (const c10::Error& e) {
    if (!isResizeRefusal(e)) throw;
    // An out= argument of the wrong size: the CPU kernel resizes it, which
    // memory it does not own cannot do. The caller copies instead.
    stack->resize(begin);
    stack->insert(stack->end(), original.begin(), original.end());
    return false;
  }
  for (const auto& [index, alias] : mutable_aliases) {
    const at::Tensor& target = original[index].toTensor();
    if (!target.sizes().equals(alias.sizes()) || !target.strides().equals(alias.strides()) ||
        target.storage_offset() != alias.storage_offset()) {
      // Same memory (the alias's storage cannot grow): only the geometry moved.
      target.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(),
                                                          alias.storage_offset());
    }
  }
  returnsToInfini(schema, stack, original,
                  [&](const at::Tensor& t) { return aliaser.toInfini(t, bytes_copied); });
  return true;
}

}  // namespace torch_infini::ops
