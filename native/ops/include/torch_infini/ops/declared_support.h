// Which (seam operator, dtype, device type) triples run natively: what
// InfiniOps declares, less what torch-infini refuses of it, in one place.
//
// InfiniOps' build is asked what it can be asked: which operators the
// installed library instantiates (cmake/FindInfiniOps.cmake reads its
// operator-call instantiations). The dtypes each operator's dispatch takes
// and the device types with a native implementation are compile-time lists
// inside its sources, not in the installed headers; so they are written down
// once, in the seam's rows (seam_operators.h), as a snapshot of the pinned
// commit. The host provider declares exactly the snapshot's `cpu` column, so
// what is native in CI is what is native on InfiniRT `cpu`;
// tests/python/ops/seam/test_declared_support.py runs every declared pair (and refuses one
// undeclared pair per operator) on whichever backend is selected, which checks the snapshot against
// a real stack.
#pragma once

#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/device_types.h"

namespace torch_infini::ops {

using DtypeMask = uint64_t;

constexpr DtypeMask dtypeBit(c10::ScalarType t) { return DtypeMask{1} << static_cast<unsigned>(t); }

// One InfiniOps operator as its build declares it.
struct Declaration {
  SeamOp op;
  const char* infiniops;    // its operator class: "Gemm"
  DtypeMask dtypes;         // the dtype list its dispatch takes
  uint32_t device_types;    // bit i: runtime::kInfiniDeviceTypeNames[i] has a native implementation
  const char* computes_in;  // "float": float64 would lose precision; nullptr: the dtype itself
};

// The seam operators InfiniOps has (the rows of seam_operators.h naming a
// class), with their InfiniOps columns.
const std::vector<Declaration>& infiniOpsDeclarations();

// The declaration of `op`, or nullptr where InfiniOps has no such operator
// (torch-infini's own seam operators: Fill, Random).
const Declaration* declarationOf(SeamOp op);

// Why torch-infini does not run (op, dtype) natively on `device_type` although
// InfiniOps declares it; nullptr where it does (or where InfiniOps does not
// declare it at all: see declared()). `infinirt_conversions`: the kernel
// converts through InfiniRT's scalar types (the InfiniOps provider), not
// through PyTorch's (the host provider).
const char* refusal(SeamOp op, std::string_view device_type, c10::ScalarType dtype,
                    bool infinirt_conversions);

// InfiniOps declares (op, dtype) on `device_type`.
bool declared(SeamOp op, std::string_view device_type, c10::ScalarType dtype);

// InfiniOps has an implementation of `op` on `device_type` (in any dtype).
bool declaredOn(SeamOp op, std::string_view device_type);

// Declared and not refused: the provider runs it natively.
inline bool nativeOn(SeamOp op, std::string_view device_type, c10::ScalarType dtype,
                     bool infinirt_conversions) {
  return declared(op, device_type, dtype) &&
         refusal(op, device_type, dtype, infinirt_conversions) == nullptr;
}

// nativeOn() for every (operator, dtype) at once: providers compute it when
// they are made and answer supports() with a bit test (it is on the path of
// every kernel call).
using NativeMasks = std::array<DtypeMask, static_cast<size_t>(SeamOp::kCount)>;
NativeMasks nativeMasks(std::string_view device_type, bool infinirt_conversions);

inline bool inMask(DtypeMask mask, c10::ScalarType dtype) {
  const auto i = static_cast<unsigned>(dtype);
  return i < 64 && ((mask >> i) & 1u) != 0;
}

}  // namespace torch_infini::ops
