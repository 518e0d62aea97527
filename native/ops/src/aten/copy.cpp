// Copies between CPU and infini and between infini tensors (also across
// devices): `_copy_from`, `_copy_from_and_resize`, `_local_scalar_dense`.
//
// Dense copies are single runtime memcpys on the current stream. Strided
// device views go through the kernel seam's copy kernel where the provider
// has one, otherwise through host staging of the storage span they cover.
// Synchronous copies wait for the stream; non_blocking ones return early only
// with pinned host memory on a runtime that has async memcpy.
#include <ATen/ATen.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "torch_infini/runtime/allocator.h"

namespace torch_infini::ops {

namespace {

using runtime::MemcpyKind;

size_t nbytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Same element order in memory: strides agree on every dimension that matters.
bool sameLayout(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

bool hasViewBits(const at::Tensor& t) { return t.is_conj() || t.is_neg(); }

bool asyncCapable() { return runtime::selectedRuntime().capabilities().async_memcpy; }

// The storage elements a view touches: [first, first + count).
struct Span {
  int64_t first;
  int64_t count;
};

Span spanOf(const at::Tensor& t) {
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {t.storage_offset(), last - t.storage_offset() + 1};
}

// A CPU copy of the storage span a device view covers, and the same view
// into it.
at::Tensor downloadSpan(const at::Tensor& src, at::Tensor* span_out) {
  Span span = spanOf(src);
  at::Tensor span_cpu = at::empty({span.count}, src.options().device(at::kCPU));
  auto& rt = runtime::selectedRuntime();
  auto stream = streamOf(src);
  const char* base =
      static_cast<const char*>(src.storage().data()) + span.first * src.element_size();
  rt.memcpyAsync(span_cpu.data_ptr(), base, span.count * src.element_size(),
                 MemcpyKind::DeviceToHost, stream);
  rt.synchronizeStream(stream);
  if (span_out) *span_out = span_cpu;
  return span_cpu.as_strided(src.sizes(), src.strides(), 0);
}

void uploadSpan(const at::Tensor& dst, const at::Tensor& span_cpu) {
  Span span = spanOf(dst);
  auto& rt = runtime::selectedRuntime();
  auto stream = streamOf(dst);
  char* base = static_cast<char*>(dst.storage().mutable_data()) + span.first * dst.element_size();
  rt.memcpyAsync(base, span_cpu.data_ptr(), span.count * dst.element_size(),
                 MemcpyKind::HostToDevice, stream);
  rt.synchronizeStream(stream);
}

bool kernelCopies(const at::Tensor& dst, const at::Tensor& src) {
  KernelProvider& k = selectedKernelProvider();
  if (dst.device() != src.device() && !k.supportsPeer()) return false;
  // A same-dtype copy is Copy's, or a Cast from the dtype to itself; a cast
  // reads one dtype and writes another: the provider needs both.
  if (dst.scalar_type() == src.scalar_type() && k.supports(SeamOp::Copy, dst.scalar_type()))
    return true;
  return k.supports(SeamOp::Cast, src.scalar_type()) && k.supports(SeamOp::Cast, dst.scalar_type());
}

// dst = src, both on infini, equal shapes. Stream-ordered on dst's current
// stream; across devices, each side's current stream waits for the other.
void deviceToDevice(const at::Tensor& dst, const at::Tensor& src) {
  auto& rt = runtime::selectedRuntime();
  const int dst_dev = dst.device().index();
  const int src_dev = src.device().index();
  auto dst_stream = streamOf(dst);
  runtime::StreamHandle src_stream = nullptr;
  if (dst_dev != src_dev) {
    src_stream = streamOf(src);
    auto ready = rt.createEvent(src_dev, false);
    rt.recordEvent(ready, src_stream);
    rt.streamWaitEvent(dst_stream, ready);
    rt.destroyEvent(ready);
  }
  if (dst.scalar_type() == src.scalar_type() && isDense(dst) && isDense(src) &&
      sameLayout(dst, src)) {
    rt.memcpyAsync(dst.data_ptr(), src.data_ptr(), nbytesOf(dst), MemcpyKind::DeviceToDevice,
                   dst_stream);
  } else if (kernelCopies(dst, src)) {
    selectedKernelProvider().copy(toRef(dst), toRef(src), dst_stream);
  } else {
    // Staged through host memory; synchronous.
    at::Tensor src_cpu = downloadSpan(src, nullptr);
    at::Tensor span;
    at::Tensor dst_view = downloadSpan(dst, &span);
    dst_view.copy_(src_cpu);
    uploadSpan(dst, span);
  }
  if (dst_dev != src_dev) {
    auto done = rt.createEvent(dst_dev, false);
    rt.recordEvent(done, dst_stream);
    rt.streamWaitEvent(src_stream, done);
    rt.destroyEvent(done);
  }
}

// dst (infini) = src (CPU, same shape and dtype as dst).
void hostToDevice(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  auto& rt = runtime::selectedRuntime();
  if (!isDense(dst)) {
    // dst has gaps: land src densely on the device, then scatter.
    at::Tensor dense = at::empty(dst.sizes(), dst.options());
    if (kernelCopies(dst, dense)) {
      hostToDevice(dense, src, false);
      selectedKernelProvider().copy(toRef(dst), toRef(dense), streamOf(dst));
      if (!non_blocking) rt.synchronizeStream(streamOf(dst));
    } else {
      at::Tensor span;
      at::Tensor dst_view = downloadSpan(dst, &span);
      dst_view.copy_(src);
      uploadSpan(dst, span);
    }
    return;
  }
  // src itself (borrowed: no copy of a tensor Python holds) or a dense
  // copy in dst's layout.
  const bool direct = isDense(src) && sameLayout(src, dst) && !hasViewBits(src);
  c10::MaybeOwned<at::Tensor> staged = c10::MaybeOwned<at::Tensor>::borrowed(src);
  if (!direct) {
    staged = c10::MaybeOwned<at::Tensor>::owned(
        at::empty_strided(dst.sizes(), dst.strides(), src.options()));
    staged->copy_(src);
  }
  auto stream = streamOf(dst);
  rt.memcpyAsync(dst.data_ptr(), staged->data_ptr(), nbytesOf(dst), MemcpyKind::HostToDevice,
                 stream);
  // A staged copy lives in pageable memory that dies here: never async.
  // The pinned block is reused only after the copy (found by address, so
  // aliases of pinned memory count); memory the pinned allocator does not
  // own makes the copy synchronous.
  const bool async = non_blocking && direct && asyncCapable() &&
                     recordPinnedUse(staged->data_ptr(), currentStream(dst.device().index()));
  if (!async) rt.synchronizeStream(stream);
}

// dst (CPU) = src (infini, same shape as dst).
void deviceToHost(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  auto& rt = runtime::selectedRuntime();
  c10::MaybeOwned<at::Tensor> dense_src = c10::MaybeOwned<at::Tensor>::borrowed(src);
  if (!isDense(src)) {
    if (kernelCopies(src, src)) {
      dense_src = c10::MaybeOwned<at::Tensor>::owned(at::empty(src.sizes(), src.options()));
      selectedKernelProvider().copy(toRef(*dense_src), toRef(src), streamOf(src));
    } else {
      // The staged CPU view carries src's conj/neg bits, so the CPU's copy_
      // resolves them.
      at::Tensor staged = downloadSpan(src, nullptr);
      if (src.is_conj()) staged._set_conj(true);
      if (src.is_neg()) staged._set_neg(true);
      dst.copy_(staged);
      return;
    }
  }
  const bool direct = isDense(dst) && sameLayout(dst, *dense_src) &&
                      dst.scalar_type() == src.scalar_type() && !hasViewBits(src) &&
                      !hasViewBits(dst);
  at::Tensor landing = direct ? dst
                              : at::empty_strided(dense_src->sizes(), dense_src->strides(),
                                                  dst.options().dtype(src.scalar_type()));
  auto stream = streamOf(src);
  rt.memcpyAsync(landing.data_ptr(), dense_src->data_ptr(), nbytesOf(landing),
                 MemcpyKind::DeviceToHost, stream);
  const bool async = non_blocking && direct && asyncCapable() &&
                     recordPinnedUse(dst.data_ptr(), currentStream(src.device().index()));
  if (async) return;
  rt.synchronizeStream(stream);
  if (!direct) {
    if (src.is_conj()) landing._set_conj(true);
    if (src.is_neg()) landing._set_neg(true);
    dst.copy_(landing);
  }
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const at::Tensor& src = self;
  TORCH_CHECK(isInfini(src) || isInfini(dst), "infini: _copy_from called without an infini tensor");
  TORCH_CHECK((isInfini(src) || src.is_cpu()) && (isInfini(dst) || dst.is_cpu()),
              "infini: copy_ between ", src.device(), " and ", dst.device(), " is not supported");
  TORCH_CHECK(at::is_expandable_to(src.sizes(), dst.sizes()), "copy_: source of shape ",
              src.sizes(), " cannot be broadcast to destination of shape ", dst.sizes());
  at::assert_no_internal_overlap(dst);
  if (dst.numel() == 0) return dst;
  if (dst.is_same(src)) return dst;
  const c10::MaybeOwned<at::Tensor> expanded_holder = expandTo(src, dst.sizes());
  const at::Tensor& expanded = *expanded_holder;

  if (isInfini(dst) && isInfini(src)) {
    if (src.is_conj() != dst.is_conj() || src.is_neg() != dst.is_neg()) {
      // Differing bits need a conjugate or negate kernel, which the seam does
      // not have: the values go through the CPU, whose copies resolve the
      // source's bits on the way down and apply the destination's on the
      // way up (resolve_conj(), ...). Synchronous.
      at::Tensor host = at::empty(expanded.sizes(), expanded.options().device(at::kCPU));
      host.copy_(expanded);
      copy_from(host, dst, /*non_blocking=*/false);
      return dst;
    }
    // Equal bits cancel: the stored values copy as they are.
    if (hasViewBits(dst)) {
      at::Tensor plain_dst = dst.is_conj() ? at::_conj(dst) : dst;
      plain_dst = plain_dst.is_neg() ? at::_neg_view(plain_dst) : plain_dst;
      at::Tensor plain_src = src.is_conj() ? at::_conj(src) : src;
      plain_src = plain_src.is_neg() ? at::_neg_view(plain_src) : plain_src;
      copy_from(plain_src, plain_dst, non_blocking);
      return dst;
    }
    // As the CPU's copy_: a source partially overlapping the destination
    // raises (the result would depend on the order elements are written).
    at::assert_no_partial_overlap(dst, src);
    const at::MemOverlapStatus overlap = at::get_overlap_status(dst, expanded);
    if (overlap != at::MemOverlapStatus::No) {
      if (overlap == at::MemOverlapStatus::Full && dst.scalar_type() == src.scalar_type() &&
          dst.strides() == expanded.strides())
        return dst;
      at::Tensor source = at::empty(expanded.sizes(), expanded.options());  // break the overlap
      deviceToDevice(source, expanded);
      deviceToDevice(dst, source);
      return dst;
    }
    deviceToDevice(dst, expanded);
    return dst;
  }
  if (isInfini(dst)) {
    // Dtype conversion and view bits are resolved on the CPU side: the
    // values stored are what dst's own conj/neg bits turn back into src.
    at::Tensor host = expanded.to(dst.scalar_type()).resolve_conj().resolve_neg();
    if (dst.is_conj()) host = host.conj_physical();
    if (dst.is_neg()) host = host.neg();
    hostToDevice(dst, host, non_blocking);
    return dst;
  }
  deviceToHost(dst, expanded, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  // (The CPU fallback's out= path.)
  resizeForCopyFrom(dst, self);
  return copy_from(self, dst, false);
}

// .item(): the element's bytes come straight into a local buffer on the
// current stream (after its pending work) and become a Scalar as the CPU
// kernel makes one; no host tensor, no copy machinery (generation reads a
// token this way every step). Conjugate and negative views arrive resolved
// (their dispatch keys' fallbacks materialize them first).
at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  alignas(16) unsigned char bytes[16];  // the widest element: complex<double>
  const size_t size = self.element_size();
  TORCH_INTERNAL_ASSERT(size <= sizeof(bytes));
  auto& rt = runtime::selectedRuntime();
  const auto stream = streamOf(self);
  rt.memcpyAsync(bytes, self.const_data_ptr(), size, MemcpyKind::DeviceToHost, stream);
  rt.synchronizeStream(stream);
  if (self.scalar_type() == at::kBool) {
    // As the CPU kernel: a byte other than 0 or 1 is still a bool.
    return at::Scalar(static_cast<bool>(bytes[0]));
  }
  at::Scalar result;
  AT_DISPATCH_V2(self.scalar_type(), "infini _local_scalar_dense", AT_WRAP([&] {
                   scalar_t value;
                   std::memcpy(&value, bytes, sizeof(scalar_t));
                   result = at::Scalar(value);
                 }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kComplexHalf, at::kHalf, at::kBFloat16,
                 AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  return result;
}

// Conjugate/negative views must reach _copy_from with their bits intact
// (copy_from resolves them); the generic conj/neg fallback would materialize
// them through clone -> copy_ -> _copy_from and recurse forever.
// _to_copy (.cpu(), .to()) passes them through too: its copy_ resolves the
// bits on the CPU side of a transfer.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  m.impl("_to_copy", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  m.impl("_to_copy", torch::CppFunction::makeFallthrough());
}

// Every dtype; strided device copies use the provider's copy kernel where it
// has one, else host staging.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar copy(m, "aten", "copy");
  copy.impl("_copy_from", copy_from);
  copy.impl("_copy_from_and_resize", copy_from_and_resize);
  copy.impl("_local_scalar_dense", local_scalar_dense);
}

}  // namespace
}  // namespace torch_infini::ops
