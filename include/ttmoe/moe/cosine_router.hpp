#pragma once
// GMoE / Tutel cosine router: logits = normalize(proj(x)) . normalize_columns(codebook) * scale with
// scale = exp(min(log_scale, ln 100)); during training N(0,1)/E noise is added before softmax and
// top-k. Gates are the probabilities of the noisy logits at the picks (not renormalised by default).

#include <cmath>
#include <random>
#include <vector>

#include "ttmoe/moe/router.hpp"

namespace ttmoe::moe {

/// Row-wise (Axis = 1) or column-wise (Axis = 0) L2 normalisation x / max(||x||, 1e-12), as
/// torch.nn.functional.normalize (the gradient passes through the norm unless it is clamped).
template <int Axis, class T, class D>
Tensor<T, DynShape<2>, D> l2_normalize(const Tensor<T, DynShape<2>, D>& x, double eps = 1e-12) {
  return x / maximum(sqrt(sum<Axis, true>(square(x))), T(eps));
}

/// The projection Linear(D -> dim) of a cosine router.
template <class T, class D = cpu>
struct CosineProj {
  Tensor<T, DynShape<2>, D> weight;
  Tensor<T, DynShape<1>, D> bias;
  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }
};

/// Cosine top-k router; parameters `proj.weight` [dim, D], `proj.bias` [dim], `codebook` [dim, E],
/// `log_scale` (scalar).
template <class T, class D = cpu>
struct CosineRouter {
  CosineProj<T, D> proj;
  Tensor<T, DynShape<2>, D> codebook;
  Tensor<T, Shape<>, D> log_scale;
  index_t top_k = 1;
  bool renormalize = false;
  double gate_noise = 1.0;  ///< noise std is gate_noise / E

  /// Fresh router: proj ~ U(+-1/sqrt(D)) (nn.Linear), codebook N(0, 0.01) (std 0.01), log_scale ln 2.
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

  template <class V>
  void visit_parameters(V& v) {
    v.sub("proj", proj);
    v("codebook", codebook);
    v("log_scale", log_scale);
  }

  index_t num_experts() const { return codebook.extent(1); }

  /// Routes x [N, D]. `noise` [N, E] ~ N(0, 1) in training (scaled here by gate_noise / E); pass an
  /// undefined tensor for evaluation (no noise).
  RouterOutput<T, D> forward(const Tensor<T, DynShape<2>, D>& x, const Tensor<T, DynShape<2>, D>& noise = {}) const {
    RouterOutput<T, D> o;
    Tensor<T, DynShape<2>, D> h = matmul<false, true>(x, proj.weight) + proj.bias;
    auto hn = l2_normalize<1>(h);
    auto cb = l2_normalize<0>(codebook);
    Tensor<T, Shape<>, D> scale = exp(minimum(log_scale, T(std::log(100.0))));
    o.logits = matmul(hn, cb) * scale;
    Tensor<T, DynShape<2>, D> noisy =
        noise.defined() ? Tensor<T, DynShape<2>, D>(o.logits + noise * T(gate_noise / double(num_experts())))
                        : o.logits;
    o.probs = softmax<-1>(noisy);
    std::tie(o.gates, o.indices) = topk_gates(noisy, o.probs, top_k, renormalize);
    return o;
  }

  /// Draws the training noise N(0, 1) [N, E] from a seeded generator.
  static Tensor<T, DynShape<2>, D> draw_noise(index_t n, index_t e, std::mt19937_64& rng) {
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<T> v(n * e);
    for (auto& a : v) a = T(nd(rng));
    return Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(n, e), v);
  }
};

}  // namespace ttmoe::moe
