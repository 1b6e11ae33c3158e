#pragma once
// TTMM's evaluation protocol and its comparison (the paper's Section 5 and Figure 1):
//  - each held-out document is cut into a prefix (the prompt: its first 50 tokens for prose, 200 for
//    code) and a continuation; a method is scored by the perplexity of the continuation only;
//  - a method's perplexity over a set of documents is exp(total NLL / total continuation tokens)
//    (every token counts once, so long documents weigh more: the corpus-level perplexity);
//  - normalised perplexity puts the base model at 0 and test-time training at 1,
//    (ppl_base - ppl) / (ppl_base - ppl_TTT), so methods of different corpora share one axis;
//  - test-time cost per prompt: what a method spends before and while answering one prompt
//    (selection + merge + 100 generated tokens for TTMM), in seconds, measured by the caller.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ttmoe/core/error.hpp"
#include "ttmoe/models/llama_generate.hpp"

namespace ttmoe::ttmm {

/// What a held-out document is.
enum class DocumentKind { prose, code };

/// The prompt length of the paper's protocol: 50 tokens for prose, 200 for code.
inline index_t prompt_tokens(DocumentKind kind) { return kind == DocumentKind::code ? 200 : 50; }

/// One held-out document cut for evaluation: `ids[:prefix]` is the prompt, the rest is scored.
struct EvalDocument {
  std::vector<std::int64_t> ids;
  index_t prefix = 0;
  /// The prompt's tokens.
  std::vector<std::int64_t> prompt() const { return {ids.begin(), ids.begin() + prefix}; }
};

/// Cuts `ids` (already truncated to what the model takes) for evaluation with a prompt of `prefix`
/// tokens. A document too short to leave a continuation keeps half its tokens (at least 1) as the
/// prompt, so short documents still count; fewer than 2 tokens throws ValueError.
inline EvalDocument cut_document(std::vector<std::int64_t> ids, index_t prefix) {
  const index_t n = index_t(ids.size());
  if (n < 2) throw ValueError("cut_document: a document of " + std::to_string(n) + " token(s) leaves nothing to score");
  if (prefix < 1) throw ValueError("cut_document: prompt length " + std::to_string(prefix) + " (need at least 1)");
  EvalDocument d;
  d.prefix = prefix < n ? prefix : std::max<index_t>(1, n / 2);
  d.ids = std::move(ids);
  return d;
}

/// One method's result over an evaluation set.
struct MethodResult {
  std::string method;                 ///< e.g. "base", "ttmm-3"
  models::ContinuationScore score;    ///< summed over every document's continuation
  double seconds_per_prompt = 0;      ///< measured test-time cost per prompt
  std::size_t documents = 0;          ///< documents scored
  /// exp(total NLL / total tokens).
  double perplexity() const { return score.perplexity(); }
  /// Adds one document's score.
  void add(const models::ContinuationScore& s) {
    score.logprob += s.logprob;
    score.tokens += s.tokens;
    ++documents;
  }
};

/// (base - ppl) / (base - ttt): 0 for the base model, 1 for test-time training, above 1 for a
/// method better than TTT. Throws ValueError when base and TTT coincide (no scale) or a value is not
/// a positive finite perplexity.
inline double normalised_perplexity(double ppl, double base, double ttt) {
  for (const double v : {ppl, base, ttt})
    if (!(v > 0) || !std::isfinite(v)) throw ValueError("normalised_perplexity: perplexity " + std::to_string(v));
  if (base == ttt)
    throw ValueError("normalised_perplexity: the base model and TTT have the same perplexity " + std::to_string(base) +
                     " (no scale to normalise on)");
  return (base - ppl) / (base - ttt);
}

/// The comparison table: one row per method (perplexity, normalised perplexity when `base` and
/// `ttt` name rows that differ, else "-", cost per prompt in ms, documents), in the given order.
inline std::string format_comparison(const std::vector<MethodResult>& rows, const std::string& base = "base",
                                     const std::string& ttt = "ttt") {
  const MethodResult *b = nullptr, *t = nullptr;
  for (const auto& r : rows) {
    if (r.method == base) b = &r;
    if (r.method == ttt) t = &r;
  }
  const bool scaled = b && t && b->perplexity() != t->perplexity();
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-12s %12s %12s %14s %6s\n", "method", "perplexity", "normalised", "ms/prompt", "docs");
  out += line;
  for (const auto& r : rows) {
    char norm[32] = "-";
    if (scaled) std::snprintf(norm, sizeof norm, "%.3f", normalised_perplexity(r.perplexity(), b->perplexity(), t->perplexity()));
    std::snprintf(line, sizeof line, "%-12s %12.3f %12s %14.1f %6zu\n", r.method.c_str(), r.perplexity(), norm,
                  1e3 * r.seconds_per_prompt, r.documents);
    out += line;
  }
  return out;
}

}  // namespace ttmoe::ttmm
