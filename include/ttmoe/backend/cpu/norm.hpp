#pragma once
// LayerNorm over the last axis on the CPU, with affine parameters that may differ per group of
// consecutive rows (row n uses gamma/beta row n / rows_per_group). One group is a plain LayerNorm;
// one group per sample or per token is MoETTA's MoE-LayerNorm. Rows are independent, so the forward
// is one parallel sweep that reads each row while it is hot in cache; the backward recomputes
// xhat from the saved per-row (mean, rstd) instead of keeping an [N, D] copy of it.

#include <algorithm>
#include <cmath>
#include <vector>

#include "ttmoe/backend/cpu/thread_pool.hpp"

namespace ttmoe::cpu_backend {

namespace detail {
/// Rows per parallel_for grain: enough work (~16k elements) per task to amortise scheduling.
inline index_t norm_row_grain(index_t dim) { return std::max<index_t>(1, 16384 / std::max<index_t>(1, dim)); }

/// Sum of f(d) over d in [0, n), in double, with 16 independent partial sums: the compiler keeps them
/// in two vectors of doubles, where one running sum would wait out each add's latency (a whole
/// LayerNorm backward once spent most of its time in such a chain).
template <class F>
inline double sum_in_double(index_t n, F&& f) {
  constexpr index_t L = 16;
  double acc[L] = {};
  index_t d = 0;
  for (; d + L <= n; d += L)
    for (index_t l = 0; l < L; ++l) acc[l] += f(d + l);
  double s = 0;
  for (; d < n; ++d) s += f(d);
  for (index_t l = 0; l < L; ++l) s += acc[l];
  return s;
}

/// Mean and biased variance of one row, two-pass (the centred pass avoids the cancellation of
/// E[x^2] - E[x]^2), accumulated in double so float results match float64 references closely.
template <class T>
inline void row_moments(const T* r, index_t dim, T& mean_out, T& var_out) {
  const double mu = sum_in_double(dim, [r](index_t d) { return double(r[d]); }) / double(dim);
  const double var = sum_in_double(dim, [r, mu](index_t d) {
                       const double c = double(r[d]) - mu;
                       return c * c;
                     }) / double(dim);
  mean_out = T(mu);
  var_out = T(var);
}
}  // namespace detail

/// Row-wise LayerNorm with grouped affine parameters and its VJP.
struct NormKernels {
  /// y[n] = (x[n] - mean) * rstd * gamma[g] + beta[g], g = n / rows_per_group, over rows of `dim`.
  /// gamma / beta ([G, dim]) may be null (no scale / no shift); stats ([rows, 2] = mean, rstd) is
  /// written when not null.
  template <class T>
  static void layer_norm(const T* x, T* y, T* stats, const T* gamma, const T* beta, index_t rows, index_t dim,
                         index_t rows_per_group, T eps) {
    parallel_for(rows, detail::norm_row_grain(dim), [&](index_t b, index_t e) {
      for (index_t n = b; n < e; ++n) {
        const T* r = x + n * dim;
        T* o = y + n * dim;
        T mu, var;
        detail::row_moments(r, dim, mu, var);
        const T rs = T(1) / std::sqrt(var + eps);
        if (stats) {
          stats[2 * n] = mu;
          stats[2 * n + 1] = rs;
        }
        const index_t g = n / rows_per_group;
        const T* ga = gamma ? gamma + g * dim : nullptr;
        const T* be = beta ? beta + g * dim : nullptr;
        if (ga && be)
          for (index_t d = 0; d < dim; ++d) o[d] = (r[d] - mu) * rs * ga[d] + be[d];
        else if (ga)
          for (index_t d = 0; d < dim; ++d) o[d] = (r[d] - mu) * rs * ga[d];
        else if (be)
          for (index_t d = 0; d < dim; ++d) o[d] = (r[d] - mu) * rs + be[d];
        else
          for (index_t d = 0; d < dim; ++d) o[d] = (r[d] - mu) * rs;
      }
    });
  }

  /// Accumulates the VJP of layer_norm for upstream gradient `go`: dx (if not null) and the
  /// per-group dgamma / dbeta (each may be null). `stats` is what the forward wrote.
  ///
  /// Work is split into items that never straddle a group: each group's rows are cut into `parts`
  /// slices. With one part per group an item owns its group's dgamma/dbeta rows and adds to them
  /// directly; otherwise each item sums into its own partial row and the partials are added in a
  /// fixed order afterwards, so the result does not depend on how threads were scheduled.
  template <class T>
  static void layer_norm_backward(const T* x, const T* go, const T* stats, const T* gamma, T* dx, T* dgamma,
                                  T* dbeta, index_t rows, index_t dim, index_t rows_per_group) {
    if (rows == 0 || dim == 0) return;
    const index_t groups = rows / rows_per_group;
    const bool params = dgamma || dbeta;
    const index_t grain = detail::norm_row_grain(dim);
    // Enough slices of a large group to keep the threads busy; a small cap bounds the partial buffer.
    const index_t parts = params ? std::clamp<index_t>((rows_per_group + grain - 1) / grain, 1, 16) : 1;
    const index_t part_rows = (rows_per_group + parts - 1) / parts;
    std::vector<T> partial(parts > 1 ? std::size_t(groups * parts * 2 * dim) : 0, T(0));
    parallel_for(groups * parts, std::max<index_t>(1, grain / part_rows), [&](index_t ib, index_t ie) {
      std::vector<T> dh(static_cast<std::size_t>(dim));
      for (index_t item = ib; item < ie; ++item) {
        const index_t g = item / parts, p = item % parts;
        const index_t n0 = g * rows_per_group + p * part_rows;
        const index_t n1 = std::min(n0 + part_rows, (g + 1) * rows_per_group);
        T* pw = nullptr;
        T* pb = nullptr;
        if (parts > 1) {
          pw = partial.data() + item * 2 * dim;
          pb = pw + dim;
        } else {
          pw = dgamma ? dgamma + g * dim : nullptr;
          pb = dbeta ? dbeta + g * dim : nullptr;
        }
        const T* ga = gamma ? gamma + g * dim : nullptr;
        for (index_t n = n0; n < n1; ++n) {
          const T mu = stats[2 * n], rs = stats[2 * n + 1];
          const T* r = x + n * dim;
          const T* gr = go + n * dim;
          if (pw)
            for (index_t d = 0; d < dim; ++d) pw[d] += gr[d] * (r[d] - mu) * rs;
          if (pb)
            for (index_t d = 0; d < dim; ++d) pb[d] += gr[d];
          if (!dx) continue;
          // dxhat = g * gamma; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
          if (ga)
            for (index_t d = 0; d < dim; ++d) dh[d] = gr[d] * ga[d];
          const T* v = ga ? dh.data() : gr;  // dxhat = g * gamma (g itself without a scale)
          const double m1 = detail::sum_in_double(dim, [v](index_t d) { return double(v[d]); });
          const double m2 = detail::sum_in_double(dim, [v, r, mu, rs](index_t d) {
            return double(v[d]) * double((r[d] - mu) * rs);
          });
          const T a = T(m1 / double(dim)), c = T(m2 / double(dim));
          T* o = dx + n * dim;
          for (index_t d = 0; d < dim; ++d) o[d] += rs * (v[d] - a - (r[d] - mu) * rs * c);
        }
      }
    });
    if (parts == 1) return;
    parallel_for(groups, 1, [&](index_t gb, index_t ge) {
      for (index_t g = gb; g < ge; ++g)
        for (index_t p = 0; p < parts; ++p) {
          const T* pw = partial.data() + (g * parts + p) * 2 * dim;
          for (index_t d = 0; d < dim; ++d) {
            if (dgamma) dgamma[g * dim + d] += pw[d];
            if (dbeta) dbeta[g * dim + d] += pw[dim + d];
          }
        }
    });
  }
};

}  // namespace ttmoe::cpu_backend
