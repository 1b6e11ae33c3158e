#pragma once
// GMoE (Tutel) auxiliary losses: importance loss on the clean softmax, and the Gaussian-CDF load
// loss comparing each clean score with the k-th largest NOISY logit (the code's definition, which
// differs from the paper's Eq. 10; see tests/reference/README.md). l_aux = (l_imp + l_load) / 2.
// Importance alone can be balanced while an expert is never picked (paper, Table 5); the load term
// is a differentiable proxy for how often each expert stays in the top-k under re-drawn noise.

#include <cmath>
#include <string>

#include "ttmoe/moe/router.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

/// The pieces of the GMoE auxiliary loss (all recorded; l_aux is the training term).
template <class T, class D = cpu>
struct AuxLosses {
  Tensor<T, DynShape<2>, D> noisy_logits;  ///< [N, E]
  Tensor<T, DynShape<1>, D> threshold;     ///< [N], k-th largest noisy logit
  Tensor<T, DynShape<1>, D> importance;    ///< [E]
  Tensor<T, DynShape<1>, D> load;          ///< [E]
  Tensor<T, Shape<>, D> l_imp, l_load, l_aux;
};

/// var(v) / (mean(v)^2 + 1e-10) with the unbiased variance (Tutel's cv_squared).
template <class T, class D>
Tensor<T, Shape<>, D> cv_squared(const Tensor<T, DynShape<1>, D>& v) {
  return variance<0>(v, 1) / (square(mean<0>(v)) + T(1e-10));
}

/// Aux losses from clean logits [N, E] and the noisy logits the picks were made on, top-k, with
/// sigma the noise std (the load CDF's scale; Tutel uses gate_noise / E even when no noise was added).
template <class T, class D>
AuxLosses<T, D> gmoe_aux_losses_noisy(const Tensor<T, DynShape<2>, D>& logits,
                                      const Tensor<T, DynShape<2>, D>& noisy_logits, index_t k, double sigma) {
  if (!(sigma > 0))
    throw ValueError("gmoe_aux_losses: the load loss needs a noise std > 0 (gate_noise / E), got " +
                     std::to_string(sigma));
  if (noisy_logits.extents() != logits.extents())
    throw ShapeError("gmoe_aux_losses: noisy logits " + noisy_logits.shape().to_string() + " and logits " +
                     logits.shape().to_string() + " differ");
  const index_t N = logits.extent(0);
  check_top_k(k, logits.extent(1), "gmoe_aux_losses");
  AuxLosses<T, D> a;
  a.noisy_logits = noisy_logits;
  Tensor<T, DynShape<2>, D> scores = softmax<-1>(logits);
  a.importance = sum<0>(scores);
  a.l_imp = cv_squared(a.importance);
  auto topv = topk(a.noisy_logits, k).first;  // values are differentiable
  auto thr = narrow<1>(topv, k - 1, 1);      // [N, 1]
  a.threshold = thr.reshape(DynShape<1>(N));
  // Phi(z) = 0.5 (1 + erf(z / sqrt 2)) composes from core ops.
  a.load = sum<0>((erf((scores - thr) * T(1.0 / (sigma * std::sqrt(2.0)))) + T(1)) * T(0.5));
  a.l_load = cv_squared(a.load);
  a.l_aux = (a.l_imp + a.l_load) * T(0.5);
  return a;
}

/// Aux losses for clean logits [N, E] and standard-normal noise [N, E] (constant), top-k.
template <class T, class D>
AuxLosses<T, D> gmoe_aux_losses(const Tensor<T, DynShape<2>, D>& logits, const Tensor<T, DynShape<2>, D>& noise,
                                index_t k, double gate_noise = 1.0) {
  const double sigma = gate_noise / double(logits.extent(1));
  return gmoe_aux_losses_noisy<T, D>(logits, Tensor<T, DynShape<2>, D>(logits + noise * T(sigma)), k, sigma);
}

/// Aux losses of one routing call (a router's output, or a layer's last routing state): the same
/// logits, noisy logits, k and noise scale that the picks used.
template <class T, class D>
AuxLosses<T, D> gmoe_aux_losses(const RouterOutput<T, D>& r) {
  return gmoe_aux_losses_noisy<T, D>(r.logits, r.noisy_logits, r.top_k(), r.noise_std);
}

}  // namespace ttmoe::moe
