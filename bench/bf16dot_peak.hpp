#pragma once
// bench_bf16_decode --peak (issue #14, prefill): what the `vdpbf16ps` GEMM could reach on this
// machine, and what it reaches, so the physical-limit arithmetic of docs/design.md's BF16 prefill
// notes is one command anyone can rerun. Prints `name: value` lines:
//   peak_reg_*       24 independent accumulators, operands in registers: the instruction's own rate
//   peak_l1_<tile>_* the GEMM's micro-kernel (bf16dot::micro_kernel) on an x and a W sliver that fit
//                    in L1 (128 k-pairs), called over and over: its loads and broadcasts included
//   gemm_<M>x<K>x<N>_* bf16dot::linear at the prefill's four projection shapes (512 rows), and the
//                    two groups that share x (q | k | v, gate | up: bf16dot::linear_group)
//   layer_projections_[grouped_]gflops  a decoder layer's seven projections at those rates, weight
//                    by weight and grouped as the model runs them
// Each as GFLOP/s of wall time and GFLOP per CPU-second (thread CPU time for the per-thread loops,
// process CPU time for the GEMMs, spin-waits included); `_1t` on one thread, `_all` on every pool
// thread at once ($TTMOE_BENCH_THREADS). `vdpbf16ps` on a zmm is 16 lanes x 2 products: 64 flop.
// Medians of $TTMOE_BENCH_REPS rounds (default 5). Compiled only where the kernel is
// (TTMOE_BF16DOT_GEMM).

#include <ttmoe/ttmoe.hpp>

#include <time.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common.hpp"

#if defined(TTMOE_BF16DOT_GEMM)

namespace bench::bf16peak {

using ttmoe::index_t;
namespace cpu_backend = ttmoe::cpu_backend;
namespace io = ttmoe::io;

/// CPU seconds of the given clock (CLOCK_THREAD_CPUTIME_ID or CLOCK_PROCESS_CPUTIME_ID).
inline double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Keeps the compiler from assuming anything about `v` (a value read from outside the loop).
template <class T>
inline void opaque(T& v) {
  asm volatile("" : "+v"(v));
}

/// `steps` x 24 `vdpbf16ps` on 24 independent accumulators with register operands; returns the
/// thread's CPU seconds. The sum of the accumulators goes to `sink` so nothing is dropped.
__attribute__((noinline)) inline double register_loop(std::int64_t steps, float& sink) {
  __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80)), b = a;  // (1, 1) pairs
  opaque(a), opaque(b);
  __m512 acc[24];
  for (auto& x : acc) x = _mm512_setzero_ps();
  const double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  for (std::int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 24
    for (int j = 0; j < 24; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  const double t = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
  __m512 sum = _mm512_setzero_ps();
  for (auto& x : acc) sum = _mm512_add_ps(sum, x);
  sink += _mm512_reduce_add_ps(sum);
  return t;
}

/// `calls` calls of the micro-kernel with tile Tl on one x sliver and one W sliver of `kcp` pairs
/// (both in L1), adding into one C tile; returns the thread's CPU seconds.
template <class Tl>
__attribute__((noinline)) inline double l1_loop(std::int64_t calls, index_t kcp, float& sink) {
  std::vector<std::uint32_t> a(std::size_t(kcp * Tl::MR), 0x3c003c00u), b(std::size_t(kcp * Tl::NR), 0x3c003c00u);
  alignas(64) float c[Tl::MR * Tl::NR] = {};
  const double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  for (std::int64_t i = 0; i < calls; ++i) {
    // A compiler barrier per call that also publishes C: the slivers never change, and without it
    // the product of the same two slivers would be hoisted out of the loop, and the columns of C
    // nobody reads dropped.
    asm volatile("" : : "r"(c) : "memory");
    cpu_backend::bf16dot::micro_kernel<Tl>(kcp, a.data(), b.data(), c, Tl::NR, cpu_backend::packed::Update::add, nullptr,
                                           nullptr, 0, Tl::MR, Tl::NR);
  }
  const double t = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
  sink += c[0];
  return t;
}

/// Runs `loop` (returning its CPU seconds, doing `flop` flop) on one thread and then on every pool
/// thread at once, `reps` rounds each, and prints `<name>_1t_gflop_per_cpu_s`, `<name>_all_gflops`
/// (all threads' flop over the wall time) and `<name>_all_gflop_per_cpu_s` (medians).
template <class Loop>
inline void per_thread_and_all(const char* name, double flop, int reps, Loop&& loop) {
  auto& pool = cpu_backend::ThreadPool::instance();
  const std::size_t nt = pool.num_threads();
  loop();  // warm-up
  std::vector<double> one, all_wall, all_cpu;
  for (int r = 0; r < reps; ++r) {
    one.push_back(flop / loop() / 1e9);
    std::vector<double> cpu(nt, 0.0);
    const auto t0 = Clock::now();
    pool.run_on_all([&](std::size_t t, std::size_t) { cpu[t] = loop(); });
    const double wall = seconds_since(t0);
    double cpu_sum = 0;
    for (double c : cpu) cpu_sum += c;
    all_wall.push_back(double(nt) * flop / wall / 1e9);
    all_cpu.push_back(double(nt) * flop / cpu_sum / 1e9);
  }
  std::printf("%s_1t_gflop_per_cpu_s: %.1f\n%s_all_gflops: %.1f\n%s_all_gflop_per_cpu_s: %.1f\n", name, median(one),
              name, median(all_wall), name, median(all_cpu));
  std::fflush(stdout);
}

/// --peak: see the header comment.
inline int peak_mode() {
  namespace bd = cpu_backend::bf16dot;
  namespace pk = cpu_backend::packed;
  const int reps = env_int("TTMOE_BENCH_REPS", 5);
  std::printf("threads: %zu\n", cpu_backend::ThreadPool::instance().num_threads());
  float sink = 0;
  const std::int64_t steps = 4 << 20;  // ~0.1 s per loop at ~1 instruction per cycle
  per_thread_and_all("peak_reg", 64.0 * 24 * double(steps), reps, [&] { return register_loop(steps, sink); });
  const index_t kcp = 128;  // W sliver 32 KiB (6 x 64) / 24 KiB (8 x 48), x sliver 3 KiB: L1
  const std::int64_t calls = steps / kcp;
  per_thread_and_all("peak_l1_6x64", 4.0 * 6 * 64 * double(kcp) * double(calls), reps,
                     [&] { return l1_loop<pk::AltTile>(calls, kcp, sink); });
  per_thread_and_all("peak_l1_8x48", 4.0 * 8 * 48 * double(kcp) * double(calls), reps,
                     [&] { return l1_loop<pk::WideTile>(calls, kcp, sink); });

  // The prefill's projections at Llama-3.2-1B widths, 512 rows: [outs...] x in. Random BF16 weights.
  const index_t rows = 512;
  struct Shape {
    const char* name;
    index_t in;
    std::vector<index_t> outs;
    int per_layer, per_layer_grouped;  // how many of these a decoder layer runs: weight by weight, grouped
  };
  const std::vector<Shape> shapes{{"gemm_512x2048x2048", 2048, {2048}, 2, 1}, {"gemm_512x2048x512", 2048, {512}, 2, 0},
                                  {"gemm_512x2048x8192", 2048, {8192}, 2, 0}, {"gemm_512x8192x2048", 8192, {2048}, 1, 1},
                                  {"group_qkv_512x2048", 2048, {2048, 512, 512}, 0, 1},
                                  {"group_gate_up_512x2048", 2048, {8192, 8192}, 0, 1}};
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 0.02f);
  std::vector<float> x(std::size_t(rows * 8192));
  for (auto& v : x) v = d(rng);
  // A decoder layer's seven projections at these rates: weight by weight, and as the model runs them
  // (q | k | v and gate | up grouped).
  double layer_seconds = 0, layer_flop = 0, grouped_seconds = 0;
  for (const Shape& s : shapes) {
    std::vector<io::Bf16Matrix> ws;
    std::vector<std::vector<float>> ys;
    std::vector<bd::Part> parts;
    double flop = 0;
    for (index_t n : s.outs) {
      std::vector<float> v(std::size_t(n * s.in));
      for (auto& e : v) e = d(rng);
      ws.push_back(io::Bf16Matrix::from_floats(v.data(), n, s.in));
      ys.emplace_back(std::size_t(rows * n));
      flop += 2.0 * double(rows) * double(n) * double(s.in);
    }
    for (std::size_t i = 0; i < ws.size(); ++i) parts.push_back({&ws[i], nullptr, nullptr, ys[i].data()});
    auto once = [&] { bd::linear_group(x.data(), rows, s.in, parts); };
    once();  // warm-up: pack buffers, first touches
    std::vector<double> wall, cpu;
    for (int r = 0; r < reps; ++r) {
      const double c0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
      const auto t0 = Clock::now();
      for (int k = 0; k < 3; ++k) once();
      wall.push_back(3 * flop / seconds_since(t0) / 1e9);
      cpu.push_back(3 * flop / (cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e9);
    }
    std::printf("%s_gflops: %.1f\n%s_gflop_per_cpu_s: %.1f\n", s.name, median(wall), s.name, median(cpu));
    std::fflush(stdout);
    layer_seconds += s.per_layer * flop / (median(wall) * 1e9);
    grouped_seconds += s.per_layer_grouped * flop / (median(wall) * 1e9);
    layer_flop += s.per_layer * flop;
  }
  std::printf("layer_projections_gflops: %.1f\nlayer_projections_grouped_gflops: %.1f\n", layer_flop / layer_seconds / 1e9,
              layer_flop / grouped_seconds / 1e9);
  std::printf("sink: %g\n", double(sink));
  return 0;
}

}  // namespace bench::bf16peak

#endif  // TTMOE_BF16DOT_GEMM
