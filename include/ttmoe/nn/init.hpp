#pragma once
// Parameter initialisation. Layers take an explicit seed so that a model is reproducible without a
// global RNG; the bounds follow torch.nn defaults so results are comparable with PyTorch training.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe::nn {

/// Fills `t` with U(-bound, bound) from a generator seeded with `seed`. The values are drawn on the
/// host and copied, so a model initialises identically on every device.
template <class T, class S, class D>
void uniform_(const Tensor<T, S, D>& t, double bound, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-bound, bound);
  std::vector<T> v(t.numel());
  for (auto& x : v) x = static_cast<T>(dist(gen));
  D::template copy_from_host<T>(t.data(), v.data(), t.numel());
}

/// Fills `t` with N(0, std^2) from a generator seeded with `seed` (drawn on the host, as uniform_).
template <class T, class S, class D>
void normal_(const Tensor<T, S, D>& t, double std, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, std);
  std::vector<T> v(t.numel());
  for (auto& x : v) x = static_cast<T>(dist(gen));
  D::template copy_from_host<T>(t.data(), v.data(), t.numel());
}

/// torch.nn.init.kaiming_uniform_(a = sqrt(5)) as nn.Linear/Conv use it: the bound simplifies to
/// 1/sqrt(fan_in). The same bound is torch's default for the bias.
inline double kaiming_uniform_bound(index_t fan_in) { return fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0; }

}  // namespace ttmoe::nn
