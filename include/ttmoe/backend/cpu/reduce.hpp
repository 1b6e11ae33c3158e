#pragma once
// Reductions and softmax along one axis on the CPU. Every tensor is viewed as [outer, n, inner]
// where n is the reduced axis. inner == 1 (the last axis, the common case: attention rows, logits)
// runs contiguous xsimd loops over n; otherwise the loops run over inner, which the compiler
// vectorises. Work is split over `outer` (or `inner`) across the thread pool.

#include <cmath>
#include <cstdint>
#include <limits>

#include "ttmoe/backend/cpu/simd_math.hpp"
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
template <class T>
T row_max(const T* x, index_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (index_t k = 0; k < n; ++k) m = vm::max(m, x[k]);
  return m;
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
      for (index_t i = 0; i < inner; ++i) {
        T m = -std::numeric_limits<T>::infinity();
        for (index_t k = 0; k < n; ++k) m = vm::max(m, xo[k * inner + i]);
        if (m == -std::numeric_limits<T>::infinity()) m = 0;  // all -inf: avoid inf - inf
        if (inner == 1) {
          using B = batch<T>;
          constexpr index_t W = B::size;
          B acc(T(0));
          const B mb(m);
          index_t k = 0;
          for (; k + W <= n; k += W) {
            const B e = vm::exp(B::load_unaligned(xo + k) - mb);
            if (!log) e.store_unaligned(yo + k);
            acc += e;
          }
          T s = xsimd::hadd(acc);
          for (; k < n; ++k) {
            const T e = std::exp(xo[k] - m);
            if (!log) yo[k] = e;
            s += e;
          }
          if (log) {
            const T ls = std::log(s);  // (x - m) - log s: exact shift first, no rounding of m + log s
            for (index_t j = 0; j < n; ++j) yo[j] = (xo[j] - m) - ls;
          } else {
            const T inv = T(1) / s;
            for (index_t j = 0; j < n; ++j) yo[j] *= inv;
          }
          continue;
        }
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
