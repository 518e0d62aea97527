// nn.LSTM and nn.GRU as the CPU runs them, where device memory is host
// memory.
//
// at::lstm and at::gru choose their route by device. Every device but the
// CPU gets a fused cell per time step (rnn_cells.cpp), each some ten ATen
// calls forward and backward with the input's projection recomputed per
// step: on infini a 2-layer LSTM took 5x the CPU's time, a GRU 1.35x. The
// CPU instead
//   - hands a float32 LSTM without projections to oneDNN: one
//     mkldnn_rnn_layer call per layer and direction (a whole sequence each;
//     autograd's formula calls mkldnn_rnn_layer_backward);
//   - runs a GRU with each layer's input projection computed once for the
//     whole sequence, then its unfused cell per step on the projected rows.
// Where the CPU can address device memory, infini takes the CPU's route:
// the same ATen calls (the oneDNN layers in the CPU fallback, in place), so
// results and gradients are the CPU's bit for bit. Elsewhere, and wherever
// the CPU's own conditions do not hold, at::lstm's and at::gru's composite
// forms run as before.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "common/random_dtypes.h"
#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini::ops {
namespace {

using at::Tensor;

// ideep::rnn_kind::LSTM, the mode mkldnn_rnn_layer takes.
constexpr int64_t kOneDnnLstmMode = 2;

bool staticInfini(const Tensor& t) {
  return isInfini(t) && !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

// Every tensor of the call on the input's infini device with static sizes,
// in memory the CPU fallback can reach in place (otherwise the composite
// form runs, and raises the CPU's device errors).
bool cpuCanRun(const Tensor& input, at::TensorList states, at::TensorList params) {
  if (!runtime::selectedRuntime().capabilities().host_addressable) return false;
  // Under infini autocast the cells follow CUDA's policy (lstm_cell and
  // gru_cell in lower precision), as on CUDA: the composite form.
  if (at::autocast::is_autocast_enabled(c10::DeviceType::PrivateUse1)) return false;
  if (!staticInfini(input)) return false;
  const auto alongside = [&](const Tensor& t) {
    return staticInfini(t) && t.device() == input.device();
  };
  return std::all_of(states.begin(), states.end(), alongside) &&
         std::all_of(params.begin(), params.end(), alongside);
}

// The weights of layer `index`: w_ih, w_hh[, b_ih, b_hh].
const Tensor* layerWeights(at::TensorList params, int64_t index, bool has_biases, int64_t layers) {
  const size_t per_layer = has_biases ? 4 : 2;
  TORCH_CHECK(params.size() == static_cast<size_t>(layers) * per_layer, "rnn: expected ",
              layers * static_cast<int64_t>(per_layer), " parameter tensors, got ", params.size());
  return &params[static_cast<size_t>(index) * per_layer];
}

// The layer stack both routes share: each layer's directions run over the
// previous layer's output ([steps, batch, features]; two directions'
// outputs concatenated), with dropout between layers in training; the
// output transposed back for batch_first. `direction(layer_input, index,
// reverse)` runs direction `index` of the stack and returns its output.
template <class Direction>
Tensor stackLayers(Tensor layer_input, int64_t num_layers, bool bidirectional, double dropout,
                   bool train, bool batch_first, Direction&& direction) {
  const int64_t directions = bidirectional ? 2 : 1;
  std::vector<Tensor> outputs;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    outputs.clear();
    for (int64_t d = 0; d < directions; ++d) {
      outputs.push_back(direction(layer_input, layer * directions + d, /*reverse=*/d > 0));
    }
    layer_input = directions == 1 ? outputs[0] : at::cat(outputs, -1);
    if (dropout != 0 && train && layer < num_layers - 1) {
      layer_input = at::dropout(layer_input, dropout, /*train=*/true);
    }
  }
  return batch_first ? layer_input.transpose(0, 1) : layer_input;
}

// ------------------------------------------------------------------ LSTM

// The CPU's test for its oneDNN route (use_mkldnn in ATen's RNN.cpp):
// oneDNN built and enabled, float32 throughout, no projections, a
// non-empty input.
bool lstmOnOneDnn(const Tensor& input, at::TensorList hx, at::TensorList params) {
  if (!at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn()) return false;
  if (hx.size() != 2 || !cpuCanRun(input, hx, params) || input.numel() == 0) return false;
  const auto float32 = [](const Tensor& t) { return t.scalar_type() == at::kFloat; };
  if (!float32(input) || !std::all_of(hx.begin(), hx.end(), float32) ||
      !std::all_of(params.begin(), params.end(), float32)) {
    return false;
  }
  return hx[0].dim() == 3 && hx[1].dim() == 3 && hx[0].size(2) == hx[1].size(2);
}

std::tuple<Tensor, Tensor, Tensor> lstmByLayers(const Tensor& input, at::TensorList hx,
                                                at::TensorList params, bool has_biases,
                                                int64_t num_layers, double dropout, bool train,
                                                bool bidirectional, bool batch_first) {
  const int64_t stacked = num_layers * (bidirectional ? 2 : 1);
  const Tensor h0 = hx[0].contiguous();
  const Tensor c0 = hx[1].contiguous();
  const int64_t hidden_size = h0.size(2);
  std::vector<Tensor> hy, cy;
  Tensor output = stackLayers(
      (batch_first ? input.transpose(0, 1) : input).contiguous(), num_layers, bidirectional,
      dropout, train, batch_first, [&](const Tensor& layer_input, int64_t index, bool reverse) {
        const Tensor* w = layerWeights(params, index, has_biases, stacked);
        // Without biases the CPU passes zeros shaped as the weights (unread).
        const Tensor b_ih = has_biases ? w[2] : at::zeros(w[0].sizes(), w[0].options());
        const Tensor b_hh = has_biases ? w[3] : at::zeros(w[1].sizes(), w[1].options());
        auto [out, h, c, workspace] =
            at::mkldnn_rnn_layer(layer_input, w[0], w[1], b_ih, b_hh, h0[index], c0[index], reverse,
                                 /*batch_sizes=*/{}, kOneDnnLstmMode, hidden_size, num_layers,
                                 has_biases, bidirectional, batch_first, train);
        hy.push_back(std::move(h));
        cy.push_back(std::move(c));
        return out;
      });
  return {output, at::stack(hy, 0), at::stack(cy, 0)};
}

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, at::TensorList hx,
                                        at::TensorList params, bool has_biases, int64_t num_layers,
                                        double dropout, bool train, bool bidirectional,
                                        bool batch_first) {
  if (!lstmOnOneDnn(input, hx, params)) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  }
  return lstmByLayers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                      batch_first);
}

// ------------------------------------------------------------------- GRU

std::optional<Tensor> bias(bool has_biases, const Tensor& b) {
  return has_biases ? std::optional<Tensor>(b) : std::nullopt;
}

// One step of the CPU's GRU cell on `projected` (this step's row of the
// input projection, [batch, 3 * hidden]): reset, update and candidate gates
// in the CPU's order of operations.
Tensor gruStep(const Tensor& projected, const Tensor& hidden, const Tensor& w_hh,
               const std::optional<Tensor>& b_hh) {
  const std::vector<Tensor> in = projected.unsafe_chunk(3, 1);
  std::vector<Tensor> hid = at::linear(hidden, w_hh, b_hh).unsafe_chunk(3, 1);
  const Tensor reset = hid[0].add_(in[0]).sigmoid_();
  const Tensor update = hid[1].add_(in[1]).sigmoid_();
  const Tensor candidate = in[2].add(hid[2].mul_(reset)).tanh_();
  return (hidden - candidate).mul_(update).add_(candidate);
}

// One direction of one layer over the whole sequence ([steps, batch, ...]):
// the stacked outputs and the final hidden state.
std::pair<Tensor, Tensor> gruDirection(const Tensor& input, const Tensor& h0, const Tensor* w,
                                       bool has_biases, bool reverse) {
  std::vector<Tensor> steps = at::linear(input, w[0], bias(has_biases, w[2])).unbind(0);
  TORCH_CHECK(!steps.empty(), "Expected sequence length to be larger than 0 in RNN");
  if (reverse) std::reverse(steps.begin(), steps.end());
  std::vector<Tensor> outputs;
  outputs.reserve(steps.size());
  Tensor hidden = h0;
  const std::optional<Tensor> b_hh = bias(has_biases, w[3]);
  for (const Tensor& step : steps) {
    hidden = gruStep(step, hidden, w[1], b_hh);
    outputs.push_back(hidden);
  }
  if (reverse) std::reverse(outputs.begin(), outputs.end());
  return {at::stack(outputs, 0), hidden};
}

std::tuple<Tensor, Tensor> gru(const Tensor& input, const Tensor& hx, at::TensorList params,
                               bool has_biases, int64_t num_layers, double dropout, bool train,
                               bool bidirectional, bool batch_first) {
  if (!cpuCanRun(input, hx, params)) {
    return at::native::gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                           batch_first);
  }
  const int64_t stacked = num_layers * (bidirectional ? 2 : 1);
  const std::vector<Tensor> h0 = hx.unbind(0);
  TORCH_CHECK(static_cast<int64_t>(h0.size()) == stacked,
              "Expected more hidden states in stacked_rnn");
  std::vector<Tensor> final_hidden;
  Tensor output = stackLayers(
      batch_first ? input.transpose(0, 1) : input, num_layers, bidirectional, dropout, train,
      batch_first, [&](const Tensor& layer_input, int64_t index, bool reverse) {
        const Tensor* w = layerWeights(params, index, has_biases, stacked);
        auto [out, hidden] = gruDirection(layer_input, h0[index], w, has_biases, reverse);
        final_hidden.push_back(std::move(hidden));
        return out;
      });
  return {output, at::stack(final_hidden, 0)};
}

// Both keys: the autograd one with gradients recorded (each ATen call
// records its own), the backend one under inference mode. Either way the
// kernels only call ATen operators.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", lstm);
  m.impl("gru.input", gru);
}
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar rnn(m, "aten", "rnn", std::nullopt, floatingDtype);
  rnn.impl("lstm.input", lstm);
  rnn.impl("gru.input", gru);
}

}  // namespace
}  // namespace torch_infini::ops
