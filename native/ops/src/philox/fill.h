// Random numbers generated on the host from an infini generator's state.
//
// The numbering rule (what makes results independent of threads, streams
// and how the work is split): element k of the output, in logical
// (row-major) order, is computed from lanes [k*w, (k+1)*w) of the Philox
// stream (seed, offset) — see philox.h — where w is lanesPerElement(): 2 for
// 64-bit precision (double results, integer ranges of 2^32 or more), else 1.
// Normal and log-normal draws use pairs (Box-Muller): elements 2j and 2j+1
// come from lanes [2j*w, (2j+2)*w). An operator that draws n elements moves
// its generator's offset past ceil(lanesFor(n) / 4) blocks, rounded up to a
// multiple of 4 (InfiniGenerator::philoxState).
#pragma once

#include <cstdint>

#include "torch_infini/ops/kernel_provider.h"

namespace torch_infini::ops {

enum class Distribution : uint8_t {
  Uniform,      // [a, b)
  Normal,       // mean a, standard deviation b
  LogNormal,    // exp(Normal(a, b))
  Bernoulli,    // 1 with probability a, else 0
  BernoulliP,   // 1 with probability p[k] (a tensor), else 0
  Exponential,  // rate a
  Geometric,    // trials to the first success, success probability a
  Cauchy,       // median a, scale b
  Integers,     // base + uniform integer in [0, range); range 0 stands for 2^64
};

struct RandomDraw {
  Distribution kind = Distribution::Uniform;
  // The distribution's parameters, in PyTorch's argument order:
  // Uniform(from, to), Normal and LogNormal(mean, std), Cauchy(median,
  // sigma), Exponential(lambda), Geometric(p), Bernoulli(p).
  double param1 = 0;
  double param2 = 0;
  int64_t base = 0;    // Integers
  uint64_t range = 0;  // Integers
  TensorRef p{};       // BernoulliP: probabilities broadcast to the output's shape
  uint64_t seed = 0;
  uint64_t offset = 0;  // first Philox block
};

// 32-bit lanes one element of `dtype` consumes.
int64_t lanesPerElement(const RandomDraw& draw, c10::ScalarType dtype);
// Lanes a draw of `numel` elements consumes (pairs rounded up).
uint64_t lanesFor(const RandomDraw& draw, c10::ScalarType dtype, int64_t numel);
// Philox blocks to reserve for them.
inline uint64_t blocksFor(const RandomDraw& draw, c10::ScalarType dtype, int64_t numel) {
  return (lanesFor(draw, dtype, numel) + 3) / 4;
}

// Writes the draw into `out`, which the CPU can address (host memory or a
// host-addressable device), any strides without internal overlap. Runs on
// the calling thread, in parallel chunks whose results do not depend on
// the chunking. BernoulliP's p must be host-addressable too.
void fillRandom(const TensorRef& out, const RandomDraw& draw);

}  // namespace torch_infini::ops
