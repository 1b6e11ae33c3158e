#pragma once
// Parameter initialisation. Layers take an explicit seed so that a model is reproducible without a
// global RNG; the bounds follow torch.nn defaults so results are comparable with PyTorch training.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe::nn {

namespace detail {
inline thread_local int skip_init_depth = 0;  ///< live SkipInit guards on this thread
}  // namespace detail

/// While a SkipInit lives, uniform_ and normal_ on this thread leave their tensor as allocated
/// (unspecified values) instead of drawing: for a loader that builds a module only to overwrite
/// every parameter from a checkpoint with a strict nn::load_state (transformers' no_init_weights).
/// Drawing is not free: std::mt19937_64 through a distribution costs ~5 ns a uniform value and ~21 ns a
/// normal one on the AMD EPYC Zen 5 here, so a random Llama-3.2-1B layer took 0.30 s and its embedding table 5.6 s, all of
/// it thrown away by the load (docs/design.md, "Loading without drawing"). Guards nest.
class SkipInit {
 public:
  SkipInit() { ++detail::skip_init_depth; }
  ~SkipInit() { --detail::skip_init_depth; }
  SkipInit(const SkipInit&) = delete;
  SkipInit& operator=(const SkipInit&) = delete;
};

/// Whether a SkipInit is alive on this thread (the init functions then draw nothing).
inline bool init_skipped() { return detail::skip_init_depth > 0; }

/// Fills `t` with U(-bound, bound) from a generator seeded with `seed`. The values are drawn on the
/// host and copied, so a model initialises identically on every device. Does nothing under SkipInit.
template <class T, class S, class D>
void uniform_(const Tensor<T, S, D>& t, double bound, std::uint64_t seed) {
  if (init_skipped()) return;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-bound, bound);
  std::vector<T> v(t.numel());
  for (auto& x : v) x = static_cast<T>(dist(gen));
  D::template copy_from_host<T>(t.data(), v.data(), t.numel());
}

/// Fills `t` with N(0, std^2) from a generator seeded with `seed` (drawn on the host, as uniform_).
/// Does nothing under SkipInit.
template <class T, class S, class D>
void normal_(const Tensor<T, S, D>& t, double std, std::uint64_t seed) {
  if (init_skipped()) return;
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
