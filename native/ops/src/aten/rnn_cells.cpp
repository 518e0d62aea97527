// The fused LSTM and GRU cells PyTorch calls on every device but the CPU
// (lstm_cell and gru_cell take the fused path for CUDA, XPU and PrivateUse1
// tensors, so nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell need them), and
// their backward kernels. The CPU has no kernel for them, so the fallback
// cannot serve them: they are written here with ATen operators on infini
// tensors (each native or in the fallback), with CUDA's kernels' definition:
// the same gate order, the same saved workspace, float arithmetic for float16
// and bfloat16 with one rounding at the end (wide(): CUDA's accumulate
// type). Autograd uses PyTorch's own formulas (derivatives.yaml), which call
// the backward kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "common/fused_helpers.h"
#include "common/random_dtypes.h"

namespace torch_infini::ops {
namespace {

using at::Tensor;

// CUDA's checks (checkSizes in RNN.cu); `factor` is 4 for LSTM, 3 for GRU.
void checkCell(const char* name, const Tensor& input_gates, const Tensor& hidden_gates,
               const Tensor& input_bias, const Tensor& hidden_bias, int64_t factor,
               const Tensor& prev) {
  TORCH_CHECK(input_gates.dim() == 2, name, ": expected input_gates to have 2 dimensions, got ",
              input_gates.dim());
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), name,
              ": input_gates and hidden_gates differ in size: ", input_gates.sizes(), " and ",
              hidden_gates.sizes());
  const int64_t gates_size = input_gates.size(1);
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), name, ": give both biases or neither");
  if (input_bias.defined()) {
    TORCH_CHECK(input_bias.dim() == 1 && input_bias.numel() == gates_size &&
                    input_bias.sizes() == hidden_bias.sizes(),
                name, ": expected biases of ", gates_size, " elements, got ", input_bias.sizes(),
                " and ", hidden_bias.sizes());
  }
  TORCH_CHECK(prev.dim() == 2 && prev.numel() == input_gates.size(0) * gates_size / factor, name,
              ": expected the previous state as [", input_gates.size(0), ", ", gates_size / factor,
              "], got ", prev.sizes());
  for (const Tensor* t : {&hidden_gates, &prev}) checkSameDevice(input_gates, *t);
  if (input_bias.defined()) {
    checkSameDevice(input_gates, input_bias);
    checkSameDevice(input_gates, hidden_bias);
  }
}

// input_gates + hidden_gates (+ input_bias + hidden_bias), in math type.
Tensor gateSums(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& input_bias,
                const Tensor& hidden_bias, c10::ScalarType math) {
  Tensor sum = input_gates.to(math) + hidden_gates.to(math);
  if (input_bias.defined()) sum = sum + input_bias.to(math) + hidden_bias.to(math);
  return sum;
}

Tensor valueOr(const std::optional<Tensor>& t) { return t.has_value() ? *t : Tensor(); }

// hy, cy and the workspace [sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)].
std::tuple<Tensor, Tensor, Tensor> _thnn_fused_lstm_cell(
    const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
    const std::optional<Tensor>& input_bias_opt, const std::optional<Tensor>& hidden_bias_opt) {
  const Tensor input_bias = valueOr(input_bias_opt);
  const Tensor hidden_bias = valueOr(hidden_bias_opt);
  checkCell("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4, cx);
  const c10::ScalarType dtype = input_gates.scalar_type();
  const c10::ScalarType math = wide(input_gates.scalar_type());
  const auto gates = gateSums(input_gates, hidden_gates, input_bias, hidden_bias, math).chunk(4, 1);
  const Tensor i = gates[0].sigmoid();
  const Tensor f = gates[1].sigmoid();
  const Tensor g = gates[2].tanh();
  const Tensor o = gates[3].sigmoid();
  const Tensor cy = f * cx.to(math) + i * g;
  const Tensor hy = o * cy.tanh();
  return {hy.to(dtype), cy.to(dtype), at::cat({i, f, g, o}, 1).to(dtype)};
}

// Gradients of the gates (one tensor: i, f, g, o), of cx, and of the biases.
std::tuple<Tensor, Tensor, Tensor> _thnn_fused_lstm_cell_backward_impl(
    const std::optional<Tensor>& grad_hy_opt, const std::optional<Tensor>& grad_cy_opt,
    const Tensor& cx, const Tensor& cy, const Tensor& workspace, bool has_bias) {
  const Tensor grad_hy = valueOr(grad_hy_opt);
  const Tensor grad_cy = valueOr(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) return {};
  const c10::ScalarType dtype = workspace.scalar_type();
  const c10::ScalarType math = wide(workspace.scalar_type());
  const auto saved = workspace.to(math).chunk(4, 1);
  const Tensor &i = saved[0], &f = saved[1], &g = saved[2], &o = saved[3];
  const Tensor tanh_cy = cy.to(math).tanh();
  Tensor grad_o = at::zeros_like(tanh_cy);
  Tensor grad_c = at::zeros_like(tanh_cy);
  if (grad_hy.defined()) {
    const Tensor go = grad_hy.to(math);
    grad_o = go * tanh_cy;
    grad_c = go * o * (1 - tanh_cy * tanh_cy);
  }
  if (grad_cy.defined()) grad_c = grad_c + grad_cy.to(math);
  const Tensor grad_i = grad_c * g * (1 - i) * i;
  const Tensor grad_f = grad_c * cx.to(math) * (1 - f) * f;
  const Tensor grad_g = grad_c * i * (1 - g * g);
  grad_o = grad_o * (1 - o) * o;
  const Tensor grad_gates = at::cat({grad_i, grad_f, grad_g, grad_o}, 1).to(dtype);
  const Tensor grad_cx = (grad_c * f).to(dtype);
  const Tensor grad_bias = has_bias ? grad_gates.sum(0) : Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

// hy and the workspace [r, z, n, hx, hidden n gate + its bias].
std::tuple<Tensor, Tensor> _thnn_fused_gru_cell(const Tensor& input_gates,
                                                const Tensor& hidden_gates, const Tensor& hx,
                                                const std::optional<Tensor>& input_bias_opt,
                                                const std::optional<Tensor>& hidden_bias_opt) {
  const Tensor input_bias = valueOr(input_bias_opt);
  const Tensor hidden_bias = valueOr(hidden_bias_opt);
  checkCell("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3, hx);
  const c10::ScalarType dtype = input_gates.scalar_type();
  const c10::ScalarType math = wide(input_gates.scalar_type());
  const auto ig = input_gates.to(math).chunk(3, 1);
  const auto hg = hidden_gates.to(math).chunk(3, 1);
  // Summed in CUDA's order: input gate, hidden gate, input bias, hidden bias.
  Tensor r_sum = ig[0] + hg[0];
  Tensor z_sum = ig[1] + hg[1];
  Tensor n_in = ig[2];
  Tensor n_hidden = hg[2];
  if (input_bias.defined()) {
    const auto b1 = input_bias.to(math).chunk(3);
    const auto b2 = hidden_bias.to(math).chunk(3);
    r_sum = r_sum + b1[0] + b2[0];
    z_sum = z_sum + b1[1] + b2[1];
    n_in = n_in + b1[2];
    n_hidden = n_hidden + b2[2];
  }
  const Tensor r = r_sum.sigmoid();
  const Tensor z = z_sum.sigmoid();
  const Tensor n = (n_in + r * n_hidden).tanh();
  const Tensor h = hx.to(math);
  const Tensor hy = n + z * (h - n);
  return {hy.to(dtype), at::cat({r, z, n, h, n_hidden}, 1).to(dtype)};
}

// Gradients of the input gates, the hidden gates, hx and the two biases.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> _thnn_fused_gru_cell_backward(
    const Tensor& grad_hy, const Tensor& workspace, bool has_bias) {
  const c10::ScalarType dtype = workspace.scalar_type();
  const c10::ScalarType math = wide(workspace.scalar_type());
  const auto saved = workspace.to(math).chunk(5, 1);
  const Tensor &r = saved[0], &z = saved[1], &n = saved[2], &hx = saved[3], &hn = saved[4];
  const Tensor go = grad_hy.to(math);
  const Tensor grad_z = go * (hx - n) * (1 - z) * z;
  const Tensor grad_hx = (go * z).to(dtype);
  const Tensor grad_n = go * (1 - z) * (1 - n * n);
  const Tensor grad_hn = grad_n * r;
  const Tensor grad_r = grad_n * hn * (1 - r) * r;
  const Tensor grad_input = at::cat({grad_r, grad_z, grad_n}, 1).to(dtype);
  const Tensor grad_hidden = at::cat({grad_r, grad_z, grad_hn}, 1).to(dtype);
  return {grad_input, grad_hidden, grad_hx, has_bias ? grad_input.sum(0) : Tensor(),
          has_bias ? grad_hidden.sum(0) : Tensor()};
}

// ATen operators on infini tensors, any floating dtype.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar rnn(m, "aten", "rnn", std::nullopt, floatingDtype);
  rnn.impl("_thnn_fused_lstm_cell", _thnn_fused_lstm_cell);
  rnn.impl("_thnn_fused_lstm_cell_backward_impl", _thnn_fused_lstm_cell_backward_impl);
  rnn.impl("_thnn_fused_gru_cell", _thnn_fused_gru_cell);
  rnn.impl("_thnn_fused_gru_cell_backward", _thnn_fused_gru_cell_backward);
}

}  // namespace
}  // namespace torch_infini::ops
