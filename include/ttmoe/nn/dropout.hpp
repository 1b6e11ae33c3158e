#pragma once
// Dropout and stochastic depth (drop_path). Identity in eval mode or with p == 0; in training the
// kept elements are scaled by 1/(1-p) so the expectation is unchanged. The mask is a constant tensor
// built from a caller-owned, seeded RNG, so a run is reproducible and the gradient is mask * g.

#include <random>

#include "ttmoe/expr/expr.hpp"

namespace ttmoe::nn {

/// Seeded random source shared by dropout layers of one model.
using Rng = std::mt19937_64;

/// Elementwise dropout with drop probability p (torch.nn.functional.dropout).
template <class T, class S, class D>
Tensor<T, DynShape<S::rank>, D> dropout(const Tensor<T, S, D>& x, double p, bool training, Rng& rng) {
  if (!training || p <= 0.0) return x;
  if (p >= 1.0) return x * T(0);
  Tensor<T, DynShape<S::rank>, D> mask(DynShape<S::rank>::from_extents(x.extents()));
  std::bernoulli_distribution keep(1.0 - p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for (index_t i = 0; i < mask.numel(); ++i) mask.data()[i] = keep(rng) ? scale : T(0);
  return x * mask;
}

/// Stochastic depth (timm drop_path): drops whole samples (leading axis) with probability p.
template <class T, class S, class D>
Tensor<T, DynShape<S::rank>, D> drop_path(const Tensor<T, S, D>& x, double p, bool training, Rng& rng) {
  if (!training || p <= 0.0) return x;
  std::array<index_t, S::rank> e{};
  e.fill(1);
  e[0] = x.extent(0);
  Tensor<T, DynShape<S::rank>, D> mask(DynShape<S::rank>::from_extents(e));
  std::bernoulli_distribution keep(1.0 - p);
  const T scale = p >= 1.0 ? T(0) : static_cast<T>(1.0 / (1.0 - p));
  for (index_t i = 0; i < mask.numel(); ++i) mask.data()[i] = keep(rng) ? scale : T(0);
  return x * mask;
}

}  // namespace ttmoe::nn
