// Comparison of sizes/strides lists on the per-operator hot path.
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstdint>

namespace torch_infini::ops {

// IntArrayRef::equals, without the out-of-line memcmp call that costs more
// than the comparison itself for the handful of dimensions a tensor has.
inline bool sameDims(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace torch_infini::ops
