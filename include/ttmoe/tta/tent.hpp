#pragma once
// Tent (Wang et al., ICLR 2021): minimise the mean softmax entropy of each test batch w.r.t. the
// LayerNorm affine parameters, one SGD step per batch (facts: lr 5e-4 at batch 64, momentum 0.9).
// Our models have no dropout / batch statistics, so "eval mode" needs no switch.

#include <string>
#include <vector>

#include "ttmoe/tta/adapting.hpp"
#include "ttmoe/tta/entropy.hpp"

namespace ttmoe::tta {

/// Tent on model type Model (forward(images) -> logits, visit_parameters).
template <class Model, class T = float, class D = cpu>
class Tent : public AdaptingMethod<Model, T, D> {
 public:
  struct Options {
    LearningRate lr{5e-4, 64, {}};
    double momentum = 0.9;
    /// Parameters adapted: LayerNorm affine params by timm naming.
    std::vector<std::string> trainable = {"*norm*.weight", "*norm*.bias"};
  };

  Tent() = default;
  explicit Tent(Options o) : opt_(std::move(o)) {}

  /// "tent".
  std::string name() const { return "tent"; }

  /// Selects the trainable parameters of `model` (freezing all others) and snapshots them. Called
  /// lazily by adapt_and_predict; calling it again re-selects.
  void prepare(Model& model) { this->adapt_only(model, opt_.trainable); }

  /// Forward (recorded), mean entropy, one SGD step; returns the pre-step logits.
  Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) {
    if (!this->prepared_for(model)) prepare(model);
    auto& sgd = this->begin_batch(images.extent(0), opt_.lr, opt_.momentum);
    autograd::Tape tape;
    Tensor<T, DynShape<2>, D> logits = model.forward(images);
    Tensor<T, Shape<>, D> loss = mean_all(entropies(logits));
    this->last_.kept = images.extent(0);
    if (this->accept_loss(tape, loss)) this->backward_and_step(tape, loss, sgd);  // never a NaN/inf gradient
    return logits.detach();
  }

  /// Restores the parameters selected at prepare() and drops the optimiser state.
  void reset() {
    if (this->prepared()) this->set_.restore();
  }

 private:
  Options opt_;
};

}  // namespace ttmoe::tta
