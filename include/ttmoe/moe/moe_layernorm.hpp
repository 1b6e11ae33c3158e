#pragma once
// MoE-LayerNorm (MoETTA): a frozen shared LayerNorm plus E expert (weight, bias) deltas chosen by a
// linear router from the token-mean of the raw input (per sample) or from each token. The chosen
// deltas enter through c = p_top / stopgrad(p_top) (value 1) so the router gets a gradient although
// the top-k pick is discrete. The forward keeps probs and picks for the load-balancing loss.

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/layer_norm.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

/// Expert deltas [E, D], zero-initialised (the adapted model starts as the pretrained one).
template <class T, class D = cpu>
struct LayerNormExperts {
  Tensor<T, DynShape<2>, D> weight_delta, bias_delta;
  template <class V>
  void visit_parameters(V& v) {
    v("weight_delta", weight_delta);
    v("bias_delta", bias_delta);
  }
};

/// Linear router parameters: weight [E, D], bias [E].
template <class T, class D = cpu>
struct RouterParams {
  Tensor<T, DynShape<2>, D> weight;
  Tensor<T, DynShape<1>, D> bias;
  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }
};

/// MoE-LayerNorm module; parameters named as the fixtures: weight, bias, experts.*, router.*.
template <class T, class D = cpu>
struct MoELayerNorm {
  Tensor<T, DynShape<1>, D> weight, bias;  ///< frozen shared affine [D]
  LayerNormExperts<T, D> experts;
  RouterParams<T, D> router;
  double eps = 1e-6;
  index_t top_k = 1;
  bool per_token = false;  ///< route each token instead of each sample's token mean

  /// Routing state of the last forward: probs [G, E] (G = B or B*T), picks [G, k].
  Tensor<T, DynShape<2>, D> probs;
  IndexTensor<DynShape<2>, D> top_index;
  /// Test hook: when defined ([G, k]), divides by these constants instead of stopgrad(p_top), so that
  /// finite differences see the function whose derivative is the straight-through gradient.
  Tensor<T, DynShape<2>, D> coefficient_denominator;

  /// Builds the module around a pretrained LayerNorm (cloned, frozen) with E zero-delta experts and
  /// a Xavier-normal router (bias zero).
  static MoELayerNorm from_layernorm(const Tensor<T, DynShape<1>, D>& w, const Tensor<T, DynShape<1>, D>& b,
                                     index_t num_experts, std::mt19937_64& rng) {
    MoELayerNorm m;
    const index_t Dm = w.extent(0);
    {
      autograd::NoGrad ng;
      m.weight = w.detach().clone();
      m.bias = b.detach().clone();
    }
    m.experts.weight_delta = Tensor<T, DynShape<2>, D>::zeros(DynShape<2>(num_experts, Dm));
    m.experts.bias_delta = Tensor<T, DynShape<2>, D>::zeros(DynShape<2>(num_experts, Dm));
    std::normal_distribution<double> nd(0.0, std::sqrt(2.0 / double(Dm + num_experts)));
    std::vector<T> rw(num_experts * Dm);
    for (auto& v : rw) v = T(nd(rng));
    m.router.weight = Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(num_experts, Dm), rw);
    m.router.bias = Tensor<T, DynShape<1>, D>::zeros(DynShape<1>(num_experts));
    m.experts.weight_delta.set_requires_grad();
    m.experts.bias_delta.set_requires_grad();
    m.router.weight.set_requires_grad();
    m.router.bias.set_requires_grad();
    return m;
  }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
    v.sub("experts", experts);
    v.sub("router", router);
  }

  index_t num_experts() const { return router.weight.extent(0); }

  /// y = normalize(x) * gamma_g + beta_g for x [B, T, D]; g is the sample (or token).
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, DynShape<3>, D>& x) {
    if (per_token) return apply(x, x.reshape(DynShape<2>(x.extent(0) * x.extent(1), x.extent(2))));
    return apply(x, mean<1>(x));
  }

  /// Sample routing only: routes sample b from token_mean[b] [B, D], the mean over all tokens of
  /// the layer's full input, and normalises x [B, T', D], any subset of those tokens (a model that
  /// needs only the class token's output passes just it). Same values, routing state and balance
  /// loss as forward(full input) restricted to those tokens.
  Tensor<T, DynShape<3>, D> forward_routed(const Tensor<T, DynShape<3>, D>& x, const Tensor<T, DynShape<2>, D>& token_mean) {
    if (per_token) throw std::logic_error("MoELayerNorm::forward_routed: per-token routing reads every token");
    if (token_mean.extent(0) != x.extent(0) || token_mean.extent(1) != x.extent(2))
      throw ShapeError("MoELayerNorm::forward_routed: token mean " + token_mean.shape().to_string() + " for x " +
                       x.shape().to_string());
    return apply(x, token_mean);
  }

 private:
  /// Routes the G rows of z (G = B, or B*T per token) and normalises x with each group's affine.
  Tensor<T, DynShape<3>, D> apply(const Tensor<T, DynShape<3>, D>& x, const Tensor<T, DynShape<2>, D>& z) {
    const index_t B = x.extent(0), Tn = x.extent(1), Dm = x.extent(2);
    const index_t G = per_token ? B * Tn : B;
    auto x2 = x.reshape(DynShape<2>(B * Tn, Dm));
    Tensor<T, DynShape<2>, D> logits = matmul<false, true>(z, router.weight) + router.bias;
    probs = softmax<-1>(logits);
    auto [ptop, idx] = topk(probs, top_k);
    top_index = idx;
    Tensor<T, DynShape<2>, D> denom = coefficient_denominator.defined() ? coefficient_denominator : ptop.detach();
    Tensor<T, DynShape<2>, D> c = ptop / denom;  // value 1; d c / d p_top = 1 / p_top
    auto flat_idx = idx.reshape(DynShape<1>(G * top_k));
    auto c3 = c.reshape(DynShape<3>(G, top_k, 1));
    auto wd = index_select(experts.weight_delta, flat_idx).reshape(DynShape<3>(G, top_k, Dm));
    auto bd = index_select(experts.bias_delta, flat_idx).reshape(DynShape<3>(G, top_k, Dm));
    Tensor<T, DynShape<2>, D> gamma = sum<1>(c3 * wd) + weight;
    Tensor<T, DynShape<2>, D> beta = sum<1>(c3 * bd) + bias;
    // Row n of x2 is token n % Tn of sample n / Tn: its affine row is n (per token) or n / Tn.
    return layer_norm_rows(x2, gamma, beta, per_token ? 1 : Tn, T(eps), "grouped_layernorm")
        .reshape(DynShape<3>(B, Tn, Dm));
  }

 public:

  /// E * sum_e mean_g(p[g, e]) * count_e / sum(count) over the last forward's top-1 picks (the first
  /// pick when top_k > 1); the counts are constants, so the gradient flows through the probabilities only.
  Tensor<T, Shape<>, D> balance_loss() const {
    const index_t E = num_experts(), G = probs.extent(0);
    std::vector<T> counts(E, T(0));
    const auto picks = top_index.to_vector();
    for (index_t g = 0; g < G; ++g) counts[picks[g * top_index.extent(1)]] += T(1);
    auto cnt = Tensor<T, DynShape<1>, D>::from_host(DynShape<1>(E), counts);
    return sum_all(mean<0>(probs) * cnt, T(E) / T(G));
  }
};

}  // namespace ttmoe::moe
