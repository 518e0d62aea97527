// The device engine over InfiniCCL (compiled where CMake found it).
//
// What InfiniCCL serves is its backend's business: at 1f3e24a its NCCL and
// MCCL backends implement all_reduce and report every other collective
// NotSupported (then the CPU engine runs it). Its failures call abort() for
// a dtype or op outside its tables, so every call is checked here first:
// only dtypes and ops its NCCL/MCCL tables map reach it.
//
// Timeouts (the process group's): a CollectiveWatchdog watches each call
// from its launch to its completion on the stream; one that outlives the
// timeout, abort() and shutdown() tear the communicator down with
// infinicclCommDestroy (InfiniCCL has no CommAbort), so a call blocked in
// the library returns, and every later call on infini tensors fails. The
// communicator's set-up (CommInitRank) is not covered: until it returns
// there is nothing to tear down (ranks other than 0 wait for the unique id
// within the store's timeout).
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <infiniccl/comm.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "collective_watchdog.h"
#include "torch_infini/distributed/process_group.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::distributed {
namespace {

const char* resultName(infinicclResult_t r) {
  switch (r) {
    case infinicclSuccess:
      return "success";
    case infinicclUnhandledError:
      return "unhandled error";
    case infinicclSystemError:
      return "system error";
    case infinicclInternalError:
      return "internal error";
    case infinicclInvalidArgument:
      return "invalid argument";
    case infinicclInvalidUsage:
      return "invalid usage";
    case infinicclRemoteError:
      return "remote error";
    case infinicclInProgress:
      return "in progress";
    case infinicclNotSupported:
      return "not supported";
    default:
      return "unknown result";
  }
}

void check(infinicclResult_t r, const char* what) {
  if (r != infinicclSuccess) {
    C10_THROW_ERROR(DistBackendError, c10::str("ProcessGroup backend 'infini': InfiniCCL ", what,
                                               " failed: ", resultName(r), " (", int(r), ")"));
  }
}

// The dtypes InfiniCCL's NCCL/MCCL backends map (no int16, uint16, bool,
// complex, float8).
std::optional<infinicclDataType_t> dataType(c10::ScalarType t) {
  switch (t) {
    case c10::kChar:
      return infinicclInt8;
    case c10::kByte:
      return infinicclUInt8;
    case c10::kInt:
      return infinicclInt32;
    case c10::kLong:
      return infinicclInt64;
    case c10::kUInt32:
      return infinicclUInt32;
    case c10::kUInt64:
      return infinicclUInt64;
    case c10::kHalf:
      return infinicclFloat16;
    case c10::kBFloat16:
      return infinicclBFloat16;
    case c10::kFloat:
      return infinicclFloat32;
    case c10::kDouble:
      return infinicclFloat64;
    default:
      return std::nullopt;
  }
}

std::optional<infinicclRedOp_t> reduceOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return infinicclSum;
    case c10d::ReduceOp::PRODUCT:
      return infinicclProd;
    case c10d::ReduceOp::MAX:
      return infinicclMax;
    case c10d::ReduceOp::MIN:
      return infinicclMin;
    case c10d::ReduceOp::AVG:
      return infinicclAvg;
    default:
      return std::nullopt;  // bitwise ops, PREMUL_SUM
  }
}

class InfiniCCLEngine final : public DeviceEngine {
 public:
  InfiniCCLEngine(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                  std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        rank_(rank),
        size_(size),
        watchdog_(timeout, [this](const std::string&) { destroyCommunicator(); }) {}

  ~InfiniCCLEngine() override {
    watchdog_.abort("ProcessGroup backend 'infini': the process group was destroyed");
  }

  void setTimeout(std::chrono::milliseconds timeout) override { watchdog_.setTimeout(timeout); }
  void abort() override {
    watchdog_.abort("ProcessGroup backend 'infini': the process group was aborted");
  }
  void shutdown() override {
    watchdog_.abort("ProcessGroup backend 'infini': the process group was shut down");
  }

  bool allreduce(at::Tensor& t, const c10d::ReduceOp& op) override {
    auto dtype = dataType(t.scalar_type());
    auto red = reduceOp(op);
    if (!dtype || !red || !t.is_non_overlapping_and_dense() || t.numel() == 0) return false;
    if (unsupported_allreduce_.load()) return false;
    watchdog_.throwIfAborted();
    const int device = t.device().index();
    infinicclComm_t comm = communicator(device);
    void* stream = currentNativeStreamUnchecked(device);
    auto watched = watchdog_.begin(
        c10::str("all_reduce of ", t.numel(), " ", t.scalar_type(), " elements on ", t.device()));
    infinicclResult_t r = infinicclAllReduce(
        t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), *dtype, *red, comm, stream);
    if (r != infinicclSuccess) {
      watchdog_.finished(watched);
      watchdog_.throwIfAborted();        // returned because the communicator was torn down
      if (r == infinicclNotSupported) {  // nothing happened: the CPU engine runs it
        unsupported_allreduce_.store(true);
        return false;
      }
      check(r, "all_reduce");
    }
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::PrivateUse1);
    c10::Event done(c10::DeviceType::PrivateUse1);
    done.record(impl.getStream(c10::Device(c10::DeviceType::PrivateUse1, device)));
    watchdog_.enqueued(watched, std::move(done));
    return true;
  }

 private:
  // One communicator per group, made on first use on the tensors' device:
  // rank 0's unique id travels through the group's store, under a key of
  // its own per attempt, so a rank retrying after a failed set-up never
  // reads the id of an attempt before.
  infinicclComm_t communicator(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (comm_) {
      TORCH_CHECK_VALUE(device == device_,
                        "ProcessGroup backend 'infini': this group's InfiniCCL "
                        "communicator is on infini:",
                        device_, ", got a tensor on infini:", device);
      return comm_;
    }
    static_assert(sizeof(infinicclUniqueId) == INFINICCL_UNIQUE_ID_BYTES);
    infinicclUniqueId id;
    const std::string key = "infini/infiniccl_unique_id/" + std::to_string(attempt_++);
    if (rank_ == 0) {
      check(infinicclGetUniqueId(&id), "GetUniqueId");
      std::vector<uint8_t> bytes(sizeof(id));
      std::memcpy(bytes.data(), &id, sizeof(id));
      store_->set(key, bytes);
    } else {
      std::vector<uint8_t> bytes = store_->get(key);  // waits, within the store's timeout
      TORCH_CHECK(bytes.size() == sizeof(id),
                  "ProcessGroup backend 'infini': InfiniCCL unique id "
                  "of ",
                  bytes.size(), " bytes in the store, expected ", sizeof(id));
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
    infinicclComm_t made = nullptr;
    check(infinicclCommInitRank(&made, size_, id, rank_), "CommInitRank");
    comm_ = made;
    device_ = device;
    return comm_;
  }

  // The watchdog's abort: InfiniCCL's only teardown (a call blocked in the
  // library returns once its communicator is destroyed).
  void destroyCommunicator() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (comm_) infinicclCommDestroy(comm_);  // errors at teardown are not raised
    comm_ = nullptr;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  std::mutex mutex_;
  infinicclComm_t comm_ = nullptr;
  int device_ = -1;
  int64_t attempt_ = 0;  // communicator set-ups tried (the unique id's key)
  std::atomic<bool> unsupported_allreduce_{false};
  CollectiveWatchdog watchdog_;  // last: stopped first, before the communicator goes
};

}  // namespace

bool hasInfiniCCL() { return true; }

std::unique_ptr<DeviceEngine> makeInfiniCCLEngine(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                  int size, std::chrono::milliseconds timeout) {
  return std::make_unique<InfiniCCLEngine>(std::move(store), rank, size, timeout);
}

}  // namespace torch_infini::distributed
