#pragma once
// Expert selection for one prompt (TTMM, the authors' rule): given the prompt's embedding q and the
// store's centroids φ_e, k_e = exp(-(1 - q·φ_e)/β²), w = k/Σk, keep w > τ, at most M (top by k),
// renormalise; NaN weights -> the nearest expert alone; nothing above τ -> the base model. The rule
// itself lives in moe/sparse_softmax.hpp (tested there against a PyTorch reference of it); this
// header turns its one-row result into the list of experts and weights the mergers take.

#include <span>
#include <vector>

#include "ttmoe/moe/sparse_softmax.hpp"

namespace ttmoe::ttmm {

/// The experts chosen for one prompt and their merging weights (summing to 1 unless empty).
struct ExpertSelection {
  std::vector<index_t> experts;  ///< increasing expert indices
  std::vector<double> weights;   ///< same length as experts
  moe::MergeStatus status = moe::MergeStatus::Ok;
  /// Whether the base model runs unchanged (nothing above τ).
  bool base_model() const noexcept { return experts.empty(); }
};

/// Selects experts for the query embedding `q` (length d, L2-normalised by the embedder) against
/// `centroids` [K, d]; `cfg` holds β, τ and M (defaults 0.2, 0.01, 50).
inline ExpertSelection select_experts(std::span<const float> q, const Tensor<float, DynShape<2>>& centroids,
                                      const moe::SparseSoftmaxConfig& cfg = {}) {
  if (index_t(q.size()) != centroids.extent(1))
    throw ShapeError("select_experts: query of length " + std::to_string(q.size()) + " for centroids of width " +
                     std::to_string(centroids.extent(1)));
  const auto query = Tensor<float, DynShape<2>>::from_host(DynShape<2>(1, index_t(q.size())), q);
  const auto r = moe::sparse_softmax_weights(query, centroids, cfg);
  const auto w = r.weights.to_vector();
  const auto sel = r.selected.to_vector();
  ExpertSelection s;
  s.status = moe::MergeStatus(r.status.to_vector()[0]);
  for (std::size_t k = 0; k < w.size(); ++k)
    if (sel[k] != 0) {
      s.experts.push_back(index_t(k));
      s.weights.push_back(double(w[k]));
    }
  return s;
}

}  // namespace ttmoe::ttmm
