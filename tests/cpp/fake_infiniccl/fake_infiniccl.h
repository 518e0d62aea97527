// Controls of the fake InfiniCCL (fake_infiniccl.cpp), for the engine's tests.
#pragma once

#include <cstdint>
#include <vector>

namespace fake_infiniccl {

void reset();
// AllReduce blocks until its communicator is destroyed, then fails.
void hangAllReduce(bool hang);
// The next CommInitRank of `rank` fails (once per call of this).
void failNextInit(int rank);
// The ids GetUniqueId made, in order; the id each CommInitRank of `rank`
// that succeeded was given (ids are numbered from 1).
std::vector<uint64_t> madeIds();
std::vector<uint64_t> initIds(int rank);
// Communicators destroyed so far.
int destroyed();

}  // namespace fake_infiniccl
