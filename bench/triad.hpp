// STREAM triad bandwidth on ttmoe's thread pool, for benchmarks that relate a rate to the machine's
// memory bandwidth in the same process (bench/llm: fraction of bandwidth of a decode step).
#pragma once

#include <algorithm>

#include "common.hpp"
#include "ttmoe/ttmoe.hpp"

namespace bench {

/// Rates of `runs` triads c = a + s*b over `len` floats, in bytes per second (3 arrays of len
/// floats moved per run: two read, one written): the best run, and the mean (all the bytes over all
/// the time), which is what a rate averaged over the same seconds, like a decode's, compares with
/// on a machine whose bandwidth moves from one millisecond to the next.
struct TriadRates {
  double best = 0, mean = 0;
};

/// Times `runs` triads over `len` floats (TriadRates). The arrays are far larger than the caches.
/// Their pool blocks go back to the OS on return: left cached, they would sit in the resident set of
/// whatever the benchmark measures next (384 MiB at the default length: the LLM's RSS-over-weights
/// figure).
inline TriadRates triad_rates(ttmoe::index_t len = ttmoe::index_t(1) << 25, int runs = 5) {
  const ttmoe::memory::ReleaseCachedAfterScope<ttmoe::memory::HostPages> release_arrays(ttmoe::cpu::memory_pool());
  using V = ttmoe::Tensor<float, ttmoe::DynShape<1>>;
  const auto a = V::full(ttmoe::DynShape<1>(len), 1.f), b = V::full(ttmoe::DynShape<1>(len), 2.f);
  // First touch of the output's pages before timing: each `c = ...` evaluates into a new block and
  // then frees the old one, so the runs alternate between two blocks, and both are touched here.
  V c = a + b * 3.f;
  c = a + b * 3.f;
  double best = 1e30, total = 0;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    c = a + b * 3.f;
    const double s = seconds_since(t0);
    best = std::min(best, s);
    total += s;
  }
  const double bytes = 3.0 * 4.0 * double(len);
  return {bytes / best, bytes * runs / total};
}

/// Best of `runs` triads over `len` floats, in bytes per second (triad_rates).
inline double triad_gbs(ttmoe::index_t len = ttmoe::index_t(1) << 25, int runs = 5) {
  return triad_rates(len, runs).best;
}

}  // namespace bench
