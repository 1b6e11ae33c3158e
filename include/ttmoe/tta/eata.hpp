#pragma once
// EATA (Niu et al., ICML 2022) as the authors' code runs it, with the MoETTA paper's settings:
//  * reliable samples: H < E0 = 0.4 ln C;
//  * non-redundant samples: |cos(p, m)| < 0.05 where m is an EMA (0.9) of the mean softmax of the
//    samples used so far (no redundancy filter until m exists);
//  * loss = mean over the kept samples of H / exp(H - E0) + fisher_alpha * sum F (theta - theta0)^2;
//  * F: diagonal Fisher from clean images given at construction, computed as the authors do: the
//    cross entropy against the model's own argmax labels, squared batch gradients averaged over the
//    batches; theta0 = the parameters before adaptation. Without images the regulariser is off (ETA).
//  * SGD lr 6e-4 at batch 64, momentum 0.9, LayerNorm affine parameters.
// As in the code, a batch with no kept sample makes no update (the regulariser alone is not applied).
// A batch with any non-finite entropy is skipped and counted (its loss could not be finite).

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ttmoe/nn/loss.hpp"
#include "ttmoe/tta/adapting.hpp"
#include "ttmoe/tta/entropy.hpp"

namespace ttmoe::tta {

/// EATA on model type Model.
template <class Model, class T = float, class D = cpu>
class EATA : public AdaptingMethod<Model, T, D> {
 public:
  struct Options {
    LearningRate lr{6e-4, 64, {}};
    double momentum = 0.9;
    double margin_factor = 0.4;   ///< E0 = margin_factor * ln C
    double d_margin = 0.05;       ///< redundancy margin on |cos|
    double probs_ema = 0.9;       ///< m <- ema m + (1 - ema) mean(p_kept)
    double fisher_alpha = 2000;   ///< regulariser weight
    std::vector<std::string> trainable = {"*norm*.weight", "*norm*.bias"};
  };

  EATA() = default;
  /// `fisher_batches`: clean in-distribution images for the Fisher (the papers use 2000 images).
  explicit EATA(Options o, std::vector<Tensor<T, DynShape<4>, D>> fisher_batches = {})
      : opt_(std::move(o)), fisher_batches_(std::move(fisher_batches)) {}

  std::string name() const { return "eata"; }

  /// Selects the trainable parameters, snapshots theta0 and computes the Fisher. Called lazily.
  void prepare(Model& model) {
    this->adapt_only(model, opt_.trainable);
    compute_fisher(model);
    probs_ema_.reset();
  }

  /// Forward (recorded), filters, weighted entropy + Fisher regulariser, one SGD step; returns the
  /// pre-step logits.
  Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) {
    if (!this->prepared_for(model)) prepare(model);
    const index_t B = images.extent(0);
    auto& sgd = this->begin_batch(B, opt_.lr, opt_.momentum);
    autograd::Tape tape;
    Tensor<T, DynShape<2>, D> logits = model.forward(images);
    const index_t C = logits.extent(1);
    const double e0 = entropy_margin(C, opt_.margin_factor);
    auto h = entropies(logits);
    const auto hv = host_values(h);
    const auto probs = host_softmax(logits);
    // Filters (decisions on detached values).
    std::vector<bool> keep(std::size_t(B), false);
    index_t kept = 0;
    for (index_t b = 0; b < B; ++b) {
      bool k = hv[b] < e0;
      if (k && probs_ema_) k = std::abs(cosine(*probs_ema_, probs, b, C)) < opt_.d_margin;
      keep[b] = k;
      kept += k;
    }
    this->last_.kept = kept;
    this->last_.threshold = e0;
    std::vector<double> coef(std::size_t(B), 0.0);
    for (index_t b = 0; b < B; ++b)
      if (keep[b]) coef[b] = 1.0 / std::exp(hv[b] - e0) / double(kept);
    for (double v : hv)
      if (!std::isfinite(v)) {  // a NaN sample would poison the loss anyway: skip the batch, counted
        this->skip_nonfinite(tape);
        return logits.detach();
      }
    if (kept == 0) {  // EATA's code only steps when some sample survives both filters
      tape.clear();
      this->last_.loss = 0;
      return logits.detach();
    }
    Tensor<T, Shape<>, D> loss = weighted_entropy_sum(h, coef);
    if (!fisher_.empty()) loss = loss + regulariser() * T(opt_.fisher_alpha);
    if (!this->accept_loss(tape, loss)) return logits.detach();
    update_probs_ema(probs, keep, kept, C);
    this->backward_and_step(tape, loss, sgd);
    return logits.detach();
  }

  /// Restores theta0, drops the optimiser and the probability EMA (the Fisher is kept).
  void reset() {
    if (!this->prepared()) return;
    this->set_.restore();
    probs_ema_.reset();
  }
  /// Diagonal Fisher per trainable parameter (parallel to trainable().params()).
  const std::vector<Tensor<T, Shape<dyn>, D>>& fisher() const { return fisher_; }

 private:
  static std::vector<double> host_softmax(const Tensor<T, DynShape<2>, D>& logits) {
    const index_t B = logits.extent(0), C = logits.extent(1);
    const auto z = logits.detach().to_vector();
    std::vector<double> p(z.size());
    for (index_t b = 0; b < B; ++b) {
      double m = -INFINITY, s = 0;
      for (index_t c = 0; c < C; ++c) m = std::max(m, double(z[b * C + c]));
      for (index_t c = 0; c < C; ++c) s += (p[b * C + c] = std::exp(double(z[b * C + c]) - m));
      for (index_t c = 0; c < C; ++c) p[b * C + c] /= s;
    }
    return p;
  }
  // torch.nn.functional.cosine_similarity (eps 1e-8) of m and row b of p.
  static double cosine(const std::vector<double>& m, const std::vector<double>& p, index_t b, index_t C) {
    double dot = 0, nm = 0, np = 0;
    for (index_t c = 0; c < C; ++c) {
      dot += m[c] * p[b * C + c];
      nm += m[c] * m[c];
      np += p[b * C + c] * p[b * C + c];
    }
    return dot / std::max(std::sqrt(nm) * std::sqrt(np), 1e-8);
  }
  void update_probs_ema(const std::vector<double>& p, const std::vector<bool>& keep, index_t kept, index_t C) {
    std::vector<double> mean(std::size_t(C), 0.0);
    for (std::size_t b = 0; b < keep.size(); ++b)
      if (keep[b])
        for (index_t c = 0; c < C; ++c) mean[c] += p[b * C + c] / double(kept);
    if (!probs_ema_) {
      probs_ema_ = mean;
      return;
    }
    for (index_t c = 0; c < C; ++c) (*probs_ema_)[c] = opt_.probs_ema * (*probs_ema_)[c] + (1 - opt_.probs_ema) * mean[c];
  }
  Tensor<T, Shape<>, D> regulariser() const {
    const auto& ps = this->set_.params();
    Tensor<T, Shape<>, D> r = sum_all(fisher_[0] * square(ps[0].flat - this->set_.initial()[0]));
    for (std::size_t i = 1; i < ps.size(); ++i) r = r + sum_all(fisher_[i] * square(ps[i].flat - this->set_.initial()[i]));
    return r;
  }
  void compute_fisher(Model& model) {
    fisher_.clear();
    if (fisher_batches_.empty()) return;
    auto& ps = this->set_.params();
    std::vector<std::vector<double>> acc(ps.size());
    for (std::size_t i = 0; i < ps.size(); ++i) acc[i].assign(std::size_t(ps[i].flat.numel()), 0.0);
    for (const auto& x : fisher_batches_) {
      autograd::Tape tape;
      Tensor<T, DynShape<2>, D> logits = model.forward(x);
      const index_t B = logits.extent(0), C = logits.extent(1);
      const auto z = logits.detach().to_vector();
      std::vector<std::int64_t> pseudo(static_cast<std::size_t>(B));
      for (index_t b = 0; b < B; ++b) {
        index_t best = 0;
        for (index_t c = 1; c < C; ++c)
          if (z[b * C + c] > z[b * C + best]) best = c;
        pseudo[b] = best;
      }
      auto labels = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(B), std::span<const std::int64_t>(pseudo));
      Tensor<T, Shape<>, D> loss = nn::cross_entropy(logits, labels);
      autograd::backward(tape, loss);
      for (std::size_t i = 0; i < ps.size(); ++i) {
        auto g = ps[i].flat.grad();
        if (!g.defined()) continue;
        const auto gv = g.to_vector();
        for (std::size_t k = 0; k < gv.size(); ++k) acc[i][k] += double(gv[k]) * double(gv[k]);
      }
      this->set_.zero_grad();
    }
    for (std::size_t i = 0; i < ps.size(); ++i) {
      std::vector<T> f(acc[i].size());
      for (std::size_t k = 0; k < f.size(); ++k) f[k] = T(acc[i][k] / double(fisher_batches_.size()));
      fisher_.push_back(Tensor<T, Shape<dyn>, D>::from_host(Shape<dyn>(index_t(f.size())), std::span<const T>(f)));
    }
  }

  Options opt_;
  std::vector<Tensor<T, DynShape<4>, D>> fisher_batches_;
  std::vector<Tensor<T, Shape<dyn>, D>> fisher_;
  std::optional<std::vector<double>> probs_ema_;
};

}  // namespace ttmoe::tta
