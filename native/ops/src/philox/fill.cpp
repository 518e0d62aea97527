// Random fills from an infini generator's state by the numbering rule that
// makes results independent of threads, streams and splits (fill.h).
#include "philox/fill.h"

#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <type_traits>
#include <vector>

#include "philox/kernels.h"

namespace torch_infini::ops {
namespace {

// Elements per parallel task (a multiple of 4, so that tasks start on a
// Philox block for every lane width and on a pair for Box-Muller).
constexpr int64_t kChunk = 1 << 14;

bool isPaired(Distribution kind) {
  return kind == Distribution::Normal || kind == Distribution::LogNormal;
}

// Uniform on the 2^24 (2^53) grid [0, 1), and the same grid shifted by half
// a step into the open interval (0, 1) for distributions that take a log.
double closedOpen24(uint32_t x) { return static_cast<double>(x >> 8) * 0x1p-24; }
double closedOpen53(uint64_t x) { return static_cast<double>(x >> 11) * 0x1p-53; }
double open24(uint32_t x) { return (static_cast<double>(x >> 8) + 0.5) * 0x1p-24; }
double open52(uint64_t x) { return (static_cast<double>(x >> 12) + 0.5) * 0x1p-52; }

// Reads the lanes of a chunk, in order, from a buffer philoxBlocks filled.
class LaneReader {
 public:
  explicit LaneReader(const uint32_t* lanes) : p_(lanes) {}
  uint32_t next() { return *p_++; }
  uint64_t next64() {
    const uint64_t hi = *p_++;
    return (hi << 32) | *p_++;
  }

 private:
  const uint32_t* p_;
};

// Walks the storage offsets of a strided view in logical order.
class Walker {
 public:
  Walker(const TensorRef& ref, int64_t first) : ref_(ref), index_(ref.sizes.size(), 0) {
    for (int64_t d = ref.dim() - 1; d >= 0 && first > 0; --d) {
      const int64_t size = ref.sizes[d];
      index_[d] = first % size;
      first /= size;
      offset_ += index_[d] * ref.strides[d];
    }
  }
  int64_t offset() const { return offset_; }
  void advance() {
    for (int64_t d = ref_.dim() - 1; d >= 0; --d) {
      offset_ += ref_.strides[d];
      if (++index_[d] < ref_.sizes[d]) return;
      offset_ -= index_[d] * ref_.strides[d];
      index_[d] = 0;
    }
  }

 private:
  const TensorRef& ref_;
  std::vector<int64_t> index_;
  int64_t offset_ = 0;
};

bool isContiguous(const TensorRef& ref) {
  int64_t expected = 1;
  for (int64_t d = ref.dim() - 1; d >= 0; --d) {
    if (ref.sizes[d] != 1 && ref.strides[d] != expected) return false;
    expected *= ref.sizes[d];
  }
  return true;
}

// A floating value rounded to T; T(x) for every T, including bool.
template <typename T>
T to(double x) {
  if constexpr (std::is_same_v<T, bool>) {
    return x != 0;
  } else {
    return static_cast<T>(x);
  }
}

template <typename T>
constexpr bool kWide = std::is_same_v<T, double>;  // 53-bit draws

// A uniform on [0, 1) from the next one lane (two for 53-bit draws).
template <typename T>
double closedOpenUnit(LaneReader& lanes) {
  return kWide<T> ? closedOpen53(lanes.next64()) : closedOpen24(lanes.next());
}

// A uniform on (0, 1) from the next one lane (two for 53-bit draws), for
// the distributions that take its log.
template <typename T>
double openUnit(LaneReader& lanes) {
  return kWide<T> ? open52(lanes.next64()) : open24(lanes.next());
}

// Uniform on [from, to) = [param1, param2).
template <typename T>
void fillUniform(const RandomDraw& draw, int64_t count, LaneReader& lanes, T* dst) {
  const double from = draw.param1;
  const double to_ = draw.param2;
  const double range = to_ - from;
  for (int64_t i = 0; i < count; ++i) {
    const double u = closedOpenUnit<T>(lanes);
    T value = to<T>(u * range + from);
    // Rounding to T may reach `to`: [from, to) holds as on CUDA.
    if (!(static_cast<double>(value) < to_) && from < to_) value = to<T>(from);
    dst[i] = value;
  }
}

// Normal (mean param1, std param2) or its exp, by Box-Muller on pairs of
// elements: in float, vectorized, for float and narrower results; in double
// otherwise.
template <typename T>
void fillNormal(const RandomDraw& draw, int64_t count, const uint32_t* lane_buffer,
                float* float_scratch, T* dst) {
  const bool log_normal = draw.kind == Distribution::LogNormal;
  if constexpr (!kWide<T>) {
    const int64_t pairs = (count + 1) / 2;
    // A float result of whole pairs takes the values in place.
    const bool direct = std::is_same_v<T, float> && count % 2 == 0;
    float* values = direct ? reinterpret_cast<float*>(dst) : float_scratch;
    normalPairsFloat(lane_buffer, pairs, static_cast<float>(draw.param1),
                     static_cast<float>(draw.param2), log_normal, values);
    if (!direct)
      for (int64_t i = 0; i < count; ++i) dst[i] = to<T>(values[i]);
    return;
  }
  LaneReader lanes(lane_buffer);
  for (int64_t i = 0; i < count; i += 2) {
    const double u1 = 1.0 - closedOpen53(lanes.next64());  // (0, 1]
    const double u2 = closedOpen53(lanes.next64());
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    double z0 = r * std::cos(theta) * draw.param2 + draw.param1;
    double z1 = r * std::sin(theta) * draw.param2 + draw.param1;
    if (log_normal) {
      z0 = std::exp(z0);
      z1 = std::exp(z1);
    }
    dst[i] = to<T>(z0);
    if (i + 1 < count) dst[i + 1] = to<T>(z1);
  }
}

// 1 with probability param1, else 0: one 32-bit lane per element.
template <typename T>
void fillBernoulli(const RandomDraw& draw, int64_t count, LaneReader& lanes, T* dst) {
  const double p = draw.param1;
  for (int64_t i = 0; i < count; ++i)
    dst[i] = to<T>(static_cast<double>(lanes.next()) * 0x1p-32 < p ? 1.0 : 0.0);
}

// 1 with the probability at the element's place in the tensor draw.p, else
// 0; `first` is the chunk's first element, where the walk over draw.p starts.
template <typename T>
void fillBernoulliP(const RandomDraw& draw, int64_t first, int64_t count, LaneReader& lanes,
                    T* dst) {
  Walker walker(draw.p, first);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, draw.p.dtype, "bernoulli_ on infini (p)", [&] {
        const auto* p = static_cast<const scalar_t*>(draw.p.data);
        for (int64_t i = 0; i < count; ++i, walker.advance()) {
          const double pk = static_cast<double>(p[walker.offset()]);
          dst[i] = to<T>(static_cast<double>(lanes.next()) * 0x1p-32 < pk ? 1.0 : 0.0);
        }
      });
}

// Exponential of rate param1.
template <typename T>
void fillExponential(const RandomDraw& draw, int64_t count, LaneReader& lanes, T* dst) {
  const double lambda = draw.param1;
  for (int64_t i = 0; i < count; ++i) {
    const double v = openUnit<T>(lanes);
    T value = to<T>(-std::log(v) / lambda);
    // Never 0 (the support is (0, inf)), even where T underflows.
    if (!(static_cast<double>(value) > 0)) value = std::numeric_limits<T>::denorm_min();
    dst[i] = value;
  }
}

// Geometric of success probability param1: trials up to the first success.
template <typename T>
void fillGeometric(const RandomDraw& draw, int64_t count, LaneReader& lanes, T* dst) {
  const double log_q = std::log1p(-draw.param1);
  for (int64_t i = 0; i < count; ++i) {
    const double v = openUnit<T>(lanes);
    dst[i] = to<T>(std::ceil(std::log(v) / log_q));
  }
}

// Cauchy of median param1 and scale param2.
template <typename T>
void fillCauchy(const RandomDraw& draw, int64_t count, LaneReader& lanes, T* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const double v = openUnit<T>(lanes);
    dst[i] = to<T>(draw.param1 + draw.param2 * std::tan(std::numbers::pi * (v - 0.5)));
  }
}

// Integers in [base, base + range), or every 64-bit value for range 0.
template <typename T>
void fillIntegers(const RandomDraw& draw, int64_t count, LaneReader& lanes, T* dst) {
  const uint64_t range = draw.range;
  const auto base = static_cast<uint64_t>(draw.base);
  // 64-bit draws for the full range (0) and ranges above 2^32.
  const bool wide = lanesPerElement(draw, c10::CppTypeToScalarType<T>::value) == 2;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t x = wide ? lanes.next64() : lanes.next();
    const uint64_t offset = range == 0 ? x : x % range;
    const auto value = static_cast<int64_t>(base + offset);
    if constexpr (std::is_same_v<T, bool>) {
      dst[i] = value != 0;
    } else {
      dst[i] = static_cast<T>(value);
    }
  }
}

// Elements [first, first + count) of the draw into dst[0, count), from the
// chunk's lanes in lane_buffer.
template <typename T>
void generate(const RandomDraw& draw, int64_t first, int64_t count, const uint32_t* lane_buffer,
              float* float_scratch, T* dst) {
  LaneReader lanes(lane_buffer);
  switch (draw.kind) {
    case Distribution::Uniform:
      fillUniform<T>(draw, count, lanes, dst);
      return;
    case Distribution::Normal:
    case Distribution::LogNormal:
      fillNormal<T>(draw, count, lane_buffer, float_scratch, dst);
      return;
    case Distribution::Bernoulli:
      fillBernoulli<T>(draw, count, lanes, dst);
      return;
    case Distribution::BernoulliP:
      fillBernoulliP<T>(draw, first, count, lanes, dst);
      return;
    case Distribution::Exponential:
      fillExponential<T>(draw, count, lanes, dst);
      return;
    case Distribution::Geometric:
      fillGeometric<T>(draw, count, lanes, dst);
      return;
    case Distribution::Cauchy:
      fillCauchy<T>(draw, count, lanes, dst);
      return;
    case Distribution::Integers:
      fillIntegers<T>(draw, count, lanes, dst);
      return;
  }
}

template <typename T>
void fillTyped(const TensorRef& out, const RandomDraw& draw) {
  const int64_t n = out.numel();
  const bool contiguous = isContiguous(out);
  T* data = static_cast<T*>(out.data);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    // Per task: the chunk's lanes, float values and (strided outputs)
    // results before they are scattered.
    const uint64_t max_lanes = lanesFor(draw, out.dtype, kChunk);
    auto lanes = std::make_unique<uint32_t[]>(static_cast<size_t>(max_lanes + 4));
    auto floats = std::make_unique<float[]>(static_cast<size_t>(kChunk));
    std::unique_ptr<T[]> scratch;  // not a vector: vector<bool> has no data()
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = c * kChunk;
      const int64_t count = std::min(kChunk, n - first);
      // first is a multiple of 4: the chunk starts on a block.
      const uint64_t first_lane = lanesFor(draw, out.dtype, first);
      const auto blocks = static_cast<int64_t>((lanesFor(draw, out.dtype, count) + 3) / 4);
      philoxBlocks(draw.seed, draw.offset + first_lane / 4, blocks, lanes.get());
      if (contiguous) {
        generate<T>(draw, first, count, lanes.get(), floats.get(), data + first);
        continue;
      }
      if (!scratch) scratch = std::make_unique<T[]>(static_cast<size_t>(kChunk));
      generate<T>(draw, first, count, lanes.get(), floats.get(), scratch.get());
      Walker walker(out, first);
      for (int64_t i = 0; i < count; ++i, walker.advance()) data[walker.offset()] = scratch[i];
    }
  });
}

}  // namespace

int64_t lanesPerElement(const RandomDraw& draw, c10::ScalarType dtype) {
  switch (draw.kind) {
    case Distribution::Bernoulli:
    case Distribution::BernoulliP:
      return 1;
    case Distribution::Integers:
      return draw.range == 0 || draw.range > (uint64_t{1} << 32) ? 2 : 1;
    default:
      return dtype == c10::ScalarType::Double ? 2 : 1;
  }
}

uint64_t lanesFor(const RandomDraw& draw, c10::ScalarType dtype, int64_t numel) {
  const auto n = static_cast<uint64_t>(isPaired(draw.kind) ? numel + (numel & 1) : numel);
  return n * static_cast<uint64_t>(lanesPerElement(draw, dtype));
}

void fillRandom(const TensorRef& out, const RandomDraw& draw) {
  if (out.numel() == 0) return;
  AT_DISPATCH_V2(out.dtype, "random on infini", AT_WRAP([&] { fillTyped<scalar_t>(out, draw); }),
                 AT_EXPAND(AT_ALL_TYPES), at::kHalf, at::kBFloat16, at::kBool,
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
}

}  // namespace torch_infini::ops
