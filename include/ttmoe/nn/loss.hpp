#pragma once
// Classification losses on logits [N, C]: cross entropy (mean over the batch) and the per-sample
// softmax entropy used by TENT-style test-time adaptation. Both go through log_softmax, which is
// stable for large logits.

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::nn {

/// mean_n (logsumexp(z_n) - z_n[target_n]); returns a rank-0 tensor.
template <class T, class S, class SI, class D>
auto cross_entropy(const Tensor<T, S, D>& logits, const IndexTensor<SI, D>& targets) {
  static_assert(S::rank == 2 && SI::rank == 1, "cross_entropy: logits [N, C], targets [N]");
  const index_t n = logits.extent(0);
  auto lsm = log_softmax<-1>(logits);
  auto picked = gather<1>(lsm, targets.reshape(DynShape<2>(n, 1)));
  return mean_all(-picked);
}

/// H_n = -sum_c p_nc log p_nc with p = softmax(z_n); returns [N] (reduces the last axis).
template <class T, class S, class D>
auto softmax_entropy(const Tensor<T, S, D>& logits) {
  return sum<-1>(-(softmax<-1>(logits) * log_softmax<-1>(logits)));
}

}  // namespace ttmoe::nn
