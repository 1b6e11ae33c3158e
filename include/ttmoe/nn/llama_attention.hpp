#pragma once
// Hugging Face Llama attention: separate q/k/v/o projections without bias, grouped-query attention
// (query head h reads kv head h / (H / KV), i.e. repeat_interleave), RoPE on q and k, causal mask.
// repeat_kv is one index_select over [B*KV] rows, so the kv gradient sums over the sharing heads.

#include <cmath>
#include <cstdint>
#include <vector>

#include "ttmoe/nn/linear.hpp"
#include "ttmoe/nn/rope.hpp"
#include "ttmoe/nn/sdpa.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::nn {

/// LlamaAttention (causal, GQA, RoPE theta configurable).
template <class T = float, class D = cpu>
struct LlamaAttention {
  Linear<T, D> q_proj, k_proj, v_proj, o_proj;
  index_t num_heads = 1, num_kv_heads = 1, head_dim = 1;
  double rope_theta = 10000.0;

  LlamaAttention() = default;
  LlamaAttention(index_t dim, index_t heads, index_t kv_heads, std::uint64_t seed = 0, double theta = 10000.0)
      : q_proj(dim, dim, false, seed),
        k_proj(dim, dim / heads * kv_heads, false, seed + 1),
        v_proj(dim, dim / heads * kv_heads, false, seed + 2),
        o_proj(dim, dim, false, seed + 3),
        num_heads(heads),
        num_kv_heads(kv_heads),
        head_dim(dim / heads),
        rope_theta(theta) {
    if (dim % heads || heads % kv_heads) throw ShapeError("LlamaAttention: heads must divide dim and kv_heads heads");
  }

  /// x [B, T, D], positions [T] or [B, T] -> [B, T, D].
  template <class S, class SI>
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& positions) const {
    static_assert(S::rank == 3, "LlamaAttention: x is [B, T, D]");
    const index_t B = x.extent(0), Tn = x.extent(1), H = num_heads, KV = num_kv_heads, hd = head_dim;
    auto heads = [&](const Tensor<T, DynShape<3>, D>& y, index_t n) {
      return permute<0, 2, 1, 3>(y.reshape(DynShape<4>(B, Tn, n, hd)));  // [B, n, T, hd]
    };
    auto [c, s] = rope_cos_sin<T>(positions, hd, rope_theta);
    auto q = apply_rope(heads(q_proj(x), H), c, s);
    auto k = apply_rope(heads(k_proj(x), KV), c, s);
    auto v = heads(v_proj(x), KV);
    const auto shp = DynShape<3>(B * H, Tn, hd);
    Tensor<T, DynShape<3>, D> q3 = q.reshape(shp);
    Tensor<T, DynShape<3>, D> k3 = repeat_kv(k).reshape(shp);
    Tensor<T, DynShape<3>, D> v3 = repeat_kv(v).reshape(shp);
    auto o = scaled_dot_product_attention(q3, k3, v3, static_cast<T>(1.0 / std::sqrt(double(hd))), true);
    auto merged = permute<0, 2, 1, 3>(o.reshape(DynShape<4>(B, H, Tn, hd))).reshape(DynShape<3>(B, Tn, H * hd));
    return o_proj(merged);
  }
  template <class S, class SI>
  auto operator()(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& positions) const {
    return forward(x, positions);
  }

  /// [B, KV, T, hd] -> [B*H, T*hd]: row b*H + h is kv row b*KV + h / (H / KV).
  Tensor<T, DynShape<2>, D> repeat_kv(const Tensor<T, DynShape<4>, D>& kv) const {
    const index_t B = kv.extent(0), Tn = kv.extent(2), H = num_heads, KV = num_kv_heads, g = H / KV;
    std::vector<std::int64_t> idx(static_cast<std::size_t>(B * H));
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h) idx[std::size_t(b * H + h)] = b * KV + h / g;
    auto it = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(B * H), std::span<const std::int64_t>(idx));
    return index_select(kv.reshape(DynShape<2>(B * KV, Tn * head_dim)), it);
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("q_proj", q_proj);
    v.sub("k_proj", k_proj);
    v.sub("v_proj", v_proj);
    v.sub("o_proj", o_proj);
  }
};

}  // namespace ttmoe::nn
