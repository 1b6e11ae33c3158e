#pragma once
// The BERT encoder (Hugging Face BertModel without its pooler; all-MiniLM-L6-v2 is one), inference
// only: word + absolute position + token-type embeddings, LayerNorm, then post-LN encoder layers
// (models/encoder_layer.hpp) with exact-erf GELU. Parameter names are HF's
// (embeddings.word_embeddings.weight, encoder.layer.{i}.attention.self.query.weight, ...), so a
// save_pretrained folder loads by name. Input is a packed batch (nn/packed_attention.hpp): no padding
// rows, so no padding mask is needed. Single sentences use token type 0, as sentence-transformers does.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/models/encoder_config.hpp"
#include "ttmoe/models/encoder_layer.hpp"
#include "ttmoe/nn/embedding.hpp"

namespace ttmoe::models {

/// BERT's embedding block (HF BertEmbeddings).
template <class T = float, class D = cpu>
struct BertEmbeddings {
  nn::Embedding<T, D> word_embeddings, position_embeddings, token_type_embeddings;
  nn::LayerNorm<T, D> norm;

  template <class V>
  void visit_parameters(V& v) {
    v.sub("word_embeddings", word_embeddings);
    v.sub("position_embeddings", position_embeddings);
    v.sub("token_type_embeddings", token_type_embeddings);
    v.sub("LayerNorm", norm);
  }
};

/// A BERT encoder; hidden_states() gives the last layer's token states.
template <class T = float, class D = cpu>
struct BertModel {
  EncoderConfig config;
  BertEmbeddings<T, D> embeddings;
  std::vector<EncoderLayer<T, D>> layers;

  BertModel() = default;
  /// A randomly initialised encoder (seeded) of architecture `c` (model_type "bert").
  explicit BertModel(const EncoderConfig& c, std::uint64_t seed = 0) : config(c) {
    if (c.is_mpnet()) throw EncoderConfigError("BertModel", "model_type", "an MPNet config (use MPNetModel)");
    embeddings.word_embeddings = nn::Embedding<T, D>(c.vocab_size, c.hidden_size, seed);
    embeddings.position_embeddings = nn::Embedding<T, D>(c.max_position_embeddings, c.hidden_size, seed + 1);
    embeddings.token_type_embeddings = nn::Embedding<T, D>(c.type_vocab_size, c.hidden_size, seed + 2);
    embeddings.norm = nn::LayerNorm<T, D>(c.hidden_size, T(c.layer_norm_eps));
    const EncoderLayerShape shape{c.hidden_size, c.num_attention_heads, c.intermediate_size, c.layer_norm_eps};
    for (index_t i = 0; i < c.num_hidden_layers; ++i)
      layers.emplace_back(EncoderNames::bert, shape, seed + 100 + 8 * std::uint64_t(i));
  }

  /// Loads config.json and model.safetensors of the HF folder `dir`.
  static BertModel load(const std::filesystem::path& dir) {
    const auto config = EncoderConfig::load(dir / "config.json");
    if (config.is_mpnet())
      throw EncoderConfigError((dir / "config.json").string(), "model_type", "'mpnet' is not a BERT (use MPNetModel)");
    BertModel m = [&] {
      nn::SkipInit no_draws;  // load_encoder_state reads every parameter (a strict load)
      return BertModel(config);
    }();
    detail::load_encoder_state(m, dir);
    return m;
  }

  /// Last-layer states [N, hidden] of the packed token ids `ids` [N] (sequences `seqs`, each at most
  /// config.max_tokens() long: positions restart at 0 in every sequence). Not recorded.
  Tensor<T, DynShape<2>, D> hidden_states(const IndexTensor<DynShape<1>, D>& ids, const nn::PackedSequences& seqs) const {
    autograd::NoGrad ng;
    std::vector<std::int64_t> pos(std::size_t(seqs.rows())), types(std::size_t(seqs.rows()), 0);
    for (index_t b = 0; b < seqs.count(); ++b) {
      if (seqs.length(b) > config.max_tokens())
        throw ValueError("BertModel: a sequence of " + std::to_string(seqs.length(b)) + " tokens exceeds max_position_embeddings " +
                         std::to_string(config.max_position_embeddings));
      for (index_t i = 0; i < seqs.length(b); ++i) pos[std::size_t(seqs.offsets[std::size_t(b)] + i)] = i;
    }
    const DynShape<1> n(seqs.rows());
    const auto positions = IndexTensor<DynShape<1>, D>::from_host(n, std::span<const std::int64_t>(pos));
    const auto type_ids = IndexTensor<DynShape<1>, D>::from_host(n, std::span<const std::int64_t>(types));
    ttmoe::detail::check_indices(ids, config.vocab_size, "BertModel (token ids)");
    Tensor<T, DynShape<2>, D> x = embeddings.word_embeddings(ids) + embeddings.position_embeddings(positions) +
                                  embeddings.token_type_embeddings(type_ids);
    x = embeddings.norm(x);
    for (const auto& layer : layers) x = layer.forward(x, seqs);
    return x;
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("embeddings", embeddings);
    for (std::size_t i = 0; i < layers.size(); ++i) v.sub("encoder.layer." + std::to_string(i), layers[i]);
  }
};

}  // namespace ttmoe::models
