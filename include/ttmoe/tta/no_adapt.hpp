#pragma once
// The source model as is: one forward under NoGrad per batch, nothing adapted.

#include <string>

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/tta/method.hpp"

namespace ttmoe::tta {

/// Baseline without adaptation.
template <class Model, class T = float, class D = cpu>
class NoAdapt {
 public:
  /// "noadapt".
  std::string name() const { return "noadapt"; }
  /// Logits of the unchanged model (nothing recorded).
  Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) {
    autograd::NoGrad ng;
    last_ = StepInfo{};
    return model.forward(images);
  }
  /// Always a no-op step.
  const StepInfo& last_step() const { return last_; }
  /// Nothing to reset.
  void reset() {}

 private:
  StepInfo last_;
};

}  // namespace ttmoe::tta
