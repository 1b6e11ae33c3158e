#pragma once
// Picking the next token from a row of logits, as transformers' generate does it: greedy (argmax,
// first index on ties), or sampling with the logits processors in transformers' order —
// temperature, then top-k, then top-p (nucleus: the smallest set of most likely tokens whose
// probability reaches top_p, always at least one) — from a seeded std::mt19937_64.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/core/error.hpp"

namespace ttmoe::models {

/// How the next token is chosen; temperature 0 means greedy.
struct SamplingOptions {
  double temperature = 0.0;  ///< 0: greedy; otherwise logits are divided by it
  std::int64_t top_k = 0;    ///< keep the k most likely tokens (0: all)
  double top_p = 1.0;        ///< keep the smallest set reaching this probability (1: all)
  std::uint64_t seed = 0;    ///< seeds the sampler's generator

  /// Throws ValueError naming the bad option.
  void validate() const {
    if (!(temperature >= 0) || !std::isfinite(temperature)) throw ValueError("sampling: temperature must be >= 0");
    if (top_k < 0) throw ValueError("sampling: top_k must be >= 0");
    if (!(top_p > 0 && top_p <= 1)) throw ValueError("sampling: top_p must be in (0, 1]");
  }
};

/// Stateful token picker (one generator shared by every sequence of a batch).
class Sampler {
 public:
  explicit Sampler(SamplingOptions o = {}) : opt_(o), rng_(o.seed) { opt_.validate(); }

  /// The next token for one row of logits.
  template <class T>
  std::int64_t operator()(std::span<const T> logits) {
    if (logits.empty()) throw ValueError("sampling: empty logits row");
    if (opt_.temperature == 0.0)
      return std::int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first maximum
    const std::size_t V = logits.size();
    std::vector<std::size_t> order(V);
    std::iota(order.begin(), order.end(), std::size_t(0));
    // Stable: equal logits keep index order, so ties resolve deterministically.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
    std::size_t keep = opt_.top_k > 0 ? std::min<std::size_t>(V, std::size_t(opt_.top_k)) : V;
    std::vector<double> p(keep);
    const double mx = double(logits[order[0]]) / opt_.temperature;
    double sum = 0;
    for (std::size_t i = 0; i < keep; ++i) sum += (p[i] = std::exp(double(logits[order[i]]) / opt_.temperature - mx));
    if (opt_.top_p < 1.0) {
      double cum = 0;
      std::size_t n = 0;
      while (n < keep) {
        cum += p[n++] / sum;
        if (cum >= opt_.top_p) break;
      }
      keep = std::max<std::size_t>(n, 1);
      p.resize(keep);
    }
    std::discrete_distribution<std::size_t> pick(p.begin(), p.end());
    return std::int64_t(order[pick(rng_)]);
  }

 private:
  SamplingOptions opt_;
  std::mt19937_64 rng_;
};

}  // namespace ttmoe::models
