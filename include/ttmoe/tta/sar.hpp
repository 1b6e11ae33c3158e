#pragma once
// SAR (Niu et al., ICLR 2023): sharpness-aware, reliable entropy minimisation with model recovery.
// Per batch, as the authors' code does:
//  1. forward; keep S1 = {H < E0}, E0 = 0.4 ln C; loss1 = mean_{S1} H; backward;
//  2. SAM ascent: e = rho g / (||g||_2 + 1e-12) over all adapted parameters (rho 0.05); theta += e;
//  3. second forward at theta + e on the same images; keep S2 = S1 and {H' < E0};
//     loss2 = mean_{S2} H'; ema <- loss2 (first) or 0.9 ema + 0.1 loss2; backward;
//  4. restore theta (exact old values) and take the SGD step with the perturbed gradient (lr 5e-4 at
//     batch 64, momentum 0.9);
//  5. if ema < reset_threshold: restore the initial parameters and optimiser, forget the ema.
// Reset threshold: the facts file (authors' code as configured for MoETTA's baselines) gives a reset
// constant of 0.005, which is the default here; the SAR / MoETTA papers state e_0 = 0.2, available
// by setting Options::reset_threshold = 0.2.
// Deviation, documented: where S1 or S2 is empty the reference code averages an empty set (NaN)
// and still applies a momentum-only SGD step; here such a batch makes no update and is not counted
// as a non-finite skip (StepInfo::kept = 0). A non-finite loss1/loss2 skips the batch (counted),
// restoring the parameters.

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ttmoe/tta/adapting.hpp"
#include "ttmoe/tta/entropy.hpp"

namespace ttmoe::tta {

/// SAR on model type Model.
template <class Model, class T = float, class D = cpu>
class SAR : public AdaptingMethod<Model, T, D> {
 public:
  struct Options {
    LearningRate lr{5e-4, 64, {}};
    double momentum = 0.9;
    double margin_factor = 0.4;     ///< E0 = margin_factor * ln C
    double rho = 0.05;              ///< SAM neighbourhood radius
    double loss_ema = 0.9;          ///< ema <- loss_ema * ema + (1 - loss_ema) * loss2
    double reset_threshold = 0.005; ///< facts (code); the papers' e_0 is 0.2
    /// LayerNorm affine parameters of blocks 0-8 (timm names; the final norm excluded, as SAR's code).
    std::vector<std::string> trainable = {"blocks.[0-8].norm[12].weight", "blocks.[0-8].norm[12].bias"};
  };

  SAR() = default;
  explicit SAR(Options o) : opt_(std::move(o)) {}

  std::string name() const { return "sar"; }

  /// Selects the trainable parameters and snapshots them. Called lazily.
  void prepare(Model& model) {
    this->adapt_only(model, opt_.trainable);
    ema_.reset();
  }

  /// Two forward/backward passes and one SGD step; returns the logits of the first forward.
  Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) {
    if (!this->prepared_for(model)) prepare(model);
    const index_t B = images.extent(0);
    auto& sgd = this->begin_batch(B, opt_.lr, opt_.momentum);
    Tensor<T, DynShape<2>, D> logits;
    std::vector<bool> keep(std::size_t(B), false);
    {
      autograd::Tape tape;
      logits = model.forward(images);
      const double e0 = entropy_margin(logits.extent(1), opt_.margin_factor);
      this->last_.threshold = e0;
      auto h = entropies(logits);
      const auto hv = host_values(h);
      index_t n1 = 0;
      for (index_t b = 0; b < B; ++b) n1 += (keep[b] = hv[b] < e0);
      if (n1 == 0 && !all_finite(hv)) return skip(tape, logits);
      if (n1 == 0) {
        tape.clear();
        return logits.detach();
      }
      Tensor<T, Shape<>, D> loss1 = weighted_entropy_sum(h, mask_mean(keep, n1));
      if (!std::isfinite(double(loss1.item()))) return skip(tape, logits);
      autograd::backward(tape, loss1);
    }
    // SAM ascent step to theta + e.
    auto& ps = this->set_.params();
    std::vector<Tensor<T, Shape<dyn>, D>> old;
    {
      autograd::NoGrad ng;
      double sq = 0;
      for (auto& p : ps) {
        auto g = p.flat.grad();
        if (!g.defined()) continue;
        for (T v : g.to_vector()) sq += double(v) * double(v);
      }
      const double scale = opt_.rho / (std::sqrt(sq) + 1e-12);
      for (auto& p : ps) {
        old.push_back(p.flat.detach().clone());
        auto g = p.flat.grad();
        if (g.defined()) assign(p.flat, p.flat + g * T(scale));
      }
      this->set_.zero_grad();
    }
    auto restore = [&] {
      autograd::NoGrad ng;
      for (std::size_t i = 0; i < ps.size(); ++i) copy_into(ps[i].flat, old[i]);
    };
    {
      autograd::Tape tape;
      Tensor<T, DynShape<2>, D> logits2 = model.forward(images);
      const double e0 = this->last_.threshold;
      auto h2 = entropies(logits2);
      const auto hv2 = host_values(h2);
      index_t n2 = 0;
      for (index_t b = 0; b < B; ++b) n2 += (keep[b] = keep[b] && hv2[b] < e0);
      this->last_.kept = n2;
      if (n2 == 0) {
        tape.clear();
        restore();
        if (!all_finite(hv2)) this->last_.skipped_nonfinite = true;
        return logits.detach();
      }
      Tensor<T, Shape<>, D> loss2 = weighted_entropy_sum(h2, mask_mean(keep, n2));
      if (!this->accept_loss(tape, loss2)) {
        restore();
        this->set_.zero_grad();
        return logits.detach();
      }
      ema_ = ema_ ? opt_.loss_ema * *ema_ + (1 - opt_.loss_ema) * this->last_.loss : this->last_.loss;
      // The gradient taken at theta + e is applied at theta.
      this->backward_and_step(tape, loss2, sgd, restore);
    }
    if (*ema_ < opt_.reset_threshold) {
      reset();
      this->last_.reset = true;
    }
    return logits.detach();
  }

  /// Restores the initial parameters and optimiser and forgets the loss EMA (SAR's model recovery).
  void reset() {
    if (!this->prepared()) return;
    this->set_.restore();
    ema_.reset();
  }
  /// The loss EMA that triggers the reset (empty before the first update / after a reset).
  std::optional<double> loss_ema() const { return ema_; }

 private:
  static bool all_finite(const std::vector<double>& v) {
    for (double x : v)
      if (!std::isfinite(x)) return false;
    return true;
  }
  static std::vector<double> mask_mean(const std::vector<bool>& keep, index_t n) {
    std::vector<double> c(keep.size(), 0.0);
    for (std::size_t b = 0; b < keep.size(); ++b) c[b] = keep[b] ? 1.0 / double(n) : 0.0;
    return c;
  }
  Tensor<T, DynShape<2>, D> skip(autograd::Tape& tape, const Tensor<T, DynShape<2>, D>& logits) {
    this->skip_nonfinite(tape);
    this->set_.zero_grad();
    return logits.detach();
  }

  Options opt_;
  std::optional<double> ema_;
};

}  // namespace ttmoe::tta
