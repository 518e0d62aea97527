// A fake InfiniCCL (infiniccl/comm.h): communicators that do nothing, with
// the failures a test needs (a collective that hangs until its
// communicator is torn down, a set-up that fails) and a record of the
// unique ids made and used.
#include "fake_infiniccl.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "infiniccl/comm.h"

namespace fake_infiniccl {
namespace {

struct Comm {
  int rank;
  bool destroyed = false;
};

struct State {
  std::mutex mutex;
  std::condition_variable changed;
  bool hang = false;
  std::map<int, int> fail_init;  // rank -> failures to come
  uint64_t next_id = 1;
  std::vector<uint64_t> made;
  std::map<int, std::vector<uint64_t>> used;
  int destroyed = 0;
  // Every communicator made, kept to the end: a call blocked on one still
  // reads it after CommDestroy.
  std::deque<std::unique_ptr<Comm>> comms;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.hang = false;
  s.fail_init.clear();
  s.made.clear();
  s.used.clear();
  s.destroyed = 0;
}

void hangAllReduce(bool hang) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().hang = hang;
}

void failNextInit(int rank) {
  std::lock_guard<std::mutex> lock(state().mutex);
  ++state().fail_init[rank];
}

std::vector<uint64_t> madeIds() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().made;
}

std::vector<uint64_t> initIds(int rank) {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().used[rank];
}

int destroyed() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().destroyed;
}

}  // namespace fake_infiniccl

using fake_infiniccl::Comm;
using fake_infiniccl::state;

extern "C" {

infinicclResult_t infinicclGetUniqueId(infinicclUniqueId* id) {
  std::lock_guard<std::mutex> lock(state().mutex);
  const uint64_t n = state().next_id++;
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, &n, sizeof(n));
  state().made.push_back(n);
  return infinicclSuccess;
}

infinicclResult_t infinicclCommInitRank(infinicclComm_t* comm, int nranks, infinicclUniqueId id,
                                        int rank) {
  if (comm == nullptr || rank < 0 || rank >= nranks) return infinicclInvalidArgument;
  std::lock_guard<std::mutex> lock(state().mutex);
  auto failing = state().fail_init.find(rank);
  if (failing != state().fail_init.end() && failing->second > 0) {
    --failing->second;
    return infinicclRemoteError;
  }
  uint64_t n = 0;
  std::memcpy(&n, id.internal, sizeof(n));
  state().used[rank].push_back(n);
  state().comms.push_back(std::make_unique<Comm>(Comm{rank}));
  *comm = state().comms.back().get();
  return infinicclSuccess;
}

infinicclResult_t infinicclCommDestroy(infinicclComm_t comm) {
  if (comm == nullptr) return infinicclInvalidArgument;
  std::lock_guard<std::mutex> lock(state().mutex);
  static_cast<Comm*>(comm)->destroyed = true;
  ++state().destroyed;
  state().changed.notify_all();
  return infinicclSuccess;
}

infinicclResult_t infinicclAllReduce(const void*, void*, size_t, infinicclDataType_t,
                                     infinicclRedOp_t, infinicclComm_t comm, void*) {
  if (comm == nullptr) return infinicclInvalidArgument;
  auto* c = static_cast<Comm*>(comm);
  std::unique_lock<std::mutex> lock(state().mutex);
  if (c->destroyed) return infinicclInvalidUsage;
  if (!state().hang) return infinicclSuccess;
  state().changed.wait(lock, [&] { return c->destroyed; });
  return infinicclRemoteError;
}
}
