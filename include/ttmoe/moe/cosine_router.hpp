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

namespace ttmoe::moe {

/// Row-wise (Axis = 1) or column-wise (Axis = 0) L2 normalisation x / max(||x||, 1e-12), as
/// torch.nn.functional.normalize (the gradient passes through the norm unless it is clamped).
template <int Axis, class T, class D>
Tensor<T, DynShape<2>, D> l2_normalize(const Tensor<T, DynShape<2>, D>& x, double eps = 1e-12) {
  return x / maximum(sqrt(sum<Axis, true>(square(x))), T(eps));
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
    auto hn = l2_normalize<1>(proj(x));
    auto cb = l2_normalize<0>(codebook);
    Tensor<T, Shape<>, D> scale = exp(minimum(log_scale, T(std::log(100.0))));
    Tensor<T, DynShape<2>, D> logits = matmul(hn, cb) * scale;
    return route_logits(logits, noise, top_k, renormalize, gate_noise, "CosineRouter");
  }

  /// Draws the training noise N(0, 1) [N, E] (kept for callers of the router alone; see draw_router_noise).
  static Tensor<T, DynShape<2>, D> draw_noise(index_t n, index_t e, std::mt19937_64& rng) {
    return draw_router_noise<T, D>(n, e, rng);
  }
};

}  // namespace ttmoe::moe
