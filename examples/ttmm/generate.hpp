#pragma once
// `ttmm generate`: TTMM on one prompt. φ of the prompt selects experts from the store (β, τ, M),
// the chosen experts and their weights are printed, they are merged onto the base model (the
// automatic mode: dense or unmaterialised for the number of tokens asked for), the continuation is
// streamed to stdout token by token, and the model is restored.

#include <algorithm>
#include <cstdio>
#include <string>

#include "eval.hpp"

namespace ttmm_example {

/// What `ttmm generate` does (its command-line options).
struct GenerateOptions {
  std::string model, experts, prompt;
  ttmoe::moe::SparseSoftmaxConfig selection;
  ttmoe::index_t max_new_tokens = 100;
  double temperature = 0;  ///< 0: greedy
  /// A dense merge's arithmetic: bf16_products (BF16-rounded factors, F32 sums) applies where the
  /// checkpoint stores BF16 and is about 1.5x faster there (ttmm/bf16_merge.hpp).
  ttmoe::ttmm::MergeArithmetic merge_arithmetic = ttmoe::ttmm::MergeArithmetic::f32;
  std::uint64_t seed = 0;
};

/// Runs `ttmm generate`; returns the exit status.
inline int run_generate(const GenerateOptions& o) {
  using namespace ttmoe;
  try {
    EvalSetup s;
    s.model = models::load_llama<float>(o.model);
    s.tokenizer = text::load_tokenizer(o.model);
    s.store.emplace(ttmm::ExpertStore::open(o.experts, models::linear_shapes(s.model), base_model_id(o.model)));
    const auto ids32 = s.tokenizer->encode(o.prompt);
    std::vector<std::int64_t> prompt(ids32.begin(), ids32.end());
    if (prompt.empty()) throw ValueError("--prompt: the prompt has no tokens");
    const auto context = std::size_t(s.model.config.max_position_embeddings);
    if (prompt.size() >= context) prompt.erase(prompt.begin(), prompt.end() - std::ptrdiff_t(context - 1));
    // Routing sees the prompt's first 50 tokens, as the authors' code embeds them.
    const std::vector<std::int64_t> head(prompt.begin(), prompt.begin() + std::ptrdiff_t(std::min<std::size_t>(prompt.size(), 50)));
    const auto q = store_embeddings(s, {head}).to_vector();
    ttmm::TestTimeMerger merger(s.model, *s.store, std::size_t(1) << 30, ttmm::MappedBaseWeights::open_model_folder(o.model),
                                o.merge_arithmetic);
    auto active = merger.activate(q, o.max_new_tokens, ttmm::MergeMode::automatic, o.selection);
    const auto& sel = active.selection();
    if (sel.base_model()) {
      std::fprintf(stderr, "experts: none above tau = %g: the base model answers\n", o.selection.tau);
    } else {
      std::fprintf(stderr, "experts (%s merge):", active.mode() == ttmm::MergeMode::dense ? "dense" : "unmaterialised");
      for (std::size_t k = 0; k < sel.experts.size(); ++k)
        std::fprintf(stderr, " %lld (w %.3f)", static_cast<long long>(sel.experts[k]), sel.weights[k]);
      std::fprintf(stderr, "\n");
    }
    models::GenerationOptions g;
    g.max_new_tokens = o.max_new_tokens;
    g.sampling.temperature = o.temperature;
    g.sampling.seed = o.seed;
    std::fputs(o.prompt.c_str(), stdout);
    g.on_token = [&](index_t, std::int64_t tok) {
      const std::int32_t t32 = std::int32_t(tok);
      std::fputs(s.tokenizer->decode(std::span<const std::int32_t>(&t32, 1)).c_str(), stdout);
      std::fflush(stdout);
      return true;
    };
    (void)models::generate(s.model, {prompt}, g);
    std::fputs("\n", stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ttmm generate: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ttmm_example
