#pragma once
// BF16-resident inference weights for the Llama-family LM (issue #14): every Linear of the decoder
// (q/k/v/o, gate/up/down) and an untied LM head keep their weight as BF16 (nn::Linear::weight_bf16)
// and run the BF16 kernel with F32 accumulation; so does the embedding table, whose one BF16 copy
// also serves a tied head (Llama-3.2-1B's 128256 x 2048 table is 1 GB in F32). Norms and biases
// stay F32. load_llama maps these straight from a BF16 file (llama_bf16_mapped.hpp).
// The model is then inference-only: forward_cached / generate / perplexity work, and recording it
// on a tape is an error naming the layer. Unmerged LoRA deltas (F32) still apply on top.

#include <string>
#include <type_traits>

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

/// Where load_llama keeps the BF16 weights a BF16 file stores (WeightPrecision::bf16; issue #14):
/// `mapped` views them in the memory-mapped file (no copy, the page cache's pages, shared with
/// other processes mapping the file; mapped 2 MiB at a time where the page cache holds the file in
/// 2 MiB folios, else 4 KiB: io::detail::advise_huge_pages); `huge_pages` copies each into
/// anonymous memory with transparent huge pages, releasing the mapped pages as it goes
/// (io::copy_to_huge_pages): a copy at load, for machines where streaming page-cache pages costs
/// what huge pages save and the page cache cannot hold the file in large folios. `mapped` is the
/// default: no copy, and the same 2 MiB entries where the page cache allows them (docs/design.md,
/// #14 decode, helpers bw17 and decode18).
enum class Bf16Storage { mapped, huge_pages };

/// Parses "mapped" / "huge_pages" (CLI flags); anything else is a ValueError naming the value.
inline Bf16Storage parse_bf16_storage(const std::string& s) {
  if (s == "mapped") return Bf16Storage::mapped;
  if (s == "huge_pages") return Bf16Storage::huge_pages;
  throw ValueError("BF16 weight storage '" + s + "' is not supported (mapped, huge_pages)");
}

/// Converts every Linear weight of `m` and its embedding table to BF16 once (round-to-nearest-even)
/// and frees the F32 copies.
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
  if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>) {
    auto& table = m.model.embed_tokens;
    if (!table.weight_bf16.defined())
      table.adopt_weight_bf16(io::Bf16Matrix::from_floats(table.weight.data(), table.weight.extent(0), table.weight.extent(1)),
                              "model.embed_tokens");
  }
}

/// Sets how every BF16-resident weight of `m` (decoder Linears, an untied head, the embedding table
/// that a tied head multiplies by) treats its activations: io::Bf16Arithmetic::exact (the default a
/// load gives) or bf16_activations (rounded to BF16 first: the AVX512-BF16 prefill kernel). F32
/// weights are untouched.
template <class T, class D>
void set_bf16_arithmetic(LlamaForCausalLM<T, D>& m, io::Bf16Arithmetic arithmetic) {
  for (auto& l : m.model.layers)
    for (auto* lin : {&l.self_attn.q_proj, &l.self_attn.k_proj, &l.self_attn.v_proj, &l.self_attn.o_proj,
                      &l.mlp.gate_proj, &l.mlp.up_proj, &l.mlp.down_proj})
      lin->weight_bf16.arithmetic = arithmetic;
  m.lm_head.weight_bf16.arithmetic = arithmetic;
  m.model.embed_tokens.weight_bf16.arithmetic = arithmetic;
}

/// Parses "exact" / "bf16" (CLI flags, io::Bf16Arithmetic); anything else is a ValueError naming it.
inline io::Bf16Arithmetic parse_bf16_arithmetic(const std::string& s) {
  if (s == "exact") return io::Bf16Arithmetic::exact;
  if (s == "bf16") return io::Bf16Arithmetic::bf16_activations;
  throw ValueError("BF16 arithmetic '" + s + "' is not supported (exact, bf16)");
}

}  // namespace ttmoe::models
