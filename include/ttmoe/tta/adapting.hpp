#pragma once
// What every adapting method (Tent, EATA, SAR, MoETTA) shares, written once: the adapted parameter
// set with its SGD optimiser, the model it was prepared for, the record of the last batch, and the
// tail of a batch (a non-finite loss drops the tape and is counted; a finite one is back-propagated,
// stepped and the gradients cleared). The methods differ only in how they form the loss, so a fix to
// the tail (e.g. what a NaN does) reaches all four at once.

#include <cmath>
#include <string>
#include <vector>

#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/tta/method.hpp"
#include "ttmoe/tta/trainable.hpp"

namespace ttmoe::tta {

/// Base of the adapting methods on model type Model (protected helpers, public read access).
template <class Model, class T = float, class D = cpu>
class AdaptingMethod {
 public:
  /// What the last adapt_and_predict call did.
  const StepInfo& last_step() const { return last_; }
  /// The adapted parameters (empty before the first batch).
  const TrainableSet<T, D>& trainable() const { return set_; }

 protected:
  /// Freezes every parameter of `model` but those matching `patterns`, snapshots them (for reset)
  /// and remembers `model` as the one prepared.
  void adapt_only(Model& model, const std::vector<std::string>& patterns) {
    select_trainable(model, patterns);
    set_ = TrainableSet<T, D>(model);
    model_ = &model;
  }
  /// True once adapt_only ran for this very model object.
  bool prepared_for(const Model& model) const { return model_ == &model; }
  /// True once adapt_only ran for some model (reset() has something to restore).
  bool prepared() const { return model_ != nullptr; }

  /// Starts a batch of `batch` images: clears the record and returns the optimiser (built at the
  /// first batch, whose size fixes the learning rate).
  nn::SGD<T, D>& begin_batch(index_t batch, const LearningRate& lr, double momentum) {
    last_ = StepInfo{};
    return set_.optimizer(lr, momentum, batch);
  }

  /// Records `loss` in the step record. A non-finite loss must never reach the parameters: the tape
  /// is dropped, the batch marked skipped, and false returned (the caller returns its logits).
  bool accept_loss(autograd::Tape& tape, const Tensor<T, Shape<>, D>& loss) {
    last_.loss = double(loss.item());
    if (std::isfinite(last_.loss)) return true;
    skip_nonfinite(tape);
    return false;
  }

  /// Drops the tape's recorded graph and marks the batch as skipped for a non-finite value.
  void skip_nonfinite(autograd::Tape& tape) {
    tape.clear();
    last_.skipped_nonfinite = true;
  }

  /// The shared tail of an accepted batch: back-propagates `loss` through `tape`, runs
  /// `before_step()` (SAR restores the unperturbed parameters there), takes one optimiser step,
  /// clears the gradients and marks the batch as updated.
  template <class BeforeStep>
  void backward_and_step(autograd::Tape& tape, const Tensor<T, Shape<>, D>& loss, nn::SGD<T, D>& sgd,
                         BeforeStep&& before_step) {
    autograd::backward(tape, loss);
    before_step();
    sgd.step();
    set_.zero_grad();
    last_.updated = true;
  }
  /// backward_and_step with nothing between the backward pass and the step.
  void backward_and_step(autograd::Tape& tape, const Tensor<T, Shape<>, D>& loss, nn::SGD<T, D>& sgd) {
    backward_and_step(tape, loss, sgd, [] {});
  }

  /// The adapted parameters, their snapshot and optimiser.
  TrainableSet<T, D> set_;
  /// Record of the current / last batch.
  StepInfo last_;

 private:
  Model* model_ = nullptr;
};

}  // namespace ttmoe::tta
