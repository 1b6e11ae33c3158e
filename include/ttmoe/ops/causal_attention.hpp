#pragma once
// Causal grouped-query attention as ONE recorded op, the form Llama-family models use: q [B, H, T, hd]
// and k [B, KV, T, hd] (RoPE applied), v [B, T, KV hd] as the value projection writes it; query head h
// reads kv head h / (H / KV) (transformers' repeat_kv); the result is the merged heads [B, T, H hd],
// the output projection's input.
//
// On a backend with the fused kernels (the FusedCausalAttentionBackend option; the CPU has them) the op
// reads k and v in place for every query head that shares them and writes the heads straight into
// [B, T, H hd]: no repeated k / v copies, no permute of v or of the output, no mask pass, and nothing
// but q, k and v on the tape; the backward recomputes each head's probabilities. A sequence of 1024
// tokens with 32 heads would otherwise keep 128 MB of probabilities per layer (and the scores beside
// them) for the backward. Other backends get the composition below: the same arithmetic through
// index_select, permute, batched matmul, an additive -inf mask and softmax, every piece differentiable.

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/record.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe {

/// [T, S] additive causal mask: key j is hidden from query i when j > i + (S - T) (queries are the
/// last T of S positions, as with a key/value cache).
template <class T, class D = cpu>
Tensor<T, DynShape<2>, D> causal_mask(index_t t, index_t s) {
  std::vector<T> m(t * s, T(0));  // built on the host, then copied to D
  for (index_t i = 0; i < t; ++i)
    for (index_t j = i + (s - t) + 1; j < s; ++j) m[i * s + j] = -std::numeric_limits<T>::infinity();
  return Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(t, s), m);
}

namespace detail {
/// [B, KV, T, hd] -> [B H, T, hd]: row b H + h is kv row b KV + h / (H / KV) (differentiable: the
/// gradient of a kv head sums over the query heads that read it).
template <class T, class D>
Tensor<T, DynShape<3>, D> repeat_kv_heads(const Tensor<T, DynShape<4>, D>& kv, index_t H) {
  const index_t B = kv.extent(0), KV = kv.extent(1), Tn = kv.extent(2), hd = kv.extent(3), G = H / KV;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(B * H));
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h) idx[std::size_t(b * H + h)] = b * KV + h / G;
  auto it = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(B * H), std::span<const std::int64_t>(idx));
  return index_select(kv.reshape(DynShape<2>(B * KV, Tn * hd)), it).reshape(DynShape<3>(B * H, Tn, hd));
}
}  // namespace detail

/// softmax(scale q k^T + causal mask) v per query head, heads merged: q [B, H, T, hd], k [B, KV, T, hd],
/// v [B, T, KV hd] -> [B, T, H hd]. Throws ShapeError when the shapes do not fit together.
template <class T, class D>
Tensor<T, DynShape<3>, D> causal_gqa_attention(const Tensor<T, DynShape<4>, D>& q, const Tensor<T, DynShape<4>, D>& k,
                                               const Tensor<T, DynShape<3>, D>& v, T scale) {
  const index_t B = q.extent(0), H = q.extent(1), Tn = q.extent(2), hd = q.extent(3), KV = k.extent(1);
  if (KV == 0 || H % KV != 0 || k.extent(0) != B || k.extent(2) != Tn || k.extent(3) != hd ||
      v.extent(0) != B || v.extent(1) != Tn || v.extent(2) != KV * hd)
    throw ShapeError("causal_gqa_attention: q " + q.shape().to_string() + ", k " + k.shape().to_string() + " and v " +
                     v.shape().to_string() + " are not [B, H, T, hd], [B, KV, T, hd] and [B, T, KV hd] with KV dividing H");
  if constexpr (FusedCausalAttentionBackend<D, T>) {
    Tensor<T, DynShape<3>, D> out(DynShape<3>(B, Tn, H * hd));
    Backend<D>::causal_gqa_attention_forward(q.data(), k.data(), v.data(), B, H, KV, Tn, hd, scale, out.data());
    if (should_record(q, k, v)) {
      auto mq = q.meta(), mk = k.meta(), mv = v.meta();
      record("causal_gqa_attention", out, [=](const T* g) {
        T *dq = nullptr, *dk = nullptr, *dv = nullptr;
        T bq = 0, bk = 0, bv = 0;
        // Each wanted gradient: written when its buffer is fresh (beta 0), else added to (beta 1).
        auto want = [](const auto& m, T*& d, T& beta) {
          if (!m) return;
          auto t = m->target();
          d = t.data;
          beta = t.fresh ? T(0) : T(1);
        };
        want(mq, dq, bq);
        want(mk, dk, bk);
        want(mv, dv, bv);
        Backend<D>::causal_gqa_attention_backward(g, q.data(), k.data(), v.data(), B, H, KV, Tn, hd, scale, dq, bq, dk,
                                                  bk, dv, bv);
      });
    }
    return out;
  } else {
    const auto folded = DynShape<3>(B * H, Tn, hd);
    const Tensor<T, DynShape<3>, D> q3 = q.reshape(folded);
    const Tensor<T, DynShape<3>, D> k3 = detail::repeat_kv_heads(k, H);
    const Tensor<T, DynShape<4>, D> v4 = permute<0, 2, 1, 3>(v.reshape(DynShape<4>(B, Tn, KV, hd)));
    const Tensor<T, DynShape<3>, D> v3 = detail::repeat_kv_heads(v4, H);
    // The scale is the GEMM's alpha: no scaled copy of q to write, nor to keep for the backward.
    Tensor<T, DynShape<3>, D> scores = matmul<false, true>(q3, k3, scale);
    scores = scores + causal_mask<T, D>(Tn, Tn);
    const Tensor<T, DynShape<3>, D> o = matmul(softmax<-1>(scores), v3);
    return permute<0, 2, 1, 3>(o.reshape(DynShape<4>(B, H, Tn, hd))).reshape(DynShape<3>(B, Tn, H * hd));
  }
}

}  // namespace ttmoe
