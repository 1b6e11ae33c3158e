#pragma once
// The Llama-family decoder-only causal LM (Hugging Face LlamaForCausalLM / Qwen2ForCausalLM): token
// embedding, pre-norm blocks (RMSNorm -> GQA attention with RoPE -> residual, RMSNorm -> SwiGLU MLP
// -> residual), a final RMSNorm and a tied or separate LM head. Parameter names are Hugging Face's
// (model.layers.{i}.self_attn.q_proj.weight, model.embed_tokens.weight, lm_head.weight), so a
// save_pretrained folder loads by name and the optimisers / freezing patterns see HF names.
// Every extent is dynamic (batch and sequence at run time, widths from config.json).
// Two paths: forward() is differentiable (the training tape), forward_cached() is inference over a
// KV cache (nn/kv_cache.hpp) and only runs the LM head where logits are wanted; given the rows whose
// hidden states are wanted, it also skips the last layer's work past the attention on the others.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/models/llama_config.hpp"
#include "ttmoe/nn/embedding.hpp"
#include "ttmoe/nn/llama_attention.hpp"
#include "ttmoe/nn/mlp.hpp"
#include "ttmoe/nn/rmsnorm.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::models {

/// One pre-norm decoder layer (HF LlamaDecoderLayer / Qwen2DecoderLayer).
template <class T = float, class D = cpu>
struct LlamaDecoderLayer {
  nn::RMSNorm<T, D> input_layernorm, post_attention_layernorm;
  nn::LlamaAttention<T, D> self_attn;
  nn::SwiGLUMLP<T, D> mlp;

  LlamaDecoderLayer() = default;
  LlamaDecoderLayer(const LlamaConfig& c, const std::vector<double>& freqs, std::uint64_t seed)
      : input_layernorm(c.hidden_size, T(c.rms_norm_eps)),
        post_attention_layernorm(c.hidden_size, T(c.rms_norm_eps)),
        self_attn(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                  c.attention_bias || c.qkv_bias, c.attention_bias, freqs, seed),
        mlp(c.hidden_size, c.intermediate_size, seed + 16) {}

  /// x [B, T, D] -> [B, T, D]; `attn` runs the attention on the normed input.
  template <class Attn>
  Tensor<T, DynShape<3>, D> block(const Tensor<T, DynShape<3>, D>& x, Attn&& attn) const {
    return feed_forward(Tensor<T, DynShape<3>, D>(x + attn(input_layernorm(x))));
  }

  /// The block's second half, h + mlp(post_attention_layernorm(h)), for h [..., D] of any rank:
  /// each row on its own, so a caller may run it on some rows only (forward_cached's kept rows).
  template <class S>
  Tensor<T, DynShape<S::rank>, D> feed_forward(const Tensor<T, S, D>& h) const {
    return mlp.down_proj(mlp.gated(post_attention_layernorm(h)), h);  // the residual is added as the GEMM stores
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("self_attn", self_attn);
    v.sub("mlp", mlp);
    v.sub("input_layernorm", input_layernorm);
    v.sub("post_attention_layernorm", post_attention_layernorm);
  }
};

/// The decoder stack without the head (HF LlamaModel: `model.*`).
template <class T = float, class D = cpu>
struct LlamaModel {
  nn::Embedding<T, D> embed_tokens;
  std::vector<LlamaDecoderLayer<T, D>> layers;
  nn::RMSNorm<T, D> norm;

  template <class V>
  void visit_parameters(V& v) {
    v.sub("embed_tokens", embed_tokens);
    for (std::size_t i = 0; i < layers.size(); ++i) v.sub("layers." + std::to_string(i), layers[i]);
    v.sub("norm", norm);
  }
};

/// A Llama-family causal LM; `lm_head` is undefined when the embeddings are tied.
template <class T = float, class D = cpu>
struct LlamaForCausalLM {
  LlamaConfig config;
  LlamaModel<T, D> model;
  nn::Linear<T, D> lm_head;  ///< [vocab, hidden]; weight undefined when tie_word_embeddings

  LlamaForCausalLM() = default;
  /// A randomly initialised model (torch-like inits; seeded) of architecture `c`.
  explicit LlamaForCausalLM(const LlamaConfig& c, std::uint64_t seed = 0) : config(c) {
    c.validate();
    const auto freqs = c.rope_frequencies();
    model.embed_tokens = nn::Embedding<T, D>(c.vocab_size, c.hidden_size, seed);
    for (index_t i = 0; i < c.num_hidden_layers; ++i)
      model.layers.emplace_back(c, freqs, seed + 1000 + 32 * std::uint64_t(i));
    model.norm = nn::RMSNorm<T, D>(c.hidden_size, T(c.rms_norm_eps));
    if (!c.tie_word_embeddings) lm_head = nn::Linear<T, D>(c.hidden_size, c.vocab_size, false, seed + 7);
  }

  /// The output projection's weight [vocab, hidden] (the embedding table when tied).
  const Tensor<T, DynShape<2>, D>& head_weight() const {
    return config.tie_word_embeddings ? model.embed_tokens.weight : lm_head.weight;
  }

  /// Final hidden states [B, T, hidden] (after the last norm) of ids [B, T]; differentiable.
  Tensor<T, DynShape<3>, D> hidden_states(const IndexTensor<DynShape<2>, D>& ids) const {
    check_ids(ids);
    const index_t Tn = ids.extent(1);
    std::vector<std::int64_t> pos(static_cast<std::size_t>(Tn));
    for (index_t i = 0; i < Tn; ++i) pos[std::size_t(i)] = i;
    auto positions = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(Tn), std::span<const std::int64_t>(pos));
    Tensor<T, DynShape<3>, D> x = model.embed_tokens(ids);
    for (const auto& layer : model.layers)
      x = layer.block(x, [&](const auto& n) { return layer.self_attn(n, positions); });
    return model.norm(x);
  }

  /// Logits [B, T, vocab] of ids [B, T] (positions 0..T-1, causal); differentiable.
  Tensor<T, DynShape<3>, D> forward(const IndexTensor<DynShape<2>, D>& ids) const {
    return logits(hidden_states(ids));
  }
  auto operator()(const IndexTensor<DynShape<2>, D>& ids) const { return forward(ids); }

  /// LM head over hidden states of any rank [..., hidden] -> [..., vocab].
  template <class S>
  Tensor<T, DynShape<S::rank>, D> logits(const Tensor<T, S, D>& h) const {
    if (!config.tie_word_embeddings && lm_head.weight_bf16.defined()) return lm_head(h);  // BF16-resident head
    if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>)
      if (config.tie_word_embeddings && model.embed_tokens.weight_bf16.defined())  // tied BF16 table
        return linear_bf16(h, model.embed_tokens.weight_bf16, Tensor<T, DynShape<1>, D>{});
    return linear(h, head_weight(), Tensor<T, DynShape<1>, D>{});
  }

  /// A KV cache sized for this model: `batch` sequences of up to `capacity` positions.
  nn::KVCache<T, D> make_cache(index_t batch, index_t capacity) const {
    if (capacity > config.max_position_embeddings)
      throw ValueError("LlamaForCausalLM::make_cache: capacity " + std::to_string(capacity) +
                       " exceeds max_position_embeddings " + std::to_string(config.max_position_embeddings));
    return nn::KVCache<T, D>(config.num_hidden_layers, batch, config.num_key_value_heads, capacity, config.head_dim);
  }

  /// Inference step: ids [B, t] continue each sequence at cache.lengths[b]; appends their keys and
  /// values, advances the lengths by t and returns the final hidden states [B, t, hidden]. Rows past
  /// a sequence's real tokens (right padding) are harmless: later steps overwrite their cache slots
  /// and no real token attends to them (they come after it). Not recorded on a tape.
  Tensor<T, DynShape<3>, D> forward_cached(const IndexTensor<DynShape<2>, D>& ids, nn::KVCache<T, D>& cache) const {
    const index_t B = ids.extent(0), t = ids.extent(1);
    return run_cached(ids, cache, nullptr).reshape(DynShape<3>(B, t, config.hidden_size));
  }

  /// forward_cached(ids, cache) when only some rows' hidden states are wanted: `keep` [R] holds flat
  /// row numbers b * t + i of ids [B, t] (any order, repeats allowed; none: the step only fills the
  /// cache) and the result is those rows' final hidden states [R, hidden], the same rows of the full
  /// step's (bit for bit where R is at least the GEMMs' row thresholds; fewer rows take the few-row
  /// kernels, another summation order). Every row's keys and values still go into the cache (later
  /// tokens read them), but the last layer runs its output projection, residual, MLP and the final
  /// norm on the kept rows alone: a prompt whose logits are wanted at its last token skips about
  /// 1/layers of the prefill's work (llama.cpp selects its output rows before the last layer's
  /// attention output the same way). Throws ValueError for a row outside [0, B * t).
  Tensor<T, DynShape<2>, D> forward_cached(const IndexTensor<DynShape<2>, D>& ids, nn::KVCache<T, D>& cache,
                                           const IndexTensor<DynShape<1>, D>& keep) const {
    ttmoe::detail::check_indices(keep, ids.extent(0) * ids.extent(1), "LlamaForCausalLM::forward_cached (kept rows)");
    return run_cached(ids, cache, &keep);
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("model", model);
    if (!config.tie_word_embeddings) v.sub("lm_head", lm_head);
  }

 private:
  /// Both forward_cached forms: all B * t rows' final hidden states [B * t, hidden], or (keep set)
  /// the kept rows' [R, hidden], the last layer's second half run on those rows only.
  Tensor<T, DynShape<2>, D> run_cached(const IndexTensor<DynShape<2>, D>& ids, nn::KVCache<T, D>& cache,
                                       const IndexTensor<DynShape<1>, D>* keep) const {
    check_ids(ids);
    const index_t B = ids.extent(0), t = ids.extent(1), dim = config.hidden_size;
    if (B != cache.batch())
      throw ShapeError("LlamaForCausalLM::forward_cached: " + std::to_string(B) + " sequences for a cache of " +
                       std::to_string(cache.batch()));
    for (index_t b = 0; b < B; ++b)
      if (cache.lengths[std::size_t(b)] + t > cache.capacity())
        throw ValueError("LlamaForCausalLM: sequence " + std::to_string(b) + " would reach " +
                         std::to_string(cache.lengths[std::size_t(b)] + t) + " positions; the context holds " +
                         std::to_string(cache.capacity()));
    autograd::NoGrad ng;
    std::vector<std::int64_t> pos(static_cast<std::size_t>(B * t));
    for (index_t b = 0; b < B; ++b)
      for (index_t i = 0; i < t; ++i) pos[std::size_t(b * t + i)] = cache.lengths[std::size_t(b)] + i;
    auto positions = IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(B, t), std::span<const std::int64_t>(pos));
    Tensor<T, DynShape<3>, D> x = model.embed_tokens(ids);
    const std::size_t L = model.layers.size(), full = keep && L > 0 ? L - 1 : L;
    for (std::size_t l = 0; l < full; ++l) {
      const auto& layer = model.layers[l];
      x = layer.block(x, [&](const auto& n) { return layer.self_attn.forward_cached(n, positions, cache, index_t(l)); });
    }
    Tensor<T, DynShape<2>, D> out;
    if (full < L) {  // the last layer: attention over every row (the cache needs them), the rest on the kept rows
      const auto& layer = model.layers[full];
      auto merged = layer.self_attn.attend_cached(layer.input_layernorm(x), positions, cache, index_t(full));
      auto rows = [&](const auto& y) { return index_select(y.reshape(DynShape<2>(B * t, y.extent(2))), *keep); };
      Tensor<T, DynShape<2>, D> h = rows(x) + layer.self_attn.o_proj(rows(merged));
      out = model.norm(layer.feed_forward(h));
    } else {
      out = keep ? model.norm(index_select(x.reshape(DynShape<2>(B * t, dim)), *keep))
                 : model.norm(x).reshape(DynShape<2>(B * t, dim));
    }
    for (auto& n : cache.lengths) n += t;
    return out;
  }

  void check_ids(const IndexTensor<DynShape<2>, D>& ids) const {
    ttmoe::detail::check_indices(ids, config.vocab_size, "LlamaForCausalLM (token ids)");
  }
};

}  // namespace ttmoe::models
