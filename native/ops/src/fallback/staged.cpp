// The CPU fallback where device memory is not host memory (NVIDIA, ...), and
// for calls the in-place path cannot serve (an out= the CPU kernel resizes).
//
// Every infini storage the arguments use is staged once: the byte span of it
// that the call's tensors cover is copied into pinned memory on the current
// stream, the stream is synchronized once, and the CPU kernel runs on views
// of those copies with the arguments' own geometry (so arguments sharing a
// storage still share one on the CPU). The spans of storages the kernel
// wrote (in-place and out= arguments) go back, again on the current stream,
// without waiting; the pinned allocator keeps each buffer until its copy has
// run. Results the kernel allocated itself (pageable memory) and out=
// arguments it resized go to the device the same way: copied into a pinned
// buffer of the caching pinned allocator, then to the device on the current
// stream without waiting. Only the copy in waits (the CPU must read).
#include "fallback/staged.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>
#include <c10/util/safe_numerics.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/bridge.h"
#include "fallback/arguments.h"

namespace torch_infini::ops {
namespace {

// Byte offsets inside a staged span stay multiples of every element size.
constexpr int64_t kSpanAlignment = 16;

struct Span {
  int64_t first;  // bytes, inclusive
  int64_t end;    // bytes, exclusive
};

// storage_offset * element size. Every tensor that holds elements lies
// inside its storage (set_ and as_strided check it, overflow included), so
// the product fits; only a tensor without elements may carry any offset
// (the CPU accepts one), and callers never multiply for those.
int64_t offsetBytes(const at::Tensor& t) {
  int64_t bytes = 0;
  TORCH_CHECK(
      !c10::mul_overflows(t.storage_offset(), static_cast<int64_t>(t.element_size()), &bytes),
      "infini: storage offset ", t.storage_offset(), " of a tensor of ", t.dtype(),
      " overflows a byte offset");
  return bytes;
}

// The bytes of its storage a tensor covers (first == end: none).
Span spanOf(const at::Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  const int64_t item = static_cast<int64_t>(t.element_size());
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {offsetBytes(t), (last + 1) * item};
}

// A pinned copy of the whole storage of CPU tensor `t`, as bytes, from the
// caching pinned allocator (its block is reused once the copies queued from
// it have run).
at::Tensor pinnedBytesOf(const at::Tensor& t) {
  const int64_t n = static_cast<int64_t>(t.storage().nbytes());
  at::Tensor pinned = at::empty({n}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  if (n > 0) std::memcpy(pinned.mutable_data_ptr(), t.storage().data(), static_cast<size_t>(n));
  return pinned;
}

// A result the CPU kernel allocated, on `device` with the CPU's geometry
// (sizes, strides, storage offset over a storage as large as its own):
// its storage's bytes go through a pinned buffer, on the current stream,
// and nothing waits for the copy.
at::Tensor resultThroughPinned(const at::Tensor& t, c10::Device device, int64_t* bytes_copied) {
  // A ZeroTensor (_efficientzerotensor: sgn's gradient) has sizes but no
  // memory: to() materializes its zeros.
  if (t._is_zerotensor() || (t.storage().nbytes() > 0 && t.storage().data() == nullptr))
    return resultToDevice(t, device, bytes_copied);
  const at::Tensor pinned = pinnedBytesOf(t);
  at::Tensor device_bytes = at::empty({pinned.numel()}, pinned.options().device(device));
  device_bytes.copy_(pinned, /*non_blocking=*/true);
  *bytes_copied += pinned.numel();
  at::Tensor result = at::empty({0}, t.options().device(device));
  result.set_(device_bytes.storage(), t.storage_offset(), t.sizes(), t.strides());
  if (t.is_conj()) result._set_conj(true);
  if (t.is_neg()) result._set_neg(true);
  return result;
}

class Stager {
 public:
  explicit Stager(int64_t* bytes_copied) : bytes_copied_(bytes_copied) {}

  // Pass 1: every infini tensor of the call, before anything is copied.
  void plan(const at::Tensor& t) {
    if (!t.defined() || !isInfini(t)) return;
    requireStrided(t);
    device_.note(t.device());
    const Span span = spanOf(t);
    if (span.first == span.end) return;
    Entry& entry = entryFor(t);
    if (entry.first == entry.end) {
      entry.first = span.first;
      entry.end = span.end;
    } else {
      entry.first = std::min(entry.first, span.first);
      entry.end = std::max(entry.end, span.end);
    }
  }

  // Device -> pinned for every span, on the current stream, then one wait.
  void copyIn() {
    if (!device_.get()) return;
    for (Entry& entry : entries_) {
      if (entry.first == entry.end) continue;
      entry.first -= entry.first % kSpanAlignment;
      entry.pinned = at::empty({entry.end - entry.first},
                               at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      entry.pinned.copy_(deviceBytes(entry), /*non_blocking=*/true);
      *bytes_copied_ += entry.end - entry.first;
    }
    runtime::selectedRuntime().synchronizeStream(
        currentNativeStreamUnchecked(device_.get()->index()));
  }

  // Pass 2: the CPU tensor standing for an infini argument.
  at::Tensor toCpu(const at::Tensor& t) {
    if (!t.defined() || !isInfini(t)) return t;
    const at::TensorOptions cpu = t.options().device(c10::kCPU);
    const Entry* entry = find(t.storage().unsafeGetStorageImpl());
    if (entry == nullptr || !entry->pinned.defined() || t.numel() == 0) {  // no bytes to read
      return at::empty_strided(t.sizes(), t.strides(), cpu);
    }
    const int64_t item = static_cast<int64_t>(t.element_size());
    at::Tensor view = at::empty({0}, cpu);
    view.set_(entry->pinned.storage(), (offsetBytes(t) - entry->first) / item, t.sizes(),
              t.strides());
    if (t.is_conj()) view._set_conj(true);
    if (t.is_neg()) view._set_neg(true);
    return view;
  }

  // After the call: an argument the kernel wrote goes back to the device.
  // One the kernel gave another geometry or memory (a resized out=) goes
  // back whole, resized; otherwise its storage's span is copied back.
  //
  // The kernel may also have pointed the argument at other memory (set_):
  // at another argument's staged storage, which it then takes on the device
  // (and whose span goes back: the kernel may have written it), or at a
  // storage of its own, which becomes a new device storage. The memory the
  // argument viewed before is left as it was, as on the CPU.
  void wrote(const at::Tensor& target, const at::Tensor& cpu) {
    if (!target.defined() || !isInfini(target)) return;
    Entry* entry = find(target.storage().unsafeGetStorageImpl());
    const bool same_memory = entry != nullptr && entry->pinned.defined() &&
                             cpu.storage().is_alias_of(entry->pinned.storage());
    if (same_memory && cpu.sizes().equals(target.sizes()) &&
        cpu.strides().equals(target.strides())) {
      entry->written = true;
      return;
    }
    if (!same_memory) {
      if (Entry* other = owner(cpu)) {
        other->written = true;
        adopt(target, infiniView(*other, cpu));
        return;
      }
      if (entry != nullptr && entry->pinned.defined()) {
        adopt(target, resultThroughPinned(cpu, target.device(), bytes_copied_));
        return;
      }
    }
    const int64_t bytes =
        static_cast<int64_t>(cpu.numel()) * static_cast<int64_t>(cpu.element_size());
    *bytes_copied_ += bytes;
    if (cpu.is_non_overlapping_and_dense() && cpu.scalar_type() == target.scalar_type() &&
        !cpu.is_conj() && !cpu.is_neg() && !target.is_conj() && !target.is_neg()) {
      // target takes the kernel's geometry (dense: its strides), and the
      // values come from a pinned copy in that layout, without waiting.
      at::Tensor pinned =
          at::empty_strided(cpu.sizes(), cpu.strides(), cpu.options().pinned_memory(true));
      pinned.copy_(cpu);
      resizeForCopyFrom(target, cpu);
      target.copy_(pinned, /*non_blocking=*/true);
      return;
    }
    // A view with gaps (lstsq's solution) or differing bits: synchronously.
    at::_copy_from_and_resize(cpu, target);
  }

  // Pinned -> device for every written span, on the current stream.
  void copyOut() {
    for (Entry& entry : entries_) {
      if (!entry.written) continue;
      deviceBytes(entry).copy_(entry.pinned, /*non_blocking=*/true);
      *bytes_copied_ += entry.end - entry.first;
    }
  }

  // A result: a view of a staged span is that view of the infini storage;
  // anything the kernel allocated is copied to the device once.
  at::Tensor toInfini(const at::Tensor& t) {
    if (!t.defined() || !device_.get()) return t;
    requireStrided(t);
    if (const Entry* entry = owner(t)) return infiniView(*entry, t);
    return resultThroughPinned(t, *device_.get(), bytes_copied_);
  }

  void noteDevice(c10::Device device) { device_.note(device); }

 private:
  struct Entry {
    c10::StorageImpl* impl = nullptr;  // the infini storage
    at::Tensor infini;                 // a uint8 tensor over all of it (keeps it alive)
    int64_t first = 0;                 // the byte span [first, end) staged
    int64_t end = 0;
    at::Tensor pinned;  // uint8 CPU copy of the span, in pinned memory
    bool written = false;
  };

  Entry& entryFor(const at::Tensor& t) {
    c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    if (Entry* known = find(impl)) return *known;
    Entry& entry = entries_.emplace_back();
    entry.impl = impl;
    entry.infini = at::empty({0}, t.options().dtype(at::kByte));
    entry.infini.set_(t.storage(), 0, {static_cast<int64_t>(impl->nbytes())}, {1});
    return entry;
  }

  // The entry whose pinned copy CPU tensor `t` views, if any.
  Entry* owner(const at::Tensor& t) {
    for (Entry& entry : entries_)
      if (entry.pinned.defined() && t.storage().is_alias_of(entry.pinned.storage())) return &entry;
    return nullptr;
  }

  // `t`, a view of the pinned copy of `entry`'s span, as that view of the
  // infini storage: t's dtype, geometry and view bits.
  static at::Tensor infiniView(const Entry& entry, const at::Tensor& t) {
    const int64_t item = static_cast<int64_t>(t.element_size());
    at::Tensor view = at::empty({0}, t.options().device(entry.infini.device()));
    view.set_(entry.infini.storage(), (offsetBytes(t) + entry.first) / item, t.sizes(),
              t.strides());
    if (t.is_conj()) view._set_conj(true);
    if (t.is_neg()) view._set_neg(true);
    return view;
  }

  // `target` takes `source`'s storage and geometry (same dtype: set_ keeps it).
  static void adopt(const at::Tensor& target, const at::Tensor& source) {
    c10::TensorImpl* impl = target.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(source.storage());
    impl->set_sizes_and_strides(source.sizes(), source.strides(), source.storage_offset());
  }

  Entry* find(const c10::StorageImpl* impl) {
    for (Entry& entry : entries_)
      if (entry.impl == impl) return &entry;
    return nullptr;
  }

  static at::Tensor deviceBytes(const Entry& entry) {
    return entry.infini.narrow(0, entry.first, entry.end - entry.first);
  }

  c10::SmallVector<Entry, 4> entries_;
  CallDevice device_;
  int64_t* bytes_copied_;
};

// Arguments an operator writes without its schema saying so: the staged
// copies of these go back too. (In place, the CPU kernel writes the memory
// itself.) Found by the op_db sweep with staging forced.
bool writesUndeclared(const c10::FunctionSchema& schema, size_t index) {
  const std::string& arg = schema.arguments()[index].name();
  return schema.name() == "aten::native_batch_norm" &&
         (arg == "running_mean" || arg == "running_var");  // updated when training
}

}  // namespace

void runStaged(const c10::OperatorHandle& op, torch::jit::Stack* stack, int64_t* bytes_copied) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const size_t begin = stack->size() - num_args;
  const Arguments original = argumentsOf(*stack, begin);
  Stager stager(bytes_copied);
  for (const c10::IValue& value : original)
    forEachTensor(value, [&](const at::Tensor& t) { stager.plan(t); });
  stager.copyIn();
  argumentsToCpu(
      stack, begin, [&](const at::Tensor& t) { return stager.toCpu(t); },
      [&](c10::Device device) { stager.noteDevice(device); });
  // The CPU tensors of written arguments, kept for after the call.
  c10::SmallVector<std::pair<size_t, c10::IValue>, 4> written;
  for (size_t i = 0; i < num_args; ++i)
    if (writes(schema, i) || writesUndeclared(schema, i))
      written.emplace_back(i, (*stack)[begin + i]);

  {
    // CPU autocast is for CPU tensors; these stand for infini's.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    op.callBoxed(stack);
  }

  for (const auto& [index, cpu] : written) {
    const c10::IValue& target = original[index];
    if (target.isTensor()) {
      stager.wrote(target.toTensor(), cpu.toTensor());
    } else if (target.isTensorList()) {
      const auto targets = target.toTensorList().vec();
      const auto cpus = cpu.toTensorList().vec();
      for (size_t k = 0; k < targets.size(); ++k) stager.wrote(targets[k], cpus[k]);
    }
  }
  stager.copyOut();
  returnsToInfini(schema, stack, original, [&](const at::Tensor& t) { return stager.toInfini(t); });
}

}  // namespace torch_infini::ops
