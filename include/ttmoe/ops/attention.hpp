#pragma once
// Multi-head self-attention on a fused qkv activation, as ONE recorded op. The input is timm's qkv
// projection output [B, T, 3D] (q | k | v along the last axis, head h owning columns h*hd..h*hd+hd-1
// of each); the output is the merged heads [B, T, D] ready for the output projection. Every GEMM
// reads q, k, v in place through their row stride 3D and writes the heads straight into [B, T, D]
// (or into the [B, T, 3D] gradient), so the permute copies of the qkv activation and of the output,
// and their backward copies, never happen. Saved for the backward: the qkv input, and on backends
// without the fused kernels also the probabilities P; the fused kernels recompute P head by head in
// the backward instead (bit-identical, B H T^2 floats less per layer on the tape: see
// backend/cpu/attention.hpp).
//
// Per (b, h): S = scale * Q K^T, P = softmax(S), O = P V.
// VJP: dP = dO V^T, dV = P^T dO, dS = P * (dP - rowsum(dP * P)), dQ = scale dS K, dK = scale dS^T Q.

#include <string>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/record.hpp"

namespace ttmoe {

/// softmax(q k^T * scale) v for each of `heads` heads of qkv [B, T, 3D] -> [B, T, D].
template <class T, ShapeType S, class D>
Tensor<T, DynShape<3>, D> fused_qkv_attention(const Tensor<T, S, D>& qkv, index_t heads, T scale) {
  static_assert(S::rank == 3, "ttmoe: fused_qkv_attention takes qkv [B, T, 3D]");
  const index_t B = qkv.extent(0), Tn = qkv.extent(1), D3 = qkv.extent(2);
  if (heads == 0 || D3 % (3 * heads) != 0)
    throw ShapeError("fused_qkv_attention: qkv " + qkv.shape().to_string() + " does not split into q, k, v of " +
                     std::to_string(heads) + " heads");
  const index_t Dm = D3 / 3, H = heads, hd = Dm / H, TT = Tn * Tn;
  Tensor<T, DynShape<3>, D> out(DynShape<3>(B, Tn, Dm));
  Tensor<T, DynShape<4>, D> probs;  // the composition's P, kept for its backward
  const T* q = qkv.data();
  if constexpr (FusedAttentionBackend<D, T>) {
    Backend<D>::qkv_attention_forward(q, B, Tn, H, hd, scale, static_cast<T*>(nullptr), out.data());
  } else {
    probs = Tensor<T, DynShape<4>, D>(DynShape<4>(B, H, Tn, Tn));
    // Sample by sample: one sample's scores (H x T x T) stay in cache from the GEMM that writes them,
    // through the softmax, to the GEMM that reads them.
    for (index_t b = 0; b < B; ++b) {
      const T* qb = q + b * Tn * D3;
      T* pb = probs.data() + b * H * TT;
      Backend<D>::gemm_batched(H, false, true, Tn, Tn, hd, scale, qb, D3, hd, qb + Dm, D3, hd, T(0), pb, Tn, TT);
      Backend<D>::softmax(pb, pb, H * Tn, Tn, 1, false);  // in place, row by row
      Backend<D>::gemm_batched(H, false, false, Tn, hd, Tn, T(1), pb, Tn, TT, qb + 2 * Dm, D3, hd, T(0),
                               out.data() + b * Tn * Dm, Dm, hd);
    }
  }
  if (should_record(qkv)) {
    auto mq = qkv.meta();
    Tensor<T, S, D> saved = qkv;
    record("fused_qkv_attention", out, [=](const T* g) {
      auto t = mq->target();
      const T beta = t.fresh ? T(0) : T(1);  // q, k, v thirds are each written exactly once
      if constexpr (FusedAttentionBackend<D, T>) {
        Backend<D>::qkv_attention_backward(g, saved.data(), static_cast<const T*>(nullptr), B, Tn, H, hd, scale, beta,
                                           t.data);
      } else {
        // Per-sample scratch for dP and dS (reused, cache-resident).
        Tensor<T, DynShape<3>, D> dp(DynShape<3>(H, Tn, Tn)), ds(DynShape<3>(H, Tn, Tn));
        const T* x = saved.data();
        for (index_t b = 0; b < B; ++b) {
          const T* gb = g + b * Tn * Dm;
          const T* pb = probs.data() + b * H * TT;
          const T* qb = x + b * Tn * D3;
          T* dxb = t.data + b * Tn * D3;
          // dP = dO V^T; dV = P^T dO
          Backend<D>::gemm_batched(H, false, true, Tn, Tn, hd, T(1), gb, Dm, hd, qb + 2 * Dm, D3, hd, T(0), dp.data(), Tn,
                                   TT);
          Backend<D>::gemm_batched(H, true, false, Tn, hd, Tn, T(1), pb, Tn, TT, gb, Dm, hd, beta, dxb + 2 * Dm, D3, hd);
          // dS = P * (dP - rowsum(dP * P)) (the softmax VJP accumulates, so into a zeroed dS)
          D::template fill_zero<T>(ds.data(), H * TT);
          Backend<D>::softmax_backward(pb, dp.data(), ds.data(), H * Tn, Tn, 1, false);
          // dQ = scale dS K; dK = scale dS^T Q
          Backend<D>::gemm_batched(H, false, false, Tn, hd, Tn, scale, ds.data(), Tn, TT, qb + Dm, D3, hd, beta, dxb, D3,
                                   hd);
          Backend<D>::gemm_batched(H, true, false, Tn, hd, Tn, scale, ds.data(), Tn, TT, qb, D3, hd, beta, dxb + Dm, D3, hd);
        }
      }
    });
  }
  return out;
}

}  // namespace ttmoe
