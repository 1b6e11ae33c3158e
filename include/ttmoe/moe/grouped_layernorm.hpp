#pragma once
// A LayerNorm whose affine parameters differ per group of rows, as ONE differentiable op:
// y[n] = (x[n] - mean) * rstd * gamma[group[n]] + beta[group[n]]. MoE-LayerNorm uses it with one
// group per sample (or per token); fusing avoids materialising [N, D] copies of gamma/beta and a
// chain of elementwise nodes. Host-side kernel (rows split over the CPU pool): requires a
// host-accessible device.

#include <cmath>
#include <type_traits>
#include <vector>

#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::moe {

namespace detail {
/// Threads `on_host_threads<D>` uses: the CPU pool's size on `cpu`, else 1.
template <class D>
std::size_t host_thread_count() {
  if constexpr (std::is_same_v<D, cpu>)
    return cpu_backend::ThreadPool::in_parallel() ? 1 : cpu_backend::num_threads();
  else
    return 1;
}
/// Runs f(thread_index, num_threads) on the CPU pool's threads for `cpu`, else once as f(0, 1).
template <class D, class F>
void on_host_threads(F&& f) {
  if constexpr (std::is_same_v<D, cpu>) {
    if (host_thread_count<D>() > 1) {
      cpu_backend::ThreadPool::instance().run_on_all(f);
      return;
    }
  }
  f(0, 1);
}
}  // namespace detail

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
  // Rows are independent: split them over the CPU pool (one pass each for mean, variance, output).
  detail::on_host_threads<D>([&](std::size_t t, std::size_t nt) {
    for (index_t n = N * t / nt; n < N * (t + 1) / nt; ++n) {
      const T* r = xp + n * Dm;
      T mu = 0, var = 0;
      for (index_t d = 0; d < Dm; ++d) mu += r[d];
      mu /= T(Dm);
      for (index_t d = 0; d < Dm; ++d) var += (r[d] - mu) * (r[d] - mu);
      var /= T(Dm);
      rstd[n] = T(1) / std::sqrt(var + T(eps));
      const T* ga = gp + group[n] * Dm;
      const T* be = bp + group[n] * Dm;
      T* h = xhat.data() + n * Dm;
      T* out = y.data() + n * Dm;
      for (index_t d = 0; d < Dm; ++d) {
        h[d] = (r[d] - mu) * rstd[n];
        out[d] = h[d] * ga[d] + be[d];
      }
    }
  });
  if (should_record(x, gamma, beta)) {
    auto mx = x.meta(), mg = gamma.meta(), mb = beta.meta();
    record("grouped_layernorm", y, [=](const T* go) {
      T* dx = mx ? mx->accumulate_target() : nullptr;
      T* dg = mg ? mg->accumulate_target() : nullptr;
      T* db = mb ? mb->accumulate_target() : nullptr;
      const T* gam = gamma.data();
      const std::size_t slots = detail::host_thread_count<D>();
      // Per-thread partial sums of d gamma / d beta (rows of one group may span threads).
      std::vector<T> part_g((dg ? slots : 0) * G * Dm, T(0)), part_b((db ? slots : 0) * G * Dm, T(0));
      detail::on_host_threads<D>([&](std::size_t t, std::size_t nt) {
        T* pg = dg ? part_g.data() + t * G * Dm : nullptr;
        T* pb = db ? part_b.data() + t * G * Dm : nullptr;
        for (index_t n = N * t / nt; n < N * (t + 1) / nt; ++n) {
          const index_t g = group[n];
          const T* gr = go + n * Dm;
          const T* h = xhat.data() + n * Dm;
          if (pg)
            for (index_t d = 0; d < Dm; ++d) pg[g * Dm + d] += gr[d] * h[d];
          if (pb)
            for (index_t d = 0; d < Dm; ++d) pb[g * Dm + d] += gr[d];
          if (dx) {
            // d xhat = g * gamma; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
            const T* ga = gam + g * Dm;
            T m1 = 0, m2 = 0;
            for (index_t d = 0; d < Dm; ++d) {
              const T dh = gr[d] * ga[d];
              m1 += dh;
              m2 += dh * h[d];
            }
            m1 /= T(Dm);
            m2 /= T(Dm);
            T* o = dx + n * Dm;
            for (index_t d = 0; d < Dm; ++d) o[d] += rstd[n] * (gr[d] * ga[d] - m1 - h[d] * m2);
          }
        }
      });
      for (std::size_t t = 0; t < slots; ++t)
        for (index_t i = 0; i < G * Dm; ++i) {
          if (dg) dg[i] += part_g[t * G * Dm + i];
          if (db) db[i] += part_b[t * G * Dm + i];
        }
    });
  }
  return y;
}

}  // namespace ttmoe::moe
