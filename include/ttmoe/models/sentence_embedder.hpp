#pragma once
// The SentenceEmbedder concept: what TTMM's φ must offer (a text -> vector map with a stable name).
// A concept rather than a virtual interface because every user (ttmm/embed_corpus.hpp, the expert
// selection) is a template that is handed one concrete embedder for a whole run: nothing ever switches
// embedders at run time, so no vtable and no owning pointer are needed, and an embedder stays a plain
// value type. Models: models::SentenceEncoder (sentence-transformers folders) and models::LlmEmbedder
// (the base LM's mean-pooled last hidden states).

#include <concepts>
#include <string>
#include <vector>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe::models {

/// encode(texts) -> [texts.size(), dim()] F32 embeddings on the CPU, row i for texts[i]; identity()
/// changes whenever the embeddings could (model, weights, truncation), so caches can key on it;
/// max_tokens() is how many tokens of a text are embedded (the rest is cut).
template <class E>
concept SentenceEmbedder = requires(const E& e, const std::vector<std::string>& texts) {
  { e.encode(texts) } -> std::same_as<Tensor<float, DynShape<2>, cpu>>;
  { e.dim() } -> std::convertible_to<index_t>;
  { e.identity() } -> std::convertible_to<std::string>;
  { e.max_tokens() } -> std::convertible_to<index_t>;
};

}  // namespace ttmoe::models
