// The vectorized Philox loops of host random number generation, kept apart
// to be built with -O3 and cloned per instruction set (kernels.h).
#include "philox/kernels.h"

#include <cmath>
#include <cstring>

#include "philox/philox.h"

// One copy of each loop per instruction set, the best picked when the
// library loads (GCC and Clang on x86-64 Linux); plain code elsewhere. Not
// under ThreadSanitizer: the picker (an ifunc resolver) runs while the
// library is relocated, and TSan's instrumentation of it would call the TSan
// runtime through a not yet relocated PLT entry (a crash at load).
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_THREAD__)
#define TORCH_INFINI_VECTOR_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define TORCH_INFINI_VECTOR_CLONES
#endif

namespace torch_infini::ops {
namespace {

inline uint32_t bitsOf(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline float fromBits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Natural log of a positive normal float. x = m * 2^e with m in
// [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <=
// 0.1716, by its series to s^9 (truncation error below 2e-10).
inline float logPositive(float x) {
  // Branch-free (selects as bit arithmetic), so the loops vectorize.
  const uint32_t bits = bitsOf(x);
  const uint32_t mantissa = (bits & 0x007FFFFFu) | 0x3F800000u;  // m in [1, 2)
  const uint32_t high = mantissa > 0x3FB504F3u ? 1u : 0u;        // m > sqrt(2): halve it
  const float m = fromBits(mantissa - (high << 23));
  const int32_t e = static_cast<int32_t>(bits >> 23) - 127 + static_cast<int32_t>(high);
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  const float series =
      s * (2.0f + s2 * (2.0f / 3 + s2 * (2.0f / 5 + s2 * (2.0f / 7 + s2 * (2.0f / 9)))));
  return static_cast<float>(e) * 0.693147180559945f + series;
}

// sin and cos of a in [-pi/4, pi/4], Taylor series to a^9 and a^10
// (truncation error below 2e-9).
inline float sinSmall(float a) {
  const float a2 = a * a;
  return a *
         (1.0f + a2 * (-1.0f / 6 + a2 * (1.0f / 120 + a2 * (-1.0f / 5040 + a2 * (1.0f / 362880)))));
}

inline float cosSmall(float a) {
  const float a2 = a * a;
  return 1.0f +
         a2 * (-0.5f + a2 * (1.0f / 24 +
                             a2 * (-1.0f / 720 + a2 * (1.0f / 40320 + a2 * (-1.0f / 3628800)))));
}

}  // namespace

TORCH_INFINI_VECTOR_CLONES
void philoxBlocks(uint64_t seed, uint64_t block, int64_t blocks, uint32_t* out) {
  for (int64_t i = 0; i < blocks; ++i) {
    const PhiloxBlock b = philox(seed, block + static_cast<uint64_t>(i));
    out[4 * i] = b[0];
    out[4 * i + 1] = b[1];
    out[4 * i + 2] = b[2];
    out[4 * i + 3] = b[3];
  }
}

TORCH_INFINI_VECTOR_CLONES
void normalPairsFloat(const uint32_t* lanes, int64_t pairs, float mean, float sd, bool log_normal,
                      float* out) {
  constexpr float kHalfPi = 1.57079632679489662f;
  for (int64_t j = 0; j < pairs; ++j) {
    // u1 in (0, 1], exact: (k + 1) 2^-24 for the top 24 bits k.
    const float u1 = static_cast<float>(static_cast<int32_t>((lanes[2 * j] >> 8) + 1)) * 0x1p-24f;
    const float r = std::sqrt(-2.0f * logPositive(u1));
    // theta = 2 pi u2 = (q + f) pi/2 with q = round(4 u2), f in [-1/2, 1/2]:
    // exact reduction, since 4 u2 = k 2^-22 is exact in float.
    const float quarter =
        static_cast<float>(static_cast<int32_t>(lanes[2 * j + 1] >> 8)) * 0x1p-22f;  // 4 u2
    const auto q = static_cast<int32_t>(quarter + 0.5f);  // quarter >= 0: truncation rounds
    const float a = (quarter - static_cast<float>(q)) * kHalfPi;
    const float s = sinSmall(a);
    const float c = cosSmall(a);
    const auto quadrant = static_cast<uint32_t>(q) & 3u;
    // cos and sin of a + quadrant * pi/2: odd quadrants swap sin and cos;
    // cos is negative in quadrants 1 and 2, sin in 2 and 3.
    const uint32_t swap = 0u - (quadrant & 1u);
    const uint32_t cb = bitsOf(c);
    const uint32_t sb = bitsOf(s);
    const float cos_t = fromBits(((sb & swap) | (cb & ~swap)) ^ (((quadrant + 1) & 2u) << 30));
    const float sin_t = fromBits(((cb & swap) | (sb & ~swap)) ^ ((quadrant & 2u) << 30));
    out[2 * j] = r * cos_t * sd + mean;
    out[2 * j + 1] = r * sin_t * sd + mean;
  }
  if (log_normal)
    for (int64_t i = 0; i < 2 * pairs; ++i) out[i] = std::exp(out[i]);
}

}  // namespace torch_infini::ops
