#pragma once
// Dropout and stochastic depth (drop_path). Identity in eval mode or with p == 0; in training the
// kept elements are scaled by 1/(1-p) so the expectation is unchanged. The mask is a constant tensor
// built from a caller-owned, seeded RNG, so a run is reproducible and the gradient is mask * g.

#include <random>
#include <vector>

#include "ttmoe/expr/expr.hpp"

namespace ttmoe::nn {

/// Seeded random source shared by dropout layers of one model.
using Rng = std::mt19937_64;

namespace detail {
/// A mask of `shape` whose elements are `scale` with probability keep_p, else 0, drawn on the host
/// (so a seed gives the same mask on every device) and copied to D.
template <class T, class D, class S>
Tensor<T, S, D> bernoulli_mask(const S& shape, double keep_p, T scale, Rng& rng) {
  std::bernoulli_distribution keep(keep_p);
  std::vector<T> m(shape.numel());
  for (auto& v : m) v = keep(rng) ? scale : T(0);
  return Tensor<T, S, D>::from_host(shape, m);
}
}  // namespace detail

/// Elementwise dropout with drop probability p (torch.nn.functional.dropout).
template <class T, class S, class D>
Tensor<T, DynShape<S::rank>, D> dropout(const Tensor<T, S, D>& x, double p, bool training, Rng& rng) {
  if (!training || p <= 0.0) return x;
  if (p >= 1.0) return x * T(0);
  auto mask = detail::bernoulli_mask<T, D>(DynShape<S::rank>::from_extents(x.extents()), 1.0 - p,
                                          static_cast<T>(1.0 / (1.0 - p)), rng);
  return x * mask;
}

/// Stochastic depth (timm drop_path): drops whole samples (leading axis) with probability p.
template <class T, class S, class D>
Tensor<T, DynShape<S::rank>, D> drop_path(const Tensor<T, S, D>& x, double p, bool training, Rng& rng) {
  if (!training || p <= 0.0) return x;
  std::array<index_t, S::rank> e{};
  e.fill(1);
  e[0] = x.extent(0);
  const T scale = p >= 1.0 ? T(0) : static_cast<T>(1.0 / (1.0 - p));
  auto mask = detail::bernoulli_mask<T, D>(DynShape<S::rank>::from_extents(e), 1.0 - p, scale, rng);
  return x * mask;
}

}  // namespace ttmoe::nn
