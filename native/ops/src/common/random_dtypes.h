// The dtype sets of the CPU's random kernels: what the operator table
// declares for each random operator and what random/operators.cpp's kernels accept
// (one definition serves both, so the declaration is what runs).
#pragma once

#include <c10/core/ScalarType.h>

namespace torch_infini::ops {

// float, double, half, bfloat16 (uniform_, normal_, log_normal_, ...).
inline bool floatingDtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}
// Also complex, drawn as its real view (uniform_, normal_, dropout).
inline bool floatingOrComplexDtype(c10::ScalarType t) {
  return floatingDtype(t) || t == c10::kComplexFloat || t == c10::kComplexDouble;
}
// Floating and the signed integers with uint8 (geometric_, randperm).
inline bool realDtype(c10::ScalarType t) {
  return floatingDtype(t) || t == c10::kByte || t == c10::kChar || t == c10::kShort ||
         t == c10::kInt || t == c10::kLong;
}
// The CPU's AT_DISPATCH_ALL_TYPES_AND3(Half, BFloat16, Bool) (random_, bernoulli_).
inline bool realOrBoolDtype(c10::ScalarType t) { return realDtype(t) || t == c10::kBool; }
// Also the wide unsigned types (random_(from, to)): every dtype a draw writes.
inline bool realBoolOrUnsignedDtype(c10::ScalarType t) {
  return realOrBoolDtype(t) || t == c10::kUInt16 || t == c10::kUInt32 || t == c10::kUInt64;
}

}  // namespace torch_infini::ops
