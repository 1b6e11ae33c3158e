#pragma once
// Bidirectional multi-head self-attention over PACKED sequences, for inference of sentence encoders
// (BERT, MPNet). A batch of sentences of different lengths is laid end to end along the rows of one
// [N, width] tensor (N = the sum of the lengths) instead of being padded to the longest: every
// per-token layer (embeddings, linears, LayerNorm, the feed-forward block) then runs on real tokens
// only, and attention runs sequence by sequence on its own L x L block. That is exactly what a
// padding mask computes (masked keys get probability 0) without the padded rows' work.
// Backends with FusedPackedAttentionBackend (the CPU's) run the whole batch as one parallel region
// over (sequence, head) pairs; others compose it per sequence from batched GEMMs and a softmax.
// Not recorded on a tape: the encoders are inference only.

#include <algorithm>
#include <string>
#include <vector>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/expr/expr.hpp"

namespace ttmoe::nn {

/// Where each sequence of a packed batch lives: sequence b owns rows offsets[b] .. offsets[b+1]-1.
struct PackedSequences {
  std::vector<index_t> offsets{0};  ///< count() + 1 non-decreasing row offsets, offsets[0] == 0

  /// Appends a sequence of `length` rows.
  void push(index_t length) { offsets.push_back(offsets.back() + length); }
  /// Number of sequences.
  index_t count() const { return index_t(offsets.size()) - 1; }
  /// Rows of sequence b.
  index_t length(index_t b) const { return offsets[std::size_t(b) + 1] - offsets[std::size_t(b)]; }
  /// Rows of all sequences together (N).
  index_t rows() const { return offsets.back(); }
  /// The longest sequence (0 for an empty batch).
  index_t longest() const {
    index_t m = 0;
    for (index_t b = 0; b < count(); ++b) m = std::max(m, length(b));
    return m;
  }
};

/// softmax(q k^T * scale + bias) v for each sequence of `seqs` and each of `heads` heads of the fused
/// projection qkv [N, 3 * width] (q | k | v along the last axis, head h owning columns h*hd ..
/// h*hd+hd-1 of each, like ops/attention.hpp) -> the merged heads [N, width]. `bias`, when defined,
/// is an additive score table [heads, L, L] with L >= seqs.longest(); sequence b adds its top-left
/// length(b) x length(b) block (relative-position biases depend on i - j only, so one table serves
/// every sequence). Queries attend to all keys of their own sequence and to nothing else.
template <class T, class D>
Tensor<T, DynShape<2>, D> packed_qkv_attention(const Tensor<T, DynShape<2>, D>& qkv, index_t heads, T scale,
                                               const PackedSequences& seqs,
                                               const Tensor<T, DynShape<3>, D>& bias = {}) {
  const index_t N = qkv.extent(0), D3 = qkv.extent(1);
  if (heads <= 0 || D3 % (3 * heads) != 0)
    throw ShapeError("packed_qkv_attention: qkv " + qkv.shape().to_string() + " does not split into q, k, v of " +
                     std::to_string(heads) + " heads");
  if (seqs.rows() != N)
    throw ShapeError("packed_qkv_attention: the sequences cover " + std::to_string(seqs.rows()) + " rows, qkv has " +
                     std::to_string(N));
  const index_t width = D3 / 3, hd = width / heads, longest = seqs.longest();
  const index_t table = bias.defined() ? bias.extent(1) : 0;
  if (bias.defined() && (bias.extent(0) != heads || bias.extent(2) != table || table < longest))
    throw ShapeError("packed_qkv_attention: bias " + bias.shape().to_string() + " is not [" + std::to_string(heads) +
                     ", L, L] with L >= " + std::to_string(longest));
  Tensor<T, DynShape<2>, D> out(DynShape<2>(N, width));
  if constexpr (FusedPackedAttentionBackend<D, T>) {  // one parallel region for the whole batch
    Backend<D>::packed_qkv_attention_forward(qkv.data(), seqs.offsets.data(), seqs.count(), heads, hd, scale,
                                             bias.defined() ? bias.data() : nullptr, table, out.data());
    return out;
  }
  Tensor<T, DynShape<1>, D> scores(DynShape<1>(std::max<index_t>(1, heads * longest * longest)));
  T* s = scores.data();
  for (index_t b = 0; b < seqs.count(); ++b) {
    const index_t L = seqs.length(b), LL = L * L;
    if (L == 0) continue;
    const T* qb = qkv.data() + seqs.offsets[std::size_t(b)] * D3;
    T beta = T(0);
    if (bias.defined()) {  // the scores GEMM accumulates onto the bias block (beta = 1)
      for (index_t h = 0; h < heads; ++h)
        Backend<D>::copy_blocks(s + h * LL, L, bias.data() + h * table * table, table, L, L, false);
      beta = T(1);
    }
    Backend<D>::gemm_batched(heads, false, true, L, L, hd, scale, qb, D3, hd, qb + width, D3, hd, beta, s, L, LL);
    Backend<D>::softmax(s, s, heads * L, L, 1, false);
    Backend<D>::gemm_batched(heads, false, false, L, hd, L, T(1), s, L, LL, qb + 2 * width, D3, hd, T(0),
                             out.data() + seqs.offsets[std::size_t(b)] * width, width, hd);
  }
  return out;
}

}  // namespace ttmoe::nn
