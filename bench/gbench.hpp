// Google Benchmark driver shared by bench_fused and bench_gemm: their main() registers one benchmark
// per measured variant (RegisterBenchmark with lambdas over data set up once in main), then calls
// bench::run_benchmarks.
#pragma once

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "common.hpp"

namespace bench {

/// Thread count for ttmoe's pool and OpenBLAS: $TTMOE_BENCH_THREADS (default 2, the figures' setting).
inline int threads() { return env_int("TTMOE_BENCH_THREADS", 2); }

/// Registers `body` (one call = one iteration) as benchmark `name`, timed in wall time: the work runs
/// on a thread pool, so the main thread's CPU time (Google Benchmark's default) would undercount it.
/// `counter` (e.g. "bytes_per_second" or "flops") becomes a rate of `per_iteration` units per second.
template <class F>
benchmark::internal::Benchmark* add(const std::string& name, const char* counter, double per_iteration, F body) {
  return benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) mutable {
           for (auto _ : st) body();
           st.counters[counter] = benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
         })
      ->UseRealTime();
}

/// Runs the registered benchmarks with the defaults the figures assume, each overridable on the
/// command line (a later flag wins): $TTMOE_BENCH_REPS repetitions (default 15, at least 10), random
/// interleaving of all repetitions (so drifts of a shared machine's speed hit every variant alike),
/// $TTMOE_BENCH_MIN_TIME seconds per repetition (default 0.2), 0.1 s of untimed warm-up per variant
/// (first touches of fresh output pages, pool start-up), aggregates only on the console (the JSON
/// from --benchmark_out keeps every repetition). Returns main()'s exit status.
inline int run_benchmarks(int argc, char** argv) {
  const char* min_time = std::getenv("TTMOE_BENCH_MIN_TIME");
  std::vector<std::string> defaults = {
      "--benchmark_repetitions=" + std::to_string(std::max(10, env_int("TTMOE_BENCH_REPS", 15))),
      "--benchmark_enable_random_interleaving=true",
      std::string("--benchmark_min_time=") + (min_time && *min_time ? min_time : "0.2"),
      "--benchmark_min_warmup_time=0.1",
      "--benchmark_display_aggregates_only=true"};
  std::vector<char*> args = {argv[0]};
  for (auto& d : defaults) args.push_back(d.data());
  args.insert(args.end(), argv + 1, argv + argc);
  int n = int(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace bench
