#pragma once
// GMoE / Tutel cosine router: logits = normalize(proj(x)) . normalize_columns(codebook) * scale with
// scale = exp(min(log_scale, ln 100)). Routing by cosine similarity bounds every logit by the scale,
// so no expert can win by the norm of its embedding alone (the reason GMoE prefers it to a linear
// router). Noise, softmax, top-k and gates follow route_logits() (router.hpp): gates are the noisy
// probabilities at the picks, not renormalised by default (GMoE's code routes top-1 unnormalised).

#include <cmath>
#include <random>
#include <vector>

#include "ttmoe/moe/router.hpp"
#include "ttmoe/nn/linear.hpp"
#include "ttmoe/ops/record.hpp"

namespace ttmoe::moe {

/// Row-wise (Axis = 1) or column-wise (Axis = 0) L2 normalisation x / max(||x||, 1e-12), as
/// torch.nn.functional.normalize (the gradient passes through the norm unless it is clamped).
template <int Axis, class T, class D>
Tensor<T, DynShape<2>, D> l2_normalize(const Tensor<T, DynShape<2>, D>& x, double eps = 1e-12) {
  return x / maximum(sqrt(sum<Axis, true>(square(x))), T(eps));
}

/// l2_normalize<1>(h) @ c for h [N, K] and c [K, E] as ONE recorded op, computed as (h @ c) / r with
/// r = max(||h_n||, eps) per row: the cosine router's similarity. Why not the composition: for GMoE's
/// router (N = tokens, K = 256, E = 6) normalising h first wrote and re-read a normalised copy of the
/// [N, K] projection and took a dozen elementwise and reduction passes over it, forward and backward,
/// about a third of the router's time beside its projection GEMM; here ONE pass over h each way on
/// backends with NormalizedRowsBackend (the norms with the E dot products; both gradients), else the
/// norms (one reduction) and a GEMM with E columns, and two GEMMs and one row-scaled add backward.
/// VJP (g [N, E], out = (h @ c) / r): dc = h^T (g / r); dh = (g / r) c^T - h * a_n / r_n^2 with
/// a_n = sum_e g_ne out_ne, the second term only where ||h_n|| > eps (the clamp passes no gradient).
template <class T, class D>
Tensor<T, DynShape<2>, D> normalized_rows_matmul(const Tensor<T, DynShape<2>, D>& h, const Tensor<T, DynShape<2>, D>& c,
                                                 double eps = 1e-12) {
  if (h.extent(1) != c.extent(0))
    throw ShapeError("normalized_rows_matmul: h " + h.shape().to_string() + " and c " + c.shape().to_string() +
                     " do not chain ([N, K] and [K, E])");
  const index_t N = h.extent(0), K = h.extent(1), E = c.extent(1);
  Tensor<T, DynShape<2>, D> norm, r, out;
  if constexpr (NormalizedRowsBackend<D, T>) {  // one pass over h (the VJP below needs r, not norm)
    r = Tensor<T, DynShape<2>, D>(DynShape<2>(N, 1));
    out = Tensor<T, DynShape<2>, D>(DynShape<2>(N, E));
    Backend<D>::normalized_rows_matmul(h.data(), c.data(), out.data(), r.data(), N, K, E, T(eps));
  } else {
    autograd::NoGrad ng;  // one op on the tape: its VJP below
    norm = sqrt(sum<1, true>(square(h)));  // [N, 1]
    r = maximum(norm, T(eps));
    out = Tensor<T, DynShape<2>, D>(matmul(h, c) / r);
  }
  if (should_record(h, c)) {
    auto mh = h.meta(), mc = c.meta();
    const auto values = out.detach();  // the VJP reads out's values, not its gradient state
    const auto h_values = h.detach(), c_values = c.detach();
    record("normalized_rows_matmul", out, [=](const T* gp) {
      // The [N, E] gradient as a tensor for the small elementwise steps (a copy: N x E values).
      if constexpr (NormalizedRowsBackend<D, T>) {  // one pass over h for both gradients
        const auto th = mh ? mh->target() : autograd::GradTarget<T>{nullptr, false};
        const auto tc = mc ? mc->target() : autograd::GradTarget<T>{nullptr, false};
        Backend<D>::normalized_rows_matmul_vjp(gp, h_values.data(), c_values.data(), values.data(), r.data(), N, K, E,
                                               T(eps), th.data, !th.fresh, tc.data, !tc.fresh);
        return;
      }
      Tensor<T, DynShape<2>, D> g(DynShape<2>(N, E));
      D::template copy<T>(g.data(), gp, N * E);
      Tensor<T, DynShape<2>, D> gr = g / r;
      if (mc) {  // dc [K, E] = h^T [K, N] gr [N, E]
        auto t = mc->target();
        Backend<D>::gemm(true, false, K, E, N, T(1), h_values.data(), K, gr.data(), E, t.fresh ? T(0) : T(1), t.data, E);
      }
      if (mh) {  // dh [N, K] = gr [N, E] c^T [E, K] - h * coef
        Tensor<T, DynShape<2>, D> coef = where(norm > T(eps), sum<1, true>(g * values) / (r * r), T(0));
        Tensor<T, DynShape<2>, D> radial = h_values * (-coef);
        auto t = mh->target();
        Backend<D>::gemm(false, true, N, K, E, T(1), gr.data(), E, c_values.data(), E, t.fresh ? T(0) : T(1), t.data, K);
        Backend<D>::add_inplace(t.data, radial.data(), N * K);
      }
    });
  }
  return out;
}

/// Cosine top-k router; parameters `proj.weight` [dim, D], `proj.bias` [dim], `codebook` [dim, E],
/// `log_scale` (scalar).
template <class T, class D = cpu>
struct CosineRouter {
  nn::Linear<T, D> proj;  ///< Linear(D -> dim) with bias (GMoE: dim 256)
  Tensor<T, DynShape<2>, D> codebook;
  Tensor<T, Shape<>, D> log_scale;
  index_t top_k = 1;
  bool renormalize = false;
  double gate_noise = 1.0;  ///< noise std is gate_noise / E

  /// Fresh router: proj ~ U(+-1/sqrt(D)) (nn.Linear), codebook N(0, 0.01) (std 0.01), log_scale ln 2
  /// (temperature 0.5). The small codebook makes the experts start evenly chosen (paper, App. C.2).
  static CosineRouter init(index_t in, index_t dim, index_t num_experts, std::mt19937_64& rng) {
    CosineRouter r;
    const double bound = 1.0 / std::sqrt(double(in));
    std::uniform_real_distribution<double> u(-bound, bound);
    std::normal_distribution<double> n(0.0, 0.01);
    std::vector<T> w(dim * in), b(dim), c(dim * num_experts);
    for (auto& v : w) v = T(u(rng));
    for (auto& v : b) v = T(u(rng));
    for (auto& v : c) v = T(n(rng));
    r.proj.weight = Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(dim, in), w);
    r.proj.bias = Tensor<T, DynShape<1>, D>::from_host(DynShape<1>(dim), b);
    r.codebook = Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(dim, num_experts), c);
    r.log_scale = Tensor<T, Shape<>, D>::full(Shape<>(), T(std::log(2.0)));
    r.proj.weight.set_requires_grad();
    r.proj.bias.set_requires_grad();
    r.codebook.set_requires_grad();
    r.log_scale.set_requires_grad();
    return r;
  }

  /// Parameters `proj.weight`, `proj.bias`, `codebook`, `log_scale` (the fixtures' names; Tutel's
  /// CosineTopKGate calls them cosine_projector.*, sim_matrix and temperature, the latter of shape [1]).
  template <class V>
  void visit_parameters(V& v) {
    v.sub("proj", proj);
    v("codebook", codebook);
    v("log_scale", log_scale);
  }

  /// E, the codebook's columns.
  index_t num_experts() const { return codebook.extent(1); }
  /// The token features the router expects.
  index_t in_features() const { return proj.weight.extent(1); }

  /// Routes x [N, D]. `noise` [N, E] ~ N(0, 1) in training (scaled here by gate_noise / E); pass an
  /// undefined tensor for evaluation (no noise).
  RouterOutput<T, D> forward(const Tensor<T, DynShape<2>, D>& x, const Tensor<T, DynShape<2>, D>& noise = {}) const {
    if (x.extent(1) != in_features())
      throw ShapeError("CosineRouter: x " + x.shape().to_string() + " does not fit proj.weight " +
                       proj.weight.shape().to_string() + " ([dim, features])");
    if (codebook.extent(0) != proj.weight.extent(0))
      throw ShapeError("CosineRouter: codebook " + codebook.shape().to_string() + " must have proj's output size " +
                       std::to_string(proj.weight.extent(0)) + " rows ([dim, experts])");
    auto cb = l2_normalize<0>(codebook);  // [dim, E]: small, composed
    Tensor<T, Shape<>, D> scale = exp(minimum(log_scale, T(std::log(100.0))));
    Tensor<T, DynShape<2>, D> logits = normalized_rows_matmul(proj(x), cb) * scale;
    return route_logits(logits, noise, top_k, renormalize, gate_noise, "CosineRouter");
  }

  /// Draws the training noise N(0, 1) [N, E] (kept for callers of the router alone; see draw_router_noise).
  static Tensor<T, DynShape<2>, D> draw_noise(index_t n, index_t e, std::mt19937_64& rng) {
    return draw_router_noise<T, D>(n, e, rng);
  }
};

}  // namespace ttmoe::moe
