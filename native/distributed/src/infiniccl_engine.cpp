// The device engine over InfiniCCL (compiled where CMake found it).
//
// What InfiniCCL serves is its backend's business: at 1f3e24a its NCCL and
// MCCL backends implement all_reduce and report every other collective
// NotSupported (then the CPU engine runs it). Its failures call abort() for
// a dtype or op outside its tables, so every call is checked here first:
// only dtypes and ops its NCCL/MCCL tables map reach it.
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <infiniccl/comm.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "torch_infini/distributed/backend.h"
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
  InfiniCCLEngine(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
      : store_(std::move(store)), rank_(rank), size_(size) {}

  ~InfiniCCLEngine() override {
    if (comm_) infinicclCommDestroy(comm_);  // errors at teardown are not raised
  }

  bool allreduce(at::Tensor& t, const c10d::ReduceOp& op) override {
    auto dtype = dataType(t.scalar_type());
    auto red = reduceOp(op);
    if (!dtype || !red || !t.is_non_overlapping_and_dense() || t.numel() == 0) return false;
    if (unsupported_allreduce_.load()) return false;
    infinicclComm_t comm = communicator(t.device().index());
    void* stream = currentNativeStreamUnchecked(t.device().index());
    infinicclResult_t r = infinicclAllReduce(
        t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), *dtype, *red, comm, stream);
    if (r == infinicclNotSupported) {  // nothing happened: the CPU engine runs it
      unsupported_allreduce_.store(true);
      return false;
    }
    check(r, "all_reduce");
    return true;
  }

 private:
  // One communicator per group, made on first use on the tensors' device:
  // rank 0's unique id travels through the group's store.
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
    const std::string key = "infini/infiniccl_unique_id";
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
    check(infinicclCommInitRank(&comm_, size_, id, rank_), "CommInitRank");
    device_ = device;
    return comm_;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  std::mutex mutex_;
  infinicclComm_t comm_ = nullptr;
  int device_ = -1;
  std::atomic<bool> unsupported_allreduce_{false};
};

}  // namespace

bool hasInfiniCCL() { return true; }

std::unique_ptr<DeviceEngine> makeInfiniCCLEngine(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                  int size) {
  return std::make_unique<InfiniCCLEngine>(std::move(store), rank, size);
}

}  // namespace torch_infini::distributed
