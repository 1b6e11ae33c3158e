#pragma once
// Generation and scoring with a Llama-family model. generate() prefills every prompt in one batched
// forward (right-padded to the longest; each sequence keeps its own length in the KV cache, so no
// padding token is ever attended), then decodes one token per sequence per step over the cache: a
// decode step reads each weight once and touches no cache entry but the new one. Streaming: the
// on_token callback sees each token as it is chosen. score_continuation() is the TTMM evaluation
// protocol: the log-likelihood of a continuation given a prefix, loss on the continuation only.
// windowed_perplexity() scores a text longer than the context the way Hugging Face's "perplexity of
// fixed-length models" guide does: windows of max_length tokens moved by stride, each scoring only
// the tokens it adds, with the tokens before them (up to max_length - stride) as context.

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ttmoe/models/llama.hpp"
#include "ttmoe/models/sampling.hpp"

namespace ttmoe::models {

/// What generate() does.
struct GenerationOptions {
  index_t max_new_tokens = 32;
  SamplingOptions sampling;                ///< greedy by default
  std::vector<std::int64_t> eos_token_ids;  ///< a sequence stops after emitting one (it is kept)
  /// Called for every new token (sequence index, token); return false to stop that sequence.
  std::function<bool(index_t, std::int64_t)> on_token;
};

/// Why a sequence stopped.
enum class StopReason { length, eos, callback, context };

/// New tokens per prompt (the prompt not repeated) and why each stopped.
struct GenerationResult {
  std::vector<std::vector<std::int64_t>> tokens;
  std::vector<StopReason> reasons;
};

/// Continues each prompt (token ids) by up to max_new_tokens tokens. Throws ValueError for an empty
/// prompt, an id outside the vocabulary, or a prompt longer than the context (max_position_embeddings).
/// Generation ends early for everyone when the longest sequence fills the context (StopReason::context).
template <class T, class D>
GenerationResult generate(const LlamaForCausalLM<T, D>& m, const std::vector<std::vector<std::int64_t>>& prompts,
                          const GenerationOptions& opt = {}) {
  const index_t B = index_t(prompts.size()), ctx = m.config.max_position_embeddings;
  if (B == 0) return {};
  index_t longest = 0;
  for (index_t b = 0; b < B; ++b) {
    const index_t n = index_t(prompts[std::size_t(b)].size());
    if (n == 0) throw ValueError("generate: prompt " + std::to_string(b) + " is empty");
    if (n > ctx)
      throw ValueError("generate: prompt " + std::to_string(b) + " has " + std::to_string(n) +
                       " tokens, more than the model's context of " + std::to_string(ctx) + " (max_position_embeddings)");
    longest = std::max(longest, n);
  }
  Sampler sampler(opt.sampling);
  auto cache = m.make_cache(B, std::min(ctx, longest + std::max<index_t>(opt.max_new_tokens, 1)));
  // Prefill: right-padded ids, then each sequence's length set to its own prompt's.
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * longest), 0), last(static_cast<std::size_t>(B));
  for (index_t b = 0; b < B; ++b) {
    const auto& p = prompts[std::size_t(b)];
    std::copy(p.begin(), p.end(), ids.begin() + b * longest);
    last[std::size_t(b)] = b * longest + index_t(p.size()) - 1;
  }
  // Only each prompt's last row is carried through the last layer's MLP and the LM head.
  auto rows = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(B), last);
  auto h = m.forward_cached(IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(B, longest), ids), cache, rows);
  for (index_t b = 0; b < B; ++b) cache.lengths[std::size_t(b)] = index_t(prompts[std::size_t(b)].size());
  autograd::NoGrad ng;
  Tensor<T, DynShape<2>, D> logits = m.logits(h);

  GenerationResult out;
  out.tokens.resize(std::size_t(B));
  out.reasons.assign(std::size_t(B), StopReason::length);
  std::vector<bool> done(std::size_t(B), false);
  const index_t V = logits.extent(1);
  std::vector<std::int64_t> next(std::size_t(B), 0);
  for (index_t step = 0; step < opt.max_new_tokens; ++step) {
    const auto host = logits.to_vector();
    bool any = false;
    for (index_t b = 0; b < B; ++b) {
      if (done[std::size_t(b)]) continue;
      const std::int64_t tok = sampler(std::span<const T>(host.data() + b * V, std::size_t(V)));
      next[std::size_t(b)] = tok;
      out.tokens[std::size_t(b)].push_back(tok);
      if (std::find(opt.eos_token_ids.begin(), opt.eos_token_ids.end(), tok) != opt.eos_token_ids.end()) {
        done[std::size_t(b)] = true;
        out.reasons[std::size_t(b)] = StopReason::eos;
      }
      if (opt.on_token && !opt.on_token(b, tok) && !done[std::size_t(b)]) {
        done[std::size_t(b)] = true;
        out.reasons[std::size_t(b)] = StopReason::callback;
      }
      any = any || !done[std::size_t(b)];
    }
    if (!any || step + 1 == opt.max_new_tokens) break;
    index_t fullest = 0;
    for (index_t n : cache.lengths) fullest = std::max(fullest, n);
    if (fullest + 1 > cache.capacity()) {
      for (index_t b = 0; b < B; ++b)
        if (!done[std::size_t(b)]) out.reasons[std::size_t(b)] = StopReason::context;
      break;
    }
    // Finished sequences still take a slot in the batch (their token is ignored): the step's
    // shapes stay fixed, and their cache rows are never read again.
    auto step_h = m.forward_cached(IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(B, 1), next), cache);
    logits = m.logits(step_h.reshape(DynShape<2>(B, step_h.extent(2))));
  }
  return out;
}

/// Log-likelihood of a continuation given a prefix.
struct ContinuationScore {
  double logprob = 0;  ///< sum over continuation tokens of log p(token | everything before it)
  index_t tokens = 0;  ///< continuation length
  /// Mean negative log-likelihood per continuation token (transformers' loss with the prefix labels -100).
  double nll() const { return tokens ? -logprob / double(tokens) : 0.0; }
  /// exp(nll).
  double perplexity() const { return std::exp(nll()); }
};

/// log p(ids[i] | ids[:i]) for every continuation token i in [prefix_len, ids.size()), in order
/// (1 <= prefix_len < ids.size()); log-softmax in double. The per-token values let callers combine
/// models token by token (TTMM's ensembling baseline averages the distributions, not the NLLs).
template <class T, class D>
std::vector<double> continuation_logprobs(const LlamaForCausalLM<T, D>& m, const std::vector<std::int64_t>& ids,
                                          index_t prefix_len) {
  const index_t n = index_t(ids.size());
  if (prefix_len < 1 || prefix_len >= n)
    throw ValueError("score_continuation: prefix length " + std::to_string(prefix_len) + " must be in [1, " +
                     std::to_string(n) + ")");
  if (n > m.config.max_position_embeddings)
    throw ValueError("score_continuation: " + std::to_string(n) + " tokens exceed the model's context of " +
                     std::to_string(m.config.max_position_embeddings));
  autograd::NoGrad ng;
  auto h = m.hidden_states(IndexTensor<DynShape<2>, D>::from_host(DynShape<2>(1, n), ids));
  // Only the rows that predict continuation tokens go through the LM head.
  std::vector<std::int64_t> rows;
  for (index_t i = prefix_len - 1; i < n - 1; ++i) rows.push_back(i);
  auto ri = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(index_t(rows.size())), rows);
  const auto logits = m.logits(index_select(h.reshape(DynShape<2>(n, h.extent(2))), ri)).to_vector();
  const index_t V = m.config.vocab_size;
  std::vector<double> out(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const T* z = logits.data() + r * std::size_t(V);
    double mx = -INFINITY, sum = 0;
    for (index_t v = 0; v < V; ++v) mx = std::max(mx, double(z[v]));
    for (index_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - mx);
    out[r] = double(z[ids[std::size_t(prefix_len) + r]]) - mx - std::log(sum);
  }
  return out;
}

/// Scores ids[prefix_len:] given ids[:prefix_len] (1 <= prefix_len < ids.size()); log-softmax in double.
template <class T, class D>
ContinuationScore score_continuation(const LlamaForCausalLM<T, D>& m, const std::vector<std::int64_t>& ids,
                                     index_t prefix_len) {
  const auto lp = continuation_logprobs(m, ids, prefix_len);
  ContinuationScore s;
  for (const double x : lp) s.logprob += x;
  s.tokens = index_t(lp.size());
  return s;
}

/// Sliding-window perplexity of `ids` (HF's protocol for fixed-length models): windows
/// [begin, min(begin + max_length, n)) for begin = 0, stride, 2 stride, ... until one reaches the end;
/// each scores the tokens past the previous window's end given everything before them in the window
/// (the first window scores all but token 0). Each token is scored at most once (every token but
/// the first when stride < max_length); the result is the mean NLL over the scored tokens: HF's
/// guide weights each window's mean loss by its number of scored tokens, the same sum (the guide
/// counts one token fewer per window for the shift, even where the label it drops was -100 already;
/// ttmoe counts exactly). Throws ValueError unless 1 <= stride <= max_length <= the
/// model's context and ids holds at least 2 tokens.
template <class T, class D>
ContinuationScore windowed_perplexity(const LlamaForCausalLM<T, D>& m, const std::vector<std::int64_t>& ids,
                                      index_t max_length, index_t stride) {
  const index_t n = index_t(ids.size());
  if (max_length < 2 || max_length > m.config.max_position_embeddings)
    throw ValueError("windowed_perplexity: window " + std::to_string(max_length) + " must be in [2, " +
                     std::to_string(m.config.max_position_embeddings) + "] (the model's context)");
  if (stride < 1 || stride > max_length)
    throw ValueError("windowed_perplexity: stride " + std::to_string(stride) + " must be in [1, " +
                     std::to_string(max_length) + "] (a larger stride would skip tokens)");
  if (n < 2) throw ValueError("windowed_perplexity: " + std::to_string(n) + " tokens leave nothing to score");
  ContinuationScore total;
  index_t scored_to = 1;  // tokens [0, scored_to) are scored (token 0 never is)
  for (index_t begin = 0;; begin += stride) {
    const index_t end = std::min(begin + max_length, n);
    if (end > scored_to) {
      const std::vector<std::int64_t> window(ids.begin() + std::ptrdiff_t(begin), ids.begin() + std::ptrdiff_t(end));
      // With stride == max_length the windows are disjoint: a window's first token has no context
      // and is not scored (as in HF, whose shifted labels drop position 0).
      const auto s = score_continuation(m, window, std::max<index_t>(1, scored_to - begin));
      total.logprob += s.logprob;
      total.tokens += s.tokens;
      scored_to = end;
    }
    if (end == n) break;
  }
  return total;
}

}  // namespace ttmoe::models
