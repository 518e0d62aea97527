// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011): a counter-based generator. Block `b` of the stream a 64-bit
// key selects is four 32-bit numbers computed from (key, b) alone, so any
// block can be produced by any thread in any order: the property that makes
// infini's random numbers independent of threads, streams and work split.
//
// Counter layout as ATen's philox_engine (ATen/core/PhiloxRNGEngine.h) with
// subsequence 0: words 0-1 hold the block index, words 2-3 are zero; the
// key is the seed. tests/cpp/test_philox.cpp checks the two agree.
#pragma once

#include <array>
#include <cstdint>

namespace torch_infini::ops {

using PhiloxBlock = std::array<uint32_t, 4>;

inline PhiloxBlock philox(uint64_t seed, uint64_t block) {
  constexpr uint32_t kMul0 = 0xD2511F53;
  constexpr uint32_t kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9;  // key schedule: golden ratio
  constexpr uint32_t kWeyl1 = 0xBB67AE85;  // and sqrt(3) - 1
  uint32_t c0 = static_cast<uint32_t>(block);
  uint32_t c1 = static_cast<uint32_t>(block >> 32);
  uint32_t c2 = 0;
  uint32_t c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed);
  uint32_t k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

// The 32-bit numbers ("lanes") of a stream read in order from lane `first`:
// lane L is word L % 4 of block offset + L / 4.
class PhiloxLanes {
 public:
  PhiloxLanes(uint64_t seed, uint64_t offset, uint64_t first)
      : seed_(seed), block_(offset + first / 4), word_(static_cast<uint32_t>(first % 4)) {
    current_ = philox(seed_, block_);
  }

  uint32_t next() {
    if (word_ == 4) {
      current_ = philox(seed_, ++block_);
      word_ = 0;
    }
    return current_[word_++];
  }

  uint64_t next64() {
    const uint64_t hi = next();
    return (hi << 32) | next();
  }

 private:
  uint64_t seed_;
  uint64_t block_;
  uint32_t word_;
  PhiloxBlock current_{};
};

}  // namespace torch_infini::ops
