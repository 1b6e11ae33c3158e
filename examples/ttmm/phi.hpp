#pragma once
// φ, the embedding that places training documents and prompts in one space (the TTMM paper's
// routing), as a store names it in index.json's embedder id:
//   "lm-mean-pooled:<model dir>"  the base model's last hidden states averaged over the tokens (the
//                                 paper's alternative; no second model to load), or
//   "<folder>"                    a sentence-transformers folder (all-MiniLM-L6-v2, all-mpnet-base-v2:
//                                 models::SentenceEncoder), fed the DECODED text of the tokens with
//                                 special tokens skipped, as the authors' code embeds a prompt's text.
// Training (`ttmm train`), evaluation and generation all go through Phi, so the query and the
// centroids are always made the same way.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ttmoe/models/llm.hpp"
#include "ttmoe/models/llm_embedder.hpp"
#include "ttmoe/models/sentence_encoder.hpp"
#include "ttmoe/text.hpp"
#include "ttmoe/training/progress.hpp"

namespace ttmm_example {

/// The embedder id a store records for the base model's mean-pooled states.
inline std::string lm_embedder_id(const std::string& model_dir) { return "lm-mean-pooled:" + model_dir; }

/// φ = the base model's last hidden states (after the final norm) averaged over a document's tokens
/// (the paper's alternative to a sentence encoder; models::mean_pooled_hidden_states, 8 documents a
/// batch), one row per document, with a progress line.
inline ttmoe::Tensor<float, ttmoe::DynShape<2>> lm_embeddings(const ttmoe::models::LlamaForCausalLM<float>& m,
                                                                const std::vector<std::vector<std::int64_t>>& tokens) {
  using namespace ttmoe;
  const auto start = std::chrono::steady_clock::now();
  const auto out = models::mean_pooled_hidden_states(m, tokens, 8, [&](std::size_t done) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    training::draw_progress_line("embed", done, tokens.size(), secs > 0 ? double(done) / secs : 0.0, "documents");
  });
  return Tensor<float, DynShape<2>>::from_host(DynShape<2>(index_t(tokens.size()), m.config.hidden_size), out);
}

/// φ as an embedder id names it (see the file comment).
class Phi {
 public:
  /// Loads the sentence encoder when `embedder_id` names a folder (a typed
  /// models::SentenceEncoderError when it is not a sentence-transformers folder ttmoe can run).
  explicit Phi(const std::string& embedder_id) {
    if (embedder_id.rfind("lm-mean-pooled:", 0) != 0) encoder_.emplace(ttmoe::models::SentenceEncoder::load(embedder_id));
  }

  /// Whether φ is the base model's own states.
  bool uses_base_model() const { return !encoder_; }

  /// φ of each token sequence, one row each.
  ttmoe::Tensor<float, ttmoe::DynShape<2>> embed(const ttmoe::models::LlamaForCausalLM<float>& m,
                                                 const ttmoe::text::Tokenizer& tok,
                                                 const std::vector<std::vector<std::int64_t>>& tokens) const {
    if (!encoder_) return lm_embeddings(m, tokens);
    std::vector<std::string> texts;
    texts.reserve(tokens.size());
    for (const auto& t : tokens) {
      const std::vector<std::int32_t> ids(t.begin(), t.end());
      texts.push_back(tok.decode(ids, /*skip_special_tokens=*/true));
    }
    return encoder_->encode(texts);
  }

 private:
  std::optional<ttmoe::models::SentenceEncoder> encoder_;
};

}  // namespace ttmm_example
