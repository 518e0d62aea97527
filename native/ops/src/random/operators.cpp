// Random operators on the device generator (never the CPU fallback: the CPU
// generator's stream would then decide infini's numbers).
//
// Argument checks and composites are PyTorch's own: the operators enter
// ATen's distribution templates (ATen/native/DistributionTemplates.h, the
// way CPU and CUDA share them), whose kernels here take (seed, offset) from
// the infini generator under its mutex, at the call, and land the draw:
// - through the kernel seam's Random operator where the provider has a
//   generator (host: in stream order, in place);
// - else generated on the host (philox/fill.h) from that state: in place
//   after the stream's pending work on host-addressable devices, otherwise
//   into pinned memory copied to the device on the current stream.
// randperm and multinomial run on the host from the same state (multinomial
// reads the probabilities, so it synchronizes, as its checks need the data).
#include <ATen/ATen.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <torch/library.h>

#include <mutex>
#include <numeric>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "common/random_dtypes.h"
#include "philox/fill.h"
#include "philox/philox.h"
#include "torch_infini/runtime/generator.h"

namespace torch_infini::ops {
namespace {

using at::native::templates::bernoulli_impl_;
using Gen = std::optional<at::Generator>;

InfiniGenerator* generatorFor(const Gen& gen, const at::Tensor& self) {
  return at::get_generator_or_default<InfiniGenerator>(gen,
                                                       defaultGenerator(self.device().index()));
}

// Takes (seed, offset) for `numel` elements of `dtype` from the generator.
void reserve(RandomDraw& draw, InfiniGenerator* gen, c10::ScalarType dtype, int64_t numel) {
  std::lock_guard<std::mutex> lock(gen->mutex_);
  const auto [seed, offset] = gen->philoxState(blocksFor(draw, dtype, numel));
  draw.seed = seed;
  draw.offset = offset;
}

// Generates on the calling thread into `self`, after its stream's pending
// work where the memory is the CPU's, else through pinned memory.
void drawOnHost(const at::Tensor& self, const RandomDraw& draw) {
  runtime::DeviceRuntime& rt = runtime::selectedRuntime();
  if (rt.capabilities().host_addressable) {
    rt.synchronizeStream(streamOf(self));
    fillRandom(toRef(self), draw);
    return;
  }
  at::Tensor staging =
      at::empty(self.sizes(), self.options().device(c10::kCPU).pinned_memory(true));
  fillRandom(toRef(staging), draw);
  self.copy_(staging, /*non_blocking=*/true);
}

// The draw into the infini tensor `self` (dtype checked by the caller).
void draw(const at::Tensor& self, RandomDraw draw, const Gen& gen) {
  checkInfiniTensor("random operator", "self", self);
  if (self.numel() == 0) return;
  at::assert_no_internal_overlap(self);
  reserve(draw, generatorFor(gen, self), self.scalar_type(), self.numel());
  KernelProvider& k = selectedKernelProvider();
  if (draw.kind != Distribution::BernoulliP && k.supports(SeamOp::Random, self.scalar_type())) {
    k.random(toRef(self), draw, streamOf(self));
    return;
  }
  drawOnHost(self, draw);
}

at::Tensor asTensor(const at::TensorBase& base) { return at::Tensor(base); }

// The dispatch macros' NotImplementedError, for a dtype the CPU's kernel of
// the operator does not take either.
void requireDtype(bool supported, const char* name, c10::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(supported, '"', name, "\" not implemented for '",
                              c10::toString(dtype), "' on infini");
}
void requireFloating(c10::ScalarType dtype, const char* name) {
  requireDtype(floatingDtype(dtype), name, dtype);
}
void requireAllAndBool(c10::ScalarType dtype, const char* name) {
  requireDtype(realOrBoolDtype(dtype), name, dtype);
}

// ---- Kernels for ATen's distribution templates ----------------------------

template <typename RNG>
struct UniformKernel {
  void operator()(at::TensorIteratorBase& iter, double from, double to, Gen gen) {
    draw(asTensor(iter.tensor_base(0)),
         {.kind = Distribution::Uniform, .param1 = from, .param2 = to}, gen);
  }
};

template <typename RNG>
struct NormalKernel {
  void operator()(const at::TensorBase& self, double mean, double std, Gen gen) {
    requireFloating(self.scalar_type(), "normal_");
    draw(asTensor(self), {.kind = Distribution::Normal, .param1 = mean, .param2 = std}, gen);
  }
};

template <typename RNG>
struct LogNormalKernel {
  void operator()(at::TensorIteratorBase& iter, double mean, double std, Gen gen) {
    requireFloating(iter.dtype(), "log_normal_");
    draw(asTensor(iter.tensor_base(0)),
         {.kind = Distribution::LogNormal, .param1 = mean, .param2 = std}, gen);
  }
};

template <typename RNG>
struct ExponentialKernel {
  void operator()(at::TensorIteratorBase& iter, double lambda, Gen gen) {
    // The CPU kernel's own check, in its words.
    TORCH_CHECK(at::isFloatingType(iter.dtype()),
                "Exponential distribution is a continuous probability distribution. dtype must "
                "be a floating point but you specified ",
                iter.dtype());
    requireFloating(iter.dtype(), "exponential_");
    draw(asTensor(iter.tensor_base(0)), {.kind = Distribution::Exponential, .param1 = lambda}, gen);
  }
};

template <typename RNG>
struct GeometricKernel {
  void operator()(at::TensorIteratorBase& iter, double p, Gen gen) {
    requireDtype(realDtype(iter.dtype()), "geometric_", iter.dtype());
    draw(asTensor(iter.tensor_base(0)), {.kind = Distribution::Geometric, .param1 = p}, gen);
  }
};

template <typename RNG>
struct CauchyKernel {
  void operator()(at::TensorIteratorBase& iter, double median, double sigma, Gen gen) {
    requireFloating(iter.dtype(), "cauchy_");
    draw(asTensor(iter.tensor_base(0)),
         {.kind = Distribution::Cauchy, .param1 = median, .param2 = sigma}, gen);
  }
};

template <typename RNG>
struct BernoulliScalarKernel {
  void operator()(const at::TensorBase& self, double p, Gen gen) {
    requireAllAndBool(self.scalar_type(), "bernoulli_");
    draw(asTensor(self), {.kind = Distribution::Bernoulli, .param1 = p}, gen);
  }
};

template <typename RNG>
struct BernoulliTensorKernel {
  void operator()(const at::TensorBase& self_base, const at::TensorBase& p_base, Gen gen) {
    const at::Tensor self = asTensor(self_base);
    requireAllAndBool(self.scalar_type(), "bernoulli_");
    requireFloating(p_base.scalar_type(), "bernoulli_ (p)");
    // The probabilities on the CPU (synchronizing): checked there, at the
    // call, as the CPU kernel checks them, and read there by the draw.
    const at::Tensor p = asTensor(p_base).to(c10::kCPU).expand(self.sizes());
    TORCH_CHECK(((p >= 0) & (p <= 1)).all().item<bool>(),
                "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                "message be improved?  If so, please report an enhancement request to PyTorch.)");
    RandomDraw d{.kind = Distribution::BernoulliP};
    d.p = toRef(p);
    draw(self, d, gen);
  }
};

// random_(): [0, 2^digits] for floating types, [0, max] for integers.
template <typename RNG>
struct RandomKernel {
  void operator()(at::TensorIteratorBase& iter, Gen gen) {
    RandomDraw d{.kind = Distribution::Integers};
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, iter.dtype(), "random_", [&] {
      if constexpr (std::is_same_v<scalar_t, bool>) {
        d.range = 2;
      } else if constexpr (std::is_floating_point_v<scalar_t> ||
                           std::is_same_v<scalar_t, at::Half> ||
                           std::is_same_v<scalar_t, at::BFloat16>) {
        d.range = (uint64_t{1} << std::numeric_limits<scalar_t>::digits) + 1;
      } else {
        d.range = static_cast<uint64_t>(std::numeric_limits<scalar_t>::max()) + 1;
      }
    });
    draw(asTensor(iter.tensor_base(0)), d, gen);
  }
};

template <typename RNG>
struct RandomFromToKernel {
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t base, Gen gen) {
    // Ranges the dtype's bounds allow were checked: unsigned types too.
    requireDtype(realBoolOrUnsignedDtype(iter.dtype()), "random_", iter.dtype());
    draw(asTensor(iter.tensor_base(0)),
         {.kind = Distribution::Integers, .base = base, .range = range}, gen);
  }
  // [int64 min, int64 max]: the full 64-bit range.
  void operator()(at::TensorIteratorBase& iter, Gen gen) {
    requireDtype(realBoolOrUnsignedDtype(iter.dtype()), "random_", iter.dtype());
    draw(asTensor(iter.tensor_base(0)),
         {.kind = Distribution::Integers, .base = std::numeric_limits<int64_t>::min(), .range = 0},
         gen);
  }
};

// ---- ATen operators ------------------------------------------------------

at::Tensor& uniform_(at::Tensor& self, double from, double to, Gen gen) {
  return at::native::templates::uniform_impl_<UniformKernel, InfiniGenerator>(self, from, to, gen);
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, Gen gen) {
  return at::native::templates::normal_impl_<NormalKernel, InfiniGenerator>(self, mean, std, gen);
}

at::Tensor& log_normal_(at::Tensor& self, double mean, double std, Gen gen) {
  return at::native::templates::log_normal_impl_<LogNormalKernel, InfiniGenerator>(self, mean, std,
                                                                                   gen);
}

at::Tensor& exponential_(at::Tensor& self, double lambda, Gen gen) {
  return at::native::templates::exponential_impl_<ExponentialKernel, InfiniGenerator>(self, lambda,
                                                                                      gen);
}

at::Tensor& geometric_(at::Tensor& self, double p, Gen gen) {
  return at::native::templates::geometric_impl_<GeometricKernel, InfiniGenerator>(self, p, gen);
}

at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, Gen gen) {
  return at::native::templates::cauchy_impl_<CauchyKernel, InfiniGenerator>(self, median, sigma,
                                                                            gen);
}

at::Tensor& random_(at::Tensor& self, Gen gen) {
  return at::native::templates::random_impl<RandomKernel, InfiniGenerator>(self, gen);
}

at::Tensor& random_from_(at::Tensor& self, int64_t from, std::optional<int64_t> to, Gen gen) {
  return at::native::templates::random_from_to_impl<RandomFromToKernel, InfiniGenerator>(self, from,
                                                                                         to, gen);
}

at::Tensor& random_to_(at::Tensor& self, int64_t to, Gen gen) {
  return random_from_(self, 0, to, gen);
}

at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, Gen gen) {
  return bernoulli_impl_<BernoulliTensorKernel, InfiniGenerator>(self, p, gen);
}

at::Tensor& bernoulli_float_(at::Tensor& self, double p, Gen gen) {
  return bernoulli_impl_<BernoulliScalarKernel, InfiniGenerator>(self, p, gen);
}

at::Tensor& bernoulli_out(const at::Tensor& self, Gen gen, at::Tensor& result) {
  return at::native::templates::bernoulli_out_impl<BernoulliTensorKernel, InfiniGenerator>(
      result, self, gen);
}

// normal(mean, std) with tensor arguments: ATen's composite (a standard
// normal draw scaled and shifted by infini operators), with the check of
// std's values made on a CPU copy rather than through a reduction on infini.
void checkStdTensor(const at::Tensor& std) {
  TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
  TORCH_CHECK(std.numel() == 0 || std.to(c10::kCPU).min().ge(0).item<bool>(),
              "normal expects all elements of std >= 0.0");
}

void checkStd(double std) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
}

at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std, Gen gen,
                                    at::Tensor& output) {
  checkStd(std);
  at::native::resize_output(output, at::infer_size(mean.sizes(), output.sizes()));
  normal_(output, 0, std, gen);
  output.add_(mean);
  return output;
}

at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std, Gen gen,
                                    at::Tensor& output) {
  checkStdTensor(std);
  at::native::resize_output(output, std.sizes());
  normal_(output, 0, 1, gen);
  output.mul_(std).add_(mean);
  return output;
}

at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std, Gen gen,
                                     at::Tensor& output) {
  checkStdTensor(std);
  at::native::resize_output(output, at::infer_size(mean.sizes(), std.sizes()));
  normal_(output, 0, 1, gen);
  output.mul_(std).add_(mean);
  return output;
}

at::Tensor normal_tensor_float(const at::Tensor& mean, double std, Gen gen) {
  checkStd(std);
  // Contiguous, as PyTorch predicts (std * samples + mean: the samples lead).
  at::Tensor out = at::empty_like(mean, at::MemoryFormat::Contiguous);
  return normal_tensor_float_out(mean, std, gen, out);
}

at::Tensor normal_float_tensor(double mean, const at::Tensor& std, Gen gen) {
  checkStdTensor(std);
  at::Tensor out = at::empty_like(std);  // std's layout, as PyTorch predicts (std * samples)
  return normal_float_tensor_out(mean, std, gen, out);
}

at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std, Gen gen) {
  checkStdTensor(std);
  // std's layout where it has the result's shape, as PyTorch predicts
  // (std * samples + mean: std leads the layout), else contiguous.
  const std::vector<int64_t> sizes = at::infer_size(mean.sizes(), std.sizes());
  at::Tensor out = std.sizes().equals(sizes)
                       ? at::empty_like(std, mean.options())
                       : at::empty(sizes, mean.options(), at::MemoryFormat::Contiguous);
  return normal_tensor_tensor_out(mean, std, gen, out);
}

// ---- randperm ---------------------------------------------------------------

// A uniform permutation of [0, n): Fisher-Yates, the swap partner of
// position i (from n-1 down to 1) being lane(s) n-1-i modulo i+1.
at::Tensor& randperm_out(int64_t n, Gen gen, at::Tensor& result) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  at::native::check_supported_max_int_with_precision(n, result);
  requireDtype(realDtype(result.scalar_type()), "randperm", result.scalar_type());
  result.resize_({n});
  if (n == 0) return result;
  RandomDraw d{.kind = Distribution::Integers, .range = static_cast<uint64_t>(n)};
  reserve(d, generatorFor(gen, result), c10::kLong, n);
  at::Tensor perm = at::empty({n}, at::TensorOptions().dtype(at::kLong));
  int64_t* p = perm.data_ptr<int64_t>();
  std::iota(p, p + n, int64_t{0});
  PhiloxLanes lanes(d.seed, d.offset, 0);
  const bool wide = lanesPerElement(d, c10::kLong) == 2;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t x = wide ? lanes.next64() : lanes.next();
    std::swap(p[i], p[static_cast<int64_t>(x % static_cast<uint64_t>(i + 1))]);
  }
  result.copy_(perm.to(result.scalar_type()));
  return result;
}

// ---- multinomial --------------------------------------------------------------

// The checks of ATen's multinomial, in its order and words.
void checkMultinomial(const at::Tensor& self, int64_t n_sample, bool replacement,
                      const at::Tensor& result) {
  TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(
      at::isFloatingType(self.scalar_type()),
      "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  TORCH_CHECK(result.scalar_type() == at::kLong,
              "multinomial expects Long tensor out, got: ", result.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n_categories = self.size(-1);
  TORCH_CHECK(replacement || (n_sample <= n_categories),
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
}

// With replacement: per row, the normalized cumulative distribution in
// double, and per sample the first category whose cumulative mass exceeds a
// uniform draw in [0, 1) (53 bits). Checks as the CPU's kernel makes them.
void sampleWithReplacement(const at::Tensor& probs, int64_t n_sample, const RandomDraw& d,
                           at::Tensor& samples) {
  const int64_t rows = probs.size(0);
  const int64_t n_categories = probs.size(1);
  const at::Tensor p = probs.to(at::kDouble).contiguous();
  const double* pp = p.data_ptr<double>();
  int64_t* out = samples.data_ptr<int64_t>();
  std::vector<double> cdf(static_cast<size_t>(n_categories));
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t c = 0; c < n_categories; ++c) {
      const double v = pp[r * n_categories + c];
      TORCH_CHECK(v >= 0, "invalid multinomial distribution (encountering probability entry < 0)");
      TORCH_CHECK(std::isfinite(v),
                  "invalid multinomial distribution (encountering probability entry = infinity "
                  "or NaN)");
      total += v;
      cdf[static_cast<size_t>(c)] = total;
    }
    TORCH_CHECK(total > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
    PhiloxLanes lanes(d.seed, d.offset, static_cast<uint64_t>(2 * r * n_sample));
    for (int64_t s = 0; s < n_sample; ++s) {
      const double u = static_cast<double>(lanes.next64() >> 11) * 0x1p-53 * total;
      // The first category with cdf > u: never one of zero probability.
      auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
      if (it == cdf.end()) --it;  // u rounded up to the total
      while (it != cdf.begin() && *(it - 1) == *it) --it;
      out[r * n_sample + s] = it - cdf.begin();
    }
  }
}

at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool replacement, Gen gen,
                            at::Tensor& result) {
  checkMultinomial(self, n_sample, replacement, result);
  checkInfiniTensor("multinomial", "self", self);
  const int64_t n_categories = self.size(-1);
  const int64_t rows = self.dim() == 1 ? 1 : self.size(0);
  if (self.dim() == 1) {
    result.resize_({n_sample});
  } else {
    result.resize_({rows, n_sample});
  }
  if (result.numel() == 0) return result;
  const at::Tensor probs = self.to(c10::kCPU).reshape({rows, n_categories});
  InfiniGenerator* generator = generatorFor(gen, self);
  at::Tensor samples;
  if (!replacement || n_sample == 1) {
    // ATen's fast path, on the host: argmax / top-k of p / q, q ~ Exp(1)
    // drawn in the probabilities' dtype (the Gumbel-max trick).
    TORCH_CHECK(((probs.max() < INFINITY) & (probs.min() >= 0)).item<bool>(),
                "probability tensor contains either `inf`, `nan` or element < 0");
    TORCH_CHECK(!(probs.sum(1) == 0).any().item<bool>(),
                "invalid multinomial distribution (sum of probabilities <= 0)");
    RandomDraw d{.kind = Distribution::Exponential, .param1 = 1.0};
    reserve(d, generator, probs.scalar_type(), probs.numel());
    at::Tensor q = at::empty_like(probs);
    fillRandom(toRef(q), d);
    at::div_out(q, probs, q);
    samples = n_sample == 1 ? q.argmax(-1, /*keepdim=*/true)
                            : std::get<1>(q.topk(n_sample, -1, /*largest=*/true, /*sorted=*/true));
  } else {
    RandomDraw d{.kind = Distribution::Uniform};
    reserve(d, generator, c10::kDouble, rows * n_sample);  // 2 lanes per sample
    samples = at::empty({rows, n_sample}, at::TensorOptions().dtype(at::kLong));
    sampleWithReplacement(probs, n_sample, d, samples);
  }
  result.copy_(samples.reshape(result.sizes()));
  return result;
}

at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement, Gen gen) {
  at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  return multinomial_out(self, n_sample, replacement, gen, result);
}

// ---- dropout --------------------------------------------------------------------

// As the CPU computes it: mask ~ Bernoulli(1 - p) (bool, the input's
// layout), output = input * mask * scale with scale rounded to the input's
// dtype; the products run as infini's own cast and multiplication kernels.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input, input.options())};
  if (train.has_value() && !*train)
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  TORCH_CHECK(at::isFloatingType(input.scalar_type()) || at::isComplexType(input.scalar_type()),
              "result type Float can't be cast to the desired output type ", input.scalar_type());
  const double p1m = 1. - p;
  const double scale = p1m == 0 ? 0. : 1. / p1m;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  bernoulli_float_(mask, p1m, std::nullopt);
  c10::Scalar rounded;
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(),
                                              "native_dropout",
                                              [&] { rounded = static_cast<scalar_t>(scale); });
  at::Tensor output = at::mul(input, mask.to(input.scalar_type()));
  output.mul_(rounded);
  return {output, mask};
}

// grad * mask * scale, as the CPU (scale applied as a Python number would be).
at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  const at::Tensor m = mask.scalar_type() == at::kBool ? mask.to(grad.scalar_type()) : mask;
  // Promotes as the CPU's (int grad: float result); in the gradient's
  // suggested memory format, as PyTorch predicts (and CUDA's kernel gives).
  return at::mul(at::mul(grad, m), scale).contiguous(grad.suggest_memory_format());
}

// From the device generator: the seam's Random kernel where the provider
// has a generator, else generated on the host; every dtype the CPU's kernel
// takes.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar floating_or_complex(m, "aten", "random", std::nullopt, floatingOrComplexDtype);
  BridgeRegistrar floating(m, "aten", "random", std::nullopt, floatingDtype);
  BridgeRegistrar real(m, "aten", "random", std::nullopt, realDtype);
  BridgeRegistrar real_or_bool(m, "aten", "random", std::nullopt, realOrBoolDtype);
  BridgeRegistrar real_bool_or_unsigned(m, "aten", "random", std::nullopt, realBoolOrUnsignedDtype);
  floating_or_complex.impl("uniform_", TORCH_FN(uniform_));
  floating_or_complex.impl("normal_", TORCH_FN(normal_));
  floating_or_complex.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
  floating_or_complex.impl("normal.Tensor_float_out", TORCH_FN(normal_tensor_float_out));
  floating_or_complex.impl("normal.float_Tensor", TORCH_FN(normal_float_tensor));
  floating_or_complex.impl("normal.float_Tensor_out", TORCH_FN(normal_float_tensor_out));
  floating_or_complex.impl("normal.Tensor_Tensor", TORCH_FN(normal_tensor_tensor));
  floating_or_complex.impl("normal.Tensor_Tensor_out", TORCH_FN(normal_tensor_tensor_out));
  floating.impl("log_normal_", TORCH_FN(log_normal_));
  floating.impl("exponential_", TORCH_FN(exponential_));
  real.impl("geometric_", TORCH_FN(geometric_));
  floating.impl("cauchy_", TORCH_FN(cauchy_));
  real_or_bool.impl("random_", TORCH_FN(random_));
  real_bool_or_unsigned.impl("random_.from", TORCH_FN(random_from_));
  real_bool_or_unsigned.impl("random_.to", TORCH_FN(random_to_));
  real_or_bool.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor_));
  real_or_bool.impl("bernoulli_.float", TORCH_FN(bernoulli_float_));
  real_or_bool.impl("bernoulli.out", TORCH_FN(bernoulli_out));
  real.impl("randperm.generator_out", TORCH_FN(randperm_out));
  floating.impl("multinomial", TORCH_FN(multinomial));  // the probabilities' dtype
  floating.impl("multinomial.out", TORCH_FN(multinomial_out));
  floating_or_complex.impl("native_dropout", TORCH_FN(native_dropout));
  // Draws nothing: an elementwise product, every dtype.
  BridgeRegistrar(m, "aten", "elementwise")
      .impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
}

}  // namespace
}  // namespace torch_infini::ops
