#pragma once
// Linear top-k router: logits = x W^T (+ b), probs = softmax, gates = the top-k probabilities
// (optionally renormalised over the k picks) scattered into a dense [N, E] map. The pick itself is
// not differentiated; the gradient flows through the selected probabilities (and the renormaliser).

#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

/// What a router returns for N tokens and E experts.
template <class T, class D = cpu>
struct RouterOutput {
  Tensor<T, DynShape<2>, D> logits;  ///< [N, E] (clean)
  Tensor<T, DynShape<2>, D> probs;   ///< [N, E]
  Tensor<T, DynShape<2>, D> gates;   ///< [N, E], non-zero at the picks only
  IndexTensor<DynShape<2>, D> indices;  ///< [N, k], descending, ties -> lower expert index
};

/// Picks the top-k of `select_by` and scatters gates taken from `probs` (renormalised over the picks
/// if asked) into a dense [N, E] map. `select_by` may differ from probs (noisy logits).
template <class T, class D>
std::pair<Tensor<T, DynShape<2>, D>, IndexTensor<DynShape<2>, D>> topk_gates(const Tensor<T, DynShape<2>, D>& select_by,
                                                                             const Tensor<T, DynShape<2>, D>& probs,
                                                                             index_t k, bool renormalize) {
  IndexTensor<DynShape<2>, D> idx;
  {
    autograd::NoGrad ng;  // the selection is not differentiated
    idx = topk(select_by, k).second;
  }
  Tensor<T, DynShape<2>, D> picked = gather<1>(probs, idx);
  if (renormalize) picked = picked / sum<1, true>(picked);
  auto zeros = Tensor<T, DynShape<2>, D>::zeros(probs.shape());
  return {scatter_add<1>(zeros, idx, picked), idx};
}

/// nn.Linear(D -> E) router with top-k gating; parameters `weight` [E, D] and optional `bias` [E].
template <class T, class D = cpu>
struct LinearRouter {
  Tensor<T, DynShape<2>, D> weight;
  Tensor<T, DynShape<1>, D> bias;  ///< may be undefined (no bias)
  index_t top_k = 1;
  bool renormalize = false;

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
  }

  /// Routes x [N, D].
  RouterOutput<T, D> forward(const Tensor<T, DynShape<2>, D>& x) const {
    RouterOutput<T, D> o;
    o.logits = bias.defined() ? Tensor<T, DynShape<2>, D>(matmul<false, true>(x, weight) + bias)
                              : matmul<false, true>(x, weight);
    o.probs = softmax<-1>(o.logits);
    std::tie(o.gates, o.indices) = topk_gates(o.probs, o.probs, top_k, renormalize);
    return o;
  }
};

}  // namespace ttmoe::moe
