#pragma once
// Entropy pieces shared by the entropy-minimising methods: per-sample softmax entropy, its values on
// the host (for filters and thresholds, which are decisions, not part of the graph), and the
// selective weighted entropy loss sum_{kept} w_i H_i / |kept| with constant weights.

#include <cmath>
#include <vector>

#include "ttmoe/nn/loss.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::tta {

/// H_n = -sum_c p log p over the last axis of logits [B, C] -> [B] (recorded under a tape).
template <class T, class D>
Tensor<T, DynShape<1>, D> entropies(const Tensor<T, DynShape<2>, D>& logits) {
  return nn::softmax_entropy(logits);
}

/// Host copy of a 1-D tensor's values as double (filters and statistics work on these).
template <class T, class D>
std::vector<double> host_values(const Tensor<T, DynShape<1>, D>& x) {
  const auto v = x.detach().to_vector();
  return std::vector<double>(v.begin(), v.end());
}

/// Mean of `v` (NaN for an empty vector).
inline double mean_of(const std::vector<double>& v) {
  if (v.empty()) return std::nan("");
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

/// sum_n coef_n * H_n with constant coefficients (zero for filtered-out samples). Masking by a zero
/// coefficient instead of gathering the kept rows gives the same value and gradient for finite
/// entropies, and lets a non-finite sample poison the loss so the batch is skipped as a whole.
template <class T, class D>
Tensor<T, Shape<>, D> weighted_entropy_sum(const Tensor<T, DynShape<1>, D>& h, const std::vector<double>& coef) {
  std::vector<T> c(coef.begin(), coef.end());
  auto ct = Tensor<T, DynShape<1>, D>::from_host(DynShape<1>(index_t(c.size())), std::span<const T>(c));
  return sum_all(h * ct);
}

}  // namespace ttmoe::tta
