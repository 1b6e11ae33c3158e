#pragma once
// Deterministic bisecting spherical k-means (TTMM clustering), exactly as tests/reference/README.md
// defines it: rows are L2-normalised; while fewer than K clusters, split the eligible cluster with
// the largest key (squared diameter, or member count) by 2-means with cosine assignment, seeded by
// the farthest-from-mean member and the member farthest from it. Squared distances and explicit
// tie rules (lowest id / earlier member / label 0) keep every choice reproducible.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe::moe {

/// Which cluster to split next.
enum class SplitRule { Diameter, Largest };

/// Clustering result.
template <class T, class D = cpu>
struct KMeansResult {
  std::vector<std::int64_t> assignments;       ///< per point, cluster ids in creation order
  Tensor<T, DynShape<2>, D> centroids;         ///< [K, d], normalize(mean of normalised members)
  std::vector<std::int64_t> sizes;             ///< per cluster
  std::vector<std::int64_t> split_order;       ///< id split at each step
  std::vector<std::int64_t> lloyd_iterations;  ///< iteration at which each split's loop ended
};

/// Bisecting k-means of embeddings [N, d] into (at most) K clusters.
template <class T, class D>
KMeansResult<T, D> bisecting_kmeans(const Tensor<T, DynShape<2>, D>& embeddings, index_t K,
                                    SplitRule rule = SplitRule::Diameter, int max_iter = 100) {
  const index_t N = embeddings.extent(0), d = embeddings.extent(1);
  auto E = embeddings.to_vector();
  std::vector<double> X(N * d);
  auto normalize = [&](double* v) {
    double s = 0;
    for (index_t k = 0; k < d; ++k) s += v[k] * v[k];
    const double n = std::max(std::sqrt(s), 1e-12);
    for (index_t k = 0; k < d; ++k) v[k] /= n;
  };
  for (index_t i = 0; i < N * d; ++i) X[i] = double(E[i]);
  for (index_t i = 0; i < N; ++i) normalize(&X[i * d]);
  auto sq = [&](const double* a, const double* b) {
    double s = 0;
    for (index_t k = 0; k < d; ++k) s += (a[k] - b[k]) * (a[k] - b[k]);
    return s;
  };
  KMeansResult<T, D> r;
  r.assignments.assign(N, 0);
  index_t nc = 1;
  while (nc < K) {
    std::int64_t best = -1;
    double best_key = -1;
    for (index_t c = 0; c < nc; ++c) {
      std::vector<index_t> M;
      for (index_t i = 0; i < N; ++i)
        if (r.assignments[i] == std::int64_t(c)) M.push_back(i);
      double diam = 0;
      for (std::size_t a = 0; a < M.size(); ++a)
        for (std::size_t b = a + 1; b < M.size(); ++b) diam = std::max(diam, sq(&X[M[a] * d], &X[M[b] * d]));
      if (M.size() < 2 || !(diam > 0)) continue;
      const double key = rule == SplitRule::Diameter ? diam : double(M.size());
      if (key > best_key) best = std::int64_t(c), best_key = key;
    }
    if (best < 0) break;
    std::vector<index_t> M;
    for (index_t i = 0; i < N; ++i)
      if (r.assignments[i] == best) M.push_back(i);
    std::vector<double> m(d, 0.0);
    for (auto i : M)
      for (index_t k = 0; k < d; ++k) m[k] += X[i * d + k];
    for (auto& v : m) v /= double(M.size());
    std::size_t a = 0, b = 0;
    double da = -1, db = -1;
    for (std::size_t j = 0; j < M.size(); ++j) {
      const double v = sq(&X[M[j] * d], m.data());
      if (v > da) da = v, a = j;
    }
    for (std::size_t j = 0; j < M.size(); ++j) {
      const double v = sq(&X[M[j] * d], &X[M[a] * d]);
      if (v > db) db = v, b = j;
    }
    std::vector<double> c0(&X[M[a] * d], &X[M[a] * d] + d), c1(&X[M[b] * d], &X[M[b] * d] + d);
    std::vector<int> labels, prev;
    int it = 1;
    for (; it <= max_iter; ++it) {
      labels.assign(M.size(), 0);
      for (std::size_t j = 0; j < M.size(); ++j) {
        double s0 = 0, s1 = 0;
        for (index_t k = 0; k < d; ++k) s0 += X[M[j] * d + k] * c0[k], s1 += X[M[j] * d + k] * c1[k];
        labels[j] = s1 > s0 ? 1 : 0;
      }
      if (it > 1 && labels == prev) break;
      prev = labels;
      for (int side = 0; side < 2; ++side) {
        std::vector<double> s(d, 0.0);
        std::size_t cnt = 0;
        for (std::size_t j = 0; j < M.size(); ++j)
          if (labels[j] == side) {
            ++cnt;
            for (index_t k = 0; k < d; ++k) s[k] += X[M[j] * d + k];
          }
        if (cnt == 0) continue;  // an empty side keeps its centre
        for (auto& v : s) v /= double(cnt);
        normalize(s.data());
        (side == 0 ? c0 : c1) = s;
      }
    }
    r.split_order.push_back(best);
    r.lloyd_iterations.push_back(std::min(it, max_iter));
    for (std::size_t j = 0; j < M.size(); ++j)
      if (labels[j] == 1) r.assignments[M[j]] = std::int64_t(nc);
    ++nc;
  }
  std::vector<T> cent(nc * d, T(0));
  r.sizes.assign(nc, 0);
  for (index_t c = 0; c < nc; ++c) {
    std::vector<double> s(d, 0.0);
    for (index_t i = 0; i < N; ++i)
      if (r.assignments[i] == std::int64_t(c)) {
        ++r.sizes[c];
        for (index_t k = 0; k < d; ++k) s[k] += X[i * d + k];
      }
    for (auto& v : s) v /= double(std::max<std::int64_t>(r.sizes[c], 1));
    normalize(s.data());
    for (index_t k = 0; k < d; ++k) cent[c * d + k] = T(s[k]);
  }
  r.centroids = Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(nc, d), cent);
  return r;
}

}  // namespace ttmoe::moe
