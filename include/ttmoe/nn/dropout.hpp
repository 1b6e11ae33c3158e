#pragma once
// Dropout and stochastic depth (drop_path). Identity in eval mode or with p == 0; in training the
// kept elements are scaled by 1/(1-p) so the expectation is unchanged. The mask is a constant operand
// keyed by one draw from a caller-owned, seeded RNG (expr/bernoulli.hpp: computed inside the pass
// that applies it, never stored), so a run is reproducible and the gradient is mask * g.

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "ttmoe/expr/bernoulli.hpp"
#include "ttmoe/expr/expr.hpp"

namespace ttmoe::nn {

/// Seeded random source shared by dropout layers of one model.
using Rng = std::mt19937_64;

namespace detail {
/// The draw threshold for keep probability keep_p: keep iff draw < keep_p * 2^32 (resolution
/// 2^-32); keep_p = 1 keeps every element.
inline std::uint64_t keep_threshold(double keep_p) {
  return keep_p >= 1.0 ? (std::uint64_t(1) << 32) : keep_p <= 0.0 ? 0 : std::uint64_t(keep_p * 4294967296.0);
}

/// A mask of extents `ext` whose elements are `scale` with probability keep_p, else 0, as an
/// expression operand (nothing is computed until an expression using it is evaluated). It takes ONE
/// draw from `rng` (the key) and derives element i from (key, i) with a counter-based mix: a
/// per-element std::bernoulli_distribution on the Mersenne twister was ~10x slower and the largest
/// part of the gap between GMoE's MoE-FFN layer and the dense FFN. The stream does not depend on the
/// device or the thread count, so a seed gives the same mask everywhere.
template <class T, class D, std::size_t R>
expr::BernoulliLeaf<T, R, D> bernoulli_leaf(const std::array<index_t, R>& ext, double keep_p, T scale, Rng& rng) {
  expr::BernoulliLeaf<T, R, D> leaf;
  leaf.ext = ext;
  leaf.key = rng();
  leaf.threshold = keep_threshold(keep_p);
  leaf.scale = scale;
  return leaf;
}

/// bernoulli_leaf materialised as a tensor of `shape` (one parallel fused loop on D).
template <class T, class D, class S>
Tensor<T, S, D> bernoulli_mask(const S& shape, double keep_p, T scale, Rng& rng) {
  return materialize<S>(bernoulli_leaf<T, D>(shape.extents(), keep_p, scale, rng));
}
}  // namespace detail

/// The scaled keep mask of dropout with drop probability p in [0, 1) over `shape`: 1/(1-p) with
/// probability 1-p, else 0, one draw from `rng`, as a tensor.
template <class T, class D, class S>
Tensor<T, S, D> dropout_mask(const S& shape, double p, Rng& rng) {
  return detail::bernoulli_mask<T, D>(shape, 1.0 - p, static_cast<T>(1.0 / (1.0 - p)), rng);
}

/// dropout_mask's values (the same draw from `rng`, the same elements) as an expression operand of
/// extents `ext`: for callers that fuse `act(h) * mask` into one elementwise pass (moe::MoEFFN's
/// experts), so the mask is computed inside that pass and again inside its backward, never stored.
template <class T, class D, std::size_t R>
expr::BernoulliLeaf<T, R, D> dropout_mask_expr(const std::array<index_t, R>& ext, double p, Rng& rng) {
  return detail::bernoulli_leaf<T, D>(ext, 1.0 - p, static_cast<T>(1.0 / (1.0 - p)), rng);
}

/// Elementwise dropout with drop probability p (torch.nn.functional.dropout).
template <class T, class S, class D>
Tensor<T, DynShape<S::rank>, D> dropout(const Tensor<T, S, D>& x, double p, bool training, Rng& rng) {
  if (!training || p <= 0.0) return x;
  if (p >= 1.0) return x * T(0);
  return x * dropout_mask_expr<T, D>(x.extents(), p, rng);  // the mask computed in the product's pass
}

/// The samples drop_path(x, p, true, rng) keeps, for a leading axis of `batch`: one flag per sample,
/// from the same single draw of `rng` and the same per-sample bits, so a caller that decides on the
/// host (nn/drop_path_branch.hpp skips the dropped samples' branch) draws exactly what drop_path draws.
inline std::vector<bool> drop_path_keep(index_t batch, double p, Rng& rng) {
  const std::uint64_t key = rng();
  const std::uint64_t threshold = detail::keep_threshold(1.0 - p);
  std::vector<bool> keep(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = expr::draw32(key, i) < threshold;
  return keep;
}

/// Stochastic depth (timm drop_path): drops whole samples (leading axis) with probability p.
template <class T, class S, class D>
Tensor<T, DynShape<S::rank>, D> drop_path(const Tensor<T, S, D>& x, double p, bool training, Rng& rng) {
  if (!training || p <= 0.0) return x;
  std::array<index_t, S::rank> e{};
  e.fill(1);
  e[0] = x.extent(0);
  const T scale = p >= 1.0 ? T(0) : static_cast<T>(1.0 / (1.0 - p));
  return x * detail::bernoulli_leaf<T, D>(e, 1.0 - p, scale, rng);
}

}  // namespace ttmoe::nn
