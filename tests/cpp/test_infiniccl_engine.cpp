// The InfiniCCL device engine (native/distributed/src/infiniccl_engine.cpp)
// against a fake InfiniCCL (tests/cpp/fake_infiniccl): a collective that
// outlives the process group's timeout fails within it, and the
// communicator is torn down; abort() ends a collective blocked in the
// library; a rank retrying a failed set-up reads the unique id of the new
// attempt, never the old one (issue 35, item 3).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "check.h"
#include "fake_infiniccl.h"
#include "torch_infini/distributed/process_group.h"
#include "torch_infini/torch_infini.h"

using namespace std::chrono_literals;
using torch_infini::distributed::DeviceEngine;
using torch_infini::distributed::makeInfiniCCLEngine;
using Clock = std::chrono::steady_clock;

namespace {

at::Tensor onInfini() { return at::ones({4}, at::TensorOptions().device("infini:0")); }

c10::intrusive_ptr<c10d::Store> store() {
  auto s = c10::make_intrusive<c10d::HashStore>();
  s->setTimeout(20s);
  return s;
}

// The error message of `fn`'s DistBackendError ("" where it raised none).
std::string distError(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::DistBackendError& e) {
    return e.what_without_backtrace();
  }
  return "";
}

void aCollectiveThatHangsFailsWithinTheTimeout() {
  fake_infiniccl::reset();
  auto engine = makeInfiniCCLEngine(store(), 0, 1, 300ms);
  at::Tensor t = onInfini();
  CHECK(engine->allreduce(t, c10d::ReduceOp::SUM));  // served, the communicator made
  fake_infiniccl::hangAllReduce(true);
  const auto start = Clock::now();
  const std::string error = distError([&] { engine->allreduce(t, c10d::ReduceOp::SUM); });
  const auto waited = Clock::now() - start;
  CHECK(error.find("timed out after") != std::string::npos);
  CHECK(error.find("timeout is 300 ms") != std::string::npos);
  CHECK(waited >= 300ms && waited < 5s);
  CHECK(fake_infiniccl::destroyed() == 1);
  // Later calls fail at once, with the reason.
  fake_infiniccl::hangAllReduce(false);
  CHECK(distError([&] { engine->allreduce(t, c10d::ReduceOp::SUM); }).find("timed out") !=
        std::string::npos);
}

void setTimeoutApplies() {
  fake_infiniccl::reset();
  auto engine = makeInfiniCCLEngine(store(), 0, 1, std::chrono::milliseconds(600000));
  engine->setTimeout(200ms);
  at::Tensor t = onInfini();
  fake_infiniccl::hangAllReduce(true);
  const auto start = Clock::now();
  CHECK(distError([&] { engine->allreduce(t, c10d::ReduceOp::SUM); }).find("timed out") !=
        std::string::npos);
  CHECK(Clock::now() - start < 5s);
}

void abortEndsABlockedCollective() {
  for (bool shutdown : {false, true}) {
    fake_infiniccl::reset();
    auto engine = makeInfiniCCLEngine(store(), 0, 1, std::chrono::milliseconds(600000));
    at::Tensor t = onInfini();
    fake_infiniccl::hangAllReduce(true);
    auto blocked = std::async(std::launch::async, [&] {
      return distError([&] { engine->allreduce(t, c10d::ReduceOp::SUM); });
    });
    CHECK(blocked.wait_for(300ms) == std::future_status::timeout);  // it hangs
    if (shutdown) {
      engine->shutdown();
    } else {
      engine->abort();
    }
    CHECK(blocked.wait_for(5s) == std::future_status::ready);
    CHECK(blocked.get().find(shutdown ? "shut down" : "aborted") != std::string::npos);
    CHECK(fake_infiniccl::destroyed() == 1);
  }
}

void aRetryReadsTheNewUniqueId() {
  fake_infiniccl::reset();
  auto shared = store();
  auto rank0 = makeInfiniCCLEngine(shared, 0, 2, std::chrono::milliseconds(600000));
  auto rank1 = makeInfiniCCLEngine(shared, 1, 2, std::chrono::milliseconds(600000));
  at::Tensor t0 = onInfini();
  at::Tensor t1 = onInfini();
  // The first set-up fails on both ranks.
  fake_infiniccl::failNextInit(0);
  fake_infiniccl::failNextInit(1);
  CHECK(throws<c10::Error>([&] { rank0->allreduce(t0, c10d::ReduceOp::SUM); }));
  CHECK(throws<c10::Error>([&] { rank1->allreduce(t1, c10d::ReduceOp::SUM); }));
  // Rank 1 retries first: it must wait for rank 0's new id, not take the old one.
  auto retry1 =
      std::async(std::launch::async, [&] { return rank1->allreduce(t1, c10d::ReduceOp::SUM); });
  std::this_thread::sleep_for(200ms);
  CHECK(rank0->allreduce(t0, c10d::ReduceOp::SUM));
  CHECK(retry1.get());
  const std::vector<uint64_t> made = fake_infiniccl::madeIds();
  CHECK(made.size() == 2);
  CHECK(fake_infiniccl::initIds(0) == std::vector<uint64_t>{made[1]});
  CHECK(fake_infiniccl::initIds(1) == std::vector<uint64_t>{made[1]});
}

}  // namespace

int main() {
  // TORCH_INFINI_BACKEND's backend (InfiniRT's cpu in a stack build), else auto.
  torch_infini::init();
  return runTests({
      {"a collective that hangs fails within the timeout",
       aCollectiveThatHangsFailsWithinTheTimeout},
      {"setTimeout applies", setTimeoutApplies},
      {"abort() and shutdown() end a blocked collective", abortEndsABlockedCollective},
      {"a retried set-up reads the new unique id", aRetryReadsTheNewUniqueId},
  });
}
