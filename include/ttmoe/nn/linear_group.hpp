#pragma once
// Several Linear layers on one input (attention's q | k | v, SwiGLU's gate | up) whose unmerged
// low-rank updates (LoRA) share the product with that input: the updates' A factors are stacked,
// xa = x [A_1; ...; A_n]^T is ONE GEMM with R = r_1 + ... + r_n outputs, and layer i adds
// xa[..., o_i : o_i + r_i] B_i^T onto its own output. Why: with rank 64 each x A_i^T is a GEMM only 64
// wide, and backward its dx (depth 64) and dA (64 rows) are as skinny; stacked they are 192 or 128 wide,
// which the packed kernel runs at about twice the rate (docs/design.md "TTMM training"). Everything is
// recorded ops (concat, linear, narrow), so the gradient of each A_i and B_i reaches its own factor and
// the adapters stay separate modules; the values equal the layers' own forward up to the GEMM's
// rounding.

#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "ttmoe/nn/linear.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::nn {

/// The outputs layers[i]->forward(x) for every i, the low-rank updates sharing one product with x
/// when every layer has one that fits x (otherwise each layer runs its own forward, which also
/// reports any shape mismatch). x is [..., in]; output i is [..., out_i].
template <class T, class D, ShapeType S, std::size_t N>
std::array<Tensor<T, DynShape<S::rank>, D>, N> linear_group(const Tensor<T, S, D>& x,
                                                            const std::array<const Linear<T, D>*, N>& layers) {
  static_assert(S::rank >= 2, "ttmoe: linear_group needs x of rank >= 2 ([..., in])");
  std::array<Tensor<T, DynShape<S::rank>, D>, N> out;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>) {
    // BF16-resident layers without updates: one call, which runs a decode step's projections as ONE
    // parallel region (backend/cpu/linear_bf16.hpp's linear_bf16_group, found by argument-dependent
    // lookup as Linear's linear_bf16 is).
    bool bf16 = true;
    for (const auto* l : layers) bf16 = bf16 && l->weight_bf16.defined() && !l->has_delta();
    if (bf16) {
      std::array<const io::Bf16Matrix*, N> ws;
      std::array<const Tensor<T, DynShape<1>, D>*, N> biases;
      for (std::size_t i = 0; i < N; ++i) ws[i] = &layers[i]->bf16_weight_for_inference(), biases[i] = &layers[i]->bias;
      return linear_bf16_group(x, ws, biases);
    }
  }
  const index_t in = x.extent(S::rank - 1);
  bool shared = N > 1;
  for (const auto* l : layers)
    shared = shared && l->has_delta() && l->delta_A.extent(1) == in;
  if (!shared) {
    for (std::size_t i = 0; i < N; ++i) out[i] = layers[i]->forward(x);
    return out;
  }
  std::vector<Tensor<T, DynShape<2>, D>> as;
  for (const auto* l : layers) as.push_back(l->delta_A);
  const Tensor<T, DynShape<2>, D> a_cat = concat<0>(as);  // [R, in]
  const Tensor<T, DynShape<1>, D> none;
  const Tensor<T, DynShape<S::rank>, D> xa = linear(x, a_cat, none);  // [..., R]
  index_t offset = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const index_t r = layers[i]->delta_A.extent(0);
    out[i] = layers[i]->forward_given_xa(x, narrow<-1>(xa, offset, r));
    offset += r;
  }
  return out;
}

}  // namespace ttmoe::nn
