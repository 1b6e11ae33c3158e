#pragma once
// LoRA (PEFT naming) on a frozen base Linear: y = x W^T + b + s (x A^T) B^T with A [r, in]
// Kaiming-uniform, B [out, r] zero (so the adapted layer starts as the base) and s = alpha / r.
// merge() folds s B A into W in place (no recording) for adapter-free inference; unmerge() undoes it.

#include <cmath>
#include <random>
#include <vector>

#include "ttmoe/ops/matmul.hpp"

namespace ttmoe::moe {

/// One LoRA factor (`lora_A` / `lora_B`), holding `weight`.
template <class T, class D = cpu>
struct LoRAFactor {
  Tensor<T, DynShape<2>, D> weight;
  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
  }
};

/// A Linear layer with a LoRA adapter; parameters `weight`, `bias`, `lora_A.weight`, `lora_B.weight`.
template <class T, class D = cpu>
struct LoRALinear {
  Tensor<T, DynShape<2>, D> weight;  ///< base [out, in], frozen
  Tensor<T, DynShape<1>, D> bias;    ///< base [out], frozen; may be undefined
  LoRAFactor<T, D> lora_A, lora_B;
  double scaling = 1.0;
  bool merged = false;

  /// Wraps a base layer: freezes it, A ~ U(+-1/sqrt(in)) (Kaiming-uniform, a = sqrt 5), B = 0.
  static LoRALinear wrap(const Tensor<T, DynShape<2>, D>& w, const Tensor<T, DynShape<1>, D>& b, index_t r,
                         double alpha, std::mt19937_64& rng) {
    LoRALinear l;
    l.weight = w.detach();
    l.bias = b.defined() ? b.detach() : b;
    const index_t out = w.extent(0), in = w.extent(1);
    const double bound = 1.0 / std::sqrt(double(in));
    std::uniform_real_distribution<double> u(-bound, bound);
    std::vector<T> a(r * in);
    for (auto& v : a) v = T(u(rng));
    l.lora_A.weight = Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(r, in), a);
    l.lora_B.weight = Tensor<T, DynShape<2>, D>::zeros(DynShape<2>(out, r));
    l.lora_A.weight.set_requires_grad();
    l.lora_B.weight.set_requires_grad();
    l.scaling = alpha / double(r);
    return l;
  }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
    v("bias", bias);
    v.sub("lora_A", lora_A);
    v.sub("lora_B", lora_B);
  }

  /// x [..., in] -> [..., out]; after merge() only the (merged) base path runs.
  template <ShapeType S>
  auto forward(const Tensor<T, S, D>& x) const {
    using SO = decltype(matmul<false, true>(x, weight));
    SO base = matmul<false, true>(x, weight);
    if (bias.defined()) base = base + bias;
    if (merged) return base;
    SO low = matmul<false, true>(matmul<false, true>(x, lora_A.weight), lora_B.weight);
    return SO(base + low * T(scaling));
  }

  /// s * B A [out, in] (not recorded).
  Tensor<T, DynShape<2>, D> delta_weight() const {
    autograd::NoGrad ng;
    return matmul(lora_B.weight.detach(), lora_A.weight.detach()) * T(scaling);
  }
  /// W += s B A in place.
  void merge() {
    if (merged) return;
    autograd::NoGrad ng;
    auto dw = delta_weight();
    assign(weight, weight.detach() + dw);
    merged = true;
  }
  /// W -= s B A in place.
  void unmerge() {
    if (!merged) return;
    autograd::NoGrad ng;
    auto dw = delta_weight();
    assign(weight, weight.detach() - dw);
    merged = false;
  }
};

}  // namespace ttmoe::moe
