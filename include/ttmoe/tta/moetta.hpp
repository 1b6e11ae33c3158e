#pragma once
// MoETTA (AAAI 2026) as the authors' code runs it (IMPLEMENTATION_FACTS.md, MoETTA section):
//  * the model's LayerNorms with index >= first_moe_index become MoE-LayerNorms (the default depends
//    on the depth, see default_first_moe_index: ViT-B/16 keeps blocks.0.norm1 plain, ViT-L/16
//    indices 0-14) with E experts (default 9, the code's value; the paper says 11 for potpourri);
//    only routers and expert deltas are trainable;
//  * per batch t: H over all C logits; H̄_t = batch mean; m_t = mean(H̄_1..H̄_t) INCLUDING batch t
//    (Algorithm 1 appends H̄_t before rescaling, and threshold_t = threshold_{t-1} * m_t / m_{t-1}
//    with threshold_1 = H̄_1 telescopes to m_t); threshold_t = m_t; alpha_t = lambda * m_t
//    (lambda 0.2);
//  * kept: H <= threshold_t (the code's comparison; the paper writes <); weight exp(E0 - H) with
//    E0 = 0.4 ln C (detached); loss = mean_kept(w H) + alpha_t * SUM over MoE layers of the balance
//    loss. With no kept sample the entropy term is omitted (the code would produce NaN), the balance
//    term still applies;
//  * SGD momentum 0.9, lr = 1e-3 * B / 64 (linear scaling from the paper's "1e-3 at batch 64",
//    fixed from the first batch's size); no reset; no mode switch (our ViT has no dropout).
// A batch whose loss (or batch-mean entropy) is not finite is skipped, counted, and leaves both the
// parameters and the running entropy mean untouched.
//
// Model requirements beyond forward(): convert_to_moe_layernorm(num_experts, first_index, seed),
// moe_layers() (empty before conversion) and balance_loss() (sum over layers, last forward), as
// models::VisionTransformer provides.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ttmoe/tta/adapting.hpp"
#include "ttmoe/tta/entropy.hpp"

namespace ttmoe::tta {

/// Running mean of batch-mean entropies: the dynamic threshold and balance weight of MoETTA.
class EntropyRunningMean {
 public:
  /// The mean after adding `batch_mean` (does not commit it).
  double peek(double batch_mean) const { return (sum_ + batch_mean) / double(count_ + 1); }
  /// Adds a batch mean.
  void add(double batch_mean) {
    sum_ += batch_mean;
    ++count_;
  }
  /// Current mean (NaN before the first batch).
  double value() const { return count_ ? sum_ / double(count_) : std::nan(""); }
  std::int64_t count() const { return count_; }
  void clear() { sum_ = 0, count_ = 0; }

 private:
  double sum_ = 0;
  std::int64_t count_ = 0;
};

/// The default first MoE-LayerNorm index (LayerNorms are counted in module order: blocks.i.norm1 = 2i,
/// blocks.i.norm2 = 2i+1, the final norm = 2*depth; those below the index stay plain and frozen) for
/// a ViT with `depth` blocks, as the authors' code chooses it:
///
///   | depth | model       | first MoE index | plain LayerNorms                      |
///   |-------|-------------|-----------------|---------------------------------------|
///   | 12    | ViT-B/16    | 1               | blocks.0.norm1                        |
///   | 24    | ViT-L/16    | 15              | blocks.0.norm1 .. blocks.7.norm1 (15) |
///   | other | any         | 1               | blocks.0.norm1                        |
///
/// The paper gives no rule for other depths (its Fig. 5 only shows that freezing a few shallow
/// LayerNorms beats replacing all of them, on ViT-B/16), so they keep the paper's "all but the first"
/// default; MoETTA::Options::first_moe_index overrides it.
inline index_t default_first_moe_index(index_t depth) { return depth == 24 ? 15 : 1; }

/// The default first MoE index for `model`: default_first_moe_index of its depth, read as
/// (num_layernorms() - 1) / 2 from a model that has num_layernorms() (a ViT: 2 per block + the final
/// norm); 1 for a model without it.
template <class Model>
index_t default_first_moe_index_for(const Model& model) {
  if constexpr (requires { model.num_layernorms(); })
    return default_first_moe_index((index_t(model.num_layernorms()) - 1) / 2);
  else
    return 1;
}

/// MoETTA on model type Model.
template <class Model, class T = float, class D = cpu>
class MoETTA : public AdaptingMethod<Model, T, D> {
 public:
  struct Options {
    index_t num_experts = 9;
    /// LayerNorms with a smaller module-order index stay plain; unset: default_first_moe_index of the
    /// model's depth (1 for ViT-B/16, 15 for ViT-L/16).
    std::optional<index_t> first_moe_index;
    std::uint64_t router_seed = 0; ///< seed of the routers' Xavier-normal init
    double lambda = 0.2;           ///< alpha_t = lambda * running mean entropy
    double margin_factor = 0.4;    ///< E0 = margin_factor * ln C
    LearningRate lr{1e-3, 64, {}};
    double momentum = 0.9;
    /// Experiments / tests: a fixed entropy threshold instead of the running mean (alpha unchanged).
    std::optional<double> fixed_threshold;
  };

  MoETTA() = default;
  explicit MoETTA(Options o) : opt_(std::move(o)) {}

  std::string name() const { return "moetta"; }

  /// Converts the model (unless it already has MoE-LayerNorms, e.g. loaded ones), freezes all but
  /// routers and experts, snapshots them. Called lazily.
  void prepare(Model& model) {
    if (model.moe_layers().empty())
      model.convert_to_moe_layernorm(opt_.num_experts, first_moe_index(model), opt_.router_seed);
    this->adapt_only(model, {"*.experts.weight_delta", "*.experts.bias_delta", "*.router.weight", "*.router.bias"});
    stats_.clear();
  }

  /// One recorded forward, the filtered re-weighted entropy + balance loss, one SGD step; returns
  /// the pre-step logits.
  Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images) {
    if (!this->prepared_for(model)) prepare(model);
    auto& sgd = this->begin_batch(images.extent(0), opt_.lr, opt_.momentum);
    autograd::Tape tape;
    Tensor<T, DynShape<2>, D> logits = model.forward(images);
    const double e0 = entropy_margin(logits.extent(1), opt_.margin_factor);
    auto h = entropies(logits);
    const auto hv = host_values(h);
    const double batch_mean = mean_of(hv);
    if (!std::isfinite(batch_mean)) {
      this->skip_nonfinite(tape);
      return logits.detach();
    }
    const double running = stats_.peek(batch_mean);  // includes this batch (Algorithm 1)
    const double threshold = opt_.fixed_threshold ? *opt_.fixed_threshold : running;
    const double alpha = opt_.lambda * running;
    this->last_.threshold = threshold;
    this->last_.alpha = alpha;
    index_t kept = 0;
    for (double v : hv) kept += v <= threshold;
    this->last_.kept = kept;
    Tensor<T, Shape<>, D> loss = model.balance_loss() * T(alpha);
    if (kept > 0) {
      std::vector<double> coef(hv.size(), 0.0);
      for (std::size_t b = 0; b < hv.size(); ++b)
        if (hv[b] <= threshold) coef[b] = std::exp(e0 - hv[b]) / double(kept);
      loss = loss + weighted_entropy_sum(h, coef);
    }
    if (!this->accept_loss(tape, loss)) return logits.detach();
    stats_.add(batch_mean);
    this->backward_and_step(tape, loss, sgd);
    return logits.detach();
  }

  /// The first MoE-LayerNorm index used for `model`: the option when set, else the depth default.
  index_t first_moe_index(const Model& model) const {
    return opt_.first_moe_index ? *opt_.first_moe_index : default_first_moe_index_for(model);
  }
  /// Restores the routers / experts as converted and forgets the entropy statistics (the method
  /// itself never resets during a stream).
  void reset() {
    if (!this->prepared()) return;
    this->set_.restore();
    stats_.clear();
  }
  /// Running mean of batch-mean entropies over the applied batches.
  const EntropyRunningMean& entropy_stats() const { return stats_; }

 private:
  Options opt_;
  EntropyRunningMean stats_;
};

}  // namespace ttmoe::tta
