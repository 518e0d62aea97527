// A recording stand-in for InfiniOps' public header: each operator class the
// kernel provider calls has InfiniOps' Call signature (Call(handle, config,
// the operator's arguments in InfiniOps' order), as in src/base/<op>.h at the
// heads, docs/stack_versions.md), and records the call instead of computing:
// the operator's name, then each argument by its InfiniOps parameter name.
// tests/cpp/test_infiniops_mapping.cpp checks what the provider passes.
// Written from InfiniOps' interface; no InfiniOps code.
#pragma once

#include <infini/rt.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace infini::ops {

using DataType = rt::DataType;
using Device = rt::Device;

class Tensor {
 public:
  Tensor(void* data, std::vector<std::size_t> shape, DataType dtype, Device device,
         std::vector<std::ptrdiff_t> strides)
      : data_(data),
        shape_(std::move(shape)),
        dtype_(dtype),
        device_(device),
        strides_(std::move(strides)) {}

  void* data() const { return data_; }
  const std::vector<std::size_t>& shape() const { return shape_; }
  const std::vector<std::ptrdiff_t>& strides() const { return strides_; }
  DataType dtype() const { return dtype_; }
  Device device() const { return device_; }

 private:
  void* data_;
  std::vector<std::size_t> shape_;
  DataType dtype_;
  Device device_;
  std::vector<std::ptrdiff_t> strides_;
};

class Handle {
 public:
  void set_stream(void* stream) { stream_ = stream; }
  void* stream() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

class Config {
 public:
  void set_implementation_index(std::size_t index) { index_ = index; }
  std::size_t implementation_index() const { return index_; }

 private:
  std::size_t index_ = 0;
};

// One recorded call: "Add", then "input=<tensor>", "alpha=0.5", ...
struct RecordedCall {
  std::string op;
  std::vector<std::string> args;
  void* stream = nullptr;
  std::size_t implementation_index = 0;
};

inline std::vector<RecordedCall>& recordedCalls() {
  static std::vector<RecordedCall> calls;
  return calls;
}

// "<data pointer> <dtype> [shape] [strides] dev<type>:<index>"
inline std::string describe(const Tensor& t) {
  std::ostringstream s;
  s << t.data() << " dtype" << static_cast<int>(t.dtype()) << " [";
  for (std::size_t i = 0; i < t.shape().size(); ++i) s << (i ? "," : "") << t.shape()[i];
  s << "] [";
  for (std::size_t i = 0; i < t.strides().size(); ++i) s << (i ? "," : "") << t.strides()[i];
  s << "] dev" << static_cast<int>(t.device().type()) << ":" << t.device().index();
  return s.str();
}
inline std::string describe(const std::optional<Tensor>& t) {
  return t ? describe(*t) : std::string("none");
}
inline std::string describe(const std::vector<Tensor>& ts) {
  std::string s = "{";
  for (std::size_t i = 0; i < ts.size(); ++i) s += (i ? "; " : "") + describe(ts[i]);
  return s + "}";
}
inline std::string describe(const std::string& v) { return "\"" + v + "\""; }
inline std::string describe(bool v) { return v ? "true" : "false"; }
inline std::string describe(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}
inline std::string describe(float v) { return describe(static_cast<double>(v)) + "f"; }
inline std::string describe(int64_t v) { return std::to_string(v); }
inline std::string describe(int v) { return std::to_string(v) + "i"; }
template <class T>
std::string describe(const std::optional<T>& v) {
  return v ? describe(*v) : std::string("none");
}
inline std::string describe(const std::optional<DataType>& v) {
  return v ? "dtype" + std::to_string(static_cast<int>(*v)) : std::string("none");
}

struct Arg {
  const char* name;
  std::string value;
};

inline void record(const char* op, const Handle& handle, const Config& config,
                   std::initializer_list<Arg> args) {
  RecordedCall call{op, {}, handle.stream(), config.implementation_index()};
  for (const Arg& a : args) call.args.push_back(std::string(a.name) + "=" + a.value);
  recordedCalls().push_back(std::move(call));
}

#define TI_ARG(name) \
  Arg { #name, describe(name) }

// Unary operators: Call(handle, config, input, out).
#define TI_UNARY_OPERATOR(Class)                                                         \
  struct Class {                                                                         \
    static void Call(const Handle& h, const Config& c, const Tensor input, Tensor out) { \
      record(#Class, h, c, {TI_ARG(input), TI_ARG(out)});                                \
    }                                                                                    \
  };
TI_UNARY_OPERATOR(Cast)
TI_UNARY_OPERATOR(Relu)
TI_UNARY_OPERATOR(Silu)
TI_UNARY_OPERATOR(Sigmoid)
TI_UNARY_OPERATOR(SiluAndMul)
TI_UNARY_OPERATOR(CausalSoftmax)
#undef TI_UNARY_OPERATOR

struct Add {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor other,
                   const double alpha, Tensor out) {
    record("Add", h, c, {TI_ARG(input), TI_ARG(other), TI_ARG(alpha), TI_ARG(out)});
  }
};

struct Mul {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor other,
                   Tensor out) {
    record("Mul", h, c, {TI_ARG(input), TI_ARG(other), TI_ARG(out)});
  }
};

struct Gemm {
  static void Call(const Handle& h, const Config& cfg, const Tensor a, const Tensor b,
                   const std::optional<Tensor> c, std::optional<float> alpha,
                   std::optional<float> beta, std::optional<int> trans_a,
                   std::optional<int> trans_b, Tensor y) {
    record("Gemm", h, cfg,
           {TI_ARG(a), TI_ARG(b), TI_ARG(c), TI_ARG(alpha), TI_ARG(beta), TI_ARG(trans_a),
            TI_ARG(trans_b), TI_ARG(y)});
  }
};

struct Gelu {
  static void Call(const Handle& h, const Config& c, const Tensor input,
                   const std::string approximate, Tensor out) {
    record("Gelu", h, c, {TI_ARG(input), TI_ARG(approximate), TI_ARG(out)});
  }
};

struct RmsNorm {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor weight,
                   float eps, Tensor out) {
    record("RmsNorm", h, c, {TI_ARG(input), TI_ARG(weight), TI_ARG(eps), TI_ARG(out)});
  }
};

struct Softmax {
  static void Call(const Handle& h, const Config& c, const Tensor input, const int64_t dim,
                   const std::optional<DataType> dtype, Tensor out) {
    record("Softmax", h, c, {TI_ARG(input), TI_ARG(dim), TI_ARG(dtype), TI_ARG(out)});
  }
};

struct Swiglu {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor gate,
                   Tensor out) {
    record("Swiglu", h, c, {TI_ARG(input), TI_ARG(gate), TI_ARG(out)});
  }
};

struct RotaryEmbedding {
  static void Call(const Handle& h, const Config& c, const Tensor positions, Tensor query,
                   std::optional<Tensor> key, const Tensor cos_sin_cache, int64_t head_size,
                   bool is_neox, int64_t rope_dim_offset, bool inverse) {
    record("RotaryEmbedding", h, c,
           {TI_ARG(positions), TI_ARG(query), TI_ARG(key), TI_ARG(cos_sin_cache), TI_ARG(head_size),
            TI_ARG(is_neox), TI_ARG(rope_dim_offset), TI_ARG(inverse)});
  }
};

struct Cat {
  static void Call(const Handle& h, const Config& c, const std::vector<Tensor> tensors,
                   const int64_t dim, Tensor out) {
    record("Cat", h, c, {TI_ARG(tensors), TI_ARG(dim), TI_ARG(out)});
  }
};

struct FusedAddRmsNorm {
  static void Call(const Handle& h, const Config& c, Tensor input, Tensor residual,
                   const std::optional<Tensor> weight, float epsilon) {
    record("FusedAddRmsNorm", h, c,
           {TI_ARG(input), TI_ARG(residual), TI_ARG(weight), TI_ARG(epsilon)});
  }
};

// Deprecated upstream in favour of FusedAddRmsNorm (another rounding order).
struct [[deprecated("Use `FusedAddRmsNorm` instead.")]] AddRmsNorm {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor residual,
                   const Tensor weight, std::optional<float> eps, Tensor out, Tensor residual_out) {
    record("AddRmsNorm", h, c,
           {TI_ARG(input), TI_ARG(residual), TI_ARG(weight), TI_ARG(eps), TI_ARG(out),
            TI_ARG(residual_out)});
  }
};

struct Linear {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor weight,
                   std::optional<Tensor> bias, Tensor out) {
    record("Linear", h, c, {TI_ARG(input), TI_ARG(weight), TI_ARG(bias), TI_ARG(out)});
  }
};

struct Embedding {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor weight,
                   const std::optional<int64_t> padding_idx, const std::optional<double> max_norm,
                   const double norm_type, const bool scale_grad_by_freq, const bool sparse,
                   Tensor out) {
    record("Embedding", h, c,
           {TI_ARG(input), TI_ARG(weight), TI_ARG(padding_idx), TI_ARG(max_norm), TI_ARG(norm_type),
            TI_ARG(scale_grad_by_freq), TI_ARG(sparse), TI_ARG(out)});
  }
};

struct TopkSoftmax {
  static void Call(const Handle& h, const Config& c, const Tensor gating_output,
                   std::optional<Tensor> bias, std::optional<Tensor> is_padding,
                   const bool renormalize, Tensor topk_weights, Tensor topk_indices,
                   Tensor token_expert_indices) {
    record("TopkSoftmax", h, c,
           {TI_ARG(gating_output), TI_ARG(bias), TI_ARG(is_padding), TI_ARG(renormalize),
            TI_ARG(topk_weights), TI_ARG(topk_indices), TI_ARG(token_expert_indices)});
  }
};

struct ReshapeAndCacheFlash {
  static void Call(const Handle& h, const Config& c, const Tensor key, const Tensor value,
                   const Tensor slot_mapping, const Tensor k_scale, const Tensor v_scale,
                   const std::string kv_cache_dtype, Tensor key_cache, Tensor value_cache) {
    record("ReshapeAndCacheFlash", h, c,
           {TI_ARG(key), TI_ARG(value), TI_ARG(slot_mapping), TI_ARG(k_scale), TI_ARG(v_scale),
            TI_ARG(kv_cache_dtype), TI_ARG(key_cache), TI_ARG(value_cache)});
  }
};

struct PagedAttentionInfinilm {
  static void Call(const Handle& h, const Config& c, const Tensor q, const Tensor k_cache,
                   const Tensor v_cache, const Tensor block_tables, const Tensor seq_lens,
                   std::optional<Tensor> alibi_slopes, float scale, Tensor out) {
    record("PagedAttentionInfinilm", h, c,
           {TI_ARG(q), TI_ARG(k_cache), TI_ARG(v_cache), TI_ARG(block_tables), TI_ARG(seq_lens),
            TI_ARG(alibi_slopes), TI_ARG(scale), TI_ARG(out)});
  }
};

inline std::string describe(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

struct Convolution {
  static void Call(const Handle& h, const Config& c, const Tensor input, const Tensor weight,
                   std::optional<Tensor> bias, const std::vector<int64_t> stride,
                   const std::vector<int64_t> padding, const std::vector<int64_t> dilation,
                   const bool transposed, const std::vector<int64_t> output_padding,
                   const int64_t groups, Tensor out) {
    record("Convolution", h, c,
           {TI_ARG(input), TI_ARG(weight), TI_ARG(bias), TI_ARG(stride), TI_ARG(padding),
            TI_ARG(dilation), TI_ARG(transposed), TI_ARG(output_padding), TI_ARG(groups),
            TI_ARG(out)});
  }
};

struct Copy {
  static void Call(const Handle& h, const Config& c, const Tensor src, const bool non_blocking,
                   Tensor out) {
    record("Copy", h, c, {TI_ARG(src), TI_ARG(non_blocking), TI_ARG(out)});
  }
};

struct Fill {
  static void Call(const Handle& h, const Config& c, const Tensor input, const double value,
                   Tensor out) {
    record("Fill", h, c, {TI_ARG(input), TI_ARG(value), TI_ARG(out)});
  }
};

#undef TI_ARG

}  // namespace infini::ops
