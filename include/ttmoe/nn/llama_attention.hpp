#pragma once
// Hugging Face Llama / Qwen2 attention: separate q/k/v/o projections (optional biases: Qwen2 has q/k/v
// bias, Llama's attention_bias puts one on all four), grouped-query attention (query head h reads kv
// head h / (H / KV), i.e. repeat_interleave), RoPE on q and k (plain or llama3-scaled frequencies),
// causal mask, head_dim independent of dim / heads. The attention core is one recorded op
// (ops/causal_attention.hpp: on the CPU it reads shared kv heads in place and recomputes the
// probabilities in the backward). forward_cached is the inference path over a KV cache.

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "ttmoe/nn/kv_cache.hpp"
#include "ttmoe/nn/linear.hpp"
#include "ttmoe/nn/linear_group.hpp"
#include "ttmoe/nn/rope.hpp"
#include "ttmoe/ops/causal_attention.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::nn {

/// LlamaAttention (causal, GQA, RoPE).
template <class T = float, class D = cpu>
struct LlamaAttention {
  Linear<T, D> q_proj, k_proj, v_proj, o_proj;
  index_t num_heads = 1, num_kv_heads = 1, head_dim = 1;
  double rope_theta = 10000.0;
  std::vector<double> inv_freq;  ///< RoPE inverse frequencies (head_dim / 2), see rope_inv_freq

  LlamaAttention() = default;
  /// Llama without biases, head_dim = dim / heads, unscaled RoPE with base `theta`.
  LlamaAttention(index_t dim, index_t heads, index_t kv_heads, std::uint64_t seed = 0, double theta = 10000.0)
      : LlamaAttention(dim, heads, kv_heads, heads > 0 ? dim / heads : 0, false, false,
                       heads > 0 ? rope_inv_freq(dim / heads, theta) : std::vector<double>{}, seed) {
    rope_theta = theta;
    if (dim % heads) throw ShapeError("LlamaAttention: heads must divide dim");
  }
  /// The general form: `qkv_bias` (Qwen2, Llama attention_bias), `o_bias` (Llama attention_bias),
  /// RoPE frequencies `freqs` (rope_inv_freq with the model's theta and scaling).
  LlamaAttention(index_t dim, index_t heads, index_t kv_heads, index_t head_dim_, bool qkv_bias, bool o_bias,
                 std::vector<double> freqs, std::uint64_t seed = 0)
      : q_proj(dim, heads * head_dim_, qkv_bias, seed),
        k_proj(dim, kv_heads * head_dim_, qkv_bias, seed + 1),
        v_proj(dim, kv_heads * head_dim_, qkv_bias, seed + 2),
        o_proj(heads * head_dim_, dim, o_bias, seed + 3),
        num_heads(heads),
        num_kv_heads(kv_heads),
        head_dim(head_dim_),
        inv_freq(std::move(freqs)) {
    if (heads <= 0 || kv_heads <= 0 || heads % kv_heads)
      throw ShapeError("LlamaAttention: kv_heads must divide heads (" + std::to_string(heads) + " heads, " +
                       std::to_string(kv_heads) + " kv heads)");
    if (head_dim_ <= 0 || head_dim_ % 2 || index_t(inv_freq.size()) != head_dim_ / 2)
      throw ShapeError("LlamaAttention: head_dim must be even with head_dim / 2 RoPE frequencies");
  }

  /// x [B, T, D], positions [T] or [B, T] -> [B, T, D] (differentiable).
  template <class S, class SI>
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& positions) const {
    static_assert(S::rank == 3, "LlamaAttention: x is [B, T, D]");
    auto [q, k, v] = project(x, positions);
    return o_proj(causal_gqa_attention(q, k, v, static_cast<T>(1.0 / std::sqrt(double(head_dim)))));
  }
  template <class S, class SI>
  auto operator()(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& positions) const {
    return forward(x, positions);
  }

  /// Inference over `cache` layer `layer`: x [B, t, D] holds each sequence's next t tokens at
  /// positions [B, t] (= cache.lengths[b] + i); their keys and values are appended. Not recorded.
  template <class S>
  Tensor<T, DynShape<3>, D> forward_cached(const Tensor<T, S, D>& x, const IndexTensor<DynShape<2>, D>& positions,
                                           KVCache<T, D>& cache, index_t layer) const {
    return o_proj(attend_cached(x, positions, cache, layer));
  }
  /// forward_cached without the output projection: the heads' outputs merged, [B, t, H * hd]. Each
  /// row is o_proj's input for that row alone, so a caller that needs some rows only (the last
  /// layer of a prefill whose logits are asked for at the last token) projects just those.
  template <class S>
  Tensor<T, DynShape<3>, D> attend_cached(const Tensor<T, S, D>& x, const IndexTensor<DynShape<2>, D>& positions,
                                          KVCache<T, D>& cache, index_t layer) const {
    const index_t B = x.extent(0), Tn = x.extent(1), H = num_heads, hd = head_dim;
    auto [q, k, v] = project(x, positions);
    Tensor<T, DynShape<3>, D> merged(DynShape<3>(B, Tn, H * hd));
    kv_cache_attention(cache, layer, q.data(), k.data(), v.data(), merged.data(), H, Tn,
                       static_cast<T>(1.0 / std::sqrt(double(hd))));
    return merged;
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("q_proj", q_proj);
    v.sub("k_proj", k_proj);
    v.sub("v_proj", v_proj);
    v.sub("o_proj", o_proj);
  }

 private:
  /// [B, T, n*hd] -> [B, n, T, hd].
  Tensor<T, DynShape<4>, D> heads(const Tensor<T, DynShape<3>, D>& y, index_t n) const {
    return permute<0, 2, 1, 3>(y.reshape(DynShape<4>(y.extent(0), y.extent(1), n, head_dim)));
  }
  struct QKV {
    Tensor<T, DynShape<4>, D> q, k;  ///< [B, H, T, hd] and [B, KV, T, hd], RoPE applied
    Tensor<T, DynShape<3>, D> v;     ///< [B, T, KV*hd] as projected
  };
  template <class S, class SI>
  QKV project(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& positions) const {
    auto [c, s] = inv_freq.empty() ? rope_cos_sin<T>(positions, head_dim, rope_theta) : rope_cos_sin<T>(positions, inv_freq);
    // One low-rank product with x for the three projections' adapters (nn/linear_group.hpp).
    auto [q, k, v] = linear_group(x, std::array<const Linear<T, D>*, 3>{&q_proj, &k_proj, &v_proj});
    return {apply_rope(heads(q, num_heads), c, s), apply_rope(heads(k, num_kv_heads), c, s), std::move(v)};
  }
};

}  // namespace ttmoe::nn
