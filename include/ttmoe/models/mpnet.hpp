#pragma once
// The MPNet encoder (Hugging Face MPNetModel without its pooler; all-mpnet-base-v2 is one), inference
// only: word + position embeddings with position ids counted from pad_token_id + 1 (RoBERTa style),
// LayerNorm, then post-LN encoder layers (models/encoder_layer.hpp) whose attention scores all add
// ONE T5-style bidirectional relative-position bias: relative distances fall into
// relative_attention_num_buckets buckets (half per direction, exact below a quarter of them, then
// logarithmic up to a distance of 128), each bucket owning a learned bias per head
// (`encoder.relative_attention_bias.weight` [buckets, heads]). The bias table is built once per batch
// and shared by every layer, as transformers' MPNetEncoder does.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/models/encoder_config.hpp"
#include "ttmoe/models/encoder_layer.hpp"
#include "ttmoe/nn/embedding.hpp"

namespace ttmoe::models {

/// MPNet's relative-position bucket of `relative` = key position - query position (transformers'
/// MPNetEncoder.relative_position_bucket). The logarithmic part is computed in single precision like
/// the reference, so boundary distances fall into the same bucket.
inline index_t mpnet_relative_bucket(std::int64_t relative, std::int64_t num_buckets = 32, std::int64_t max_distance = 128) {
  const std::int64_t half = num_buckets / 2, exact = half / 2;
  const std::int64_t n = -relative;
  const std::int64_t base = n < 0 ? half : 0;
  const std::int64_t dist = n < 0 ? -n : n;
  if (dist < exact) return index_t(base + dist);
  const float scaled = std::log(float(dist) / float(exact)) / float(std::log(double(max_distance) / double(exact))) *
                       float(half - exact);
  return index_t(base + std::min<std::int64_t>(exact + std::int64_t(scaled), half - 1));
}

/// MPNet's embedding block (HF MPNetEmbeddings: no token types).
template <class T = float, class D = cpu>
struct MPNetEmbeddings {
  nn::Embedding<T, D> word_embeddings, position_embeddings;
  nn::LayerNorm<T, D> norm;

  template <class V>
  void visit_parameters(V& v) {
    v.sub("word_embeddings", word_embeddings);
    v.sub("position_embeddings", position_embeddings);
    v.sub("LayerNorm", norm);
  }
};

/// An MPNet encoder; hidden_states() gives the last layer's token states.
template <class T = float, class D = cpu>
struct MPNetModel {
  EncoderConfig config;
  MPNetEmbeddings<T, D> embeddings;
  std::vector<EncoderLayer<T, D>> layers;
  nn::Embedding<T, D> relative_attention_bias;  ///< [buckets, heads], shared by all layers

  MPNetModel() = default;
  /// A randomly initialised encoder (seeded) of architecture `c` (model_type "mpnet").
  explicit MPNetModel(const EncoderConfig& c, std::uint64_t seed = 0) : config(c) {
    if (!c.is_mpnet()) throw EncoderConfigError("MPNetModel", "model_type", "'" + c.model_type + "' is not MPNet");
    embeddings.word_embeddings = nn::Embedding<T, D>(c.vocab_size, c.hidden_size, seed);
    embeddings.position_embeddings = nn::Embedding<T, D>(c.max_position_embeddings, c.hidden_size, seed + 1);
    embeddings.norm = nn::LayerNorm<T, D>(c.hidden_size, T(c.layer_norm_eps));
    relative_attention_bias = nn::Embedding<T, D>(c.relative_attention_num_buckets, c.num_attention_heads, seed + 2);
    const EncoderLayerShape shape{c.hidden_size, c.num_attention_heads, c.intermediate_size, c.layer_norm_eps};
    for (index_t i = 0; i < c.num_hidden_layers; ++i)
      layers.emplace_back(EncoderNames::mpnet, shape, seed + 100 + 8 * std::uint64_t(i));
  }

  /// Loads config.json and model.safetensors of the HF folder `dir`.
  static MPNetModel load(const std::filesystem::path& dir) {
    const auto config = EncoderConfig::load(dir / "config.json");
    if (!config.is_mpnet())
      throw EncoderConfigError((dir / "config.json").string(), "model_type",
                               "'" + config.model_type + "' is not MPNet (use BertModel)");
    MPNetModel m = [&] {
      nn::SkipInit no_draws;  // load_encoder_state reads every parameter (a strict load)
      return MPNetModel(config);
    }();
    detail::load_encoder_state(m, dir);
    return m;
  }

  /// The additive score table [heads, L, L]: entry (h, i, j) is the bias of head h for query i and
  /// key j.
  Tensor<T, DynShape<3>, D> position_bias(index_t L) const {
    const index_t H = config.num_attention_heads;
    std::vector<std::int64_t> buckets(std::size_t(L * L));
    for (index_t i = 0; i < L; ++i)
      for (index_t j = 0; j < L; ++j)
        buckets[std::size_t(i * L + j)] = mpnet_relative_bucket(std::int64_t(j) - std::int64_t(i), std::int64_t(config.relative_attention_num_buckets));
    const auto idx = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(L * L), std::span<const std::int64_t>(buckets));
    const Tensor<T, DynShape<2>, D> per_pair = relative_attention_bias(idx);  // [L*L, H]
    return Tensor<T, DynShape<2>, D>(permute<1, 0>(per_pair)).reshape(DynShape<3>(H, L, L));
  }

  /// Last-layer states [N, hidden] of the packed token ids `ids` [N] (sequences `seqs`, each at most
  /// config.max_tokens() long). Not recorded.
  Tensor<T, DynShape<2>, D> hidden_states(const IndexTensor<DynShape<1>, D>& ids, const nn::PackedSequences& seqs) const {
    autograd::NoGrad ng;
    std::vector<std::int64_t> pos(std::size_t(seqs.rows()));
    for (index_t b = 0; b < seqs.count(); ++b) {
      if (seqs.length(b) > config.max_tokens())
        throw ValueError("MPNetModel: a sequence of " + std::to_string(seqs.length(b)) + " tokens exceeds the " +
                         std::to_string(config.max_tokens()) + " positions of the model");
      // transformers' create_position_ids_from_input_ids: real tokens count from padding_idx + 1
      for (index_t i = 0; i < seqs.length(b); ++i)
        pos[std::size_t(seqs.offsets[std::size_t(b)] + i)] = config.pad_token_id + 1 + i;
    }
    const auto positions =
        IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(seqs.rows()), std::span<const std::int64_t>(pos));
    ttmoe::detail::check_indices(ids, config.vocab_size, "MPNetModel (token ids)");
    Tensor<T, DynShape<2>, D> x = embeddings.word_embeddings(ids) + embeddings.position_embeddings(positions);
    x = embeddings.norm(x);
    const auto bias = position_bias(std::max<index_t>(1, seqs.longest()));
    for (const auto& layer : layers) x = layer.forward(x, seqs, bias);
    return x;
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("embeddings", embeddings);
    for (std::size_t i = 0; i < layers.size(); ++i) v.sub("encoder.layer." + std::to_string(i), layers[i]);
    v.sub("encoder.relative_attention_bias", relative_attention_bias);
  }
};

}  // namespace ttmoe::models
