// The host generator's building blocks: Philox-4x32-10 as ATen's own engine
// computes it, and the vectorized Box-Muller against double-precision math.
#include <ATen/core/PhiloxRNGEngine.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "check.h"
#include "philox/kernels.h"
#include "philox/philox.h"

using namespace torch_infini::ops;

namespace {

// Block b of seed s is what at::philox_engine(s, 0, b) yields first.
void philoxMatchesAten() {
  for (uint64_t seed : {uint64_t{0}, uint64_t{67280421310721}, ~uint64_t{0}}) {
    for (uint64_t block : {uint64_t{0}, uint64_t{1}, uint64_t{0xFFFFFFFF}, uint64_t{1} << 40}) {
      at::philox_engine engine(seed, /*subsequence=*/0, /*offset=*/block);
      const PhiloxBlock mine = philox(seed, block);
      for (uint32_t word : mine) CHECK(engine() == word);
    }
  }
}

// philoxBlocks (cloned per instruction set) equals the scalar definition,
// and PhiloxLanes reads the same stream from any lane.
void blocksAndLanesAgree() {
  const uint64_t seed = 1234;
  std::vector<uint32_t> words(4 * 37);
  philoxBlocks(seed, 100, 37, words.data());
  for (int b = 0; b < 37; ++b) {
    const PhiloxBlock ref = philox(seed, 100 + static_cast<uint64_t>(b));
    for (int w = 0; w < 4; ++w) CHECK(words[4 * b + w] == ref[w]);
  }
  PhiloxLanes lanes(seed, 100, 6);  // lane 6: block 101, word 2
  for (size_t i = 6; i < words.size(); ++i) CHECK(lanes.next() == words[i]);
}

// normalPairsFloat's own log/sin/cos against double math on the same lanes:
// within 4 float ulps of the value (|z| <= 5.8), over a million pairs and
// the extreme lanes (u1 = 2^-24 and 1, theta at every quadrant boundary).
void boxMullerIsAccurate() {
  std::vector<uint32_t> lanes(2 * (1 << 20));
  philoxBlocks(99, 0, static_cast<int64_t>(lanes.size() / 4), lanes.data());
  const uint32_t extremes[][2] = {
      {0, 0},          {0xFFFFFFFF, 0}, {0, 0x40000000},         {0, 0x80000000},
      {0, 0xC0000000}, {0, 0xFFFFFFFF}, {0x7FFFFF00, 0x20000000}};
  for (const auto& e : extremes) {
    lanes.push_back(e[0]);
    lanes.push_back(e[1]);
  }
  const auto pairs = static_cast<int64_t>(lanes.size() / 2);
  std::vector<float> out(lanes.size());
  normalPairsFloat(lanes.data(), pairs, 0.0f, 1.0f, false, out.data());
  for (int64_t j = 0; j < pairs; ++j) {
    const double u1 = ((lanes[2 * j] >> 8) + 1) * 0x1p-24;
    const double u2 = (lanes[2 * j + 1] >> 8) * 0x1p-24;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    const double z[2] = {r * std::cos(theta), r * std::sin(theta)};
    for (int k = 0; k < 2; ++k) {
      const double got = out[2 * j + k];
      const double ulp = std::max(std::abs(z[k]), 1e-2) * 0x1p-23;
      CHECK(std::abs(got - z[k]) <= 4 * ulp);
    }
  }
  // mean and sd applied after, exp for log-normal.
  std::vector<float> shifted(out.size());
  normalPairsFloat(lanes.data(), 4, 3.0f, 2.0f, true, shifted.data());
  for (int i = 0; i < 8; ++i)
    CHECK(std::abs(shifted[i] - std::exp(out[i] * 2.0f + 3.0f)) <= 1e-5f * shifted[i]);
}

}  // namespace

int main() {
  return runTests({{"philoxMatchesAten", philoxMatchesAten},
                   {"blocksAndLanesAgree", blocksAndLanesAgree},
                   {"boxMullerIsAccurate", boxMullerIsAccurate}});
}
