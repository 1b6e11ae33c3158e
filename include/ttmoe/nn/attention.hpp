#pragma once
// timm ViT Attention: fused qkv Linear [3D, D] with bias, heads folded into the GEMM batch, no mask,
// then the output projection. Row layout of qkv.weight: q rows, k rows, v rows; head h owns rows
// h*hd .. h*hd+hd-1 within each (so reshape [B, T, 3, H, hd] splits them).

#include <cmath>
#include <cstdint>

#include "ttmoe/nn/linear.hpp"
#include "ttmoe/nn/sdpa.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::nn {

/// Multi-head self-attention (timm `Attention`, qkv_bias=True).
template <class T = float, class D = cpu>
struct Attention {
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
    static_assert(S::rank == 3, "Attention: x is [B, T, D]");
    const index_t B = x.extent(0), Tn = x.extent(1), Dm = x.extent(2), H = num_heads, hd = Dm / H;
    auto q5 = qkv(x).reshape(DynShape<5>(B, Tn, 3, H, hd));
    auto parts = permute<2, 0, 3, 1, 4>(q5);  // [3, B, H, T, hd]
    const auto shp = DynShape<3>(B * H, Tn, hd);
    Tensor<T, DynShape<3>, D> q = parts.slice(0, 1).reshape(shp);
    Tensor<T, DynShape<3>, D> k = parts.slice(1, 2).reshape(shp);
    Tensor<T, DynShape<3>, D> v = parts.slice(2, 3).reshape(shp);
    auto o = scaled_dot_product_attention(q, k, v, static_cast<T>(1.0 / std::sqrt(double(hd))), false);
    auto merged = permute<0, 2, 1, 3>(o.reshape(DynShape<4>(B, H, Tn, hd))).reshape(DynShape<3>(B, Tn, Dm));
    return proj(merged);
  }
  template <class S>
  auto operator()(const Tensor<T, S, D>& x) const {
    return forward(x);
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("qkv", qkv);
    v.sub("proj", proj);
  }
};

}  // namespace ttmoe::nn
