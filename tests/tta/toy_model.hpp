#pragma once
// A minimal classifier with the interface the TTA methods need (forward(images) -> logits,
// visit_parameters): flatten -> LayerNorm ("norm") -> Linear ("head"). Small enough that the
// methods' behaviour can be checked in milliseconds.

#include <cstdint>

#include "ttmoe/nn/layernorm.hpp"
#include "ttmoe/nn/linear.hpp"
#include "ttmoe/ttmoe.hpp"

namespace ttmoe::test {

template <class T = double>
struct ToyClassifier {
  nn::LayerNorm<T> norm;
  nn::Linear<T> head;

  ToyClassifier(index_t features, index_t classes, std::uint64_t seed) : norm(features), head(features, classes, true, seed) {}

  /// images [B, C, H, W] -> logits [B, classes].
  Tensor<T, DynShape<2>> forward(const Tensor<T, DynShape<4>>& images) const {
    const index_t B = images.extent(0);
    auto x = images.reshape(DynShape<2>(B, images.numel() / B));
    Tensor<T, DynShape<2>> h = norm(x);
    return head(h);
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("norm", norm);
    v.sub("head", head);
  }
};

}  // namespace ttmoe::test
