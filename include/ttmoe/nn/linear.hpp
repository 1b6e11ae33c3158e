#pragma once
// nn.Linear: y = x W^T + b with W stored [out, in] (torch layout, so checkpoints load unchanged).
// One GEMM over all leading dims of x with the bias fused in (ops/linear.hpp). An optional unmerged
// low-rank update (LoRA adapters, models/peft_adapter.hpp) adds two thin GEMMs, its sum riding on
// the second GEMM's store. An inference-only layer may instead hold its weight as BF16
// (`weight_bf16`, issue #14; kernel in backend/cpu/linear_bf16.hpp, found by argument-dependent
// lookup so this header stays device-generic): F32 activations, F32 accumulation, half the bytes.

#include <cstdint>
#include <string>
#include <type_traits>

#include "ttmoe/io/bf16_matrix.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/bf16_resident.hpp"
#include "ttmoe/nn/callable.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/ops/linear.hpp"

namespace ttmoe::nn {

/// A fully connected layer; `bias` is undefined when constructed without one.
template <class T = float, class D = cpu>
struct Linear : Callable<Linear<T, D>> {
  Tensor<T, DynShape<2>, D> weight;  ///< [out, in]
  Tensor<T, DynShape<1>, D> bias;    ///< [out] or undefined
  /// Unmerged low-rank update, off while undefined: y += (x delta_A^T) delta_B^T with delta_A
  /// [R, in] (adapter scales folded in) and delta_B [out, R], e.g. moe::stack_lora's factors of
  /// several adapters at once. Not a parameter of the layer (adapters are saved apart from it).
  Tensor<T, DynShape<2>, D> delta_A, delta_B;
  /// Inference-only BF16 copy of the weight [out, in]; when defined, `weight` is undefined and
  /// forward() runs the BF16 kernel (CPU, float). Recording such a layer on a tape is an error.
  io::Bf16Matrix weight_bf16;

  Linear() = default;
  /// Kaiming-uniform init like torch (bound 1/sqrt(in) for weight and bias); parameters trainable.
  Linear(index_t in_features, index_t out_features, bool with_bias = true, std::uint64_t seed = 0)
      : weight(DynShape<2>(out_features, in_features)) {
    const double b = kaiming_uniform_bound(in_features);
    uniform_(weight, b, seed);
    weight.set_requires_grad();
    if (with_bias) {
      bias = Tensor<T, DynShape<1>, D>(DynShape<1>(out_features));
      uniform_(bias, b, seed ^ 0x9E3779B97F4A7C15ull);
      bias.set_requires_grad();
    }
  }

  index_t in_features() const { return weight_bf16.defined() ? weight_bf16.cols : weight.extent(1); }
  index_t out_features() const { return weight_bf16.defined() ? weight_bf16.rows : weight.extent(0); }

  /// Replaces the F32 weight by its BF16 rounding (round-to-nearest-even) and frees it; the
  /// layer is inference-only from then on. `name` labels the layer in later errors.
  void keep_weight_bf16(std::string name) {
    if (weight_bf16.defined()) return;
    if (!weight.defined()) throw ValueError("nn::Linear " + name + ": no weight to keep as BF16");
    if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>) {
      weight_bf16 = io::Bf16Matrix::from_floats(weight.data(), weight.extent(0), weight.extent(1));
      weight = Tensor<T, DynShape<2>, D>{};
      bf16_name_ = std::move(name);
    } else {
      throw ValueError("nn::Linear " + name + ": BF16-resident weights need float on the CPU");
    }
  }

  /// Makes `w` the layer's weight (inference only from then on) and frees the F32 one: how a
  /// loader hands over BF16 bits that already exist, e.g. mapped straight from a checkpoint.
  void adopt_weight_bf16(io::Bf16Matrix w, std::string name) {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>) {
      weight_bf16 = std::move(w);
      weight = Tensor<T, DynShape<2>, D>{};
      bf16_name_ = std::move(name);
    } else {
      throw ValueError("nn::Linear " + name + ": BF16-resident weights need float on the CPU");
    }
  }

  /// x [..., in] -> [..., out] (rank >= 2).
  template <class S>
  Tensor<T, DynShape<S::rank>, D> forward(const Tensor<T, S, D>& x) const {
    if (!delta_A.defined()) return base_forward(x);
    const Tensor<T, DynShape<1>, D> none;
    return forward_given_xa(x, linear(x, delta_A, none));
  }
  /// residual + x W^T + b: the residual (the output's shape) is added as the GEMM stores.
  template <class S, class R>
  Tensor<T, DynShape<S::rank>, D> forward(const Tensor<T, S, D>& x, const Tensor<T, R, D>& residual) const {
    if (weight_bf16.defined()) return with_delta(x, bf16_forward(x, &residual));
    return with_delta(x, linear(x, weight, bias, residual));
  }
  /// The BF16 weight for an inference call that runs it outside forward() (nn::linear_group's
  /// batch-1 group): refuses a recording tape as forward() does. Only when weight_bf16 is defined.
  const io::Bf16Matrix& bf16_weight_for_inference() const {
    refuse_recording_bf16("nn::Linear", bf16_name_);
    return weight_bf16;
  }
  /// Whether a low-rank update is attached.
  bool has_delta() const { return delta_A.defined(); }
  /// forward(x) with the update's first product x delta_A^T given as `xa` [..., R]: the base output
  /// (F32 or BF16 weight) plus xa delta_B^T. nn::linear_group computes `xa` once for several layers.
  template <class S, class SA>
  Tensor<T, DynShape<S::rank>, D> forward_given_xa(const Tensor<T, S, D>& x, const Tensor<T, SA, D>& xa) const {
    const Tensor<T, DynShape<1>, D> none;
    return linear(xa, delta_B, none, base_forward(x));
  }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }

 private:
  std::string bf16_name_;  ///< the layer's name in BF16 errors

  /// The BF16 path: inference only, float on the CPU.
  template <class S, class R>
  Tensor<T, DynShape<S::rank>, D> bf16_forward(const Tensor<T, S, D>& x, const Tensor<T, R, D>* residual) const {
    refuse_recording_bf16("nn::Linear", bf16_name_);
    if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>) {
      return linear_bf16(x, weight_bf16, bias, residual);
    } else {
      throw ValueError("nn::Linear " + bf16_name_ + ": BF16-resident weights need float on the CPU");
    }
  }

  /// x W^T + b through the F32 or the BF16 weight, without the update.
  template <class S>
  Tensor<T, DynShape<S::rank>, D> base_forward(const Tensor<T, S, D>& x) const {
    if (weight_bf16.defined()) return bf16_forward(x, static_cast<const Tensor<T, DynShape<1>, D>*>(nullptr));
    return linear(x, weight, bias);
  }

  /// y + (x delta_A^T) delta_B^T, or y when no update is attached.
  template <class S>
  Tensor<T, DynShape<S::rank>, D> with_delta(const Tensor<T, S, D>& x, Tensor<T, DynShape<S::rank>, D> y) const {
    if (!delta_A.defined()) return y;
    const Tensor<T, DynShape<1>, D> none;
    return linear(linear(x, delta_A, none), delta_B, none, y);
  }
};

}  // namespace ttmoe::nn
