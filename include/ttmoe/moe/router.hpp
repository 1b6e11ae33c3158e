#pragma once
// Token routers for MoE layers, with one interface so that a layer (moe::MoEFFN) can take any of them:
//
//   RouterOutput<T, D> forward(x [N, D], noise [N, E] or undefined) const;
//   index_t num_experts() const;  index_t in_features() const;  index_t top_k;
//
// Every router computes clean logits its own way and hands them to route_logits(), which does what
// GMoE's Tutel gate does after the logits: training noise N(0, 1) * gate_noise / E added to the logits
// (the caller draws it, so a run is reproducible and a test can fix it), softmax, the top-k of the
// probabilities, and the gates = the picked probabilities, optionally renormalised over the k picks.
// The pick itself is not differentiated; the gradient reaches the router through the picked
// probabilities (and the renormaliser). Keeping the noisy logits and the noise scale in the output is
// what lets gmoe_aux_losses() be computed from a layer's routing state afterwards.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/linear.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

/// What a router returns for N tokens and E experts. Every tensor is recorded on the active tape.
template <class T, class D = cpu>
struct RouterOutput {
  Tensor<T, DynShape<2>, D> logits;        ///< [N, E] clean logits (the aux losses' importance input)
  Tensor<T, DynShape<2>, D> noisy_logits;  ///< [N, E] logits + noise * noise_std; the clean logits without noise
  Tensor<T, DynShape<2>, D> probs;         ///< [N, E] softmax(noisy_logits): what the picks and gates read
  IndexTensor<DynShape<2>, D> indices;     ///< [N, k] picks by descending probability, ties -> lower expert
  Tensor<T, DynShape<2>, D> top_probs;     ///< [N, k] probs at the picks (column 0 is the token's priority)
  Tensor<T, DynShape<2>, D> top_gates;     ///< [N, k] combine weights: top_probs, or top_probs / their sum
  Tensor<T, DynShape<2>, D> gates;         ///< [N, E] top_gates scattered densely (zero off the picks)
  double noise_std = 0;                    ///< gate_noise / E: the noise scale, also the load loss's CDF scale

  /// k: the picks per token.
  index_t top_k() const { return indices.extent(1); }
  /// E: the experts routed over.
  index_t num_experts() const { return logits.extent(1); }
};

/// Throws ValueError unless 1 <= k <= E: a top-k beyond the expert count has no meaning, and catching it
/// here names the layer instead of failing later inside topk.
inline void check_top_k(index_t k, index_t num_experts, const std::string& who) {
  if (k < 1 || k > num_experts)
    throw ValueError(who + ": top_k = " + std::to_string(k) + " must lie in [1, " + std::to_string(num_experts) +
                     "] (the number of experts)");
}

/// The routing step shared by every router: noise, softmax, top-k, gates (see the file comment).
/// `noise` is standard-normal [N, E] (scaled here by gate_noise / E) or undefined for evaluation.
template <class T, class D>
RouterOutput<T, D> route_logits(const Tensor<T, DynShape<2>, D>& logits, const Tensor<T, DynShape<2>, D>& noise,
                                index_t top_k, bool renormalize, double gate_noise, const std::string& who) {
  const index_t E = logits.extent(1);
  check_top_k(top_k, E, who);
  if (noise.defined() && noise.extents() != logits.extents())
    throw ShapeError(who + ": noise " + noise.shape().to_string() + " must have the logits' shape " +
                     logits.shape().to_string() + " ([tokens, experts])");
  RouterOutput<T, D> o;
  o.noise_std = gate_noise / double(E);
  o.logits = logits;
  o.noisy_logits = noise.defined() ? Tensor<T, DynShape<2>, D>(logits + noise * T(o.noise_std)) : logits;
  o.probs = softmax<-1>(o.noisy_logits);
  {
    autograd::NoGrad ng;  // the selection is not differentiated
    o.indices = topk(o.probs, top_k).second;
  }
  o.top_probs = gather<1>(o.probs, o.indices);
  o.top_gates = renormalize ? Tensor<T, DynShape<2>, D>(o.top_probs / sum<1, true>(o.top_probs)) : o.top_probs;
  auto zeros = Tensor<T, DynShape<2>, D>::zeros(o.probs.shape());
  o.gates = scatter_add<1>(zeros, o.indices, o.top_gates);
  return o;
}

/// Draws the standard-normal router noise [N, E] from a seeded generator (training only). It is drawn
/// on the host and copied: it is small (tokens x experts), and a seeded host stream is reproducible on
/// every device.
template <class T, class D = cpu>
Tensor<T, DynShape<2>, D> draw_router_noise(index_t n, index_t e, std::mt19937_64& rng) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<T> v(n * e);
  for (auto& a : v) a = T(nd(rng));
  return Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(n, e), v);
}

/// nn.Linear(D -> E) router (V-MoE / the GMoE paper's Eq. 3); parameters `weight` [E, D] and an optional
/// `bias` [E] (left undefined for a bias-less router: the visitor then skips it, so checkpoints of
/// either kind load by name).
template <class T, class D = cpu>
struct LinearRouter {
  Tensor<T, DynShape<2>, D> weight;
  Tensor<T, DynShape<1>, D> bias;  ///< may be undefined (no bias)
  index_t top_k = 1;
  bool renormalize = false;  ///< divide the k gates by their sum (Tutel does for k > 1; GMoE's code uses k = 1)
  double gate_noise = 1.0;   ///< training noise std is gate_noise / E (applied only when forward gets noise)

  /// Parameters `weight`, `bias` (an undefined bias is skipped by the visitor).
  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }

  /// E, the rows of the weight.
  index_t num_experts() const { return weight.extent(0); }
  /// The token features the router expects.
  index_t in_features() const { return weight.extent(1); }

  /// Routes x [N, D]; `noise` [N, E] ~ N(0, 1) in training, undefined for evaluation.
  RouterOutput<T, D> forward(const Tensor<T, DynShape<2>, D>& x, const Tensor<T, DynShape<2>, D>& noise = {}) const {
    if (x.extent(1) != in_features())
      throw ShapeError("LinearRouter: x " + x.shape().to_string() + " does not fit weight " +
                       weight.shape().to_string() + " ([experts, features])");
    return route_logits(linear(x, weight, bias), noise, top_k, renormalize, gate_noise, "LinearRouter");
  }
};

}  // namespace ttmoe::moe
