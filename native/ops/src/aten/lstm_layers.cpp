// nn.LSTM as the CPU runs it, where device memory is host memory.
//
// On the CPU, at::lstm hands a float32 LSTM without projections to oneDNN,
// one mkldnn_rnn_layer call per layer and direction (a whole sequence each;
// autograd's formula calls mkldnn_rnn_layer_backward). Every other device
// gets at::lstm's composite form: a fused cell per time step, each some ten
// ATen calls forward and backward (rnn_cells.cpp) -- on infini 5x the CPU's
// time for a 2-layer LSTM. Where the CPU can address device memory, infini
// takes the CPU's route: the same layer calls, which the CPU fallback runs
// with the CPU's oneDNN kernels in place, so results are the CPU's bit for
// bit, forward and backward. Elsewhere (and wherever the CPU itself would
// not use oneDNN) the composite form runs as before.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/ops/lstm_native.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "aten/bridge.h"
#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini::ops {
namespace {

using at::Tensor;

// ideep::rnn_kind::LSTM, the mode mkldnn_rnn_layer takes.
constexpr int64_t kOneDnnLstmMode = 2;

bool onInfiniAs(const Tensor& t, c10::ScalarType dtype) {
  return isInfini(t) && t.scalar_type() == dtype;
}

// The CPU's test for its oneDNN route (use_mkldnn in ATen's RNN.cpp), with
// infini for the CPU: oneDNN built and enabled, float32 throughout, no
// projections, a non-empty input, static sizes; and device memory the CPU
// can address, since the layers run in the CPU fallback.
bool cpuRoute(const Tensor& input, at::TensorList hx, at::TensorList params) {
  if (!at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn()) return false;
  if (!runtime::selectedRuntime().capabilities().host_addressable) return false;
  if (!onInfiniAs(input, at::kFloat) || input.numel() == 0 || hx.size() != 2) return false;
  for (const Tensor& t : hx) {
    if (!onInfiniAs(t, at::kFloat) || t.dim() != 3) return false;
    if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return false;
  }
  if (hx[0].size(2) != hx[1].size(2)) return false;  // projections (proj_size)
  for (const Tensor& p : params) {
    if (!onInfiniAs(p, at::kFloat)) return false;
  }
  return !input.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

std::tuple<Tensor, Tensor, Tensor> lstmByLayers(const Tensor& input, at::TensorList hx,
                                                at::TensorList params, bool has_biases,
                                                int64_t num_layers, double dropout, bool train,
                                                bool bidirectional, bool batch_first) {
  const int64_t directions = bidirectional ? 2 : 1;
  const size_t per_layer = has_biases ? 4 : 2;
  TORCH_CHECK(params.size() == static_cast<size_t>(num_layers * directions) * per_layer,
              "lstm: expected ", num_layers * directions * static_cast<int64_t>(per_layer),
              " parameter tensors, got ", params.size());
  const Tensor h0 = hx[0].contiguous();
  const Tensor c0 = hx[1].contiguous();
  const int64_t hidden_size = h0.size(2);
  Tensor layer_input = (batch_first ? input.transpose(0, 1) : input).contiguous();
  std::vector<Tensor> hy, cy, outputs;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    outputs.clear();
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      const Tensor* w = &params[static_cast<size_t>(index) * per_layer];
      // Without biases the CPU passes zeros shaped as the weights (unread).
      const Tensor b_ih = has_biases ? w[2] : at::zeros(w[0].sizes(), w[0].options());
      const Tensor b_hh = has_biases ? w[3] : at::zeros(w[1].sizes(), w[1].options());
      auto [output, h, c, workspace] = at::mkldnn_rnn_layer(
          layer_input, w[0], w[1], b_ih, b_hh, h0[index], c0[index], /*reverse=*/direction > 0,
          /*batch_sizes=*/{}, kOneDnnLstmMode, hidden_size, num_layers, has_biases, bidirectional,
          batch_first, train);
      outputs.push_back(std::move(output));
      hy.push_back(std::move(h));
      cy.push_back(std::move(c));
    }
    layer_input = directions == 1 ? outputs[0] : at::cat(outputs, -1);
    if (dropout != 0 && train && layer < num_layers - 1) {
      layer_input = at::dropout(layer_input, dropout, /*train=*/true);
    }
  }
  Tensor output = batch_first ? layer_input.transpose(0, 1) : layer_input;
  return {output, at::stack(hy, 0), at::stack(cy, 0)};
}

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, at::TensorList hx,
                                        at::TensorList params, bool has_biases,
                                        int64_t num_layers, double dropout, bool train,
                                        bool bidirectional, bool batch_first) {
  if (!cpuRoute(input, hx, params)) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  }
  return lstmByLayers(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                      batch_first);
}

// Both keys: the autograd one with gradients recorded (the layer calls
// record their own), the backend one under inference mode. Either way the
// kernel only calls ATen operators.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("lstm.input", lstm); }
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("lstm.input", lstm); }

}  // namespace
}  // namespace torch_infini::ops
