#pragma once
// ThrustBackend<Dev>: every Backend kernel written once against thrust, templated on the device type
// whose execution policy it runs under. Backend<cuda> (nvcc, CUDA system + cuBLAS GEMM) and
// Backend<thrust_host> (any host compiler, thrust's CPP system) both derive from it, so the logic the
// GPU runs is tested on machines without one.
//
// `Dev` provides: `using temp_allocator = ...` (thrust scratch allocator) and
// `static auto policy(temp_allocator&)` (the thrust execution policy, e.g. cuda::par_nosync.on(stream)),
// plus the Device concept's allocate / deallocate.
//
// Fused elementwise expressions run as ONE thrust::transform over a counting iterator: the kernel
// tree (plain data, raw pointers) is carried by value, each output index is turned into a
// multi-index and `kernel.at(idx)` evaluated. The fused VJP positions a per-element copy of the
// tree with `set_row` and runs `fwd`/`bwd` at that position (its sinks are in output layout, so every
// element writes only its own slot: no races).
//
// No Eigen, no fmt, no xsimd in this header (safe for .cu translation units).

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <math.h>

#include <thrust/copy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/discard_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/core/config.hpp"
#include "ttmoe/expr/coalesce.hpp"
#include "ttmoe/expr/kernel.hpp"
#include "ttmoe/expr/vmath.hpp"

namespace ttmoe::cuda_backend {

namespace detail {

using count_it = thrust::counting_iterator<index_t>;

// Output multi-index of flat position i in row-major extents ext.
template <std::size_t R>
TTMOE_HD inline std::array<index_t, R> unravel(index_t i, const std::array<index_t, R>& ext) {
  std::array<index_t, R> idx{};
  for (std::size_t d = R; d-- > 0;) {
    idx[d] = i % ext[d];
    i /= ext[d];
  }
  return idx;
}

// RAII scratch of n T's on device Dev (pool-backed).
template <class T, class Dev>
struct Scratch {
  T* p;
  index_t n;
  explicit Scratch(index_t count) : p(Dev::template allocate<T>(count)), n(count) {}
  ~Scratch() { Dev::template deallocate<T>(p, n); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

template <class T, std::size_t R, class K>
struct EvalAt {
  K k;
  std::array<index_t, R> ext;
  TTMOE_HD T operator()(index_t i) const { return static_cast<T>(k.at(unravel<R>(i, ext))); }
};

template <class T, std::size_t R, class K>
struct BackwardAt {
  K k;
  std::array<index_t, R> ext;
  const T* g;
  TTMOE_HD void operator()(index_t i) const {
    K kk = k;
    const auto idx = unravel<R>(i, ext);
    index_t j = 0;
    if constexpr (R > 0) j = idx[R - 1];
    kk.set_row(idx, i - j);
    typename K::template Cache<T> c;
    kk.template fwd<T>(j, c);
    kk.template bwd<T>(j, c, g[i]);
  }
};

template <class T>
struct AddInto {  // dst[i] += src[i]
  T* dst;
  const T* src;
  TTMOE_HD void operator()(index_t i) const { dst[i] += src[i]; }
};

// dst[q] += sum of src over the output positions that broadcast from leaf element q.
template <class T, std::size_t R>
struct BroadcastSum {
  T* dst;
  const T* src;
  std::array<index_t, R> out_ext, leaf_ext;  // leaf_ext right-aligned into rank R (1 = broadcast)
  index_t count;                            // output positions per leaf element
  TTMOE_HD void operator()(index_t q) const {
    std::array<index_t, R> idx = unravel<R>(q, leaf_ext);
    T acc = 0;
    for (index_t c = 0; c < count; ++c) {
      index_t r = c;
      for (std::size_t d = R; d-- > 0;)
        if (leaf_ext[d] == 1 && out_ext[d] != 1) {
          idx[d] = r % out_ext[d];
          r /= out_ext[d];
        }
      index_t off = 0;
      if constexpr (R > 0)  // nvcc warns (#186) on `d < 0` with an unsigned bound
        for (std::size_t d = 0; d < R; ++d) off = off * out_ext[d] + idx[d];
      acc += src[off];
    }
    dst[q] += acc;
  }
};

template <class T>
struct AddScalarFrom {  // dst[0] += *s
  T* dst;
  const T* s;
  TTMOE_HD void operator()(index_t) const { dst[0] += s[0]; }
};

struct Iota {
  TTMOE_HD index_t operator()(index_t i) const { return i; }
};

struct DivBy {
  index_t n;
  TTMOE_HD index_t operator()(index_t i) const { return i / n; }
};

template <class T>
struct Scale {
  T s;
  TTMOE_HD T operator()(T v) const { return s * v; }
};

// ---- per (o, i) reductions along the middle axis of [outer, n, inner] ----
template <class T>
struct SumAxis {
  const T* x;
  T* out;
  index_t n, inner;
  T scale;
  TTMOE_HD void operator()(index_t p) const {
    const index_t o = p / inner, i = p % inner;
    const T* xo = x + o * n * inner + i;
    T s = 0;
    for (index_t k = 0; k < n; ++k) s += xo[k * inner];
    out[p] = scale * s;
  }
};

template <class T>
struct BroadcastAddAxis {
  T* dx;
  const T* g;
  index_t n, inner;
  T scale;
  TTMOE_HD void operator()(index_t p) const {
    const index_t i = p % inner, o = p / (n * inner);
    dx[p] += scale * g[o * inner + i];
  }
};

template <class T>
struct Extremum {
  const T* x;
  T* out;
  std::int64_t* idx;
  index_t n, inner;
  bool is_min;
  TTMOE_HD void operator()(index_t p) const {
    const index_t o = p / inner, i = p % inner;
    const T* xo = x + o * n * inner + i;
    T best = xo[0];
    index_t arg = 0;
    for (index_t k = 1; k < n && best == best; ++k) {
      const T v = xo[k * inner];
      if (v != v || (is_min ? v < best : v > best)) {
        best = v;
        arg = k;
      }
    }
    out[p] = best;
    if (idx) idx[p] = static_cast<std::int64_t>(arg);
  }
};

template <class T>
struct Variance {
  const T* x;
  T* out;
  index_t n, inner, ddof;
  TTMOE_HD void operator()(index_t p) const {
    const index_t o = p / inner, i = p % inner;
    const T* xo = x + o * n * inner + i;
    T mean = 0;
    for (index_t k = 0; k < n; ++k) mean += xo[k * inner];
    mean /= T(n);
    T ss = 0;
    for (index_t k = 0; k < n; ++k) {
      const T d = xo[k * inner] - mean;
      ss += d * d;
    }
    out[p] = ss / T(n - ddof);
  }
};

template <class T>
struct VarianceBackward {
  const T* x;
  const T* g;
  T* dx;
  index_t n, inner, ddof;
  TTMOE_HD void operator()(index_t p) const {
    const index_t o = p / inner, i = p % inner;
    const T* xo = x + o * n * inner + i;
    T* d = dx + o * n * inner + i;
    T mean = 0;
    for (index_t k = 0; k < n; ++k) mean += xo[k * inner];
    mean /= T(n);
    const T c = T(2) * g[p] / T(n - ddof);
    for (index_t k = 0; k < n; ++k) d[k * inner] += c * (xo[k * inner] - mean);
  }
};

template <class T>
TTMOE_HD inline T vmax(T a, T b) {
  return a > b || a != a ? a : b;
}

template <class T>
struct Softmax {
  const T* x;
  T* y;
  index_t n, inner;
  bool log;
  TTMOE_HD void operator()(index_t p) const {
    const index_t o = p / inner, i = p % inner;
    const T* xo = x + o * n * inner + i;
    T* yo = y + o * n * inner + i;
    const T ninf = -static_cast<T>(INFINITY);
    T m = ninf;
    for (index_t k = 0; k < n; ++k) m = vmax(m, xo[k * inner]);
    if (m == ninf) m = 0;
    T s = 0;
    for (index_t k = 0; k < n; ++k) s += vm::exp(xo[k * inner] - m);
    if (log) {
      const T ls = m + vm::log(s);
      for (index_t k = 0; k < n; ++k) yo[k * inner] = xo[k * inner] - ls;
    } else {
      const T inv = T(1) / s;
      for (index_t k = 0; k < n; ++k) yo[k * inner] = vm::exp(xo[k * inner] - m) * inv;
    }
  }
};

template <class T>
struct SoftmaxBackward {
  const T* y;
  const T* g;
  T* dx;
  index_t n, inner;
  bool log;
  TTMOE_HD void operator()(index_t p) const {
    const index_t o = p / inner, i = p % inner, base = o * n * inner + i;
    T s = 0;
    for (index_t k = 0; k < n; ++k) {
      const index_t q = base + k * inner;
      s += log ? g[q] : g[q] * y[q];
    }
    for (index_t k = 0; k < n; ++k) {
      const index_t q = base + k * inner;
      dx[q] += log ? g[q] - vm::exp(y[q]) * s : y[q] * (g[q] - s);
    }
  }
};

template <class T>
struct LogSumExp {
  const T* x;
  T* out;
  index_t n, inner;
  TTMOE_HD void operator()(index_t p) const {
    const index_t o = p / inner, i = p % inner;
    const T* xo = x + o * n * inner + i;
    T m = -static_cast<T>(INFINITY);
    for (index_t k = 0; k < n; ++k) m = vmax(m, xo[k * inner]);
    if (m == static_cast<T>(INFINITY) || m == -static_cast<T>(INFINITY)) {
      out[p] = m;
      return;
    }
    T s = 0;
    for (index_t k = 0; k < n; ++k) s += vm::exp(xo[k * inner] - m);
    out[p] = m + vm::log(s);
  }
};

template <class T>
struct LogSumExpBackward {
  const T* x;
  const T* lse;
  const T* g;
  T* dx;
  index_t n, inner;
  TTMOE_HD void operator()(index_t p) const {
    const index_t i = p % inner, o = p / (n * inner), r = o * inner + i;
    dx[p] += g[r] * vm::exp(x[p] - lse[r]);
  }
};

// ---- indexing ----
template <class T>
struct GatherAxis {
  const T* x;
  const std::int64_t* idx;
  index_t n, inner, m;
  TTMOE_HD T operator()(index_t q) const {
    const index_t i = q % inner, o = q / (m * inner);
    return x[(o * n + static_cast<index_t>(idx[q])) * inner + i];
  }
};

struct ScatterKey {  // destination flat index of source position q
  const std::int64_t* idx;
  index_t n, inner, m;
  TTMOE_HD index_t operator()(index_t q) const {
    const index_t i = q % inner, o = q / (m * inner);
    return (o * n + static_cast<index_t>(idx[q])) * inner + i;
  }
};

template <class T>
struct ScatterDirect {  // m == 1: one source per destination slot of each (o, i)
  T* dx;
  const T* g;
  ScatterKey key;
  TTMOE_HD void operator()(index_t q) const { dx[key(q)] += g[q]; }
};

template <class T>
struct AddAtKeys {  // dx[keys[u]] += sums[u] (keys unique)
  T* dx;
  const index_t* keys;
  const T* sums;
  TTMOE_HD void operator()(index_t u) const { dx[keys[u]] += sums[u]; }
};

template <class T>
struct GatherBy {  // out[u] = src[perm[u]]
  const T* src;
  const index_t* perm;
  TTMOE_HD T operator()(index_t u) const { return src[perm[u]]; }
};

template <class T>
struct CopyBlocks {
  T* dst;
  const T* src;
  index_t ds, ss, len;
  bool accumulate;
  TTMOE_HD void operator()(index_t p) const {
    const index_t r = p / len, k = p % len;
    if (accumulate) dst[r * ds + k] += src[r * ss + k];
    else dst[r * ds + k] = src[r * ss + k];
  }
};

template <class T, std::size_t R>
struct Permute {
  const T* x;
  T* out;
  std::array<index_t, R> out_ext, in_stride_of_out;  // input stride of each output dim
  bool accumulate;
  TTMOE_HD void operator()(index_t p) const {
    index_t r = p, off = 0;
    for (std::size_t d = R; d-- > 0;) {
      off += (r % out_ext[d]) * in_stride_of_out[d];
      r /= out_ext[d];
    }
    if (accumulate) out[p] += x[off];
    else out[p] = x[off];
  }
};

template <class T>
struct TopkLess {  // orders flat positions by (row asc, value desc with NaN first, index asc)
  const T* x;
  index_t n;
  TTMOE_HD bool operator()(index_t a, index_t c) const {
    const index_t ra = a / n, rc = c / n;
    if (ra != rc) return ra < rc;
    const T va = x[a], vc = x[c];
    const bool na = va != va, nc = vc != vc;
    if (na != nc) return na;
    if (va != vc) return va > vc;
    return a < c;
  }
};

template <class T>
struct TopkTake {
  const T* x;
  const index_t* order;
  T* values;
  std::int64_t* indices;
  index_t n, k;
  TTMOE_HD void operator()(index_t p) const {
    const index_t r = p / k, j = p % k, src = order[r * n + j];
    values[p] = x[src];
    indices[p] = static_cast<std::int64_t>(src - r * n);
  }
};

// ---- LayerNorm rows with grouped affine parameters (row n uses group n / rpg) ----
template <class T>
struct LayerNormRow {  // one thread per row: two-pass moments, then the normalised, affine row
  const T* x;
  T* y;
  T* stats;
  const T* gamma;
  const T* beta;
  index_t dim, rpg;
  T eps;
  TTMOE_HD void operator()(index_t n) const {
    const T* r = x + n * dim;
    T mu = 0, var = 0;
    for (index_t d = 0; d < dim; ++d) mu += r[d];
    mu /= T(dim);
    for (index_t d = 0; d < dim; ++d) var += (r[d] - mu) * (r[d] - mu);
    var /= T(dim);
    const T rs = T(1) / vm::sqrt(var + eps);
    if (stats) {
      stats[2 * n] = mu;
      stats[2 * n + 1] = rs;
    }
    const index_t g = n / rpg;
    for (index_t d = 0; d < dim; ++d) {
      T v = (r[d] - mu) * rs;
      if (gamma) v *= gamma[g * dim + d];
      if (beta) v += beta[g * dim + d];
      y[n * dim + d] = v;
    }
  }
};

template <class T>
struct LayerNormInputGrad {  // one thread per row: dx += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
  const T* x;
  const T* go;
  const T* stats;
  const T* gamma;
  T* dx;
  index_t dim, rpg;
  TTMOE_HD void operator()(index_t n) const {
    const T mu = stats[2 * n], rs = stats[2 * n + 1];
    const T* r = x + n * dim;
    const T* g = go + n * dim;
    const T* ga = gamma ? gamma + (n / rpg) * dim : nullptr;
    T m1 = 0, m2 = 0;
    for (index_t d = 0; d < dim; ++d) {
      const T dh = ga ? g[d] * ga[d] : g[d];
      m1 += dh;
      m2 += dh * (r[d] - mu) * rs;
    }
    m1 /= T(dim);
    m2 /= T(dim);
    for (index_t d = 0; d < dim; ++d) {
      const T dh = ga ? g[d] * ga[d] : g[d];
      dx[n * dim + d] += rs * (dh - m1 - (r[d] - mu) * rs * m2);
    }
  }
};

template <class T>
struct LayerNormParamGrad {  // one thread per (group, column): sums over the group's rows
  const T* x;
  const T* go;
  const T* stats;
  T* dgamma;
  T* dbeta;
  index_t dim, rpg;
  TTMOE_HD void operator()(index_t p) const {
    const index_t g = p / dim, d = p % dim;
    T sw = 0, sb = 0;
    for (index_t n = g * rpg; n < (g + 1) * rpg; ++n) {
      const T gr = go[n * dim + d];
      sw += gr * (x[n * dim + d] - stats[2 * n]) * stats[2 * n + 1];
      sb += gr;
    }
    if (dgamma) dgamma[p] += sw;
    if (dbeta) dbeta[p] += sb;
  }
};

template <class T>
struct BiasRows {  // C[i, j] = bias[j] for position p = i * N + j
  const T* bias;
  T* c;
  index_t n, ldc;
  TTMOE_HD void operator()(index_t p) const { c[(p / n) * ldc + p % n] = bias[p % n]; }
};

// Generic GEMM: one thread per element of C, row-major operands with leading dimensions.
template <class T>
struct GemmElem {
  bool ta, tb;
  index_t M, N, K;
  T alpha, beta;
  const T* A;
  index_t lda, sa;
  const T* B;
  index_t ldb, sb;
  T* C;
  index_t ldc, sc;
  TTMOE_HD void operator()(index_t p) const {
    const index_t b = p / (M * N), r = p % (M * N), i = r / N, j = r % N;
    const T* a = A + b * sa;
    const T* bb = B + b * sb;
    T acc = 0;
    for (index_t k = 0; k < K; ++k) {
      const T av = ta ? a[k * lda + i] : a[i * lda + k];
      const T bv = tb ? bb[j * ldb + k] : bb[k * ldb + j];
      acc += av * bv;
    }
    T* c = C + b * sc + i * ldc + j;
    *c = beta == T(0) ? alpha * acc : alpha * acc + beta * *c;
  }
};

}  // namespace detail

/// All Backend kernels over thrust, run under Dev's execution policy.
template <class Dev>
struct ThrustBackend {
 protected:
  template <class F>
  static void for_n(index_t n, const F& f) {
    if (n == 0) return;
    typename Dev::temp_allocator a;
    thrust::for_each(Dev::policy(a), detail::count_it(0), detail::count_it(n), f);
  }
  template <class T, class F>
  static void transform_n(index_t n, T* out, const F& f) {
    if (n == 0) return;
    typename Dev::temp_allocator a;
    thrust::transform(Dev::policy(a), detail::count_it(0), detail::count_it(n), out, f);
  }

 public:
  // ---- elementwise ------------------------------------------------------------------------------
  /// out[i] = kernel value at output position i: one thrust::transform.
  template <class T, std::size_t R, class K>
  static void evaluate(K kernel, T* out, std::array<index_t, R> ext) {
    expr::coalesce(ext, kernel);
    index_t n = 1;
    for (auto x : ext) n *= x;
    transform_n(n, out, detail::EvalAt<T, R, K>{kernel, ext});
  }

  /// The fused VJP: every output position recomputes its forward values and pushes grad_out down.
  template <class T, std::size_t R, class K>
  static void evaluate_backward(K kernel, const T* grad_out, std::array<index_t, R> ext) {
    expr::coalesce(ext, kernel);
    index_t n = 1;
    for (auto x : ext) n *= x;
    for_n(n, detail::BackwardAt<T, R, K>{kernel, ext, grad_out});
  }

  /// dst[i] += src[i].
  template <class T>
  static void add_inplace(T* dst, const T* src, index_t n) {
    for_n(n, detail::AddInto<T>{dst, src});
  }

  /// Sums src (extents `out`) over the dimensions along which an operand of extents `leaf` was
  /// broadcast, adding into dst (extents `leaf`). One thread per leaf element (deterministic);
  /// a single-element leaf is a thrust::reduce instead.
  template <class T, std::size_t RL, std::size_t R>
  static void reduce_broadcast_add(T* dst, const std::array<index_t, RL>& leaf, const T* src,
                                   const std::array<index_t, R>& out) {
    index_t out_n = 1, leaf_n = 1;
    for (auto x : out) out_n *= x;
    for (auto x : leaf) leaf_n *= x;
    if (out_n == 0 || leaf_n == 0) return;
    if (leaf_n == 1) {
      detail::Scratch<T, Dev> s(1);
      {
        typename Dev::temp_allocator a;
        const T total = thrust::reduce(Dev::policy(a), src, src + out_n, T(0));
        Dev::template copy_from_host<T>(s.p, &total, 1);
      }
      for_n(1, detail::AddScalarFrom<T>{dst, s.p});
      return;
    }
    std::array<index_t, R> le{};
    le.fill(1);
    if constexpr (RL > 0)  // nvcc warns (#186) on `d < 0` with an unsigned bound
      for (std::size_t d = 0; d < RL; ++d) le[R - RL + d] = leaf[d];
    for_n(leaf_n, detail::BroadcastSum<T, R>{dst, src, out, le, out_n / leaf_n});
  }

  // ---- reductions ([outer, n, inner] views) --------------------------------------------------------
  /// out[o, i] = scale * sum_k x[o, k, i]. Last-axis sums (inner == 1) are a thrust::reduce_by_key
  /// over row keys; other axes one thread per output element.
  template <class T>
  static void reduce_sum(const T* x, T* out, index_t outer, index_t n, index_t inner, T scale) {
    if (outer * inner == 0) return;
    if (inner == 1 && n > 0) {
      typename Dev::temp_allocator a;
      auto keys = thrust::make_transform_iterator(detail::count_it(0), detail::DivBy{n});
      thrust::reduce_by_key(Dev::policy(a), keys, keys + outer * n, x, thrust::make_discard_iterator(), out);
      if (scale != T(1)) thrust::transform(Dev::policy(a), out, out + outer, out, detail::Scale<T>{scale});
      return;
    }
    for_n(outer * inner, detail::SumAxis<T>{x, out, n, inner, scale});
  }
  /// dx[o, k, i] += scale * g[o, i].
  template <class T>
  static void broadcast_add_axis(T* dx, const T* g, index_t outer, index_t n, index_t inner, T scale) {
    for_n(outer * n * inner, detail::BroadcastAddAxis<T>{dx, g, n, inner, scale});
  }
  /// max / min along the axis (+ first arg-extremum); NaN wins.
  template <class T>
  static void reduce_extremum(const T* x, T* out, std::int64_t* idx, index_t outer, index_t n, index_t inner,
                              bool is_min) {
    for_n(outer * inner, detail::Extremum<T>{x, out, idx, n, inner, is_min});
  }
  template <class T>
  static void reduce_variance(const T* x, T* out, index_t outer, index_t n, index_t inner, index_t ddof) {
    for_n(outer * inner, detail::Variance<T>{x, out, n, inner, ddof});
  }
  template <class T>
  static void variance_backward(const T* x, const T* g, T* dx, index_t outer, index_t n, index_t inner, index_t ddof) {
    for_n(outer * inner, detail::VarianceBackward<T>{x, g, dx, n, inner, ddof});
  }
  /// softmax / log_softmax: one thread per row (o, i).
  template <class T>
  static void softmax(const T* x, T* y, index_t outer, index_t n, index_t inner, bool log) {
    for_n(outer * inner, detail::Softmax<T>{x, y, n, inner, log});
  }
  template <class T>
  static void softmax_backward(const T* y, const T* g, T* dx, index_t outer, index_t n, index_t inner, bool log) {
    for_n(outer * inner, detail::SoftmaxBackward<T>{y, g, dx, n, inner, log});
  }
  template <class T>
  static void logsumexp(const T* x, T* out, index_t outer, index_t n, index_t inner) {
    for_n(outer * inner, detail::LogSumExp<T>{x, out, n, inner});
  }
  template <class T>
  static void logsumexp_backward(const T* x, const T* lse, const T* g, T* dx, index_t outer, index_t n, index_t inner) {
    for_n(outer * n * inner, detail::LogSumExpBackward<T>{x, lse, g, dx, n, inner});
  }

  /// dx[o, idx[o, j, i], i] += g[o, j, i]. Several sources may hit one destination, so (m > 1) the
  /// destination keys are stable-sorted with their values and summed with reduce_by_key, then added
  /// at the unique keys: deterministic (same order on every run and device) and needing no atomics
  /// (no float/double atomicAdd, works unchanged on the host system).
  template <class T>
  static void scatter_add_axis(T* dx, const T* g, const std::int64_t* idx, index_t outer, index_t n, index_t inner,
                               index_t m) {
    const index_t total = outer * m * inner;
    if (total == 0) return;
    const detail::ScatterKey key{idx, n, inner, m};
    if (m == 1) {
      for_n(total, detail::ScatterDirect<T>{dx, g, key});
      return;
    }
    detail::Scratch<index_t, Dev> keys(total), perm(total), ukeys(total);
    detail::Scratch<T, Dev> vals(total), sums(total);
    transform_n(total, keys.p, key);
    transform_n(total, perm.p, detail::Iota{});
    index_t nu = 0;
    {
      typename Dev::temp_allocator a;
      thrust::stable_sort_by_key(Dev::policy(a), keys.p, keys.p + total, perm.p);
    }
    transform_n(total, vals.p, detail::GatherBy<T>{g, perm.p});
    {
      typename Dev::temp_allocator a;
      auto ends = thrust::reduce_by_key(Dev::policy(a), keys.p, keys.p + total, vals.p, ukeys.p, sums.p);
      nu = static_cast<index_t>(ends.first - ukeys.p);
    }
    for_n(nu, detail::AddAtKeys<T>{dx, ukeys.p, sums.p});
  }

  // ---- indexing ---------------------------------------------------------------------------------
  template <class T>
  static void gather_axis(const T* x, const std::int64_t* idx, T* out, index_t outer, index_t n, index_t inner,
                          index_t m) {
    transform_n(outer * m * inner, out, detail::GatherAxis<T>{x, idx, n, inner, m});
  }
  template <class T>
  static void copy_blocks(T* dst, index_t dst_stride, const T* src, index_t src_stride, index_t rows, index_t len,
                          bool accumulate) {
    for_n(rows * len, detail::CopyBlocks<T>{dst, src, dst_stride, src_stride, len, accumulate});
  }
  template <class T, std::size_t R>
  static void permute(const T* x, T* out, const std::array<index_t, R>& ext, const std::array<std::size_t, R>& perm,
                      bool accumulate) {
    std::array<index_t, R> in_stride{}, out_ext{}, s{};
    index_t acc = 1;
    for (std::size_t d = R; d-- > 0;) {
      in_stride[d] = acc;
      acc *= ext[d];
    }
    for (std::size_t d = 0; d < R; ++d) {
      out_ext[d] = ext[perm[d]];
      s[d] = in_stride[perm[d]];
    }
    for_n(acc, detail::Permute<T, R>{x, out, out_ext, s, accumulate});
  }
  /// Top-k per row: one thrust::sort of all positions by (row, value desc, index), then the first k
  /// of each row are taken. Same tie / NaN rules as the CPU.
  template <class T>
  static void topk(const T* x, T* values, std::int64_t* indices, index_t rows, index_t n, index_t k) {
    const index_t total = rows * n;
    if (total == 0 || k == 0) return;
    detail::Scratch<index_t, Dev> order(total);
    transform_n(total, order.p, detail::Iota{});
    {
      typename Dev::temp_allocator a;
      thrust::sort(Dev::policy(a), order.p, order.p + total, detail::TopkLess<T>{x, n});
    }
    for_n(rows * k, detail::TopkTake<T>{x, order.p, values, indices, n, k});
  }

  // ---- LayerNorm rows (grouped affine) ----------------------------------------------------------
  /// y[n] = (x[n] - mean) * rstd * gamma[n / rpg] + beta[n / rpg]; gamma / beta / stats may be null.
  /// One thread per row (Backend<cuda> replaces it with warp-per-row kernels).
  template <class T>
  static void layer_norm(const T* x, T* y, T* stats, const T* gamma, const T* beta, index_t rows, index_t dim,
                         index_t rows_per_group, T eps) {
    for_n(rows, detail::LayerNormRow<T>{x, y, stats, gamma, beta, dim, rows_per_group, eps});
  }
  /// Accumulates dx (one thread per row) and dgamma / dbeta (one thread per group and column,
  /// summing that group's rows in order: deterministic, no atomics). Null outputs are skipped.
  template <class T>
  static void layer_norm_backward(const T* x, const T* go, const T* stats, const T* gamma, T* dx, T* dgamma,
                                  T* dbeta, index_t rows, index_t dim, index_t rows_per_group) {
    if (dx) for_n(rows, detail::LayerNormInputGrad<T>{x, go, stats, gamma, dx, dim, rows_per_group});
    if (dgamma || dbeta)
      for_n(rows / rows_per_group * dim, detail::LayerNormParamGrad<T>{x, go, stats, dgamma, dbeta, dim, rows_per_group});
  }

  // ---- GEMM (generic: one thread per output element; Backend<cuda> replaces it with cuBLAS) --------
  template <class T>
  static void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda, const T* B,
                   index_t ldb, T beta, T* C, index_t ldc) {
    for_n(M * N, detail::GemmElem<T>{ta, tb, M, N, K, alpha, beta, A, lda, 0, B, ldb, 0, C, ldc, 0});
  }
  /// C = alpha op(A) op(B) + bias (bias [N] broadcast over rows; C not read): the rows start as the
  /// bias, then the GEMM (cuBLAS on the GPU) accumulates onto them.
  template <class T>
  static void gemm_bias(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda,
                        const T* B, index_t ldb, const T* bias, T* C, index_t ldc) {
    if (M == 0 || N == 0) return;
    for_n(M * N, detail::BiasRows<T>{bias, C, N, ldc});
    Backend<Dev>::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, T(1), C, ldc);
  }
  template <class T>
  static void gemm_batched(index_t batch, bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A,
                           index_t lda, index_t stride_a, const T* B, index_t ldb, index_t stride_b, T beta, T* C,
                           index_t ldc, index_t stride_c) {
    for_n(batch * M * N, detail::GemmElem<T>{ta, tb, M, N, K, alpha, beta, A, lda, stride_a, B, ldb, stride_b, C,
                                             ldc, stride_c});
  }
};

}  // namespace ttmoe::cuda_backend
