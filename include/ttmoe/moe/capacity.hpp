#pragma once
// Capacity-limited, batch-prioritised routing (Tutel's extract_critical with batch_prioritized_routing,
// as GMoE uses it). Each expert has C = k * int(factor * ceil(N / E)) slots. Tokens are visited in one
// priority order, by descending top score (stable: ties keep the lower token first), and the k picks
// are placed in rounds: every token's first pick, then every token's second pick, ... Each pick takes
// the next slot of its expert, and a pick whose slot is >= C is dropped. Slots are counted over all
// earlier picks, dropped ones included (Tutel offsets round r by the number of round < r picks of the
// expert), so an expert that overflowed on first picks keeps no second picks. Prioritising the batch
// by confidence means that under pressure the tokens the router is least sure about lose their slot.
// Host-side bookkeeping only: no gradient flows through these decisions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "ttmoe/core/error.hpp"

namespace ttmoe::moe {

/// Slot assignment of one routing call: N tokens, k picks each, pick j of token n at n * k + j.
struct CapacityPlan {
  std::int64_t capacity = 0;              ///< slots per expert
  std::int64_t top_k = 1;                 ///< picks per token
  std::vector<std::int64_t> order;        ///< [N] tokens by priority (the order of every round)
  std::vector<std::int64_t> slot;         ///< [N * k] slot of each pick; >= capacity when dropped
  std::vector<std::int64_t> kept;         ///< [N * k] 1 kept / 0 dropped
  std::vector<std::int64_t> expert_load;  ///< [E] kept picks per expert

  /// Whether pick j of token n keeps its slot.
  bool is_kept(std::int64_t n, std::int64_t j) const { return kept[std::size_t(n * top_k + j)] != 0; }
  /// Number of dropped picks.
  std::int64_t dropped() const { return std::int64_t(kept.size()) - std::accumulate(kept.begin(), kept.end(), std::int64_t(0)); }
};

/// Throws ValueError unless factor > 0 (NaN included): Tutel gives factor <= 0 other meanings (dynamic
/// capacity) that this library does not implement, so it must not silently compute a capacity of 0.
inline void check_capacity_factor(double factor, const std::string& who) {
  if (!(factor > 0))
    throw ValueError(who + ": capacity_factor = " + std::to_string(factor) +
                     " must be > 0 (use infinity for no capacity limit)");
}

/// C = k * int(factor * ceil(N / E)) (int() truncates, as Tutel). An infinite factor means no limit:
/// C = N, which no expert can exceed because a token picks an expert at most once.
inline std::int64_t expert_capacity(std::int64_t n_tokens, std::int64_t n_experts, std::int64_t k, double factor) {
  check_capacity_factor(factor, "expert_capacity");
  if (n_experts < 1) throw ValueError("expert_capacity: " + std::to_string(n_experts) + " experts");
  if (std::isinf(factor)) return n_tokens;
  const auto per = static_cast<std::int64_t>((n_tokens + n_experts - 1) / n_experts);
  return k * static_cast<std::int64_t>(factor * double(per));
}

/// Assigns slots for top-k picks: `expert` [N * k] row-major (token n's picks at n*k .. n*k+k-1, best
/// first), `score` [N] the priority of each token (its top probability). With k = 1 this is plain
/// batch-prioritised top-1 routing.
template <class T>
CapacityPlan plan_capacity(const std::vector<std::int64_t>& expert, const std::vector<T>& score, std::int64_t n_experts,
                           std::int64_t k = 1, double factor = 1.5) {
  if (k < 1 || k > n_experts)
    throw ValueError("plan_capacity: top_k = " + std::to_string(k) + " must lie in [1, " + std::to_string(n_experts) +
                     "]");
  const std::size_t N = score.size();
  if (expert.size() != N * std::size_t(k))
    throw ValueError("plan_capacity: " + std::to_string(expert.size()) + " picks for " + std::to_string(N) +
                     " tokens at top_k = " + std::to_string(k) + " (expected tokens * top_k)");
  CapacityPlan p;
  p.capacity = expert_capacity(std::int64_t(N), n_experts, k, factor);
  p.top_k = k;
  p.order.resize(N);
  std::iota(p.order.begin(), p.order.end(), 0);
  std::stable_sort(p.order.begin(), p.order.end(), [&](auto a, auto b) { return score[a] > score[b]; });
  p.slot.assign(N * k, 0);
  p.kept.assign(N * k, 0);
  p.expert_load.assign(n_experts, 0);
  std::vector<std::int64_t> fill(n_experts, 0);
  for (std::int64_t j = 0; j < k; ++j)
    for (auto n : p.order) {
      const std::size_t q = std::size_t(n * k + j);
      const auto e = expert[q];
      if (e < 0 || e >= n_experts)
        throw ValueError("plan_capacity: expert " + std::to_string(e) + " of token " + std::to_string(n) +
                         " is outside [0, " + std::to_string(n_experts) + ")");
      p.slot[q] = fill[e]++;
      p.kept[q] = p.slot[q] < p.capacity ? 1 : 0;
      p.expert_load[e] += p.kept[q];
    }
  return p;
}

}  // namespace ttmoe::moe
