// The second translation unit that speaks pybind11: PyTorch's stack capture
// (CapturedTraceback: Python, TorchScript and C++ frames) and its symbolizer
// are pybind11 code. The caching allocator holds the gathered stacks as
// opaque c10::GatheredContext; this file gathers and symbolizes them and
// lays the snapshot out with torch.cuda.memory._snapshot's keys, so
// torch.cuda._memory_viz and pytorch.org/memory_viz read it.
#include "memory_history.h"

#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

#include "torch_infini/runtime/memory_history.h"

// From torch/csrc/profiler/python/combined_traceback.h, which cannot be
// included from an installed PyTorch (it needs nlohmann/json, not shipped);
// libtorch_python exports both.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace torch_infini::bindings {
namespace py = pybind11;

namespace {

std::shared_ptr<c10::GatheredContext> gatherPython() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/false);
}

std::shared_ptr<c10::GatheredContext> gatherWithCpp() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/true);
}

const char* actionName(MemoryTraceEntry::Action action) {
  using Action = MemoryTraceEntry::Action;
  switch (action) {
    case Action::Alloc:
      return "alloc";
    case Action::FreeRequested:
      return "free_requested";
    case Action::FreeCompleted:
      return "free_completed";
    case Action::SegmentAlloc:
      return "segment_alloc";
    case Action::SegmentFree:
      return "segment_free";
    case Action::Oom:
      return "oom";
  }
  return "unknown";
}

const char* stateName(MemoryBlockSnapshot::State state) {
  using State = MemoryBlockSnapshot::State;
  switch (state) {
    case State::ActiveAllocated:
      return "active_allocated";
    case State::ActivePendingFree:
      return "active_pending_free";
    case State::Inactive:
      return "inactive";
  }
  return "unknown";
}

// Symbolizes every stack of a snapshot in one batch (as torch.cuda does).
class Frames {
 public:
  void add(const std::shared_ptr<c10::GatheredContext>& context) {
    if (context) tracebacks_.push_back(torch::getCapturedTracebackFromContext(context));
  }

  void symbolize() { symbolized_ = torch::py_symbolize(tracebacks_); }

  // Stacks are taken in the order they were added.
  py::object next(const std::shared_ptr<c10::GatheredContext>& context) {
    if (!context) return py::list();
    return symbolized_.at(used_++);
  }

 private:
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::vector<py::object> symbolized_;
  size_t used_ = 0;
};

}  // namespace

void recordMemoryHistory(bool trace, int context, bool cpp_stacks, size_t max_entries, bool clear) {
  if (context > 0) torch::installCapturedTracebackPython();
  torch_infini::recordMemoryHistory(
      trace, context > 0 ? (cpp_stacks ? gatherWithCpp : gatherPython) : nullptr,
      static_cast<RecordContext>(context), max_entries, clear);
}

PyObject* memorySnapshot() {
  MemorySnapshot snapshot;
  {
    py::gil_scoped_release no_gil;
    snapshot = torch_infini::memorySnapshot();
  }
  Frames frames;
  for (const MemorySegmentSnapshot& segment : snapshot.segments) {
    frames.add(segment.context);
    for (const MemoryBlockSnapshot& block : segment.blocks) frames.add(block.context);
  }
  for (const auto& trace : snapshot.traces)
    for (const MemoryTraceEntry& entry : trace) frames.add(entry.context);
  frames.symbolize();

  py::list segments;
  for (const MemorySegmentSnapshot& segment : snapshot.segments) {
    py::dict s;
    s["device"] = segment.device;
    s["address"] = segment.addr;
    s["total_size"] = segment.total;
    s["allocated_size"] = segment.allocated;
    s["active_size"] = segment.active;
    s["requested_size"] = segment.requested;
    s["stream"] = segment.stream;
    s["segment_type"] = segment.small ? "small" : "large";
    s["segment_pool_id"] = py::make_tuple(0, 0);
    s["is_expandable"] = false;
    s["frames"] = frames.next(segment.context);
    py::list blocks;
    for (const MemoryBlockSnapshot& block : segment.blocks) {
      py::dict b;
      b["address"] = block.addr;
      b["size"] = block.size;
      b["requested_size"] = block.requested;
      b["state"] = stateName(block.state);
      b["frames"] = frames.next(block.context);
      blocks.append(b);
    }
    s["blocks"] = blocks;
    segments.append(s);
  }
  py::list traces;
  for (const auto& trace : snapshot.traces) {
    py::list entries;
    for (const MemoryTraceEntry& entry : trace) {
      py::dict e;
      e["action"] = actionName(entry.action);
      e["addr"] = entry.addr;
      e["size"] = entry.size;
      e["stream"] = entry.stream;
      e["time_us"] = entry.time_us;
      e["frames"] = frames.next(entry.context);
      if (entry.action == MemoryTraceEntry::Action::Oom) e["device_free"] = entry.device_free;
      entries.append(e);
    }
    traces.append(entries);
  }
  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = traces;
  return result.release().ptr();
}

}  // namespace torch_infini::bindings
