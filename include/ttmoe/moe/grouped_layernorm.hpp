#pragma once
// A LayerNorm whose affine parameters differ per group of rows, as ONE differentiable op:
// y[n] = (x[n] - mean) * rstd * gamma[group[n]] + beta[group[n]]. MoE-LayerNorm uses it with one
// group per sample (or per token); fusing avoids materialising [N, D] copies of gamma/beta and a
// chain of elementwise nodes. Host-side kernel: requires a host-accessible device.

#include <cmath>
#include <vector>

#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::moe {

/// Normalises each row of x [N, Dm] over its last axis (biased variance) and applies the affine
/// parameters of its group: gamma, beta [G, Dm], `group[n]` in [0, G). Records grads for x, gamma, beta.
template <class T, class D>
Tensor<T, DynShape<2>, D> grouped_layernorm(const Tensor<T, DynShape<2>, D>& x, const Tensor<T, DynShape<2>, D>& gamma,
                                            const Tensor<T, DynShape<2>, D>& beta, std::vector<index_t> group,
                                            double eps) {
  static_assert(D::host_accessible, "ttmoe: grouped_layernorm has a host kernel only");
  const index_t N = x.extent(0), Dm = x.extent(1), G = gamma.extent(0);
  if (gamma.extent(1) != Dm || beta.extent(0) != G || beta.extent(1) != Dm || index_t(group.size()) != N)
    throw ShapeError("grouped_layernorm: x " + x.shape().to_string() + ", gamma " + gamma.shape().to_string() +
                     ", beta " + beta.shape().to_string() + " and " + std::to_string(group.size()) + " group ids");
  for (auto g : group)
    if (g < 0 || g >= G) throw ValueError("grouped_layernorm: group id out of range");
  Tensor<T, DynShape<2>, D> y(DynShape<2>(N, Dm)), xhat(DynShape<2>(N, Dm));
  std::vector<T> rstd(N);
  const T* xp = x.data();
  const T* gp = gamma.data();
  const T* bp = beta.data();
  for (index_t n = 0; n < N; ++n) {
    const T* r = xp + n * Dm;
    T mu = 0, var = 0;
    for (index_t d = 0; d < Dm; ++d) mu += r[d];
    mu /= T(Dm);
    for (index_t d = 0; d < Dm; ++d) var += (r[d] - mu) * (r[d] - mu);
    var /= T(Dm);
    rstd[n] = T(1) / std::sqrt(var + T(eps));
    const index_t g = group[n];
    for (index_t d = 0; d < Dm; ++d) {
      const T h = (r[d] - mu) * rstd[n];
      xhat.data()[n * Dm + d] = h;
      y.data()[n * Dm + d] = h * gp[g * Dm + d] + bp[g * Dm + d];
    }
  }
  if (should_record(x, gamma, beta)) {
    auto mx = x.meta(), mg = gamma.meta(), mb = beta.meta();
    record("grouped_layernorm", y, [=](const T* go) {
      T* dx = mx ? mx->accumulate_target() : nullptr;
      T* dg = mg ? mg->accumulate_target() : nullptr;
      T* db = mb ? mb->accumulate_target() : nullptr;
      for (index_t n = 0; n < N; ++n) {
        const index_t g = group[n];
        const T* gr = go + n * Dm;
        const T* h = xhat.data() + n * Dm;
        if (dg)
          for (index_t d = 0; d < Dm; ++d) dg[g * Dm + d] += gr[d] * h[d];
        if (db)
          for (index_t d = 0; d < Dm; ++d) db[g * Dm + d] += gr[d];
        if (dx) {
          // d xhat = g * gamma; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
          T m1 = 0, m2 = 0;
          for (index_t d = 0; d < Dm; ++d) {
            const T dh = gr[d] * gamma.data()[g * Dm + d];
            m1 += dh;
            m2 += dh * h[d];
          }
          m1 /= T(Dm);
          m2 /= T(Dm);
          for (index_t d = 0; d < Dm; ++d)
            dx[n * Dm + d] += rstd[n] * (gr[d] * gamma.data()[g * Dm + d] - m1 - h[d] * m2);
        }
      }
    });
  }
  return y;
}

}  // namespace ttmoe::moe
