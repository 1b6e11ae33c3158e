#pragma once
// TTMM's test-time training baseline (TTT, after Hardt & Sun): for each prompt, a fresh LoRA
// adapter takes one optimiser step on each of the N = 100 training documents nearest to the prompt
// in embedding space, from the most to the least similar, at learning rate 5e-4; the prompt is then
// scored with that adapter. The most expensive method at test time and the paper's upper anchor
// (normalised perplexity 1, ttmm/evaluation.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/core/error.hpp"
#include "ttmoe/models/llama_lora.hpp"
#include "ttmoe/models/llama_loss.hpp"
#include "ttmoe/training/llama_lora.hpp"
#include "ttmoe/ttmm/expert_training.hpp"

namespace ttmoe::ttmm {

/// How TTT adapts to one prompt; the defaults are the paper's (N = 100, lr 5e-4) with the experts'
/// LoRA shape (ExpertTrainingOptions: rank 64, alpha 16, every linear of the blocks).
struct TestTimeTrainingOptions {
  std::size_t neighbours = 100;  ///< N, the nearest training documents (one step each)
  ExpertTrainingOptions lora = [] {
    ExpertTrainingOptions o;
    o.adam.lr = 5e-4;
    o.batch = 1;
    return o;
  }();
};

/// Indices of the `n` rows of `documents` [N, d] most similar to `query` (length d) by dot product
/// (cosine for L2-normalised embeddings), most similar first; ties by lower index. Fewer when the
/// corpus is smaller. Throws ShapeError for a query of the wrong width.
inline std::vector<std::size_t> nearest_documents(std::span<const float> query, const Tensor<float, DynShape<2>>& documents,
                                                  std::size_t n) {
  const index_t N = documents.extent(0), d = documents.extent(1);
  if (index_t(query.size()) != d)
    throw ShapeError("nearest_documents: query of length " + std::to_string(query.size()) + " for embeddings of width " +
                     std::to_string(d));
  const auto e = documents.to_vector();
  std::vector<double> sim(std::size_t(N), 0.0);
  for (index_t i = 0; i < N; ++i)
    for (index_t k = 0; k < d; ++k) sim[std::size_t(i)] += double(e[std::size_t(i * d + k)]) * double(query[std::size_t(k)]);
  std::vector<std::size_t> order(static_cast<std::size_t>(N));
  std::iota(order.begin(), order.end(), std::size_t(0));
  const std::size_t keep = std::min(n, order.size());
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(keep), order.end(),
                    [&](std::size_t a, std::size_t b) { return sim[a] != sim[b] ? sim[a] > sim[b] : a < b; });
  order.resize(keep);
  return order;
}

/// Trains a fresh adapter on `m` for one prompt: one step per document of `neighbours` (token ids,
/// most similar first, as nearest_documents orders them), in that order, batch 1. `m` is left as it
/// was; `progress` (may be empty) sees each step. Throws ValueError for no neighbours.
template <class T, class D>
models::PeftAdapter<T, D> test_time_train(models::LlamaForCausalLM<T, D>& m,
                                          const std::vector<std::vector<std::int64_t>>& neighbours,
                                          const TestTimeTrainingOptions& o = {},
                                          std::function<void(const training::StepReport&)> progress = {}) {
  if (neighbours.empty()) throw ValueError("test_time_train: no neighbouring documents to train on");
  auto adapter = models::make_lora_adapter(m, expert_adapter_config(o.lora), o.lora.seed);
  auto next = [&](std::size_t step, std::size_t) {
    return models::CausalLMBatch<D>::from_rows({neighbours[step]}, {}, o.lora.pad_id);
  };
  training::LoraTrainOptions to;
  to.adam = o.lora.adam;
  to.loop.total_steps = neighbours.size();
  to.loop.progress = std::move(progress);
  training::train_lora(m, adapter, next, to);
  return adapter;
}

}  // namespace ttmoe::ttmm
