#pragma once
// The training loss of a causal LM: shifted cross-entropy with a loss mask, as transformers computes
// it from `labels` (position t's logits predict labels[t + 1]; a label of -100 is not scored, so a
// prompt or padding costs nothing). Only the rows that are scored go through the LM head: with a
// 128k vocabulary the logits of a 1024-token sequence are 525 MB, and a continuation-only loss
// scores a fraction of them.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ttmoe/models/llama.hpp"
#include "ttmoe/nn/loss.hpp"

namespace ttmoe::models {

/// Hugging Face's ignore index: a label that is not scored.
inline constexpr std::int64_t kIgnoreLabel = -100;

/// One (micro-)batch for a causal LM: token ids [B, T] and labels [B * T] (row-major, the ids' own
/// tokens where scored, kIgnoreLabel elsewhere).
template <class D = cpu>
struct CausalLMBatch {
  IndexTensor<DynShape<2>, D> ids;
  std::vector<std::int64_t> labels;

  /// Right-pads `rows` with `pad_id` to the longest; row b's first prefix_lengths[b] tokens (prompt)
  /// and its padding get kIgnoreLabel, the rest is scored. An empty `prefix_lengths` scores every
  /// real token. Throws ValueError for no rows, an empty row or a prefix length past its row.
  static CausalLMBatch from_rows(const std::vector<std::vector<std::int64_t>>& rows,
                                 const std::vector<std::size_t>& prefix_lengths = {}, std::int64_t pad_id = 0) {
    if (rows.empty()) throw ValueError("CausalLMBatch: no rows");
    if (!prefix_lengths.empty() && prefix_lengths.size() != rows.size())
      throw ValueError("CausalLMBatch: " + std::to_string(prefix_lengths.size()) + " prefix lengths for " +
                       std::to_string(rows.size()) + " rows");
    std::size_t T = 0;
    for (const auto& r : rows) T = std::max(T, r.size());
    std::vector<std::int64_t> ids(rows.size() * T, pad_id), labels(rows.size() * T, kIgnoreLabel);
    for (std::size_t b = 0; b < rows.size(); ++b) {
      const auto& r = rows[b];
      const std::size_t prefix = prefix_lengths.empty() ? 0 : prefix_lengths[b];
      if (r.empty()) throw ValueError("CausalLMBatch: row " + std::to_string(b) + " is empty");
      if (prefix >= r.size())
        throw ValueError("CausalLMBatch: row " + std::to_string(b) + " has " + std::to_string(r.size()) +
                         " tokens, a prefix of " + std::to_string(prefix) + " leaves none to score");
      for (std::size_t t = 0; t < r.size(); ++t) {
        ids[b * T + t] = r[t];
        if (t >= prefix) labels[b * T + t] = r[t];
      }
    }
    CausalLMBatch out;
    out.ids = IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(index_t(rows.size()), index_t(T)), ids);
    out.labels = std::move(labels);
    return out;
  }

  /// How many tokens the loss scores (labels not ignored, past each row's first position).
  index_t scored_tokens() const {
    const index_t B = ids.extent(0), T = ids.extent(1);
    index_t n = 0;
    for (index_t b = 0; b < B; ++b)
      for (index_t t = 1; t < T; ++t) n += labels[std::size_t(b * T + t)] != kIgnoreLabel;
    return n;
  }
};

/// Mean next-token cross-entropy over the scored labels of `batch` (transformers' loss with the same
/// labels); differentiable, rank 0. Throws ValueError when the labels do not fit the ids or score
/// nothing, and for a label outside the vocabulary.
template <class T, class D>
auto causal_lm_loss(const LlamaForCausalLM<T, D>& m, const CausalLMBatch<D>& batch) {
  const index_t B = batch.ids.extent(0), Tn = batch.ids.extent(1), V = m.config.vocab_size;
  if (batch.labels.size() != std::size_t(B * Tn))
    throw ValueError("causal_lm_loss: " + std::to_string(batch.labels.size()) + " labels for ids [" + std::to_string(B) +
                     ", " + std::to_string(Tn) + "]");
  std::vector<std::int64_t> rows, targets;
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t + 1 < Tn; ++t) {
      const std::int64_t y = batch.labels[std::size_t(b * Tn + t + 1)];
      if (y == kIgnoreLabel) continue;
      if (y < 0 || std::uint64_t(y) >= std::uint64_t(V))
        throw ValueError("causal_lm_loss: label " + std::to_string(y) + " at [" + std::to_string(b) + ", " +
                         std::to_string(t + 1) + "] is outside the vocabulary of " + std::to_string(V));
      rows.push_back(b * Tn + t);
      targets.push_back(y);
    }
  if (rows.empty()) throw ValueError("causal_lm_loss: the labels score no token");
  const index_t n = index_t(rows.size());
  auto h = m.hidden_states(batch.ids);
  auto picked = index_select(h.reshape(DynShape<2>(B * Tn, h.extent(2))),
                             IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(n), rows));
  return nn::cross_entropy(m.logits(picked), IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(n), targets));
}

}  // namespace ttmoe::models
