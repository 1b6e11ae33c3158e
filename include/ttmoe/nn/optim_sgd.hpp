#pragma once
// torch.optim.SGD semantics: d = g + wd p; buf = d on the first step, then momentum buf +
// (1 - dampening) d; nesterov uses d + momentum buf; p -= lr d. Each update is one fused assign.

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/optim_state.hpp"

namespace ttmoe::nn {

/// Stochastic gradient descent with optional momentum / weight decay / nesterov.
template <class T = float, class D = cpu>
class SGD {
 public:
  struct Options {
    double lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0;
    bool nesterov = false;
  };

  SGD(std::vector<ParamRef<T, D>> params, Options opt) : params_(std::move(params)), opt_(opt), buf_(params_.size()) {}

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

  /// Clears every parameter's gradient.
  void zero_grad() {
    for (auto& p : params_) p.flat.zero_grad();
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

  std::int64_t steps() const { return steps_; }
  Options& options() { return opt_; }
  const std::vector<ParamRef<T, D>>& params() const { return params_; }

 private:
  std::vector<ParamRef<T, D>> params_;
  Options opt_;
  std::vector<detail::FlatBuf<T, D>> buf_;
  std::int64_t steps_ = 0;
};

}  // namespace ttmoe::nn
