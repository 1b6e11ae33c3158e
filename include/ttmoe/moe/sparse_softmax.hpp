#pragma once
// TTMM merging weights from query / centroid similarity (reference-code form):
//   sim = q . phi_k;  w = softmax(sim / beta^2)  (= exp(-(1 - sim) / beta^2) normalised);
//   keep S = {k : w_k > tau}; if |S| > max_experts keep the max_experts largest (ties -> lower k);
//   weights = w / sum_S w on S, 0 elsewhere                                   (status Ok)
// Degenerate rows: nothing kept and no NaN -> all-zero weights = use the base model (status
// BaseModel); nothing kept because w is NaN (a corrupt centroid / query) -> weight 1 on the nearest
// expert, the largest NON-NaN similarity (ties -> lower k; all NaN -> expert 0) (status NanFallback).
// Inputs are used as given (callers pass L2-normalised vectors). The weights are differentiable
// w.r.t. query and centroids through w; the selection is a constant.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

/// Per-row outcome of the sparse softmax.
enum class MergeStatus : std::int64_t { Ok = 0, BaseModel = 1, NanFallback = 2 };

/// Configuration (TTMM defaults).
struct SparseSoftmaxConfig {
  double beta = 0.2;  ///< sqrt of the temperature (the code's convention)
  double tau = 0.01;
  index_t max_experts = 50;
};

/// Result for Q queries and K experts.
template <class T, class D = cpu>
struct SparseSoftmaxResult {
  Tensor<T, DynShape<2>, D> similarity;      ///< [Q, K]
  Tensor<T, DynShape<2>, D> kernel_weights;  ///< [Q, K], dense softmax w
  Tensor<T, DynShape<2>, D> weights;         ///< [Q, K], the merging weights
  IndexTensor<DynShape<2>, D> selected;      ///< [Q, K], 0/1
  IndexTensor<DynShape<1>, D> num_selected;  ///< [Q]
  IndexTensor<DynShape<1>, D> status;        ///< [Q], MergeStatus values
};

/// Sparse softmax merging weights for query [Q, d] and centroids [K, d].
template <class T, class D>
SparseSoftmaxResult<T, D> sparse_softmax_weights(const Tensor<T, DynShape<2>, D>& query,
                                                 const Tensor<T, DynShape<2>, D>& centroids,
                                                 const SparseSoftmaxConfig& cfg = {}) {
  SparseSoftmaxResult<T, D> r;
  const index_t Q = query.extent(0), K = centroids.extent(0);
  r.similarity = matmul<false, true>(query, centroids);
  r.kernel_weights = softmax<-1>(r.similarity * T(1.0 / (cfg.beta * cfg.beta)));
  const auto w = r.kernel_weights.to_vector();
  const auto sim = r.similarity.to_vector();
  std::vector<T> mask(Q * K, T(0)), fallback(Q * K, T(0)), empty_row(Q, T(0));
  std::vector<std::int64_t> sel(Q * K, 0), nsel(Q, 0), status(Q, 0);
  for (index_t q = 0; q < Q; ++q) {
    const T* wr = w.data() + q * K;
    std::vector<index_t> s;
    bool any_nan = false;
    for (index_t k = 0; k < K; ++k) {
      if (std::isnan(wr[k])) any_nan = true;
      if (wr[k] > T(cfg.tau)) s.push_back(k);  // NaN > tau is false
    }
    if (s.empty()) {
      empty_row[q] = T(1);
      if (any_nan) {
        index_t best = 0;
        T bv = -INFINITY;
        bool found = false;
        for (index_t k = 0; k < K; ++k) {
          const T v = sim[q * K + k];
          if (!std::isnan(v) && (!found || v > bv)) best = k, bv = v, found = true;
        }
        fallback[q * K + best] = T(1);
        sel[q * K + best] = 1;
        nsel[q] = 1;
        status[q] = std::int64_t(MergeStatus::NanFallback);
      } else {
        status[q] = std::int64_t(MergeStatus::BaseModel);
      }
      continue;
    }
    if (index_t(s.size()) > cfg.max_experts) {
      std::stable_sort(s.begin(), s.end(), [&](index_t a, index_t b) { return wr[a] > wr[b]; });
      s.resize(cfg.max_experts);
    }
    for (auto k : s) mask[q * K + k] = T(1), sel[q * K + k] = 1;
    nsel[q] = std::int64_t(s.size());
  }
  auto mk = [&](const std::vector<T>& v, index_t a, index_t b) {
    return Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(a, b), v);
  };
  auto m = mk(mask, Q, K), fb = mk(fallback, Q, K), er = mk(empty_row, Q, 1);
  // where() keeps NaNs of unselected entries out; rows with nothing kept divide 0 by 1.
  Tensor<T, DynShape<2>, D> kept = where(m, r.kernel_weights, T(0));
  r.weights = kept / (sum<1, true>(kept) + er) + fb;
  r.selected = IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(Q, K), sel);
  r.num_selected = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(Q), nsel);
  r.status = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(Q), status);
  return r;
}

/// The paper's form ReLU(w - tau) / sum ReLU(w - tau) (no cap; an all-zero row stays zero).
template <class T, class D>
Tensor<T, DynShape<2>, D> sparse_softmax_paper(const Tensor<T, DynShape<2>, D>& kernel_weights, double tau = 0.01) {
  Tensor<T, DynShape<2>, D> rl = relu(kernel_weights - T(tau));
  Tensor<T, DynShape<2>, D> s = sum<1, true>(rl);
  return rl / (s + (s <= T(0)));
}

}  // namespace ttmoe::moe
