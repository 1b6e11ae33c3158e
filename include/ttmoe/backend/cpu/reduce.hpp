#pragma once
// Reductions and softmax along one axis on the CPU. Every tensor is viewed as [outer, n, inner]
// where n is the reduced axis. inner == 1 (the last axis, the common case: attention rows, logits)
// runs contiguous xsimd loops over n; otherwise the loops run over inner, which the compiler
// vectorises. Work is split over `outer` (or `inner`) across the thread pool.

#include <cmath>
#include <cstdint>
#include <limits>

#include "ttmoe/simd/math.hpp"  // vm:: on xsimd batches
#include "ttmoe/expr/vmath.hpp"              // vm:: on scalars (max with NaN propagation)
#include "ttmoe/backend/cpu/thread_pool.hpp"

namespace ttmoe::cpu_backend {

namespace detail {
template <class T>
T row_sum(const T* x, index_t n) {
  using B = batch<T>;
  constexpr index_t W = B::size;
  B acc(T(0));
  index_t k = 0;
  for (; k + W <= n; k += W) acc += B::load_unaligned(x + k);
  T s = xsimd::hadd(acc);
  for (; k < n; ++k) s += x[k];
  return s;
}
/// Maximum of a row; NaN if the row holds one (as every ttmoe max). Vector lanes keep running maxima
/// (NaN sticks), reduced at the end: a scalar chain of NaN-aware compares was the softmax's slowest loop.
template <class T>
T row_max(const T* x, index_t n) {
  using B = batch<T>;
  constexpr index_t W = B::size;
  T m = -std::numeric_limits<T>::infinity();
  index_t k = 0;
  if (n >= W) {
    B acc = B::load_unaligned(x);
    for (k = W; k + W <= n; k += W) acc = vm::max(acc, B::load_unaligned(x + k));
    alignas(64) T lanes[W];
    acc.store_aligned(lanes);
    for (index_t j = 0; j < W; ++j) m = vm::max(m, lanes[j]);
  }
  for (; k < n; ++k) m = vm::max(m, x[k]);
  return m;
}
/// Sum of exp(x - m) over a row, also stored to y unless y is null (y may alias x).
template <class T>
T row_exp_sum(const T* x, T* y, index_t n, T m) {
  using B = batch<T>;
  constexpr index_t W = B::size;
  const B mb(m);
  B acc(T(0));
  index_t k = 0;
  for (; k + W <= n; k += W) {
    const B e = vm::exp(B::load_unaligned(x + k) - mb);
    if (y) e.store_unaligned(y + k);
    acc += e;
  }
  if (k < n) {  // the partial last vector, padded with -inf (exp gives 0): a scalar std::exp per
               // element cost more than the vector part on attention's 197-wide rows
    alignas(64) T tail[W];
    const index_t r = n - k;
    for (index_t j = 0; j < W; ++j) tail[j] = j < r ? x[k + j] : -std::numeric_limits<T>::infinity();
    const B e = vm::exp(B::load_aligned(tail) - mb);
    acc += e;
    if (y) {
      e.store_aligned(tail);
      for (index_t j = 0; j < r; ++j) y[k + j] = tail[j];
    }
  }
  return xsimd::hadd(acc);
}
/// y = x * a over a row (y may alias x).
template <class T>
void row_scale(const T* x, T* y, index_t n, T a) {
  using B = batch<T>;
  constexpr index_t W = B::size;
  const B ab(a);
  index_t k = 0;
  for (; k + W <= n; k += W) (B::load_unaligned(x + k) * ab).store_unaligned(y + k);
  for (; k < n; ++k) y[k] = x[k] * a;
}
/// y = (x - m) - c over a row: the exact shift by the maximum first, so log_softmax never rounds
/// m + c (y may alias x).
template <class T>
void row_shift2(const T* x, T* y, index_t n, T m, T c) {
  using B = batch<T>;
  constexpr index_t W = B::size;
  const B mb(m), cb(c);
  index_t k = 0;
  for (; k + W <= n; k += W) ((B::load_unaligned(x + k) - mb) - cb).store_unaligned(y + k);
  for (; k < n; ++k) y[k] = (x[k] - m) - c;
}
/// y = softmax(x) over one contiguous row (y may alias x); a row of only -inf gives NaN, as the formula.
template <class T>
void softmax_row(const T* x, T* y, index_t n) {
  T m = row_max(x, n);
  if (m == -std::numeric_limits<T>::infinity()) m = 0;  // all -inf: avoid inf - inf
  const T s = row_exp_sum(x, y, n, m);
  row_scale(y, y, n, T(1) / s);
}
/// The softmax VJP over one contiguous row: d = y * (g - sum(g * y)), added to d when `accumulate`
/// (d may alias g when it is not).
template <class T>
void softmax_backward_row(const T* y, const T* g, T* d, index_t n, bool accumulate) {
  using B = batch<T>;
  constexpr index_t W = B::size;
  B acc(T(0));
  index_t k = 0;
  for (; k + W <= n; k += W) acc = xsimd::fma(B::load_unaligned(g + k), B::load_unaligned(y + k), acc);
  T s = xsimd::hadd(acc);
  for (; k < n; ++k) s += g[k] * y[k];
  const B sb(s);
  for (k = 0; k + W <= n; k += W) {
    const B r = B::load_unaligned(y + k) * (B::load_unaligned(g + k) - sb);
    (accumulate ? r + B::load_unaligned(d + k) : r).store_unaligned(d + k);
  }
  for (; k < n; ++k) d[k] = y[k] * (g[k] - s) + (accumulate ? d[k] : T(0));
}
// Runs f(o) for o in [0, outer), split over threads when the total work is large.
template <class F>
void over_outer(index_t outer, index_t work_per_outer, F&& f) {
  const index_t grain = std::max<index_t>(1, (index_t(1) << 14) / std::max<index_t>(1, work_per_outer));
  parallel_for(outer, grain, [&](index_t b, index_t e) {
    for (index_t o = b; o < e; ++o) f(o);
  });
}
}  // namespace detail

/// Reductions, softmax and their VJPs along one axis.
struct ReduceKernels {
  /// out[o, i] = scale * sum_k x[o, k, i].
  template <class T>
  static void reduce_sum(const T* x, T* out, index_t outer, index_t n, index_t inner, T scale) {
    detail::over_outer(outer, n * inner, [&](index_t o) {
      const T* xo = x + o * n * inner;
      T* oo = out + o * inner;
      if (inner == 1) {
        oo[0] = scale * detail::row_sum(xo, n);
        return;
      }
      for (index_t i = 0; i < inner; ++i) oo[i] = 0;
      for (index_t k = 0; k < n; ++k)
        for (index_t i = 0; i < inner; ++i) oo[i] += xo[k * inner + i];
      for (index_t i = 0; i < inner; ++i) oo[i] *= scale;
    });
  }

  /// dx[o, k, i] += scale * g[o, i] (the VJP of reduce_sum).
  template <class T>
  static void broadcast_add_axis(T* dx, const T* g, index_t outer, index_t n, index_t inner, T scale) {
    detail::over_outer(outer, n * inner, [&](index_t o) {
      T* d = dx + o * n * inner;
      const T* go = g + o * inner;
      for (index_t k = 0; k < n; ++k)
        for (index_t i = 0; i < inner; ++i) d[k * inner + i] += scale * go[i];
    });
  }

  /// out[o, i] = max_k (or min_k) x[o, k, i]; idx (if not null) receives the first arg-extremum. NaN wins.
  template <class T>
  static void reduce_extremum(const T* x, T* out, std::int64_t* idx, index_t outer, index_t n, index_t inner, bool is_min) {
    detail::over_outer(outer, n * inner, [&](index_t o) {
      const T* xo = x + o * n * inner;
      for (index_t i = 0; i < inner; ++i) {
        T best = xo[i];
        index_t arg = 0;
        for (index_t k = 1; k < n && best == best; ++k) {
          const T v = xo[k * inner + i];
          if (v != v || (is_min ? v < best : v > best)) {
            best = v;
            arg = k;
          }
        }
        out[o * inner + i] = best;
        if (idx) idx[o * inner + i] = static_cast<std::int64_t>(arg);
      }
    });
  }

  /// out[o, i] = sum_k (x - mean)^2 / (n - ddof), computed in two passes for accuracy.
  template <class T>
  static void reduce_variance(const T* x, T* out, index_t outer, index_t n, index_t inner, index_t ddof) {
    detail::over_outer(outer, 2 * n * inner, [&](index_t o) {
      const T* xo = x + o * n * inner;
      for (index_t i = 0; i < inner; ++i) {
        T mean = 0;
        for (index_t k = 0; k < n; ++k) mean += xo[k * inner + i];
        mean /= T(n);
        T ss = 0;
        for (index_t k = 0; k < n; ++k) {
          const T d = xo[k * inner + i] - mean;
          ss += d * d;
        }
        out[o * inner + i] = ss / T(n - ddof);
      }
    });
  }

  /// y = softmax(x) (or log_softmax when `log`) along the axis, max-subtracted for stability.
  template <class T>
  static void softmax(const T* x, T* y, index_t outer, index_t n, index_t inner, bool log) {
    detail::over_outer(outer, 3 * n * inner, [&](index_t o) {
      const T* xo = x + o * n * inner;
      T* yo = y + o * n * inner;
      if (inner == 1 && !log) return detail::softmax_row(xo, yo, n);
      if (inner == 1) {
        T m = detail::row_max(xo, n);
        if (m == -std::numeric_limits<T>::infinity()) m = 0;  // all -inf: avoid inf - inf
        return detail::row_shift2(xo, yo, n, m, T(std::log(detail::row_exp_sum(xo, static_cast<T*>(nullptr), n, m))));
      }
      for (index_t i = 0; i < inner; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        for (index_t k = 0; k < n; ++k) m = vm::max(m, xo[k * inner + i]);
        if (m == -std::numeric_limits<T>::infinity()) m = 0;  // all -inf: avoid inf - inf
        T s = 0;
        for (index_t k = 0; k < n; ++k) s += std::exp(xo[k * inner + i] - m);
        const T ls = std::log(s);
        for (index_t k = 0; k < n; ++k) {
          const T v = (xo[k * inner + i] - m) - ls;
          yo[k * inner + i] = log ? v : std::exp(v);
        }
      }
    });
  }

  /// VJP of softmax (y = softmax) or log_softmax (y = log_softmax): dx += J^T g.
  template <class T>
  static void softmax_backward(const T* y, const T* g, T* dx, index_t outer, index_t n, index_t inner, bool log) {
    detail::over_outer(outer, 2 * n * inner, [&](index_t o) {
      const T* yo = y + o * n * inner;
      const T* go = g + o * n * inner;
      T* d = dx + o * n * inner;
      if (inner == 1 && !log) {  // attention rows, on vectors
        detail::softmax_backward_row(yo, go, d, n, true);
        return;
      }
      for (index_t i = 0; i < inner; ++i) {
        T s = 0;
        for (index_t k = 0; k < n; ++k) s += log ? go[k * inner + i] : go[k * inner + i] * yo[k * inner + i];
        for (index_t k = 0; k < n; ++k) {
          const index_t p = k * inner + i;
          d[p] += log ? go[p] - std::exp(yo[p]) * s : yo[p] * (go[p] - s);
        }
      }
    });
  }

  /// out[o, i] = log sum_k exp(x[o, k, i]).
  template <class T>
  static void logsumexp(const T* x, T* out, index_t outer, index_t n, index_t inner) {
    detail::over_outer(outer, 2 * n * inner, [&](index_t o) {
      const T* xo = x + o * n * inner;
      for (index_t i = 0; i < inner; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        for (index_t k = 0; k < n; ++k) m = vm::max(m, xo[k * inner + i]);
        if (std::isinf(m)) {
          out[o * inner + i] = m;
          continue;
        }
        T s = 0;
        for (index_t k = 0; k < n; ++k) s += std::exp(xo[k * inner + i] - m);
        out[o * inner + i] = m + std::log(s);
      }
    });
  }
  /// VJP of variance: dx += g * 2 (x - mean) / (n - ddof).
  template <class T>
  static void variance_backward(const T* x, const T* g, T* dx, index_t outer, index_t n, index_t inner, index_t ddof) {
    detail::over_outer(outer, 2 * n * inner, [&](index_t o) {
      const T* xo = x + o * n * inner;
      T* d = dx + o * n * inner;
      for (index_t i = 0; i < inner; ++i) {
        T mean = 0;
        for (index_t k = 0; k < n; ++k) mean += xo[k * inner + i];
        mean /= T(n);
        const T c = T(2) * g[o * inner + i] / T(n - ddof);
        for (index_t k = 0; k < n; ++k) d[k * inner + i] += c * (xo[k * inner + i] - mean);
      }
    });
  }

  /// VJP of logsumexp: dx += g * exp(x - lse).
  template <class T>
  static void logsumexp_backward(const T* x, const T* lse, const T* g, T* dx, index_t outer, index_t n, index_t inner) {
    detail::over_outer(outer, 2 * n * inner, [&](index_t o) {
      for (index_t k = 0; k < n; ++k)
        for (index_t i = 0; i < inner; ++i) {
          const index_t p = (o * n + k) * inner + i;
          dx[p] += g[o * inner + i] * std::exp(x[p] - lse[o * inner + i]);
        }
    });
  }

  /// dx[o, idx[o, j, i], i] += g[o, j, i] for j < m: the VJP of gather and of max/min (m = 1).
  template <class T>
  static void scatter_add_axis(T* dx, const T* g, const std::int64_t* idx, index_t outer, index_t n, index_t inner,
                               index_t m) {
    // Serial over j within each outer slice: several j may hit one destination.
    detail::over_outer(outer, m * inner, [&](index_t o) {
      for (index_t j = 0; j < m; ++j)
        for (index_t i = 0; i < inner; ++i) {
          const index_t q = (o * m + j) * inner + i;
          dx[(o * n + static_cast<index_t>(idx[q])) * inner + i] += g[q];
        }
    });
  }
};

}  // namespace ttmoe::cpu_backend
