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

#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "bridge.h"

namespace torch_infini::ops {
namespace {

// infini tensors are strided: sparse and other layouts are refused clearly.
void requireStrided(const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.layout() == c10::kStrided,
                              "infini supports strided (dense) tensors only, not the ", t.layout(),
                              " layout");
}

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
      entry = &storages_.emplace_back();
      entry->impl = impl;
      entry->cpu = c10::Storage(c10::Storage::use_byte_size_t(), impl->nbytes(),
                                c10::DataPtr(impl->mutable_data(), c10::Device(c10::kCPU)),
                                /*allocator=*/nullptr, /*resizable=*/false);
      entry->infini = t;
    }
    at::Tensor alias = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(entry->cpu), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    alias.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) alias._set_conj(true);
    if (t.is_neg()) alias._set_neg(true);
    return alias;
  }

  void noteDevice(c10::Device device) {
    // "infini" without an index is the current device, as for CUDA.
    if (!device.has_index()) device = c10::Device(device.type(), currentDevice());
    if (!device_) {
      device_ = device;
      return;
    }
    TORCH_CHECK(*device_ == device,
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device_, " and ", device, "!");
  }

  // A result of the CPU kernel as an infini tensor: memory it shares with an
  // argument stays that memory; memory the kernel allocated is copied once.
  at::Tensor toInfini(const at::Tensor& t, int64_t* bytes_copied) {
    if (!t.defined() || !device_) return t;
    requireStrided(t);
    for (const Entry& entry : storages_) {
      if (t.storage().is_alias_of(entry.cpu)) {
        return entry.infini.as_strided(t.sizes(), t.strides(), t.storage_offset());
      }
    }
    *bytes_copied += static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
    return t.to(*device_);
  }

  const std::optional<c10::Device>& device() const { return device_; }

 private:
  struct Entry {
    c10::StorageImpl* impl = nullptr;  // the infini storage
    c10::Storage cpu;                  // the CPU storage over the same memory
    at::Tensor infini;                 // a tensor of that storage (keeps it alive)
  };
  // A handful per call: a linear search beats hashing. Entries never move
  // while pointers to them are held (push only, read after).
  std::deque<Entry> storages_;
  std::optional<c10::Device> device_;
};

// The argument a mutable return aliases (same alias set), or -1.
int mutatedArgument(const c10::FunctionSchema& schema, const c10::Argument& ret) {
  const c10::AliasInfo* info = ret.alias_info();
  if (info == nullptr || !info->isWrite()) return -1;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* arg = schema.arguments()[i].alias_info();
    if (arg != nullptr && arg->isWrite() && arg->beforeSets() == info->beforeSets()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool isResizeRefusal(const c10::Error& e) {
  return std::string(e.what_without_backtrace()).find("not resizable") != std::string::npos;
}

}  // namespace

bool runOnHostAliases(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                      int64_t* bytes_copied) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;
  const c10::SmallVector<c10::IValue, 8> original(
      stack->begin() + static_cast<std::ptrdiff_t>(begin), stack->end());
  Aliaser aliaser;
  // Mutable tensor arguments (in-place self, out=) and their CPU aliases: a
  // CPU kernel may give them a new shape within their memory (an out= of 0
  // elements resized to (1, 0, 3)), which the infini tensor must take too.
  c10::SmallVector<std::pair<size_t, at::Tensor>, 4> mutable_aliases;
  for (size_t i = begin; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      value = aliaser.toCpu(value.toTensor());
      const c10::AliasInfo* info = schema.arguments()[i - begin].alias_info();
      if (info != nullptr && info->isWrite() && isInfini(original[i - begin].toTensor())) {
        mutable_aliases.emplace_back(i - begin, value.toTensor());
      }
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList().vec()) list.push_back(aliaser.toCpu(t));
      value = list;
    } else if (value.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const auto& t : value.toOptionalTensorList().vec())
        list.push_back(t.has_value() ? std::optional<at::Tensor>(aliaser.toCpu(*t)) : t);
      value = list;
    } else if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1) {
      aliaser.noteDevice(value.toDevice());  // a factory's device: compute on the CPU
      value = c10::Device(c10::kCPU);
    }
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
  const size_t num_returns = schema.returns().size();
  const size_t ret_begin = stack->size() - num_returns;
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue& value = (*stack)[ret_begin + r];
    const int mutated = mutatedArgument(schema, schema.returns()[r]);
    if (mutated >= 0) {
      value = original[static_cast<size_t>(mutated)];  // in-place / out=: the given tensor
    } else if (value.isTensor()) {
      value = aliaser.toInfini(value.toTensor(), bytes_copied);
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList().vec())
        list.push_back(aliaser.toInfini(t, bytes_copied));
      value = list;
    }
  }
  return true;
}

}  // namespace torch_infini::ops
