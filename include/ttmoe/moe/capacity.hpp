#pragma once
// Capacity-limited, batch-prioritised routing (Tutel / GMoE): tokens are visited by descending top
// score (stable: ties keep the lower token first), each takes the next slot of its expert, and a
// token whose slot is >= C = k * int(factor * ceil(N / E)) is dropped. Host-side bookkeeping only:
// no gradient flows through these decisions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace ttmoe::moe {

/// Per-token slot assignment for one routing call.
struct CapacityPlan {
  std::int64_t capacity = 0;
  std::vector<std::int64_t> order;        ///< tokens by priority
  std::vector<std::int64_t> slot;         ///< per token; >= capacity when dropped
  std::vector<std::int64_t> kept;         ///< per token, 1 kept / 0 dropped
  std::vector<std::int64_t> expert_load;  ///< kept tokens per expert
};

/// C = k * int(factor * ceil(N / E)) (int() truncates, as Tutel).
inline std::int64_t expert_capacity(std::int64_t n_tokens, std::int64_t n_experts, std::int64_t k, double factor) {
  const auto per = static_cast<std::int64_t>((n_tokens + n_experts - 1) / n_experts);
  return k * static_cast<std::int64_t>(factor * double(per));
}

/// Assigns slots for top-1 picks `expert[n]` with priority `score[n]`.
template <class T>
CapacityPlan plan_capacity(const std::vector<std::int64_t>& expert, const std::vector<T>& score, std::int64_t n_experts,
                           std::int64_t k = 1, double factor = 1.5) {
  const std::size_t N = expert.size();
  CapacityPlan p;
  p.capacity = expert_capacity(std::int64_t(N), n_experts, k, factor);
  p.order.resize(N);
  std::iota(p.order.begin(), p.order.end(), 0);
  std::stable_sort(p.order.begin(), p.order.end(), [&](auto a, auto b) { return score[a] > score[b]; });
  p.slot.assign(N, 0);
  p.kept.assign(N, 0);
  p.expert_load.assign(n_experts, 0);
  std::vector<std::int64_t> fill(n_experts, 0);
  for (auto n : p.order) {
    const auto e = expert[n];
    p.slot[n] = fill[e]++;
    p.kept[n] = p.slot[n] < p.capacity ? 1 : 0;
    p.expert_load[e] += p.kept[n];
  }
  return p;
}

}  // namespace ttmoe::moe
