// STREAM triad bandwidth on ttmoe's thread pool, for benchmarks that relate a rate to the machine's
// memory bandwidth in the same process (bench/llm: fraction of bandwidth of a decode step).
#pragma once

#include <algorithm>

#include "common.hpp"
#include "ttmoe/ttmoe.hpp"

namespace bench {

/// Best of `runs` triads c = a + s*b over `len` floats, in bytes per second (3 arrays of len floats
/// moved per run: two read, one written). The arrays are far larger than the caches. Their pool
/// blocks go back to the OS on return: left cached, they would sit in the resident set of whatever
/// the benchmark measures next (384 MiB at the default length: the LLM's RSS-over-weights figure).
inline double triad_gbs(ttmoe::index_t len = ttmoe::index_t(1) << 25, int runs = 5) {
  const ttmoe::memory::ReleaseCachedAfterScope<ttmoe::memory::HostPages> release_arrays(ttmoe::cpu::memory_pool());
  using V = ttmoe::Tensor<float, ttmoe::DynShape<1>>;
  const auto a = V::full(ttmoe::DynShape<1>(len), 1.f), b = V::full(ttmoe::DynShape<1>(len), 2.f);
  V c = a + b * 3.f;  // first touch of the output's pages before timing
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    c = a + b * 3.f;
    best = std::min(best, seconds_since(t0));
  }
  return 3.0 * 4.0 * double(len) / best;
}

}  // namespace bench
