#pragma once
// TTMM's clustering of the training documents: bisecting k-means to K clusters on the L2-normalised
// embeddings φ (moe/bisecting_kmeans.hpp), splitting the cluster of largest diameter by default as the
// paper does; centroid e = normalise(mean of its members' normalised embeddings), which is what the
// test-time selection compares a prompt's φ against. Unlike the building block, which stops early
// when nothing can be split, a TTMM store needs exactly K non-empty experts, so every way of not
// getting them is a typed error here.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ttmoe/core/error.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/moe/bisecting_kmeans.hpp"

namespace ttmoe::ttmm {

/// The embeddings cannot be clustered into the K clusters asked for (K out of range, non-finite
/// embeddings, too few distinct documents, an empty cluster).
class ClusteringError : public ValueError {
 public:
  using ValueError::ValueError;
};

/// K clusters of a corpus's documents.
struct Clusters {
  std::vector<std::int64_t> assignment;       ///< per document, its cluster in [0, K)
  Tensor<float, DynShape<2>> centroids;       ///< [K, d], unit rows
  std::vector<std::int64_t> sizes;            ///< documents per cluster, all > 0

  /// Number of clusters.
  std::size_t count() const { return sizes.size(); }
  /// The documents of cluster `k`, ascending.
  std::vector<std::size_t> members(std::size_t k) const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < assignment.size(); ++i)
      if (assignment[i] == std::int64_t(k)) out.push_back(i);
    return out;
  }
};

/// Bisecting k-means of `embeddings` [N, d] into exactly K clusters (`rule`: which cluster to split
/// next; the paper's largest diameter by default). Throws ClusteringError for K < 1, K > N, a
/// non-finite or all-zero embedding, fewer than K distinct directions among the documents, and an
/// empty cluster.
inline Clusters cluster_embeddings(const Tensor<float, DynShape<2>>& embeddings, index_t K,
                                   moe::SplitRule rule = moe::SplitRule::Diameter, int max_iter = 100) {
  const index_t N = embeddings.extent(0), d = embeddings.extent(1);
  if (K < 1) throw ClusteringError("clustering: K = " + std::to_string(K) + " clusters (need at least 1)");
  if (K > N)
    throw ClusteringError("clustering: K = " + std::to_string(K) + " clusters for " + std::to_string(N) +
                          " documents (K may not exceed the number of documents)");
  const auto e = embeddings.to_vector();
  for (index_t i = 0; i < N; ++i) {
    double s = 0;
    for (index_t k = 0; k < d; ++k) {
      const double v = e[std::size_t(i * d + k)];
      if (!std::isfinite(v))
        throw ClusteringError("clustering: embedding of document " + std::to_string(i) + " has a non-finite value " +
                              std::to_string(v) + " at " + std::to_string(k));
      s += v * v;
    }
    if (!(s > 0)) throw ClusteringError("clustering: embedding of document " + std::to_string(i) + " is all zeros (no direction)");
  }
  auto r = moe::bisecting_kmeans(embeddings, K, rule, max_iter);
  if (index_t(r.sizes.size()) < K)
    throw ClusteringError("clustering: only " + std::to_string(r.sizes.size()) + " of K = " + std::to_string(K) +
                          " clusters could be formed (the other documents' embeddings coincide); use a smaller K");
  Clusters c;
  c.assignment = std::move(r.assignments);
  c.centroids = std::move(r.centroids);
  c.sizes = std::move(r.sizes);
  for (std::size_t k = 0; k < c.sizes.size(); ++k)
    if (c.sizes[k] == 0) throw ClusteringError("clustering: cluster " + std::to_string(k) + " is empty");
  return c;
}

}  // namespace ttmoe::ttmm
