#pragma once
// MoE feed-forward layer (GMoE): a linear top-1 router, capacity-limited batch-prioritised slots,
// E experts fc2(gelu(fc1(x))). Tokens are grouped per expert: each expert gathers its kept rows
// with index_select, runs ONE matmul per layer, and its gated output is scattered back. The output
// of a kept token is p_top * expert(x) (not renormalised); a dropped token outputs 0 (the residual
// connection lives outside).

#include <string>
#include <vector>

#include "ttmoe/moe/capacity.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

/// A weight [out, in] and bias [out] (nn.Linear layout, without depending on nn::Linear).
template <class T, class D = cpu>
struct Affine {
  Tensor<T, DynShape<2>, D> weight;
  Tensor<T, DynShape<1>, D> bias;
  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }
  /// x W^T + b for x [N, in].
  Tensor<T, DynShape<2>, D> operator()(const Tensor<T, DynShape<2>, D>& x) const {
    return matmul<false, true>(x, weight) + bias;
  }
  /// A deep copy (a fresh trainable leaf).
  Affine copy() const {
    autograd::NoGrad ng;
    Affine a{weight.detach().clone(), bias.detach().clone()};
    a.weight.set_requires_grad();
    a.bias.set_requires_grad();
    return a;
  }
};

/// One expert: fc2(gelu_exact(fc1(x))).
template <class T, class D = cpu>
struct FFNExpert {
  Affine<T, D> fc1, fc2;
  template <class V>
  void visit_parameters(V& v) {
    v.sub("fc1", fc1);
    v.sub("fc2", fc2);
  }
  Tensor<T, DynShape<2>, D> operator()(const Tensor<T, DynShape<2>, D>& x) const {
    Tensor<T, DynShape<2>, D> h = gelu(fc1(x));
    return fc2(h);
  }
};

/// Router weight [E, D] without bias.
template <class T, class D = cpu>
struct FFNRouter {
  Tensor<T, DynShape<2>, D> weight;
  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
  }
};

/// Routing bookkeeping of the last forward (per token, flattened).
struct MoEFFNRouting {
  std::vector<std::int64_t> top_index;
  CapacityPlan plan;
};

/// MoE FFN; parameters `router.weight`, `experts.{e}.fc1.{weight,bias}`, `experts.{e}.fc2.*`.
template <class T, class D = cpu>
struct MoEFFN {
  FFNRouter<T, D> router;
  std::vector<FFNExpert<T, D>> experts;
  double capacity_factor = 1.5;

  Tensor<T, DynShape<2>, D> probs;  ///< [N, E] of the last forward
  MoEFFNRouting routing;

  /// Initialises every expert as a copy of a dense FFN (GMoE's upcycling); the router is given.
  static MoEFFN from_dense(const FFNExpert<T, D>& dense, const Tensor<T, DynShape<2>, D>& router_weight) {
    MoEFFN m;
    m.router.weight = router_weight;
    for (index_t e = 0; e < router_weight.extent(0); ++e) m.experts.push_back({dense.fc1.copy(), dense.fc2.copy()});
    return m;
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("router", router);
    for (std::size_t e = 0; e < experts.size(); ++e) v.sub("experts." + std::to_string(e), experts[e]);
  }

  /// y [B, T, D] for x [B, T, D]; all B*T tokens compete for capacity in one call.
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, DynShape<3>, D>& x) {
    const index_t B = x.extent(0), Tn = x.extent(1), Dm = x.extent(2), N = B * Tn;
    const index_t E = router.weight.extent(0);
    auto xf = x.reshape(DynShape<2>(N, Dm));
    probs = softmax<-1>(matmul<false, true>(xf, router.weight));
    auto [top_score, top_idx] = topk(probs, 1);  // [N, 1]: the score keeps its gradient
    routing.top_index = top_idx.to_vector();
    routing.plan = plan_capacity(routing.top_index, top_score.to_vector(), E, 1, capacity_factor);
    Tensor<T, DynShape<2>, D> out = Tensor<T, DynShape<2>, D>::zeros(DynShape<2>(N, Dm));
    for (index_t e = 0; e < E; ++e) {
      std::vector<std::int64_t> rows;
      for (index_t n = 0; n < N; ++n)
        if (routing.top_index[n] == e && routing.plan.kept[n]) rows.push_back(n);
      if (rows.empty()) continue;
      const index_t ne = index_t(rows.size());
      auto ridx = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(ne), rows);
      auto xe = index_select(xf, ridx);
      auto ye = experts[e](xe);
      auto ge = index_select(top_score, ridx);  // [ne, 1]
      Tensor<T, DynShape<2>, D> contrib = ye * ge;
      std::vector<std::int64_t> full(ne * Dm);
      for (index_t i = 0; i < ne; ++i)
        for (index_t d = 0; d < Dm; ++d) full[i * Dm + d] = rows[i];
      auto sidx = IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(ne, Dm), full);
      out = scatter_add<0>(out, sidx, contrib);
    }
    return out.reshape(DynShape<3>(B, Tn, Dm));
  }
};

}  // namespace ttmoe::moe
