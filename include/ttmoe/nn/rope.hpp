#pragma once
// Rotary position embedding, Hugging Face Llama convention (rotate_half, inv_freq = theta^(-2j/hd)).
// Angles are computed in double and rounded once to T, so the float path is as exact as it can be.
// rotate_half is one GEMM with a constant signed permutation matrix: it is differentiable through
// matmul's VJP and needs no slicing on the last axis.

#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/indexing.hpp"  // IndexTensor
#include "ttmoe/ops/matmul.hpp"

namespace ttmoe::nn {

/// Frequency scaling of RoPE (Hugging Face `rope_scaling` / `rope_parameters`): none, or Llama 3.1's
/// "llama3" (low frequencies divided by `factor`, high ones kept, a smooth ramp between).
struct RopeScaling {
  enum class Type { none, llama3 } type = Type::none;  ///< the rope_type
  double factor = 1.0;                                  ///< llama3: low-frequency divisor
  double low_freq_factor = 1.0;                         ///< llama3: wavelengths above orig/low are scaled
  double high_freq_factor = 4.0;                        ///< llama3: wavelengths below orig/high are kept
  double original_max_position_embeddings = 8192;      ///< llama3: the pre-training context
};

/// inv_freq[j] = theta^(-2j/hd) for j < hd/2, then the scaling's rewrite (transformers'
/// `_compute_llama3_parameters`). In double: the tables are built once per forward, not per element.
inline std::vector<double> rope_inv_freq(index_t head_dim, double theta = 10000.0, const RopeScaling& sc = {}) {
  const index_t half = head_dim / 2;
  std::vector<double> inv(static_cast<std::size_t>(half));
  for (index_t j = 0; j < half; ++j) inv[std::size_t(j)] = std::pow(theta, -2.0 * double(j) / double(head_dim));
  if (sc.type == RopeScaling::Type::llama3) {
    const double pi = 3.14159265358979323846;
    const double low_wavelen = sc.original_max_position_embeddings / sc.low_freq_factor;
    const double high_wavelen = sc.original_max_position_embeddings / sc.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * pi / f;
      if (wavelen > low_wavelen) {
        f = f / sc.factor;
      } else if (wavelen >= high_wavelen) {  // the medium band: interpolate between scaled and kept
        const double smooth = (sc.original_max_position_embeddings / wavelen - sc.low_freq_factor) /
                              (sc.high_freq_factor - sc.low_freq_factor);
        f = (1.0 - smooth) * f / sc.factor + smooth * f;
      }
    }
  }
  return inv;
}

/// cos / sin tables [P..., hd] for integer positions of any shape P (cat(ang, ang) layout), from the
/// inverse frequencies `inv_freq` (hd / 2 of them, see rope_inv_freq).
template <class T, class SI, class D>
std::pair<Tensor<T, DynShape<SI::rank + 1>, D>, Tensor<T, DynShape<SI::rank + 1>, D>> rope_cos_sin(
    const IndexTensor<SI, D>& positions, const std::vector<double>& inv_freq) {
  const index_t half = index_t(inv_freq.size()), head_dim = 2 * half;
  std::array<index_t, SI::rank + 1> e{};
  const auto ep = positions.extents();
  for (std::size_t i = 0; i < SI::rank; ++i) e[i] = ep[i];
  e[SI::rank] = head_dim;
  const auto shp = DynShape<SI::rank + 1>::from_extents(e);
  const auto pos = positions.to_vector();
  std::vector<T> c(shp.numel()), s(shp.numel());  // built on the host, then copied to D
  for (std::size_t n = 0; n < pos.size(); ++n)
    for (index_t j = 0; j < half; ++j) {
      const double a = double(pos[n]) * inv_freq[std::size_t(j)];
      const index_t o = index_t(n) * head_dim;
      c[o + j] = c[o + j + half] = static_cast<T>(std::cos(a));
      s[o + j] = s[o + j + half] = static_cast<T>(std::sin(a));
    }
  using TT = Tensor<T, DynShape<SI::rank + 1>, D>;
  return {TT::from_host(shp, c), TT::from_host(shp, s)};
}

/// cos / sin tables with unscaled frequencies theta^(-2j/hd).
template <class T, class SI, class D>
std::pair<Tensor<T, DynShape<SI::rank + 1>, D>, Tensor<T, DynShape<SI::rank + 1>, D>> rope_cos_sin(
    const IndexTensor<SI, D>& positions, index_t head_dim, double theta = 10000.0) {
  return rope_cos_sin<T>(positions, rope_inv_freq(head_dim, theta));
}

/// The [hd, hd] matrix R with x @ R = rotate_half(x) = cat(-x[hd/2:], x[:hd/2]).
template <class T, class D = cpu>
Tensor<T, DynShape<2>, D> rotate_half_matrix(index_t head_dim) {
  std::vector<T> r(head_dim * head_dim, T(0));
  const index_t h = head_dim / 2;
  for (index_t i = 0; i < h; ++i) {
    r[(i + h) * head_dim + i] = T(-1);
    r[i * head_dim + i + h] = T(1);
  }
  return Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(head_dim, head_dim), r);
}

/// Applies RoPE to x [B, H, T, hd] with cos/sin [B, T, hd] or [T, hd] (broadcast over heads).
template <class T, class S, class SC, class D>
Tensor<T, DynShape<4>, D> apply_rope(const Tensor<T, S, D>& x, const Tensor<T, SC, D>& cos,
                                     const Tensor<T, SC, D>& sin) {
  static_assert(S::rank == 4, "apply_rope: x is [B, heads, T, head_dim]");
  const index_t hd = x.extent(3);
  const index_t b = SC::rank == 3 ? cos.extent(0) : 1;
  const auto shp = DynShape<4>(b, 1, x.extent(2), hd);
  auto c4 = cos.reshape(shp), s4 = sin.reshape(shp);
  Tensor<T, DynShape<4>, D> rot = matmul(x, rotate_half_matrix<T, D>(hd));
  return x * c4 + rot * s4;
}

/// Functional RoPE from positions ([B, T] or [T]); q and k may have different head counts.
template <class T, class S, class SI, class D>
Tensor<T, DynShape<4>, D> rope(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& positions,
                               double theta = 10000.0) {
  auto [c, s] = rope_cos_sin<T>(positions, x.extent(3), theta);
  return apply_rope(x, c, s);
}

}  // namespace ttmoe::nn
