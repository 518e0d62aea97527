#include "torch_infini/ops/operator_table.h"

#include "random_dtypes.h"
#include "unary_operators.h"

namespace torch_infini::ops {
const std::vector<OperatorEntry>& bridgeOperators() {
  static const std::vector<OperatorEntry> table{
      // Tensor creation, views and storage (tensor_factories.cpp).
      {"aten::empty.memory_format", "factory", std::nullopt},
      {"aten::empty_strided", "factory", std::nullopt},
      {"aten::as_strided", "view", std::nullopt},
      {"aten::view", "view", std::nullopt},
      {"aten::_reshape_alias", "view", std::nullopt},
      {"aten::unfold", "view", std::nullopt},
      {"aten::view_as_real", "view", std::nullopt},
      {"aten::view_as_complex", "view", std::nullopt},
      {"aten::resize_", "storage", std::nullopt},
      {"aten::set_.source_Storage_storage_offset", "storage", std::nullopt},
      {"aten::set_.source_Storage", "storage", std::nullopt},
      {"aten::set_.source_Tensor", "storage", std::nullopt},
      {"aten::set_", "storage", std::nullopt},
      {"aten::record_stream", "storage", std::nullopt},
      // `param.data = t` and nn.Module.to() (tensor_factories.cpp).
      {"aten::_has_compatible_shallow_copy_type", "storage", std::nullopt},
      // Copies (copy.cpp): every dtype; strided device copies use the
      // provider's copy kernel where it has one, else host staging.
      {"aten::_copy_from", "copy", std::nullopt},
      {"aten::_copy_from_and_resize", "copy", std::nullopt},
      {"aten::_local_scalar_dense", "copy", std::nullopt},
      // Fills (elementwise.cpp): a fill kernel or a one-time pattern upload.
      {"aten::fill_.Scalar", "fill", std::nullopt},
      {"aten::fill_.Tensor", "fill", std::nullopt},
      {"aten::zero_", "fill", std::nullopt},
      // Elementwise.
      {"aten::add.Tensor", "elementwise", Op::Add},
      {"aten::add_.Tensor", "elementwise", Op::Add},
      {"aten::add.out", "elementwise", Op::Add},
      {"aten::sub.Tensor", "elementwise", Op::Add},  // add with -alpha, as ATen's own
      {"aten::sub_.Tensor", "elementwise", Op::Add},
      {"aten::sub.out", "elementwise", Op::Add},
      {"aten::mul.Tensor", "elementwise", Op::Mul},
      {"aten::mul_.Tensor", "elementwise", Op::Mul},
      {"aten::mul.out", "elementwise", Op::Mul},
  // The unary operators' three schemas each (unary_operators.h).
#define TORCH_INFINI_UNARY_ENTRIES(name, seam, method, resize)                            \
  {"aten::" #name, "activation", Op::seam}, {"aten::" #name "_", "activation", Op::seam}, \
      {"aten::" #name ".out", "activation", Op::seam},
      TORCH_INFINI_UNARY_OPERATORS(TORCH_INFINI_UNARY_ENTRIES)
#undef TORCH_INFINI_UNARY_ENTRIES
      // Concatenation (cat.cpp).
      {"aten::cat", "shape", Op::Cat},
      {"aten::cat.out", "shape", Op::Cat},
      // Matrix products (matmul.cpp).
      {"aten::mm", "matmul", Op::Gemm},
      {"aten::mm.out", "matmul", Op::Gemm},
      {"aten::bmm", "matmul", Op::Gemm},
      {"aten::bmm.out", "matmul", Op::Gemm},
      {"aten::addmm", "matmul", Op::Gemm},
      {"aten::addmm.out", "matmul", Op::Gemm},
      // Normalization (normalization.cpp).
      {"aten::rms_norm", "normalization", Op::RmsNorm},
      // Random numbers (random.cpp) from the device generator: the seam's
      // Random kernel where the provider has a generator, else generated on
      // the host; every dtype the CPU's kernel takes.
      {"aten::uniform_", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::normal_", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::normal.Tensor_float", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::normal.Tensor_float_out", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::normal.float_Tensor", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::normal.float_Tensor_out", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::normal.Tensor_Tensor", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::normal.Tensor_Tensor_out", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::log_normal_", "random", std::nullopt, floatingDtype},
      {"aten::exponential_", "random", std::nullopt, floatingDtype},
      {"aten::geometric_", "random", std::nullopt, realDtype},
      {"aten::cauchy_", "random", std::nullopt, floatingDtype},
      {"aten::random_", "random", std::nullopt, realOrBoolDtype},
      {"aten::random_.from", "random", std::nullopt, realBoolOrUnsignedDtype},
      {"aten::random_.to", "random", std::nullopt, realBoolOrUnsignedDtype},
      {"aten::bernoulli_.Tensor", "random", std::nullopt, realOrBoolDtype},
      {"aten::bernoulli_.float", "random", std::nullopt, realOrBoolDtype},
      {"aten::bernoulli.out", "random", std::nullopt, realOrBoolDtype},
      {"aten::randperm.generator_out", "random", std::nullopt, realDtype},
      {"aten::multinomial", "random", std::nullopt, floatingDtype},  // the probabilities
      {"aten::multinomial.out", "random", std::nullopt, floatingDtype},
      {"aten::native_dropout", "random", std::nullopt, floatingOrComplexDtype},
      {"aten::native_dropout_backward", "elementwise", std::nullopt},  // draws nothing
      // The fused recurrent cells PyTorch calls off the CPU (rnn_cells.cpp):
      // ATen operators on infini tensors, any floating dtype.
      {"aten::_thnn_fused_lstm_cell", "rnn", std::nullopt, floatingDtype},
      {"aten::_thnn_fused_lstm_cell_backward_impl", "rnn", std::nullopt, floatingDtype},
      {"aten::_thnn_fused_gru_cell", "rnn", std::nullopt, floatingDtype},
      {"aten::_thnn_fused_gru_cell_backward", "rnn", std::nullopt, floatingDtype},
      // GradScaler's kernels (amp.cpp), in stream order: the gradients'
      // floating dtypes; the scale is float32.
      {"aten::_amp_foreach_non_finite_check_and_unscale_", "amp", Op::AmpUnscale},
      {"aten::_amp_update_scale_", "amp", Op::AmpUpdateScale},
      // InfiniOps' fused LLM kernels as torch.ops.infini (fused.cpp).
      {"infini::silu_and_mul", "fused", Op::SiluAndMul},
      {"infini::swiglu", "fused", Op::Swiglu},
      {"infini::causal_softmax", "fused", Op::CausalSoftmax},
      // The sampler draws on the device generator, selects on the host
      // (fused_sampler.cpp): every floating dtype of logits.
      {"infini::top_k_top_p_sample", "random", std::nullopt, floatingDtype},
  };
  return table;
}

std::vector<c10::ScalarType> supportedDtypes(const OperatorEntry& entry) {
  using c10::ScalarType;
  // The dtypes tensors are commonly made of (quantized and float8 excluded).
  static constexpr ScalarType kDtypes[] = {
      ScalarType::Bool,   ScalarType::Byte,         ScalarType::Char,         ScalarType::Short,
      ScalarType::Int,    ScalarType::Long,         ScalarType::UInt16,       ScalarType::UInt32,
      ScalarType::UInt64, ScalarType::Half,         ScalarType::BFloat16,     ScalarType::Float,
      ScalarType::Double, ScalarType::ComplexFloat, ScalarType::ComplexDouble};
  std::vector<ScalarType> out;
  for (ScalarType dtype : kDtypes)
    if (entry.op.has_value() ? kernels().supports(*entry.op, dtype)
                             : entry.accepts == nullptr || entry.accepts(dtype))
      out.push_back(dtype);
  return out;
}

}  // namespace torch_infini::ops
