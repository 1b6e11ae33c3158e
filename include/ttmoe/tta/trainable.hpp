#pragma once
// The trainable part of a model as the TTA methods see it: which parameters are adapted (chosen by
// name globs), a snapshot of their initial values (for reset()), and the SGD optimiser over them,
// built lazily at the first batch because its learning rate depends on the batch size.

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/module.hpp"
#include "ttmoe/nn/optim_sgd.hpp"
#include "ttmoe/tta/method.hpp"

namespace ttmoe::tta {

/// Freezes every parameter of `model`, then makes those whose dotted name matches one of `patterns`
/// (fnmatch globs; `*` also crosses dots) trainable. Returns how many matched; throws if none did,
/// because a method silently adapting nothing would look like NoAdapt.
template <class Model>
std::size_t select_trainable(Model& model, const std::vector<std::string>& patterns) {
  nn::freeze(model);
  std::size_t n = 0;
  for (const auto& p : patterns) n += nn::set_trainable(model, p, true);
  if (n == 0) throw std::invalid_argument("tta::select_trainable: no parameter matches the patterns");
  return n;
}

/// dst <- src elementwise, not recorded. assign() takes a lazy expression, so the tensor enters as
/// src * 1, which is exact for every value (NaN and signed zeros included).
template <class T, class D>
void copy_into(const Tensor<T, Shape<dyn>, D>& dst, const Tensor<T, Shape<dyn>, D>& src) {
  autograd::NoGrad ng;
  assign(dst, src * T(1));
}

/// Trainable parameters, their initial values and the optimiser over them.
template <class T = float, class D = cpu>
class TrainableSet {
 public:
  TrainableSet() = default;
  /// Collects the currently trainable parameters of `model` and snapshots them. Call after the
  /// requires_grad flags are final (freezing replaces a tensor's gradient metadata).
  template <class Model>
  explicit TrainableSet(Model& model) : params_(nn::trainable_parameters<T, D>(model)) {
    autograd::NoGrad ng;
    for (auto& p : params_) initial_.push_back(p.flat.detach().clone());
  }

  /// The adapted parameters (flat views sharing storage and gradients with the model).
  std::vector<nn::ParamRef<T, D>>& params() { return params_; }
  const std::vector<nn::ParamRef<T, D>>& params() const { return params_; }
  /// Their values when the set was built.
  const std::vector<Tensor<T, Shape<dyn>, D>>& initial() const { return initial_; }

  /// The SGD optimiser, created on first use with lr.for_batch(batch) and `momentum`.
  nn::SGD<T, D>& optimizer(const LearningRate& lr, double momentum, index_t batch) {
    if (!sgd_) {
      typename nn::SGD<T, D>::Options o;
      o.lr = lr.for_batch(batch);
      o.momentum = momentum;
      sgd_ = std::make_unique<nn::SGD<T, D>>(params_, o);
    }
    return *sgd_;
  }
  /// True once the optimiser exists.
  bool has_optimizer() const { return static_cast<bool>(sgd_); }

  /// Clears every adapted parameter's gradient.
  void zero_grad() {
    for (auto& p : params_) p.flat.zero_grad();
  }

  /// Restores the initial values and drops the optimiser (momentum starts afresh, as the reference
  /// implementations reload the optimiser state on reset).
  void restore() {
    autograd::NoGrad ng;
    for (std::size_t i = 0; i < params_.size(); ++i) copy_into(params_[i].flat, initial_[i]);
    zero_grad();
    sgd_.reset();
  }

 private:
  std::vector<nn::ParamRef<T, D>> params_;
  std::vector<Tensor<T, Shape<dyn>, D>> initial_;
  std::unique_ptr<nn::SGD<T, D>> sgd_;
};

}  // namespace ttmoe::tta
