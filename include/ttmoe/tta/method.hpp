#pragma once
// The contract between the test-time-adaptation engine and the methods (NoAdapt, Tent, EATA, SAR,
// MoETTA). A method is a class, generic over the model type, with
//   std::string name() const;
//   Tensor<T, DynShape<2>, D> adapt_and_predict(Model& model, const Tensor<T, DynShape<4>, D>& images);
//   const StepInfo& last_step() const;
//   void reset();
// adapt_and_predict returns the logits of the forward pass made BEFORE the batch's update (the
// online-TTA protocol: a prediction never sees its own gradient step). The model only needs
// `forward(images) -> logits [B, C]` and `visit_parameters` (nn::for_each_parameter).

#include <cmath>
#include <concepts>
#include <limits>
#include <optional>
#include <string>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe::tta {

/// What one adapt_and_predict call did; the engine counts skipped batches from it and tests read it.
struct StepInfo {
  bool updated = false;            ///< the trainable parameters changed
  bool skipped_nonfinite = false;  ///< the loss was NaN/inf: nothing was applied (gradients dropped)
  bool reset = false;              ///< the method restored the initial parameters after this batch (SAR)
  index_t kept = 0;                ///< samples that entered the entropy term (all of them for Tent)
  double loss = std::numeric_limits<double>::quiet_NaN();  ///< total loss value (NaN if none formed)
  double threshold = std::numeric_limits<double>::quiet_NaN();  ///< entropy threshold used (filters)
  double alpha = std::numeric_limits<double>::quiet_NaN();      ///< balance-loss weight (MoETTA)
};

/// A model usable by the methods: images [B, C, H, W] -> logits [B, classes].
template <class M, class T, class D = cpu>
concept Classifier = requires(M& m, const Tensor<T, DynShape<4>, D>& x) {
  { m.forward(x) } -> std::convertible_to<Tensor<T, DynShape<2>, D>>;
};

/// A method the engine can drive on model type M.
template <class A, class M, class T, class D = cpu>
concept Method = Classifier<M, T, D> && requires(A& a, const A& ca, M& m, const Tensor<T, DynShape<4>, D>& x) {
  { ca.name() } -> std::convertible_to<std::string>;
  { a.adapt_and_predict(m, x) } -> std::convertible_to<Tensor<T, DynShape<2>, D>>;
  { ca.last_step() } -> std::convertible_to<StepInfo>;
};

/// Learning rate given at a reference batch size and scaled linearly with the actual batch size
/// (lr = lr_at_reference * B / reference_batch), the rule the papers' "lr x at batch 64" implies and
/// that Tent/SAR's code applies. `fixed` overrides the rule. The engine-facing methods fix the rate
/// from the FIRST batch's size, so a short final batch does not change it.
struct LearningRate {
  double at_reference = 1e-3;
  index_t reference_batch = 64;
  std::optional<double> fixed;
  /// The rate for batch size `batch`.
  double for_batch(index_t batch) const {
    return fixed ? *fixed : at_reference * double(batch) / double(reference_batch);
  }
};

/// E0 = factor * ln(C): the entropy margin of EATA/SAR/MoETTA (factor 0.4 in all three papers).
inline double entropy_margin(index_t num_classes, double factor = 0.4) { return factor * std::log(double(num_classes)); }

}  // namespace ttmoe::tta
