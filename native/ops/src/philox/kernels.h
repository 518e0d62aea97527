// The hot loops of host random number generation, written so the compiler
// vectorizes them (this file is built with -O3 and, on x86-64, cloned for
// AVX2 and AVX-512 with the best chosen at load time). No ATen here.
#pragma once

#include <cstdint>

namespace torch_infini::ops {

// Words of Philox blocks [block, block + blocks) of `seed`'s stream:
// out[4 * i + w] = word w of block + i (philox.h).
void philoxBlocks(uint64_t seed, uint64_t block, int64_t blocks, uint32_t* out);

// Box-Muller on lane pairs, in float: pair j = (lanes[2j], lanes[2j+1]) gives
// out[2j] = r cos(theta) and out[2j+1] = r sin(theta), with
// r = sqrt(-2 log(u1)), u1 in (0, 1] from the first lane's top 24 bits, and
// theta = 2 pi u2, u2 in [0, 1) from the second's; then * sd + mean, and
// exp() of that for a log-normal draw. log, sin and cos are this file's own
// polynomials, within a few float ulp of the exact values (test_philox.cpp).
void normalPairsFloat(const uint32_t* lanes, int64_t pairs, float mean, float sd, bool log_normal,
                      float* out);

}  // namespace torch_infini::ops
