#pragma once
// BF16-resident inference weights for the Llama-family LM (issue #14): every Linear of the decoder
// (q/k/v/o, gate/up/down) and an untied LM head keep their weight as BF16 (nn::Linear::weight_bf16)
// and run the BF16 kernel with F32 accumulation; norms, the embedding table and a tied head stay
// F32 (the embedding is read one row per token, so its precision does not set the decode speed).
// The model is then inference-only: forward_cached / generate / perplexity work, and recording it
// on a tape is an error naming the layer. Unmerged LoRA deltas (F32) still apply on top.

#include <string>

#include "ttmoe/models/llama.hpp"

namespace ttmoe::models {

/// Precision the loaded Linear weights are kept in.
enum class WeightPrecision { f32, bf16 };

/// Parses "f32" / "bf16" (CLI flags); anything else is a ValueError naming the value.
inline WeightPrecision parse_weight_precision(const std::string& s) {
  if (s == "f32") return WeightPrecision::f32;
  if (s == "bf16") return WeightPrecision::bf16;
  throw ValueError("weight precision '" + s + "' is not supported (f32, bf16)");
}

/// Converts every Linear weight of `m` to BF16 once (round-to-nearest-even) and frees its F32 copy.
template <class T, class D>
void keep_linear_weights_bf16(LlamaForCausalLM<T, D>& m) {
  for (std::size_t i = 0; i < m.model.layers.size(); ++i) {
    auto& l = m.model.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    l.self_attn.q_proj.keep_weight_bf16(p + "self_attn.q_proj");
    l.self_attn.k_proj.keep_weight_bf16(p + "self_attn.k_proj");
    l.self_attn.v_proj.keep_weight_bf16(p + "self_attn.v_proj");
    l.self_attn.o_proj.keep_weight_bf16(p + "self_attn.o_proj");
    l.mlp.gate_proj.keep_weight_bf16(p + "mlp.gate_proj");
    l.mlp.up_proj.keep_weight_bf16(p + "mlp.up_proj");
    l.mlp.down_proj.keep_weight_bf16(p + "mlp.down_proj");
  }
  if (!m.config.tie_word_embeddings) m.lm_head.keep_weight_bf16("lm_head");
}

}  // namespace ttmoe::models
