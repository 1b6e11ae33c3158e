#pragma once
// LayerNorm over the last axis as ONE differentiable op. The composed version (mean, centre, square,
// mean, rsqrt, affine) makes ~6 passes over [rows, D] and keeps several [rows, D] intermediates alive
// for the backward; here the forward is one parallel sweep over rows (each row is read while hot in
// cache) and the VJP keeps only a handle on x (which the caller holds anyway: in a pre-norm
// transformer it is the residual stream) plus per-row mean and rstd. xhat is recomputed in the VJP,
// which is cheaper than storing it. Host kernel: requires a host-accessible device.

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/ops/record.hpp"

namespace ttmoe::nn {

namespace detail {
/// Rows per parallel_for grain: enough work (~16k elements) per task to amortise scheduling.
inline index_t layernorm_row_grain(index_t dim) { return std::max<index_t>(1, 16384 / std::max<index_t>(1, dim)); }

/// Mean and biased variance of one row, two-pass (the centred pass avoids the cancellation of
/// E[x^2] - E[x]^2), accumulated in double for float input so parity with float64 references holds.
template <class T>
inline void row_moments(const T* r, index_t dim, T& mean_out, T& var_out) {
  using A = double;
  A s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  index_t d = 0;
  for (; d + 4 <= dim; d += 4) {  // four independent chains: lets the compiler pipeline the adds
    s0 += A(r[d]);
    s1 += A(r[d + 1]);
    s2 += A(r[d + 2]);
    s3 += A(r[d + 3]);
  }
  for (; d < dim; ++d) s0 += A(r[d]);
  const A mu = (s0 + s1 + s2 + s3) / A(dim);
  s0 = s1 = s2 = s3 = 0;
  d = 0;
  for (; d + 4 <= dim; d += 4) {
    const A a = A(r[d]) - mu, b = A(r[d + 1]) - mu, c = A(r[d + 2]) - mu, e = A(r[d + 3]) - mu;
    s0 += a * a;
    s1 += b * b;
    s2 += c * c;
    s3 += e * e;
  }
  for (; d < dim; ++d) s0 += (A(r[d]) - mu) * (A(r[d]) - mu);
  mean_out = T(mu);
  var_out = T((s0 + s1 + s2 + s3) / A(dim));
}
}  // namespace detail

/// Fused LayerNorm: y = (x - mean) * rstd * weight + bias over the last axis (biased variance,
/// rstd = 1/sqrt(var + eps)). `weight` / `bias` are [D] or undefined (no affine part). The output
/// keeps x's shape type (so a static Shape<dyn, 197, 768> stays static). Records one VJP giving dx
/// and, only for operands that require grad, dweight / dbias.
template <class T, class S, class D, class SW>
Tensor<T, S, D> layer_norm_fused(const Tensor<T, S, D>& x, const Tensor<T, SW, D>& weight,
                                 const Tensor<T, SW, D>& bias, T eps = T(1e-6)) {
  static_assert(D::host_accessible, "ttmoe: layer_norm_fused has a host kernel only");
  static_assert(SW::rank == 1, "layer_norm_fused: weight / bias are [D]");
  const index_t Dm = x.extent(S::rank - 1);
  const index_t N = Dm ? x.numel() / Dm : 0;
  if ((weight.defined() && weight.extent(0) != Dm) || (bias.defined() && bias.extent(0) != Dm))
    throw ShapeError("layer_norm: input " + x.shape().to_string() + " vs weight " +
                     (weight.defined() ? weight.shape().to_string() : std::string("-")) + " / bias " +
                     (bias.defined() ? bias.shape().to_string() : std::string("-")));
  Tensor<T, S, D> y(x.shape());
  const bool rec = should_record(x, weight, bias);
  // Per-row statistics are only kept when a backward will read them.
  auto stats = rec ? std::make_shared<std::vector<T>>(std::size_t(2 * N)) : nullptr;
  const T* xp = x.data();
  const T* wp = weight.defined() ? weight.data() : nullptr;
  const T* bp = bias.defined() ? bias.data() : nullptr;
  T* yp = y.data();
  T* sp = stats ? stats->data() : nullptr;
  cpu_backend::parallel_for(N, detail::layernorm_row_grain(Dm), [&](index_t b, index_t e) {
    for (index_t n = b; n < e; ++n) {
      const T* r = xp + n * Dm;
      T* o = yp + n * Dm;
      T mu, var;
      detail::row_moments(r, Dm, mu, var);
      const T rs = T(1) / std::sqrt(var + eps);
      if (sp) {
        sp[2 * n] = mu;
        sp[2 * n + 1] = rs;
      }
      if (wp && bp)
        for (index_t d = 0; d < Dm; ++d) o[d] = (r[d] - mu) * rs * wp[d] + bp[d];
      else if (wp)
        for (index_t d = 0; d < Dm; ++d) o[d] = (r[d] - mu) * rs * wp[d];
      else
        for (index_t d = 0; d < Dm; ++d) o[d] = (r[d] - mu) * rs;
    }
  });
  if (rec) {
    auto mx = x.requires_grad() ? x.meta() : nullptr;
    auto mw = weight.defined() && weight.requires_grad() ? weight.meta() : nullptr;
    auto mb = bias.defined() && bias.requires_grad() ? bias.meta() : nullptr;
    Tensor<T, S, D> xs = x;  // handle only: x's storage is what the VJP re-normalises
    Tensor<T, SW, D> ws = weight;
    record("layer_norm", y, [=](const T* go) {
      T* dx = mx ? mx->accumulate_target() : nullptr;
      T* dw = mw ? mw->accumulate_target() : nullptr;
      T* db = mb ? mb->accumulate_target() : nullptr;
      const T* xr = xs.data();
      const T* w = ws.defined() ? ws.data() : nullptr;
      const T* st = stats->data();
      // dweight / dbias reduce over rows: each chunk sums into its own slice, summed serially after.
      const index_t grain = detail::layernorm_row_grain(Dm);
      const index_t chunks = (dw || db) ? (N + grain - 1) / grain : 0;
      std::vector<T> part(std::size_t(chunks * 2 * Dm), T(0));
      cpu_backend::parallel_for(N, grain, [&](index_t b, index_t e) {
        std::vector<T> dh(static_cast<std::size_t>(Dm));
        for (index_t n = b; n < e; ++n) {
          const T mu = st[2 * n], rs = st[2 * n + 1];
          const T* r = xr + n * Dm;
          const T* g = go + n * Dm;
          if (dw || db) {
            // Row n always lands in the chunk n / grain, however parallel_for splits the range.
            T* pw = part.data() + (n / grain) * 2 * Dm;
            T* pb = pw + Dm;
            for (index_t d = 0; d < Dm; ++d) {
              pw[d] += g[d] * (r[d] - mu) * rs;
              pb[d] += g[d];
            }
          }
          if (!dx) continue;
          // dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
          double m1 = 0, m2 = 0;
          for (index_t d = 0; d < Dm; ++d) {
            const T v = w ? g[d] * w[d] : g[d];
            dh[d] = v;
            m1 += double(v);
            m2 += double(v) * double((r[d] - mu) * rs);
          }
          const T a = T(m1 / double(Dm)), c = T(m2 / double(Dm));
          T* o = dx + n * Dm;
          for (index_t d = 0; d < Dm; ++d) o[d] += rs * (dh[d] - a - (r[d] - mu) * rs * c);
        }
      });
      for (index_t k = 0; k < chunks; ++k) {
        const T* pw = part.data() + k * 2 * Dm;
        for (index_t d = 0; d < Dm; ++d) {
          if (dw) dw[d] += pw[d];
          if (db) db[d] += pw[Dm + d];
        }
      }
    });
  }
  return y;
}

}  // namespace ttmoe::nn
