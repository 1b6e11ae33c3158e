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

#include <algorithm>
#include <string>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/record.hpp"

namespace ttmoe {

namespace detail {
/// The (sample, head) grid of attention's per-head products as strided batched GEMMs: one launch
/// per sample that batches its heads, or one launch per head that batches the samples, whichever
/// gives fewer and larger launches. On a GPU a launch of 12 small products leaves most of the chip
/// idle and costs a launch each; ViT-B/16 at batch 64 issued 64 x 3 such launches per layer forward
/// where 12 x 2 + 1 now do the same work (measured on an H100: see docs/design.md "CUDA backend").
struct HeadGrid {
  index_t samples;  ///< samples in this grid
  index_t heads;    ///< heads per sample
  /// True when each launch batches the samples of one head.
  bool by_head() const { return samples > heads; }
  /// Number of launches that cover the grid.
  index_t launches() const { return by_head() ? heads : samples; }
  /// Products per launch.
  index_t batch() const { return by_head() ? samples : heads; }
  /// Offset of launch i's first product in an operand whose products sit sample_stride and
  /// head_stride elements apart.
  index_t offset(index_t i, index_t sample_stride, index_t head_stride) const {
    return i * (by_head() ? head_stride : sample_stride);
  }
  /// Element stride between the products of one launch in that operand.
  index_t stride(index_t sample_stride, index_t head_stride) const {
    return by_head() ? sample_stride : head_stride;
  }
};

/// Elements of dP scratch (and as many again of dS) that the unfused backward holds at once: it walks
/// the batch in chunks of samples that fit, so a large batch keeps its launches wide without a second
/// copy of the tape's P. A variable (per thread) so that tests can force several chunks.
inline thread_local index_t attention_scratch_elements = index_t(1) << 24;
}  // namespace detail

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
    // Strides (per sample, per head) of q/k/v in qkv, of P and of the merged output.
    const index_t xs = Tn * D3, ps = H * TT, os = Tn * Dm;
    const detail::HeadGrid grid{B, H};
    T* p = probs.data();
    for (index_t i = 0; i < grid.launches(); ++i)  // S = scale Q K^T
      Backend<D>::gemm_batched(grid.batch(), false, true, Tn, Tn, hd, scale, q + grid.offset(i, xs, hd), D3,
                               grid.stride(xs, hd), q + Dm + grid.offset(i, xs, hd), D3, grid.stride(xs, hd), T(0),
                               p + grid.offset(i, ps, TT), Tn, grid.stride(ps, TT));
    Backend<D>::softmax(p, p, B * H * Tn, Tn, 1, false);  // in place, row by row
    for (index_t i = 0; i < grid.launches(); ++i)  // O = P V, straight into the merged heads
      Backend<D>::gemm_batched(grid.batch(), false, false, Tn, hd, Tn, T(1), p + grid.offset(i, ps, TT), Tn,
                               grid.stride(ps, TT), q + 2 * Dm + grid.offset(i, xs, hd), D3, grid.stride(xs, hd), T(0),
                               out.data() + grid.offset(i, os, hd), Dm, grid.stride(os, hd));
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
        // dP and dS scratch for a chunk of samples (detail::attention_scratch_elements).
        const index_t xs = Tn * D3, ps = H * TT, os = Tn * Dm;
        const index_t chunk = std::clamp<index_t>(detail::attention_scratch_elements / ps, 1, B);
        Tensor<T, DynShape<2>, D> dp(DynShape<2>(chunk, ps)), ds(DynShape<2>(chunk, ps));
        for (index_t b0 = 0; b0 < B; b0 += chunk) {
          const detail::HeadGrid grid{std::min(chunk, B - b0), H};
          const T* gb = g + b0 * os;
          const T* pb = probs.data() + b0 * ps;
          const T* xb = saved.data() + b0 * xs;
          T* dxb = t.data + b0 * xs;
          for (index_t i = 0; i < grid.launches(); ++i) {
            const index_t ox = grid.offset(i, xs, hd), op = grid.offset(i, ps, TT), oo = grid.offset(i, os, hd);
            const index_t sx = grid.stride(xs, hd), sp = grid.stride(ps, TT), so = grid.stride(os, hd);
            // dP = dO V^T; dV = P^T dO
            Backend<D>::gemm_batched(grid.batch(), false, true, Tn, Tn, hd, T(1), gb + oo, Dm, so, xb + 2 * Dm + ox, D3,
                                     sx, T(0), dp.data() + op, Tn, sp);
            Backend<D>::gemm_batched(grid.batch(), true, false, Tn, hd, Tn, T(1), pb + op, Tn, sp, gb + oo, Dm, so, beta,
                                     dxb + 2 * Dm + ox, D3, sx);
          }
          // dS = P * (dP - rowsum(dP * P)) (the softmax VJP accumulates, so into a zeroed dS)
          D::template fill_zero<T>(ds.data(), grid.samples * ps);
          Backend<D>::softmax_backward(pb, dp.data(), ds.data(), grid.samples * H * Tn, Tn, 1, false);
          for (index_t i = 0; i < grid.launches(); ++i) {
            const index_t ox = grid.offset(i, xs, hd), op = grid.offset(i, ps, TT);
            const index_t sx = grid.stride(xs, hd), sp = grid.stride(ps, TT);
            // dQ = scale dS K; dK = scale dS^T Q
            Backend<D>::gemm_batched(grid.batch(), false, false, Tn, hd, Tn, scale, ds.data() + op, Tn, sp,
                                     xb + Dm + ox, D3, sx, beta, dxb + ox, D3, sx);
            Backend<D>::gemm_batched(grid.batch(), true, false, Tn, hd, Tn, scale, ds.data() + op, Tn, sp, xb + ox, D3,
                                     sx, beta, dxb + Dm + ox, D3, sx);
          }
        }
      }
    });
  }
  return out;
}

}  // namespace ttmoe
