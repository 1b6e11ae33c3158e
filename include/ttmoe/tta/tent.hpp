#pragma once
// Tent (Wang et al., ICLR 2021): minimise the mean softmax entropy of each test batch w.r.t. the
// LayerNorm affine parameters, one SGD step per batch (facts: lr 5e-4 at batch 64, momentum 0.9).
// Our models have no dropout / batch statistics, so "eval mode" needs no switch.

#include <string>
#include <vector>

#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/tta/entropy.hpp"
#include "ttmoe/tta/trainable.hpp"

namespace ttmoe::tta {

/// Tent on model type Model (forward(images) -> logits, visit_parameters).
template <class Model, class T = float, class D = cpu>
class Tent {
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
  void prepare(Model& model) {
    select_trainable(model, opt_.trainable);
    set_ = TrainableSet<T, D>(model);
    model_ = &model;
  }

  /// Forward (recorded), mean entropy, one SGD step; returns the pre-step logits.
  Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) {
    if (model_ != &model) prepare(model);
    last_ = StepInfo{};
    auto& sgd = set_.optimizer(opt_.lr, opt_.momentum, images.extent(0));
    autograd::Tape tape;
    Tensor<T, DynShape<2>, D> logits = model.forward(images);
    Tensor<T, Shape<>, D> loss = mean_all(entropies(logits));
    last_.loss = double(loss.item());
    last_.kept = images.extent(0);
    if (!std::isfinite(last_.loss)) {  // never apply a NaN/inf gradient
      tape.clear();
      last_.skipped_nonfinite = true;
      return logits.detach();
    }
    autograd::backward(tape, loss);
    sgd.step();
    set_.zero_grad();
    last_.updated = true;
    return logits.detach();
  }

  const StepInfo& last_step() const { return last_; }
  /// Restores the parameters selected at prepare() and drops the optimiser state.
  void reset() {
    if (model_) set_.restore();
  }
  /// The adapted parameters (empty before the first batch).
  const TrainableSet<T, D>& trainable() const { return set_; }

 private:
  Options opt_;
  TrainableSet<T, D> set_;
  Model* model_ = nullptr;
  StepInfo last_;
};

}  // namespace ttmoe::tta
