#pragma once
// Dropout and stochastic depth (drop_path). Identity in eval mode or with p == 0; in training the
// kept elements are scaled by 1/(1-p) so the expectation is unchanged. The mask is a constant tensor
// built from a caller-owned, seeded RNG, so a run is reproducible and the gradient is mask * g.

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "ttmoe/expr/expr.hpp"

namespace ttmoe::nn {

/// Seeded random source shared by dropout layers of one model.
using Rng = std::mt19937_64;

namespace detail {
/// splitmix64's output function (Steele, Lea & Flood 2014): a bijective mix of a 64-bit counter into
/// 64 well-spread bits, so mask element i can be drawn from (key, i) alone, with no sequential state.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Fills m[0, n) with `scale` where a uniform 32-bit draw is below `threshold` (keep), else 0. Draw i
/// is half of mix64(key + (i / 2) * golden): one mix gives two draws, and the loop has no carried
/// state (the compiler vectorises it; a device kernel could run it as is).
template <class T>
void fill_bernoulli(T* m, std::size_t n, std::uint64_t key, std::uint64_t threshold, T scale) {
  constexpr std::uint64_t golden = 0x9e3779b97f4a7c15ULL;  // Weyl step of splitmix64
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::uint64_t bits = mix64(key + i * golden);
    m[2 * i] = (bits & 0xffffffffULL) < threshold ? scale : T(0);
    m[2 * i + 1] = (bits >> 32) < threshold ? scale : T(0);
  }
  if (n % 2 != 0) m[n - 1] = (mix64(key + pairs * golden) & 0xffffffffULL) < threshold ? scale : T(0);
}

/// A mask of `shape` whose elements are `scale` with probability keep_p, else 0. It takes ONE draw
/// from `rng` (the key) and derives element i from (key, i) with a counter-based mix: a per-element
/// std::bernoulli_distribution on the Mersenne twister was ~10x slower and the largest part of the
/// gap between GMoE's MoE-FFN layer (10M hidden activations at 32 images) and the dense FFN. Drawn on
/// the host, so a seed gives the same mask on every device; written in place where D's memory is
/// host-accessible, else copied to D.
/// fill_bernoulli's threshold for keep probability keep_p: keep iff draw < keep_p * 2^32 (resolution
/// 2^-32); keep_p = 1 keeps every element.
inline std::uint64_t keep_threshold(double keep_p) {
  return keep_p >= 1.0 ? (std::uint64_t(1) << 32) : keep_p <= 0.0 ? 0 : std::uint64_t(keep_p * 4294967296.0);
}

template <class T, class D, class S>
Tensor<T, S, D> bernoulli_mask(const S& shape, double keep_p, T scale, Rng& rng) {
  const std::uint64_t key = rng();
  const std::uint64_t threshold = keep_threshold(keep_p);
  const auto n = std::size_t(shape.numel());
  if constexpr (D::host_accessible) {
    auto t = Tensor<T, S, D>::empty(shape);
    fill_bernoulli(t.data(), n, key, threshold, scale);
    return t;
  } else {
    std::vector<T> m(n);
    fill_bernoulli(m.data(), n, key, threshold, scale);
    return Tensor<T, S, D>::from_host(shape, m);
  }
}
}  // namespace detail

/// The scaled keep mask of dropout with drop probability p in [0, 1) over `shape`: 1/(1-p) with
/// probability 1-p, else 0, one draw from `rng`. For callers that fuse `act(h) * mask` into one
/// elementwise pass instead of evaluating act(h) and then dropout (moe::MoEFFN's experts).
template <class T, class D, class S>
Tensor<T, S, D> dropout_mask(const S& shape, double p, Rng& rng) {
  return detail::bernoulli_mask<T, D>(shape, 1.0 - p, static_cast<T>(1.0 / (1.0 - p)), rng);
}

/// Elementwise dropout with drop probability p (torch.nn.functional.dropout).
template <class T, class S, class D>
Tensor<T, DynShape<S::rank>, D> dropout(const Tensor<T, S, D>& x, double p, bool training, Rng& rng) {
  if (!training || p <= 0.0) return x;
  if (p >= 1.0) return x * T(0);
  return x * dropout_mask<T, D>(DynShape<S::rank>::from_extents(x.extents()), p, rng);
}

/// The samples drop_path(x, p, true, rng) keeps, for a leading axis of `batch`: one flag per sample,
/// from the same single draw of `rng` and the same per-sample bits, so a caller that decides on the
/// host (nn/drop_path_branch.hpp skips the dropped samples' branch) draws exactly what drop_path draws.
inline std::vector<bool> drop_path_keep(index_t batch, double p, Rng& rng) {
  const std::uint64_t key = rng();
  std::vector<float> m(static_cast<std::size_t>(batch));
  detail::fill_bernoulli(m.data(), m.size(), key, detail::keep_threshold(1.0 - p), 1.0f);
  std::vector<bool> keep(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) keep[i] = m[i] != 0.0f;
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
  auto mask = detail::bernoulli_mask<T, D>(DynShape<S::rank>::from_extents(e), 1.0 - p, scale, rng);
  return x * mask;
}

}  // namespace ttmoe::nn
