#pragma once
// torch.optim.SGD semantics: d = g + wd p; buf = d on the first step, then momentum buf +
// (1 - dampening) d; nesterov uses d + momentum buf; p -= lr d. Each update is one fused assign.

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/optim_state.hpp"

namespace ttmoe::nn {

/// SGD's hyper-parameters (torch.optim.SGD's names and defaults, lr aside).
struct SGDOptions {
  double lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

/// Stochastic gradient descent with optional momentum / weight decay / nesterov.
template <class T = float, class D = cpu>
class SGD : public Optimizer<T, D, SGDOptions> {
 public:
  using Options = SGDOptions;

  SGD(std::vector<ParamRef<T, D>> params, Options opt) : Base(std::move(params), opt), buf_(params_.size()) {}

  /// One update of every parameter that has a gradient (parameters without one are skipped).
  void step() {
    autograd::NoGrad ng;
    const T lr = T(opt_.lr), mu = T(opt_.momentum), damp = T(1 - opt_.dampening), wd = T(opt_.weight_decay);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i].flat;
      auto g = p.grad();
      if (!g.defined()) continue;
      if (mu == T(0)) {
        assign(p, p - lr * (g + wd * p));
        continue;
      }
      auto& b = buf_[i];
      if (!b.defined()) {
        b = detail::FlatBuf<T, D>(p.shape());
        assign(b, g + wd * p);  // torch: the first buffer is d itself (no dampening)
      } else {
        assign(b, mu * b + damp * (g + wd * p));
      }
      if (opt_.nesterov)
        assign(p, p - lr * ((g + wd * p) + mu * b));
      else
        assign(p, p - lr * b);
    }
    ++steps_;
  }

  /// Momentum buffers as "<param>.momentum_buffer" plus the step count.
  OptimizerState<T> state_dict() const {
    OptimizerState<T> s{steps_, {}};
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (buf_[i].defined()) s.tensors.emplace_back(params_[i].name + ".momentum_buffer", detail::to_host(buf_[i]));
    return s;
  }
  /// Restores state written by state_dict() for the same parameter names.
  void load_state_dict(const OptimizerState<T>& s) {
    steps_ = s.step;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto key = params_[i].name + ".momentum_buffer";
      buf_[i] = s.contains(key) ? detail::from_host<T, D>(s.at(key), params_[i].flat.numel(), key) : detail::FlatBuf<T, D>();
    }
  }

 private:
  using Base = Optimizer<T, D, SGDOptions>;
  using Base::opt_, Base::params_, Base::steps_;
  std::vector<detail::FlatBuf<T, D>> buf_;
};

}  // namespace ttmoe::nn
