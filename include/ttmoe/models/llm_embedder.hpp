#pragma once
// φ from the base LM itself (the TTMM paper's alternative to a sentence encoder): the mean over a
// text's tokens of the Llama-family model's last hidden states (after the final RMSNorm, what
// transformers returns as last_hidden_state), L2-normalised by default so that dot products are
// cosines as the expert selection expects. Texts are tokenised by the model's own tokenizer
// (its template, e.g. BOS, applied) and cut to max_tokens. Batches are right-padded: with causal
// attention no real token sees a padding token, so the padded rows change nothing and are left out
// of the mean. mean_pooled_hidden_states is that pooling on token ids, for callers that tokenise
// themselves (the ttmm example's "lm-mean-pooled" φ).

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/models/llama_hf.hpp"
#include "ttmoe/models/sentence_encoder.hpp"
#include "ttmoe/text/load.hpp"

namespace ttmoe::models {

/// How models::LlmEmbedder cuts and batches texts.
struct LlmEmbedderOptions {
  index_t max_tokens = 512;  ///< tokens per text (template tokens included)
  index_t batch_size = 8;
  bool normalize = true;     ///< L2-normalise each embedding
};

/// The mean over each token sequence of `model`'s last hidden states (after the final RMSNorm), one
/// row of hidden_size floats per sequence ([tokens.size(), hidden_size] row-major); an empty
/// sequence gives a zero row. Sequences run `batch_size` at a time, longest first, right-padded
/// (see the file comment). `progress`, when given, is told after each batch how many sequences are
/// done. Not normalised.
template <class D>
std::vector<float> mean_pooled_hidden_states(const LlamaForCausalLM<float, D>& model,
                                             const std::vector<std::vector<std::int64_t>>& tokens, index_t batch_size,
                                             const std::function<void(std::size_t)>& progress = {}) {
  autograd::NoGrad ng;
  const index_t d = model.config.hidden_size;
  const std::size_t step = std::size_t(std::max<index_t>(1, batch_size));
  std::vector<std::size_t> order(tokens.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return tokens[a].size() > tokens[b].size(); });
  std::vector<float> out(tokens.size() * std::size_t(d), 0.f);
  for (std::size_t first = 0; first < order.size(); first += step) {
    const std::size_t last = std::min(order.size(), first + step);
    const index_t B = index_t(last - first), T = index_t(tokens[order[first]].size());  // longest first
    if (T > 0) {
      std::vector<std::int64_t> padded(std::size_t(B * T), 0);
      for (index_t b = 0; b < B; ++b) {
        const auto& seq = tokens[order[first + std::size_t(b)]];
        std::copy(seq.begin(), seq.end(), padded.begin() + b * T);
      }
      const auto ids = IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(B, T), std::span<const std::int64_t>(padded));
      const auto h = model.hidden_states(ids).to_vector();
      for (index_t b = 0; b < B; ++b) {
        const std::size_t row = order[first + std::size_t(b)];
        const index_t L = index_t(tokens[row].size());
        for (index_t c = 0; c < d && L > 0; ++c) {
          double s = 0;
          for (index_t t = 0; t < L; ++t) s += h[std::size_t((b * T + t) * d + c)];
          out[row * std::size_t(d) + std::size_t(c)] = float(s / double(L));
        }
      }
    }
    if (progress) progress(last);
  }
  return out;
}

/// The base LM's mean-pooled last hidden states as a sentence embedder (models::SentenceEmbedder),
/// the model on device D. A class template so that nothing is instantiated until a translation unit
/// that has D's backend uses it; `LlmEmbedder` is the CPU one.
template <class D = cpu>
class BasicLlmEmbedder {
 public:
  /// How texts are cut and batched.
  using Options = LlmEmbedderOptions;

  /// Shares `model` (the base LM a TTMM run already holds) and `tokenizer`; `name` enters identity().
  BasicLlmEmbedder(std::shared_ptr<const LlamaForCausalLM<float, D>> model, std::shared_ptr<const text::Tokenizer> tokenizer,
                   std::string name, Options opt)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), opt_(opt) {
    if (!model_ || !tokenizer_) throw ValueError("LlmEmbedder: a model and a tokenizer are needed");
    opt_.max_tokens = std::clamp<index_t>(opt_.max_tokens, 1, model_->config.max_position_embeddings);
    opt_.batch_size = std::max<index_t>(1, opt_.batch_size);
    identity_ = "lm:" + name + ":" + std::to_string(dim()) + ":" + std::to_string(opt_.max_tokens) +
                (opt_.normalize ? ":l2" : ":raw");
  }

  /// Loads the HF folder `dir` (config.json, weights, tokenizer.json or tokenizer.model).
  static BasicLlmEmbedder load(const std::filesystem::path& dir, Options opt) {
    auto model = std::make_shared<const LlamaForCausalLM<float, D>>(load_llama<float, D>(dir));
    std::shared_ptr<text::Tokenizer> tok = text::load_tokenizer(dir);
    // A tokenizer.json may ask for padding or a shorter truncation: texts are cut here, never padded.
    if (auto* hf = dynamic_cast<text::HfTokenizer*>(tok.get())) {
      hf->set_padding(false);
      hf->set_truncation(std::size_t(std::max<index_t>(1, opt.max_tokens)));
    }
    return BasicLlmEmbedder(std::move(model), std::move(tok), std::filesystem::path(dir).lexically_normal().filename().string(), opt);
  }
  /// load() with the default options.
  static BasicLlmEmbedder load(const std::filesystem::path& dir) { return load(dir, Options{}); }

  /// Embeddings [texts.size(), dim()], row i for texts[i]; a text with no tokens gives a zero row.
  Tensor<float, DynShape<2>, cpu> encode(const std::vector<std::string>& texts) const {
    const index_t n = index_t(texts.size()), d = dim();
    std::vector<std::vector<std::int64_t>> ids(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const auto t = tokenizer_->encode(texts[i], true);
      ids[i].assign(t.begin(), t.begin() + std::min<std::ptrdiff_t>(std::ptrdiff_t(t.size()), std::ptrdiff_t(opt_.max_tokens)));
    }
    std::vector<float> out = mean_pooled_hidden_states(*model_, ids, opt_.batch_size);
    if (opt_.normalize) detail::normalize_rows(out, d);
    return Tensor<float, DynShape<2>, cpu>::from_host(DynShape<2>(n, d), out);
  }

  /// Width of the embeddings (the model's hidden size).
  index_t dim() const { return model_->config.hidden_size; }
  /// Tokens per text (the rest is cut).
  index_t max_tokens() const { return opt_.max_tokens; }
  /// "lm:<name>:<dim>:<max_tokens>:<l2|raw>" (for embedding caches).
  const std::string& identity() const { return identity_; }

 private:
  std::shared_ptr<const LlamaForCausalLM<float, D>> model_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  Options opt_;
  std::string identity_;
};

/// The LM embedder on the CPU.
using LlmEmbedder = BasicLlmEmbedder<cpu>;

}  // namespace ttmoe::models
