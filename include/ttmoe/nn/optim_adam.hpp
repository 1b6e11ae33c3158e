#pragma once
// torch.optim.Adam / AdamW (amsgrad off). Adam adds L2 decay to the gradient; AdamW decays the
// parameter directly (p *= 1 - lr wd) before the Adam step with the raw gradient. Bias correction
// uses each parameter's own step count, as torch does, so parameters that skip steps stay exact.

#include <cmath>

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/optim_state.hpp"

namespace ttmoe::nn {

/// Adam's hyper-parameters (torch.optim.Adam's names and defaults).
struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  ///< true: AdamW
};

/// Adam (decoupled = false) or AdamW (decoupled = true).
template <class T = float, class D = cpu>
class Adam : public Optimizer<T, D, AdamOptions> {
 public:
  using Options = AdamOptions;

  Adam(std::vector<ParamRef<T, D>> params, Options opt)
      : Base(std::move(params), opt), m_(params_.size()), v_(params_.size()), t_(params_.size(), 0) {}

  /// One update of every parameter that has a gradient.
  void step() {
    autograd::NoGrad ng;
    const T b1 = T(opt_.beta1), b2 = T(opt_.beta2), wd = T(opt_.weight_decay), eps = T(opt_.eps);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i].flat;
      auto g = p.grad();
      if (!g.defined()) continue;
      if (!m_[i].defined()) {
        m_[i] = detail::FlatBuf<T, D>::zeros(p.shape());
        v_[i] = detail::FlatBuf<T, D>::zeros(p.shape());
      }
      const std::int64_t t = ++t_[i];
      // Scalars folded in double, then rounded once: matches torch's Python-float arithmetic.
      const double bc1 = 1 - std::pow(opt_.beta1, double(t)), bc2 = 1 - std::pow(opt_.beta2, double(t));
      const T step_size = T(opt_.lr / bc1), inv_sqrt_bc2 = T(1 / std::sqrt(bc2));
      auto& m = m_[i];
      auto& v = v_[i];
      if (opt_.decoupled) {
        if (opt_.weight_decay != 0) assign(p, p * T(1 - opt_.lr * opt_.weight_decay));
        assign(m, b1 * m + (T(1) - b1) * g);
        assign(v, b2 * v + (T(1) - b2) * square(g));
      } else {
        assign(m, b1 * m + (T(1) - b1) * (g + wd * p));
        assign(v, b2 * v + (T(1) - b2) * square(g + wd * p));
      }
      assign(p, p - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps));
    }
    ++steps_;
  }

  /// "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step" (one element) plus the step count.
  OptimizerState<T> state_dict() const {
    OptimizerState<T> s{steps_, {}};
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!m_[i].defined()) continue;
      const auto& n = params_[i].name;
      s.tensors.emplace_back(n + ".exp_avg", detail::to_host(m_[i]));
      s.tensors.emplace_back(n + ".exp_avg_sq", detail::to_host(v_[i]));
      s.tensors.emplace_back(n + ".step", std::vector<T>{T(t_[i])});
    }
    return s;
  }
  /// Restores state written by state_dict() for the same parameter names.
  void load_state_dict(const OptimizerState<T>& s) {
    steps_ = s.step;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& n = params_[i].name;
      const index_t numel = params_[i].flat.numel();
      if (s.contains(n + ".exp_avg")) {
        m_[i] = detail::from_host<T, D>(s.at(n + ".exp_avg"), numel, n);
        v_[i] = detail::from_host<T, D>(s.at(n + ".exp_avg_sq"), numel, n);
        t_[i] = static_cast<std::int64_t>(s.at(n + ".step").at(0));
      } else {
        m_[i] = v_[i] = {};
        t_[i] = 0;
      }
    }
  }

 private:
  using Base = Optimizer<T, D, AdamOptions>;
  using Base::opt_, Base::params_, Base::steps_;
  std::vector<detail::FlatBuf<T, D>> m_, v_;
  std::vector<std::int64_t> t_;
};

/// AdamW: Adam with decoupled weight decay (torch default weight_decay 1e-2).
template <class T = float, class D = cpu>
Adam<T, D> AdamW(std::vector<ParamRef<T, D>> params, typename Adam<T, D>::Options opt) {
  opt.decoupled = true;
  return Adam<T, D>(std::move(params), opt);
}

}  // namespace ttmoe::nn
