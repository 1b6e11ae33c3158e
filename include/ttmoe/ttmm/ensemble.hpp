#pragma once
// TTMM's ensembling baseline: the same experts TTMM selects, run as separate models and combined by
// averaging their next-token distributions with the selection weights w,
//   p(x_t | x_<t) = sum_k w_k p_k(x_t | x_<t),
// instead of merging their weights. It costs one forward per expert (the paper's point: better than
// a merge at a cost that grows with the number of experts). Each expert is put on the model alone,
// merged (models::AttachedAdapters, restored exactly afterwards), so the model is unchanged on return.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ttmoe/core/error.hpp"
#include "ttmoe/models/llama_generate.hpp"
#include "ttmoe/models/llama_lora.hpp"

namespace ttmoe::ttmm {

/// log of sum_k w_k exp(logp[k][t]) for every token t: the per-token log-probabilities of the
/// w-weighted mixture of the models whose per-token log-probabilities are `logp` (one row per model,
/// rows of equal length). Computed with the largest term factored out, so very unlikely tokens do
/// not underflow. Throws ValueError for no models, mismatched lengths or a negative weight.
inline std::vector<double> mixture_logprobs(const std::vector<std::vector<double>>& logp, const std::vector<double>& w) {
  if (logp.empty() || logp.size() != w.size())
    throw ValueError("mixture_logprobs: " + std::to_string(logp.size()) + " models for " + std::to_string(w.size()) +
                     " weights (need at least one, one weight each)");
  for (std::size_t k = 0; k < logp.size(); ++k) {
    if (logp[k].size() != logp[0].size())
      throw ValueError("mixture_logprobs: model " + std::to_string(k) + " scored " + std::to_string(logp[k].size()) +
                       " tokens, model 0 " + std::to_string(logp[0].size()));
    if (!(w[k] >= 0)) throw ValueError("mixture_logprobs: weight " + std::to_string(k) + " is " + std::to_string(w[k]));
  }
  std::vector<double> out(logp[0].size());
  for (std::size_t t = 0; t < out.size(); ++t) {
    double top = -std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < logp.size(); ++k)
      if (w[k] > 0) top = std::max(top, logp[k][t]);
    double sum = 0;
    for (std::size_t k = 0; k < logp.size(); ++k)
      if (w[k] > 0) sum += w[k] * std::exp(logp[k][t] - top);
    out[t] = top + std::log(sum);
  }
  return out;
}

/// Log-likelihood of ids[prefix_len:] under the ensemble of `experts` (adapter, weight w_k; the
/// weights should sum to 1) on base model `m`. With no expert it is the base model's score.
template <class T, class D>
models::ContinuationScore ensemble_continuation(models::LlamaForCausalLM<T, D>& m,
                                                const std::vector<models::WeightedAdapter<T, D>>& experts,
                                                const std::vector<std::int64_t>& ids, index_t prefix_len) {
  std::vector<std::vector<double>> logp;
  std::vector<double> w;
  if (experts.empty()) {
    logp.push_back(models::continuation_logprobs(m, ids, prefix_len));
    w.push_back(1.0);
  }
  for (const auto& e : experts) {
    models::AttachedAdapters<T, D> alone(m, {{e.adapter, 1.0}}, models::LoraMode::merged);
    logp.push_back(models::continuation_logprobs(m, ids, prefix_len));
    w.push_back(e.weight);
  }
  models::ContinuationScore s;
  for (const double x : mixture_logprobs(logp, w)) s.logprob += x;
  s.tokens = index_t(logp[0].size());
  return s;
}

}  // namespace ttmoe::ttmm
