#pragma once
// The one refusal every BF16-resident layer (nn::Linear's weight_bf16, nn::Embedding's table;
// issue #14) gives when it is recorded on an autograd tape: BF16 bits have no gradient storage, so
// such a layer is inference-only and says which layer it is and how to get a trainable model.

#include <string>

#include "ttmoe/core/error.hpp"
#include "ttmoe/core/recording.hpp"

namespace ttmoe::nn {

/// Throws a ValueError naming the layer, `kind` + " " + `name` (e.g. "nn::Linear
/// model.layers.0.self_attn.q_proj"), when a tape is recording on this thread; does nothing under
/// NoGrad or with no tape (and builds no string then: it runs on every inference call).
inline void refuse_recording_bf16(const char* kind, const std::string& name) {
  if (autograd::is_recording())
    throw ValueError(std::string(kind) + " " + name +
                     ": the weight is BF16-resident (inference only); training or autograd needs the F32 weight "
                     "(load with WeightPrecision::f32)");
}

}  // namespace ttmoe::nn
