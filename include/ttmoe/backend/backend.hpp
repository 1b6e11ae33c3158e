#pragma once
// The backend contract: what `Backend<D>` (declared in core/backend_decl.hpp) must provide for ops to
// run on device D. Ops above this floor are written once against it; each device specialises
// Backend<D> (backend/cpu for the host, backend/cuda for NVIDIA GPUs and thrust's host systems) and
// static_asserts `BackendFor<D, float>` and `BackendFor<D, double>` next to the specialisation, so a
// missing or mistyped kernel is reported there, by name, rather than deep inside the first op that
// calls it. docs/extending.md has the checklist for a new backend.
//
// Every kernel is a static function on raw device pointers (no tensors, no autograd): it computes,
// and the op that calls it records the VJP. Shapes reach kernels as [outer, n, inner] views: the
// axis an op works along has n elements, `outer` the product of the extents before it and `inner`
// the product of those after it. Unless a kernel says "accumulate", it overwrites its output.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "ttmoe/backend/gemm_epilogue.hpp"
#include "ttmoe/core/backend_decl.hpp"
#include "ttmoe/core/device.hpp"
#include "ttmoe/expr/kernel.hpp"
#include "ttmoe/expr/ops.hpp"

namespace ttmoe {

namespace backend_contract {
/// A representative kernel tree (a tensor operand plus a scalar) for checking `evaluate`: kernels are
/// templates, so a backend must accept every tree the expression library builds; this one stands for
/// them in the concept.
template <class T>
using SampleKernel = expr::OpKernel<op::add, expr::LeafKernel<T, 2>, expr::ScalarKernel<T>>;
}  // namespace backend_contract

/// The kernels every backend must provide for element type T (float and double are required).
/// With B = Backend<D>, all static, all on device pointers:
/// - elementwise: `evaluate<T, R>(kernel, out, ext)` writes a fused expression's kernel tree over
///   extents `ext`; `evaluate_backward<T, R>(kernel, grad_out, ext)` runs the tree's per-element VJP
///   (the tree carries its gradient sinks); `add_inplace(dst, src, n)` adds; `reduce_broadcast_add(dst,
///   leaf_ext, src, out_ext)` sums a gradient of extents out_ext into a broadcast operand of extents
///   leaf_ext (accumulate).
/// - reductions on [outer, n, inner]: `reduce_sum` (times a scale), `broadcast_add_axis` (its VJP,
///   accumulate), `reduce_extremum` (max/min and first arg-extremum, NaN wins), `reduce_variance` /
///   `variance_backward` (ddof), `softmax` / `softmax_backward` (or log-softmax), `logsumexp` /
///   `logsumexp_backward` (accumulate), `scatter_add_axis` (index_select's VJP: accumulate, several
///   sources may hit one destination; must be deterministic).
/// - indexing: `gather_axis`, `copy_blocks` (strided row copies, optionally accumulating), `permute`
///   (optionally accumulating), `topk` per row (values descending, first index on ties, NaN largest).
/// - LayerNorm rows with grouped affine parameters: `layer_norm` (writes per-row mean and rstd to
///   `stats`) and `layer_norm_backward` (accumulates dx, dgamma, dbeta; null ones skipped).
/// - GEMM, BLAS conventions (row-major, op(A) [M, K], op(B) [K, N]): `gemm` (C = alpha op(A) op(B) +
///   beta C), `gemm_bias` (C = alpha op(A) op(B) + bias row; C not read), `gemm_batched` (strided).
template <class D, class T>
concept BackendFor =
    Device<D> &&
    requires(const T* c, T* m, const std::int64_t* ci, std::int64_t* mi, index_t n, T s, bool b,
             backend_contract::SampleKernel<T> k, std::array<index_t, 2> e2, std::array<index_t, 1> e1,
             std::array<std::size_t, 2> p2) {
      // elementwise
      Backend<D>::template evaluate<T, 2>(k, m, e2);
      Backend<D>::template evaluate_backward<T, 2>(k, c, e2);
      Backend<D>::add_inplace(m, c, n);
      Backend<D>::reduce_broadcast_add(m, e1, c, e2);
      // reductions over [outer, n, inner]
      Backend<D>::reduce_sum(c, m, n, n, n, s);
      Backend<D>::broadcast_add_axis(m, c, n, n, n, s);
      Backend<D>::reduce_extremum(c, m, mi, n, n, n, b);
      Backend<D>::reduce_variance(c, m, n, n, n, n);
      Backend<D>::variance_backward(c, c, m, n, n, n, n);
      Backend<D>::softmax(c, m, n, n, n, b);
      Backend<D>::softmax_backward(c, c, m, n, n, n, b);
      Backend<D>::logsumexp(c, m, n, n, n);
      Backend<D>::logsumexp_backward(c, c, c, m, n, n, n);
      Backend<D>::scatter_add_axis(m, c, ci, n, n, n, n);
      // indexing
      Backend<D>::gather_axis(c, ci, m, n, n, n, n);
      Backend<D>::copy_blocks(m, n, c, n, n, n, b);
      Backend<D>::permute(c, m, e2, p2, b);
      Backend<D>::topk(c, m, mi, n, n, n);
      // LayerNorm rows (grouped affine)
      Backend<D>::layer_norm(c, m, m, c, c, n, n, n, s);
      Backend<D>::layer_norm_backward(c, c, c, c, m, m, m, n, n, n);
      // GEMM
      Backend<D>::gemm(b, b, n, n, n, s, c, n, c, n, s, m, n);
      Backend<D>::gemm_bias(b, b, n, n, n, s, c, n, c, n, c, m, n);
      Backend<D>::gemm_batched(n, b, b, n, n, n, s, c, n, n, c, n, n, s, m, n, n);
    };

/// Option: fused multi-head attention over a packed qkv [B, T, 3 H hd] (`qkv_attention_forward(qkv, B,
/// T, H, hd, scale, probs, out)` and `qkv_attention_backward(g, qkv, probs, B, T, H, hd, scale, beta,
/// dqkv)`; `probs` [B, H, T, T] may be null, and ops/attention.hpp passes null: the forward then keeps
/// the softmax probabilities in scratch and the backward recomputes them from qkv). Backends without it
/// get ops/attention.hpp's composition of batched GEMMs and a softmax, with the same results.
template <class D, class T>
concept FusedAttentionBackend = requires(const T* c, T* m, index_t n, T s) {
  Backend<D>::qkv_attention_forward(c, n, n, n, n, s, m, m);
  Backend<D>::qkv_attention_backward(c, c, c, n, n, n, n, s, s, m);
};

/// Option: bidirectional attention over packed sequences (`packed_qkv_attention_forward(qkv, offsets,
/// count, H, hd, scale, bias, table, out)`, nn/packed_attention.hpp's layout; `bias` [H, table, table]
/// may be null), one parallel region for a whole batch. Backends without it get nn/packed_attention's
/// per-sequence batched GEMMs and softmax, with the same results.
template <class D, class T>
concept FusedPackedAttentionBackend = requires(const T* c, const index_t* o, T* m, index_t n, T s) {
  Backend<D>::packed_qkv_attention_forward(c, o, n, n, n, s, c, n, m);
};

/// Option: fused causal grouped-query attention (the Llama form) over q [B, H, T, hd], k [B, KV, T, hd]
/// and v [B, T, KV hd] into [B, T, H hd] (`causal_gqa_attention_forward(q, k, v, B, H, KV, T, hd, scale,
/// out)`, `causal_gqa_attention_backward(g, q, k, v, B, H, KV, T, hd, scale, dq, beta_q, dk, beta_k, dv,
/// beta_v)`, a null d* meaning not wanted). Backends without it get ops/causal_attention.hpp's
/// composition (repeated kv heads, batched GEMMs, an additive mask and a softmax), with the same results.
template <class D, class T>
concept FusedCausalAttentionBackend = requires(const T* c, T* m, index_t n, T s) {
  Backend<D>::causal_gqa_attention_forward(c, c, c, n, n, n, n, n, s, m);
  Backend<D>::causal_gqa_attention_backward(c, c, c, c, n, n, n, n, n, s, m, s, m, s, m, s);
};

/// Option: causal grouped-query attention of t new queries over a KV cache (`cached_causal_gqa_attention_forward(q,
/// kc, vc, lengths, B, H, KV, t, Tm, hd, scale, out)`: q [B, H, t, hd], kc and vc [B, KV, Tm, hd]
/// holding positions 0 .. lengths[b] + t - 1, out [B, t, H hd]; nn/kv_cache.hpp's layout). Inference
/// only. Backends without it get nn::kv_cache_attention's query-by-query loop, with the same results.
template <class D, class T>
concept FusedCachedAttentionBackend = requires(const T* c, const index_t* l, T* m, index_t n, T s) {
  Backend<D>::cached_causal_gqa_attention_forward(c, c, c, l, n, n, n, n, n, n, s, m);
};

/// Option: whole-row gathers by a row index (`gather_rows(x, idx, out, row, m)`: out[j, :] =
/// x[idx[j], :] for j < m, rows of `row` elements; `scatter_add_rows(dx, g, idx, row, m)`: dx[idx[j], :]
/// += g[j, :], deterministic, several j may hit one row). index_select and its VJP use them with the
/// [m] index as given; backends without them get gather_axis / scatter_add_axis over an index
/// repeated per element (m x row int64s built on the host), with the same results.
template <class D, class T>
concept RowGatherBackend = requires(const T* c, T* m, const std::int64_t* ci, index_t n) {
  Backend<D>::gather_rows(c, ci, m, n, n);
  Backend<D>::scatter_add_rows(m, c, ci, n, n);
};

/// Option: a mixture of experts' gated combine read straight from the experts' separate outputs, one
/// pass each way. `gated_rows(parts, part, row, gate, residual, out, width, n, k)`: out[i, :] =
/// residual[i, :] (a null residual: 0) + sum over j < k of gate[q] * parts[part[q]][row[q], :] with
/// q = i k + j, rows of `width` elements, part[q] = -1 or a null part adding nothing (a dropped pick),
/// a null gate meaning all ones, out possibly the residual itself. `gated_rows_vjp(g, parts, part, row, gate, dparts, add_part, dgate,
/// add_gate, width, n, k)`: for each pick q with part[q] = p >= 0, row row[q] of dparts[p] = gate[q] *
/// g[i, :] (added to where add_part[p]), and dgate[q] = g[i, :] . parts[p][row[q], :] (0 for a dropped
/// pick; added to where add_gate); a null dparts[p] or dgate is skipped. Every row of every part is
/// read by exactly one pick, so each part's gradient is written whole. `parts`, `dparts` and
/// `add_part` are host arrays (of device pointers). moe::gated_combine uses them; backends without
/// them get concat, index_select and an elementwise product, with the same results.
template <class D, class T>
concept GatedRowsBackend = requires(const T* const* cp, T* const* mp, const std::int64_t* ci, const T* c, T* m,
                                    const bool* f, index_t n, bool b) {
  Backend<D>::gated_rows(cp, ci, ci, c, c, m, n, n, n);
  Backend<D>::gated_rows_vjp(c, cp, ci, ci, c, mp, f, m, b, n, n, n);
};

/// Option: moe::normalized_rows_matmul and its VJP, each in one pass over h
/// (`normalized_rows_matmul(h, c, out, r, N, K, E, eps)`: out = (h c) / r for h [N, K], c [K, E], r [N]
/// the rows' norms clamped at eps, both written; `normalized_rows_matmul_vjp(g, h, c, out, r, N, K, E,
/// eps, dh, add_h, dc, add_c)`: dh = (g / r) c^T - h coef, coef[n] = (g[n] . out[n]) / r[n]^2 where
/// r[n] > eps, else 0; dc = h^T (g / r); null targets skipped, add_*: add instead of storing). Backends
/// without them get a reduction, GEMMs and elementwise passes, with the same results up to rounding.
template <class D, class T>
concept NormalizedRowsBackend = requires(const T* c, T* m, index_t n, T s, bool b) {
  Backend<D>::normalized_rows_matmul(c, c, m, m, n, n, n, s);
  Backend<D>::normalized_rows_matmul_vjp(c, c, c, c, c, n, n, n, s, m, b, m, b);
};

/// Option: independent host tasks side by side (`run_tasks(n, task)` runs task(i) for every i in [0, n),
/// each free host thread taking the next index in order, each task's own kernels running serially on
/// its thread; `task_threads()`: how many run at once). ops/parallel_tasks.hpp runs and replays
/// recorded tasks with them; backends without them (a GPU's one stream) run the tasks one by one.
template <class D>
concept TaskParallelBackend = requires(index_t n, const std::function<void(index_t)>& task) {
  { Backend<D>::task_threads() } -> std::convertible_to<index_t>;
  Backend<D>::run_tasks(n, task);
};

/// Option: a GEMM that finishes its output with a GemmEpilogue (bias, residual, activation Act or its
/// VJP as it stores; `gemm_epilogue<Act>(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, ep)`, Act =
/// void for none). Backends without it get ops/linear.hpp's composition of separate ops.
template <class D, class T>
concept GemmEpilogueBackend = requires(const T* c, T* m, index_t n, T s, const GemmEpilogue<T>& ep) {
  Backend<D>::template gemm_epilogue<void>(false, false, n, n, n, s, c, n, c, n, m, n, ep);
};

}  // namespace ttmoe
