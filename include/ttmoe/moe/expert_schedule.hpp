#pragma once
// How an MoE layer runs its experts on the host's threads: whole experts side by side, one per thread
// (ops/parallel_tasks.hpp), or one after another with every GEMM split over all threads. Side by side
// wins when the experts can be spread evenly: measured on GMoE-S/16's layer (6 experts of ~1050
// tokens, forward + backward, 2 threads of an AMD EPYC Zen 5), 104.6 ms side by side against 110.4 ms
// one after another, since a GEMM of ~1000 rows split over two threads loses ~5% to the split and
// the threads meet once per kernel. It loses when one thread would be left with much more than its
// share (one big expert, or fewer experts than threads), so the schedule is simulated first.

#include <algorithm>
#include <numeric>
#include <vector>

#include "ttmoe/core/config.hpp"

namespace ttmoe::moe {

/// How an MoE layer's experts share the host's threads.
enum class ExpertThreads {
  automatic,     ///< side by side when schedule_experts says so, else one by one
  one_by_one,    ///< one expert after another, each GEMM split over all threads
  side_by_side,  ///< whole experts as tasks, one per thread (one after another on one thread)
};

/// The experts with tokens, longest first, and whether ExpertThreads::automatic runs them side by side.
struct ExpertSchedule {
  bool side_by_side = false;          ///< automatic's choice
  std::vector<index_t> longest_first; ///< experts with tokens by descending count (ties: lower index first)
};

/// Side by side exactly when `threads` > 1 and a free thread taking the next of the experts ordered
/// longest first finishes within `max_imbalance` times an even share (total / threads, time taken
/// proportional to tokens). The default 1.05 is about what splitting every GEMM over the threads was
/// measured to cost instead (see above).
inline ExpertSchedule schedule_experts(const std::vector<index_t>& tokens, index_t threads, double max_imbalance = 1.05) {
  ExpertSchedule s;
  for (index_t e = 0; e < index_t(tokens.size()); ++e)
    if (tokens[std::size_t(e)] > 0) s.longest_first.push_back(e);
  std::stable_sort(s.longest_first.begin(), s.longest_first.end(),
                   [&](index_t a, index_t b) { return tokens[std::size_t(a)] > tokens[std::size_t(b)]; });
  if (threads < 2 || s.longest_first.size() < 2) return s;
  std::vector<double> busy(std::size_t(threads), 0.0);  // when each thread is free again
  for (const index_t e : s.longest_first) *std::min_element(busy.begin(), busy.end()) += double(tokens[std::size_t(e)]);
  const double total = std::accumulate(busy.begin(), busy.end(), 0.0);
  s.side_by_side = *std::max_element(busy.begin(), busy.end()) <= max_imbalance * total / double(threads);
  return s;
}

}  // namespace ttmoe::moe
