// The InfiniOps kernel provider's argument mapping, without InfiniOps or a
// GPU: providers/infiniops/infiniops_provider.cpp compiled against a
// recording stand-in for InfiniOps' header (recording_infiniops/), which
// has InfiniOps' Call signatures and records each call with its arguments
// by InfiniOps' parameter names. Each seam method must call the right
// InfiniOps operator with the right arguments in InfiniOps' order, on the
// given stream, with implementation index 0; supports() must follow the
// declarations for the device type; what InfiniOps lacks must raise.
// The runtime is a stand-in too: an "nvidia" InfiniRT runtime whose memory
// is malloc's (the provider writes one constant through it).
#include <c10/util/Exception.h>
#include <infini/ops.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "philox/fill.h"
#include "providers/infiniops/infiniops_provider.h"

namespace torch_infini::ops {
// The provider counts its arithmetic launches (seam/kernel_provider.cpp in
// the library); here the count is checked.
int64_t launches = 0;
void countNonCpuKernelLaunch() { ++launches; }
}  // namespace torch_infini::ops

namespace {

using namespace torch_infini;
using c10::ScalarType;
using infini::ops::recordedCalls;
using ops::SeamOp;
using ops::TensorRef;

class RecordingNvidiaRuntime final : public runtime::InfiniRtRuntime {
 public:
  const std::string& name() const override { return name_; }
  runtime::Capabilities capabilities() const override { return {}; }
  int deviceCount() const noexcept override { return 2; }
  std::string deviceName(int) const override { return "stand-in"; }
  void setDevice(int device) override { bound = device; }
  void synchronizeDevice(int) override {}
  std::pair<size_t, size_t> memGetInfo(int) override { return {0, 0}; }
  // The provider keeps its constants for the process's lifetime (device
  // memory in the library); this runtime, a static, frees them at exit.
  void* malloc(int, size_t bytes) override { return live_.emplace_back(std::malloc(bytes)); }
  void free(int, void* ptr) override {
    std::erase(live_, ptr);
    std::free(ptr);
  }
  ~RecordingNvidiaRuntime() override {
    for (void* ptr : live_) std::free(ptr);
  }
  void* mallocHost(size_t bytes) override { return std::malloc(bytes); }
  void freeHost(void* ptr) override { std::free(ptr); }
  void memcpy(void* dst, const void* src, size_t bytes, runtime::MemcpyKind) override {
    std::memcpy(dst, src, bytes);
  }
  void memcpyAsync(void* dst, const void* src, size_t bytes, runtime::MemcpyKind,
                   runtime::StreamHandle) override {
    std::memcpy(dst, src, bytes);
  }
  void memsetAsync(void*, int, size_t, runtime::StreamHandle) override {}
  runtime::StreamHandle createStream(int) override { return nullptr; }
  void destroyStream(runtime::StreamHandle) override {}
  void synchronizeStream(runtime::StreamHandle) override {}
  bool queryStream(runtime::StreamHandle) override { return true; }
  void streamWaitEvent(runtime::StreamHandle, runtime::EventHandle) override {}
  runtime::EventHandle createEvent(int, bool) override { return nullptr; }
  void destroyEvent(runtime::EventHandle) override {}
  void recordEvent(runtime::EventHandle, runtime::StreamHandle) override {}
  bool queryEvent(runtime::EventHandle) override { return true; }
  void synchronizeEvent(runtime::EventHandle) override {}
  float elapsedTime(runtime::EventHandle, runtime::EventHandle) override { return 0; }
  runtime::InfiniDeviceType deviceType() const override {
    return runtime::InfiniDeviceType::kNvidia;
  }
  void bind(int device) override { bound = device; }

  int bound = -1;

 private:
  const std::string name_ = "nvidia";
  std::vector<void*> live_;
};

RecordingNvidiaRuntime& rt() {
  static RecordingNvidiaRuntime runtime;
  return runtime;
}

ops::KernelProvider& provider() {
  static std::unique_ptr<ops::KernelProvider> p = ops::makeInfiniOpsKernels(rt());
  return *p;
}

// A view at a fake address (nothing reads it: the stand-in records).
TensorRef ref(uintptr_t address, ScalarType dtype, std::vector<int64_t> sizes,
              std::vector<int64_t> strides, int device = 1) {
  TensorRef r;
  r.data = reinterpret_cast<void*>(address);
  r.dtype = dtype;
  r.device = device;
  r.sizes.assign(sizes.begin(), sizes.end());
  r.strides.assign(strides.begin(), strides.end());
  return r;
}

// How the stand-in records `r` once the provider has converted it, with
// `dtype` InfiniOps' code and `strides` what InfiniOps must see.
std::string tensor(const TensorRef& r, infini::rt::DataType dtype,
                   std::vector<std::ptrdiff_t> strides) {
  std::vector<std::size_t> shape(r.sizes.begin(), r.sizes.end());
  return infini::ops::describe(infini::ops::Tensor(
      r.data, shape, dtype, infini::rt::Device(infini::rt::Device::Type::kNvidia, r.device),
      strides));
}
std::string tensor(const TensorRef& r, infini::rt::DataType dtype) {
  return tensor(r, dtype, std::vector<std::ptrdiff_t>(r.strides.begin(), r.strides.end()));
}

constexpr auto kF32 = infini::rt::DataType::kFloat32;
constexpr auto kF16 = infini::rt::DataType::kFloat16;
constexpr auto kBF16 = infini::rt::DataType::kBFloat16;
constexpr auto kI64 = infini::rt::DataType::kInt64;

runtime::StreamHandle stream() { return reinterpret_cast<void*>(0x5EA); }

// The one call the last provider call made: `op` with exactly `args`, on
// stream(), implementation index 0, and the runtime bound to device 1.
void expectCall(const char* op, const std::vector<std::string>& args) {
  CHECK(recordedCalls().size() == 1);
  const infini::ops::RecordedCall& call = recordedCalls().front();
  if (call.op != op || call.args != args) {
    std::fprintf(stderr, "expected %s(", op);
    for (const auto& a : args) std::fprintf(stderr, "%s, ", a.c_str());
    std::fprintf(stderr, ")\n     got %s(", call.op.c_str());
    for (const auto& a : call.args) std::fprintf(stderr, "%s, ", a.c_str());
    std::fprintf(stderr, ")\n");
  }
  CHECK(call.op == op);
  CHECK(call.args == args);
  CHECK(call.stream == stream());
  CHECK(call.implementation_index == 0);
  CHECK(rt().bound == 1);
  recordedCalls().clear();
  rt().bound = -1;
}

void supportsFollowsTheDeclarationsForNvidia() {
  ops::KernelProvider& k = provider();
  CHECK(k.name() == "infiniops");
  CHECK(k.supports(SeamOp::Add, ScalarType::Float));
  CHECK(k.supports(SeamOp::Add, ScalarType::Long));
  CHECK(!k.supports(SeamOp::Add, ScalarType::Bool));    // no InfiniOps dtype
  CHECK(!k.supports(SeamOp::Add, ScalarType::UInt16));  // no CPU oracle
  CHECK(k.supports(SeamOp::Gemm, ScalarType::BFloat16));
  CHECK(!k.supports(SeamOp::Gemm, ScalarType::Double));  // computes in float
  CHECK(k.supports(SeamOp::Softmax, ScalarType::Half));
  CHECK(!k.supports(SeamOp::Softmax, ScalarType::Double));
  CHECK(k.supports(SeamOp::FusedAddRmsNorm, ScalarType::BFloat16));
  CHECK(!k.supports(SeamOp::FusedAddRmsNorm, ScalarType::Double));
  CHECK(k.supports(SeamOp::RotaryEmbedding, ScalarType::Float));
  CHECK(k.supports(SeamOp::Copy, ScalarType::UInt16));  // Copy: every type, CUDA-like devices
  CHECK(!k.supports(SeamOp::Cast, ScalarType::Float));  // Cast: cpu and ascend only
  CHECK(!k.supports(SeamOp::Cat, ScalarType::Float));
  CHECK(k.supports(SeamOp::Fill, ScalarType::BFloat16));
  CHECK(!k.supports(SeamOp::Random, ScalarType::Float));
  CHECK(!k.supports(SeamOp::AmpUnscale, ScalarType::Float));
  CHECK(!k.supportsPeer());
  CHECK(!k.gemmBias());
  CHECK(!k.gemmStridedOutput());
  CHECK(k.gemmReducedPrecision(ScalarType::Float) != nullptr);  // TF32 on NVIDIA
  CHECK(k.gemmReducedPrecision(ScalarType::BFloat16) == nullptr);
}

void binaryOperators() {
  const TensorRef out = ref(0x100, ScalarType::Float, {2, 3}, {3, 1});
  const TensorRef a = ref(0x200, ScalarType::Float, {2, 3}, {1, 2});
  const TensorRef b = ref(0x300, ScalarType::Float, {2, 3}, {0, 1});  // broadcast rows
  ops::launches = 0;
  provider().add(out, a, b, 0.5, stream());
  expectCall("Add", {"input=" + tensor(a, kF32), "other=" + tensor(b, kF32), "alpha=0.5",
                     "out=" + tensor(out, kF32)});
  provider().mul(out, a, b, stream());
  expectCall("Mul",
             {"input=" + tensor(a, kF32), "other=" + tensor(b, kF32), "out=" + tensor(out, kF32)});
  CHECK(ops::launches == 2);
}

// x * s for float16 and bfloat16 runs as Add(-0.0 broadcast, x, alpha = s).
void scalarMultiplyIsAnAddFromNegativeZero() {
  CHECK(provider().scalarOperand(SeamOp::Mul, ScalarType::Half));
  CHECK(!provider().scalarOperand(SeamOp::Mul, ScalarType::Float));
  CHECK(!provider().scalarOperand(SeamOp::Add, ScalarType::Half));
  const TensorRef out = ref(0x100, ScalarType::Half, {4}, {1});
  const TensorRef x = ref(0x200, ScalarType::Half, {4}, {1});
  provider().binaryScalar(SeamOp::Mul, out, x, c10::Scalar(3.0), 1.0, stream());
  CHECK(recordedCalls().size() == 1);
  const std::string zero_arg = recordedCalls().front().args.at(0);
  // The constant: one -0.0 (bits 0x8000) on device 1, read with stride 0.
  void* zero = nullptr;
  CHECK(std::sscanf(zero_arg.c_str(), "input=%p", &zero) == 1);
  uint16_t bits = 0;
  std::memcpy(&bits, zero, sizeof(bits));
  CHECK(bits == 0x8000);
  TensorRef zero_ref = ref(reinterpret_cast<uintptr_t>(zero), ScalarType::Half, {4}, {0});
  expectCall("Add", {"input=" + tensor(zero_ref, kF16), "other=" + tensor(x, kF16), "alpha=3",
                     "out=" + tensor(out, kF16)});
}

void gemmPassesNoBiasAndNoTranspose() {
  const TensorRef out = ref(0x100, ScalarType::BFloat16, {2, 4, 5}, {20, 5, 1});
  const TensorRef a = ref(0x200, ScalarType::BFloat16, {2, 4, 3}, {12, 1, 4});  // transposed
  const TensorRef b = ref(0x300, ScalarType::BFloat16, {2, 3, 5}, {15, 5, 1});
  provider().gemm(out, a, b, nullptr, 2.0f, 0.0f, stream());
  expectCall("Gemm", {"a=" + tensor(a, kBF16), "b=" + tensor(b, kBF16), "c=none", "alpha=2f",
                      "beta=none", "trans_a=0i", "trans_b=0i", "y=" + tensor(out, kBF16)});
}

void unaryOperatorsAndGelu() {
  const TensorRef out = ref(0x100, ScalarType::Half, {3, 1, 4}, {4, 4, 1});
  // A size-1 dimension's stride is normalized: InfiniOps' contiguity test reads it.
  const TensorRef x = ref(0x200, ScalarType::Half, {3, 1, 4}, {4, 99, 1});
  const std::string in = "input=" + tensor(x, kF16, {4, 4, 1});
  const std::string o = "out=" + tensor(out, kF16);
  provider().unary(SeamOp::Relu, out, x, stream());
  expectCall("Relu", {in, o});
  provider().unary(SeamOp::Silu, out, x, stream());
  expectCall("Silu", {in, o});
  provider().unary(SeamOp::Sigmoid, out, x, stream());
  expectCall("Sigmoid", {in, o});
  provider().gelu(out, x, /*tanh=*/true, stream());
  expectCall("Gelu", {in, "approximate=\"tanh\"", o});
  provider().gelu(out, x, /*tanh=*/false, stream());
  expectCall("Gelu", {in, "approximate=\"none\"", o});
}

void normalizationAndSoftmax() {
  const TensorRef out = ref(0x100, ScalarType::Float, {4, 8}, {8, 1});
  const TensorRef x = ref(0x200, ScalarType::Float, {4, 8}, {16, 1});
  const TensorRef w = ref(0x300, ScalarType::Float, {8}, {1});
  provider().rmsNorm(out, x, w, 1e-5f, stream());
  expectCall("RmsNorm", {"input=" + tensor(x, kF32), "weight=" + tensor(w, kF32),
                         "eps=" + infini::ops::describe(1e-5f), "out=" + tensor(out, kF32)});
  provider().softmax(out, x, 1, stream());
  expectCall("Softmax",
             {"input=" + tensor(x, kF32), "dim=1", "dtype=none", "out=" + tensor(out, kF32)});
  provider().causalSoftmax(out, x, stream());
  expectCall("CausalSoftmax", {"input=" + tensor(x, kF32), "out=" + tensor(out, kF32)});
}

void fusedActivations() {
  const TensorRef out = ref(0x100, ScalarType::BFloat16, {2, 4}, {4, 1});
  const TensorRef x = ref(0x200, ScalarType::BFloat16, {2, 8}, {8, 1});
  provider().siluAndMul(out, x, stream());
  expectCall("SiluAndMul", {"input=" + tensor(x, kBF16), "out=" + tensor(out, kBF16)});
  const TensorRef input = ref(0x300, ScalarType::BFloat16, {2, 4}, {4, 1});
  const TensorRef gate = ref(0x400, ScalarType::BFloat16, {2, 4}, {4, 1});
  provider().swiglu(out, input, gate, stream());
  expectCall("Swiglu", {"input=" + tensor(input, kBF16), "gate=" + tensor(gate, kBF16),
                        "out=" + tensor(out, kBF16)});
}

void rotaryEmbeddingArgumentOrder() {
  const TensorRef q = ref(0x100, ScalarType::Half, {2, 3, 4, 8}, {96, 32, 8, 1});
  const TensorRef k = ref(0x200, ScalarType::Half, {2, 3, 2, 8}, {96, 32, 8, 1});
  const TensorRef pos = ref(0x300, ScalarType::Long, {2, 3}, {3, 1});
  const TensorRef cache = ref(0x400, ScalarType::Float, {16, 4}, {4, 1});
  provider().rotaryEmbedding(q, &k, pos, cache, 8, /*is_neox=*/false, /*offset=*/2,
                             /*inverse=*/true, stream());
  expectCall("RotaryEmbedding",
             {"positions=" + tensor(pos, kI64), "query=" + tensor(q, kF16),
              "key=" + tensor(k, kF16), "cos_sin_cache=" + tensor(cache, kF32), "head_size=8",
              "is_neox=false", "rope_dim_offset=2", "inverse=true"});
  provider().rotaryEmbedding(q, nullptr, pos, cache, 8, true, 0, false, stream());
  expectCall("RotaryEmbedding", {"positions=" + tensor(pos, kI64), "query=" + tensor(q, kF16),
                                 "key=none", "cos_sin_cache=" + tensor(cache, kF32), "head_size=8",
                                 "is_neox=true", "rope_dim_offset=0", "inverse=false"});
}

void fusedAddRmsNormInPlace() {
  const TensorRef x = ref(0x100, ScalarType::Half, {6, 16}, {24, 1});
  const TensorRef r = ref(0x200, ScalarType::Half, {6, 16}, {16, 1});
  const TensorRef w = ref(0x300, ScalarType::Half, {16}, {1});
  provider().fusedAddRmsNorm(x, r, &w, 1e-6f, stream());
  expectCall("FusedAddRmsNorm",
             {"input=" + tensor(x, kF16), "residual=" + tensor(r, kF16),
              "weight=" + tensor(w, kF16), "epsilon=" + infini::ops::describe(1e-6f)});
  provider().fusedAddRmsNorm(x, r, nullptr, 1e-6f, stream());
  expectCall("FusedAddRmsNorm", {"input=" + tensor(x, kF16), "residual=" + tensor(r, kF16),
                                 "weight=none", "epsilon=" + infini::ops::describe(1e-6f)});
}

// add_rms_norm's two results: out (the normalized sum) and residual_out (the sum).
void addRmsNormOutOfPlace() {
  const TensorRef out = ref(0x100, ScalarType::BFloat16, {2, 3, 16}, {48, 16, 1});
  const TensorRef residual_out = ref(0x200, ScalarType::BFloat16, {2, 3, 16}, {48, 16, 1});
  const TensorRef x = ref(0x300, ScalarType::BFloat16, {2, 3, 16}, {48, 16, 1});
  const TensorRef r = ref(0x400, ScalarType::BFloat16, {2, 3, 16}, {48, 16, 1});
  const TensorRef w = ref(0x500, ScalarType::BFloat16, {16}, {1});
  ops::launches = 0;
  provider().addRmsNorm(out, residual_out, x, r, w, 1e-5f, stream());
  expectCall("AddRmsNorm",
             {"input=" + tensor(x, kBF16), "residual=" + tensor(r, kBF16),
              "weight=" + tensor(w, kBF16), "eps=" + infini::ops::describe(1e-5f),
              "out=" + tensor(out, kBF16), "residual_out=" + tensor(residual_out, kBF16)});
  CHECK(ops::launches == 1);  // arithmetic: counted
}

// linear's operands in InfiniOps' order (input, weight, bias, out), the
// bias optional.
void linearWithAndWithoutBias() {
  const TensorRef out = ref(0x100, ScalarType::Float, {6, 4}, {4, 1});
  const TensorRef x = ref(0x200, ScalarType::Float, {6, 8}, {8, 1});
  const TensorRef w = ref(0x300, ScalarType::Float, {4, 8}, {1, 4});  // transposed: any strides
  const TensorRef b = ref(0x400, ScalarType::Float, {4}, {1});
  ops::launches = 0;
  provider().linear(out, x, w, b, stream());
  expectCall("Linear", {"input=" + tensor(x, kF32), "weight=" + tensor(w, kF32),
                        "bias=" + tensor(b, kF32), "out=" + tensor(out, kF32)});
  provider().linear(out, x, w, std::nullopt, stream());
  expectCall("Linear", {"input=" + tensor(x, kF32), "weight=" + tensor(w, kF32), "bias=none",
                        "out=" + tensor(out, kF32)});
  CHECK(ops::launches == 2);  // arithmetic: counted
}

// The forward is a gather: InfiniOps' backward-only arguments stay at their
// defaults (max_norm would renormalize the weight in place).
void embeddingIsAGather() {
  const TensorRef out = ref(0x100, ScalarType::BFloat16, {5, 8}, {8, 1});
  const TensorRef weight = ref(0x200, ScalarType::BFloat16, {32, 8}, {16, 1});  // a column slice
  const TensorRef indices = ref(0x300, ScalarType::Long, {5}, {1});
  ops::launches = 0;
  provider().embedding(out, weight, indices, stream());
  expectCall("Embedding",
             {"input=" + tensor(indices, kI64), "weight=" + tensor(weight, kBF16),
              "padding_idx=none", "max_norm=none", "norm_type=2", "scale_grad_by_freq=false",
              "sparse=false", "out=" + tensor(out, kBF16)});
  CHECK(ops::launches == 0);  // a byte mover: the CPU's bits whatever the kernel
  CHECK(provider().supports(SeamOp::Embedding, ScalarType::Half));
  CHECK(!provider().supports(SeamOp::Embedding, ScalarType::Double));  // not in its list
}

void topkSoftmaxArgumentOrder() {
  const TensorRef gating = ref(0x100, ScalarType::Half, {6, 16}, {16, 1});
  const TensorRef weights = ref(0x200, ScalarType::Float, {6, 2}, {2, 1});
  const TensorRef indices = ref(0x300, ScalarType::Int, {6, 2}, {2, 1});
  const TensorRef token_expert = ref(0x400, ScalarType::Int, {6, 2}, {2, 1});
  const TensorRef bias = ref(0x500, ScalarType::Float, {16}, {1});
  const TensorRef padding = ref(0x600, ScalarType::Byte, {6}, {1});
  constexpr auto kI32 = infini::rt::DataType::kInt32;
  provider().topkSoftmax(weights, indices, token_expert, gating, &bias, &padding, true, stream());
  expectCall("TopkSoftmax",
             {"gating_output=" + tensor(gating, kF16), "bias=" + tensor(bias, kF32),
              "is_padding=" + tensor(padding, infini::rt::DataType::kUInt8), "renormalize=true",
              "topk_weights=" + tensor(weights, kF32), "topk_indices=" + tensor(indices, kI32),
              "token_expert_indices=" + tensor(token_expert, kI32)});
  provider().topkSoftmax(weights, indices, token_expert, gating, nullptr, nullptr, false, stream());
  expectCall(
      "TopkSoftmax",
      {"gating_output=" + tensor(gating, kF16), "bias=none", "is_padding=none", "renormalize=false",
       "topk_weights=" + tensor(weights, kF32), "topk_indices=" + tensor(indices, kI32),
       "token_expert_indices=" + tensor(token_expert, kI32)});
  CHECK(provider().supports(SeamOp::TopkSoftmax, ScalarType::BFloat16));
}

// Unquantized caches: the scales are one float32 1.0 on the key's device,
// kv_cache_dtype "auto".
void reshapeAndCacheFlashWritesTheCaches() {
  const TensorRef key = ref(0x100, ScalarType::Half, {3, 2, 8}, {32, 8, 1});
  const TensorRef value = ref(0x200, ScalarType::Half, {3, 2, 8}, {16, 8, 1});
  const TensorRef key_cache = ref(0x300, ScalarType::Half, {4, 16, 2, 8}, {256, 16, 8, 1});
  const TensorRef value_cache = ref(0x400, ScalarType::Half, {4, 16, 2, 8}, {256, 16, 8, 1});
  const TensorRef slots = ref(0x500, ScalarType::Long, {3}, {1});
  ops::launches = 0;
  provider().reshapeAndCacheFlash(key, value, key_cache, value_cache, slots, stream());
  CHECK(recordedCalls().size() == 1);
  const std::vector<std::string> args = recordedCalls().front().args;
  CHECK(args.size() == 8);
  // The scale: whatever address the provider keeps it at, on device 1.
  const std::string scale = args[3].substr(std::string("k_scale=").size());
  CHECK(scale.find(" dtype" + std::to_string(static_cast<int>(kF32)) + " [1] [1] dev") !=
        std::string::npos);
  CHECK(scale.ends_with(":1"));
  float one = 0;
  std::memcpy(&one, reinterpret_cast<void*>(std::stoull(scale, nullptr, 16)), sizeof(one));
  CHECK(one == 1.0f);
  expectCall("ReshapeAndCacheFlash",
             {"key=" + tensor(key, kF16), "value=" + tensor(value, kF16),
              "slot_mapping=" + tensor(slots, kI64), "k_scale=" + scale, "v_scale=" + scale,
              "kv_cache_dtype=\"auto\"", "key_cache=" + tensor(key_cache, kF16),
              "value_cache=" + tensor(value_cache, kF16)});
  CHECK(ops::launches == 0);  // a byte mover
  CHECK(provider().supports(SeamOp::ReshapeAndCacheFlash, ScalarType::Float));
}

void pagedAttentionArgumentOrder() {
  const TensorRef out = ref(0x100, ScalarType::BFloat16, {2, 4, 64}, {256, 64, 1});
  const TensorRef q = ref(0x200, ScalarType::BFloat16, {2, 4, 64}, {512, 64, 1});
  const TensorRef kc = ref(0x300, ScalarType::BFloat16, {5, 2, 16, 64}, {2048, 1024, 64, 1});
  const TensorRef vc = ref(0x400, ScalarType::BFloat16, {5, 2, 16, 64}, {2048, 1024, 64, 1});
  const TensorRef tables = ref(0x500, ScalarType::Int, {2, 3}, {3, 1});
  const TensorRef lens = ref(0x600, ScalarType::Int, {2}, {1});
  const TensorRef alibi = ref(0x700, ScalarType::Float, {4}, {1});
  constexpr auto kI32 = infini::rt::DataType::kInt32;
  ops::launches = 0;
  provider().pagedAttention(out, q, kc, vc, tables, lens, &alibi, 0.125f, stream());
  expectCall("PagedAttentionInfinilm",
             {"q=" + tensor(q, kBF16), "k_cache=" + tensor(kc, kBF16),
              "v_cache=" + tensor(vc, kBF16), "block_tables=" + tensor(tables, kI32),
              "seq_lens=" + tensor(lens, kI32), "alibi_slopes=" + tensor(alibi, kF32),
              "scale=" + infini::ops::describe(0.125f), "out=" + tensor(out, kBF16)});
  provider().pagedAttention(out, q, kc, vc, tables, lens, nullptr, 0.125f, stream());
  expectCall(
      "PagedAttentionInfinilm",
      {"q=" + tensor(q, kBF16), "k_cache=" + tensor(kc, kBF16), "v_cache=" + tensor(vc, kBF16),
       "block_tables=" + tensor(tables, kI32), "seq_lens=" + tensor(lens, kI32),
       "alibi_slopes=none", "scale=" + infini::ops::describe(0.125f), "out=" + tensor(out, kBF16)});
  CHECK(ops::launches == 2);
  CHECK(provider().supports(SeamOp::PagedAttention, ScalarType::Half));
  CHECK(!provider().supports(SeamOp::PagedAttention, ScalarType::Float));  // not in its list
}

void convolutionIsNotTransposed() {
  const TensorRef out = ref(0x100, ScalarType::Half, {2, 6, 5, 5}, {150, 1, 30, 6});
  const TensorRef input = ref(0x200, ScalarType::Half, {2, 4, 7, 7}, {196, 49, 7, 1});
  const TensorRef weight = ref(0x300, ScalarType::Half, {6, 2, 3, 3}, {18, 9, 3, 1});
  const TensorRef bias = ref(0x400, ScalarType::Half, {6}, {1});
  ops::launches = 0;
  provider().convolution(out, input, weight, &bias, {1, 2}, {0, 1}, {1, 1}, 2, stream());
  expectCall("Convolution",
             {"input=" + tensor(input, kF16), "weight=" + tensor(weight, kF16),
              "bias=" + tensor(bias, kF16), "stride=[1,2]", "padding=[0,1]", "dilation=[1,1]",
              "transposed=false", "output_padding=[0,0]", "groups=2", "out=" + tensor(out, kF16)});
  provider().convolution(out, input, weight, nullptr, {1}, {0}, {2}, 1, stream());
  expectCall("Convolution",
             {"input=" + tensor(input, kF16), "weight=" + tensor(weight, kF16), "bias=none",
              "stride=[1]", "padding=[0]", "dilation=[2]", "transposed=false", "output_padding=[0]",
              "groups=1", "out=" + tensor(out, kF16)});
  CHECK(ops::launches == 2);
  CHECK(provider().supports(SeamOp::Convolution, ScalarType::Float));
  CHECK(!provider().supports(SeamOp::Convolution, ScalarType::Double));
}

// Fill gets PyTorch's conversion of the value to the dtype, as a double
// (exact): 0.1 into float16 is 0.0999755859375. Integers past 2^53 have no
// exact double: the bridge uploads those.
void fillTakesTheConvertedValue() {
  const TensorRef half = ref(0x100, ScalarType::Half, {4, 2}, {1, 4});
  ops::launches = 0;
  provider().fill(half, c10::Scalar(0.1), stream());
  expectCall("Fill",
             {"input=" + tensor(half, kF16), "value=0.0999755859375", "out=" + tensor(half, kF16)});
  const TensorRef longs = ref(0x200, ScalarType::Long, {3}, {1});
  provider().fill(longs, c10::Scalar(int64_t{-7}), stream());
  expectCall("Fill", {"input=" + tensor(longs, kI64), "value=-7", "out=" + tensor(longs, kI64)});
  CHECK(ops::launches == 0);  // a value written, not computed
  CHECK(provider().fillTakes(c10::Scalar(int64_t{1} << 53), ScalarType::Long));
  CHECK(!provider().fillTakes(c10::Scalar((int64_t{1} << 53) + 1), ScalarType::Long));
  CHECK(provider().fillTakes(c10::Scalar(int64_t{2147483647}), ScalarType::Int));
  CHECK(provider().fillTakes(c10::Scalar(1e300), ScalarType::Double));
}

void copyAndCat() {
  const TensorRef dst = ref(0x100, ScalarType::Float, {2, 3}, {3, 1});
  const TensorRef src = ref(0x200, ScalarType::Half, {2, 3}, {1, 2});
  ops::launches = 0;
  provider().copy(dst, src, stream());
  expectCall("Cast", {"input=" + tensor(src, kF16), "out=" + tensor(dst, kF32)});
  // One dtype: Copy, the source strided (a transpose) or broadcast.
  const TensorRef same = ref(0x250, ScalarType::Float, {2, 3}, {1, 0});
  provider().copy(dst, same, stream());
  expectCall("Copy",
             {"src=" + tensor(same, kF32), "non_blocking=false", "out=" + tensor(dst, kF32)});
  const TensorRef out = ref(0x300, ScalarType::Float, {2, 5}, {5, 1});
  const TensorRef a = ref(0x400, ScalarType::Float, {2, 2}, {2, 1});
  const TensorRef b = ref(0x500, ScalarType::Float, {2, 3}, {1, 2});
  provider().cat(out, {a, b}, 1, stream());
  expectCall("Cat", {"tensors={" + tensor(a, kF32) + "; " + tensor(b, kF32) + "}", "dim=1",
                     "out=" + tensor(out, kF32)});
  CHECK(ops::launches == 0);  // byte movers: the CPU's bits whatever the kernel
}

// What InfiniOps has no operator for raises NotImplementedError naming it
// and the device type; nothing is called.
void whatInfiniOpsLacksRaises() {
  const TensorRef t = ref(0x100, ScalarType::Float, {4}, {1});
  const auto raisesNaming = [](const std::function<void()>& fn, const char* op) {
    try {
      fn();
    } catch (const c10::NotImplementedError& e) {
      const std::string what = e.what();
      return what.find(op) != std::string::npos &&
             what.find("device type 'nvidia'") != std::string::npos;
    }
    return false;
  };
  CHECK(raisesNaming([&] { provider().random(t, ops::RandomDraw{}, stream()); }, "random"));
  CHECK(raisesNaming([&] { provider().ampUnscale({t}, t, t, stream()); }, "amp_unscale"));
  CHECK(raisesNaming([&] { provider().ampUpdateScale(t, t, t, 2.0, 0.5, 10, stream()); },
                     "amp_update_scale"));
  CHECK(recordedCalls().empty());
}

}  // namespace

int main() {
  return runTests({
      {"supports() follows the declarations for nvidia", supportsFollowsTheDeclarationsForNvidia},
      {"add and mul", binaryOperators},
      {"x * scalar is Add from -0.0", scalarMultiplyIsAnAddFromNegativeZero},
      {"gemm: no bias, no transpose flags", gemmPassesNoBiasAndNoTranspose},
      {"unary operators and gelu", unaryOperatorsAndGelu},
      {"rms_norm, softmax, causal_softmax", normalizationAndSoftmax},
      {"silu_and_mul and swiglu", fusedActivations},
      {"rotary_embedding's argument order", rotaryEmbeddingArgumentOrder},
      {"fused_add_rms_norm in place", fusedAddRmsNormInPlace},
      {"add_rms_norm out of place", addRmsNormOutOfPlace},
      {"linear with and without a bias", linearWithAndWithoutBias},
      {"embedding is a gather", embeddingIsAGather},
      {"topk_softmax's argument order", topkSoftmaxArgumentOrder},
      {"reshape_and_cache_flash writes the caches", reshapeAndCacheFlashWritesTheCaches},
      {"paged_attention's argument order", pagedAttentionArgumentOrder},
      {"convolution is not transposed", convolutionIsNotTransposed},
      {"fill takes the converted value", fillTakesTheConvertedValue},
      {"copy through Cast or Copy, and cat", copyAndCat},
      {"what InfiniOps lacks raises", whatInfiniOpsLacksRaises},
  });
}
