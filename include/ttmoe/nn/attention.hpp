#pragma once
// timm ViT Attention: fused qkv Linear [3D, D] with bias, the attention core on the qkv activation as
// one op (ops/attention.hpp), no mask, then the output projection. Row layout of qkv.weight: q rows,
// k rows, v rows; head h owns rows h*hd .. h*hd+hd-1 within each.

#include <cmath>
#include <cstdint>

#include "ttmoe/nn/linear.hpp"
#include "ttmoe/ops/attention.hpp"

namespace ttmoe::nn {

/// Multi-head self-attention (timm `Attention`, qkv_bias=True).
template <class T = float, class D = cpu>
struct Attention : Callable<Attention<T, D>> {
  Linear<T, D> qkv, proj;
  index_t num_heads = 1;

  Attention() = default;
  Attention(index_t dim, index_t heads, std::uint64_t seed = 0)
      : qkv(dim, 3 * dim, true, seed), proj(dim, dim, true, seed + 1), num_heads(heads) {
    if (dim % heads) throw ShapeError("Attention: dim not divisible by num_heads");
  }

  /// x [B, T, D] -> [B, T, D].
  template <class S>
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, S, D>& x) const {
    return proj(heads(x));
  }
  /// residual + attention(x): the residual stream closes in the output projection's store.
  template <class S, class R>
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, S, D>& x, const Tensor<T, R, D>& residual) const {
    return proj(heads(x), residual);
  }

  /// The merged heads [B, T, D] before the output projection.
  template <class S>
  Tensor<T, DynShape<3>, D> heads(const Tensor<T, S, D>& x) const {
    static_assert(S::rank == 3, "Attention: x is [B, T, D]");
    const index_t hd = x.extent(2) / num_heads;
    // One op from the qkv activation to the merged heads: no permute copies (ops/attention.hpp).
    return fused_qkv_attention(qkv(x), num_heads, static_cast<T>(1.0 / std::sqrt(double(hd))));
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("qkv", qkv);
    v.sub("proj", proj);
  }
};

}  // namespace ttmoe::nn
