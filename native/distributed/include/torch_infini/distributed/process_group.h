// The c10d backend "infini": torch.distributed on infini tensors.
//
// Engines, both existing libraries:
//  - a device engine (InfiniCCL, where the build found it), stream-ordered on
//    device memory; it serves the calls it supports (see DeviceEngine);
//  - a CPU engine (gloo) reached through host memory, for everything else:
//    every call on `host` and InfiniRT `cpu`, and on accelerators what the
//    device engine does not serve.
//
// The CPU engine's calls map their infini tensors to CPU tensors:
//  - where device memory is host-addressable, the CPU tensors alias it (the
//    engine reads and writes device memory in place);
//  - elsewhere they are pinned staging copies: inputs are copied in before
//    the call, outputs back when the collective completes.
// Stream order: the call first waits for the work pending on the current
// stream of the tensors' device, so the engine sees its inputs; the Work it
// returns holds every tensor (device and staged) until the collective is
// done, and its future is ready only after outputs are back in device
// memory, so work enqueued after wait() sees the result.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_infini::distributed {

// A collective library on device memory. Each method enqueues the call on
// the current stream of the tensor's device and returns true, or returns
// false without side effects when it does not serve the call (dtype, op,
// layout, or a collective its backend lacks): the CPU engine then runs it.
class DeviceEngine {
 public:
  virtual ~DeviceEngine() = default;
  virtual bool allreduce(at::Tensor& tensor, const c10d::ReduceOp& op) = 0;
  // The group's timeout: a call that outlives it aborts the engine.
  virtual void setTimeout(std::chrono::milliseconds timeout) = 0;
  // Stop: pending calls return failing, later ones raise (ProcessGroup's
  // abort() and shutdown()).
  virtual void abort() = 0;
  virtual void shutdown() = 0;
};

class InfiniBackend final : public c10d::Backend {
 public:
  // `engine` is a CPU backend of the same group (rank, size): gloo.
  // `device_engine` (may be null) serves first where it can.
  InfiniBackend(c10::intrusive_ptr<c10d::Backend> engine, int rank, int size,
                std::unique_ptr<DeviceEngine> device_engine = nullptr);

  const std::string getBackendName() const override;
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void abort() override;
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Between these, calls run as they come; endCoalescing returns one Work
  // that waits for all of them (what _coalescing_manager expects).
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

 private:
  c10::intrusive_ptr<c10d::Work> track(c10::intrusive_ptr<c10d::Work> work);

  c10::intrusive_ptr<c10d::Backend> engine_;
  std::unique_ptr<DeviceEngine> device_engine_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
};

// Whether this build has InfiniCCL, and its device engine for one group.
bool hasInfiniCCL();
std::unique_ptr<DeviceEngine> makeInfiniCCLEngine(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                  int size, std::chrono::milliseconds timeout);

// Stages every call through pinned memory even where device memory is
// host-addressable, so the staged path is tested on the backends CI has.
void setForceStaging(bool on);

// Waits (at most `timeout_ms`) until the futures of every Work issued so far
// are complete and their callbacks freed; called at exit with the GIL
// released. True if everything finished.
bool drainCompletions(int64_t timeout_ms);

}  // namespace torch_infini::distributed
