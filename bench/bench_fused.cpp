// Fused elementwise chain vs a STREAM-style triad, both over 16M floats on the ttmoe thread pool.
//   triad:  c[i] = a[i] + s * b[i]          (reads 2 arrays, writes 1)
//   chain:  out = gelu(alpha * x + beta) * y (reads 2 tensors, writes 1; alpha, beta scalars)
// Both write into preallocated outputs; a third variant (`Tensor out = expr`) allocates a new output
// every time (fresh pages: the cost a caller pays when not reusing buffers). relu and plain-multiply
// chains separate the cost of erf from the fused loop's memory traffic. Repetitions alternate between
// the variants; every figure is a median. Threads: $TTMOE_BENCH_THREADS (default 2).
#include <ttmoe/ttmoe.hpp>

#include <cstring>
#include <memory>
#include <random>

#include "common.hpp"

#ifndef BENCH_TAG
#define BENCH_TAG ""
#endif

using namespace ttmoe;

int main() {
  const int threads = bench::env_int("TTMOE_BENCH_THREADS", 2);
  const int reps = std::max(10, bench::env_int("TTMOE_BENCH_REPS", 15));
  cpu_backend::set_num_threads(threads);
  const index_t n = index_t{1} << 24;  // 16M floats = 64 MiB per array
  const double bytes = 3.0 * sizeof(float) * double(n);
  const std::string tag = BENCH_TAG;

  using Vec = Shape<dyn>;
  std::vector<float> hx(n), hy(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (index_t i = 0; i < n; ++i) hx[i] = u(rng), hy[i] = u(rng);
  auto x = Tensor<float, Vec>::from_host(Vec(n), hx);
  auto y = Tensor<float, Vec>::from_host(Vec(n), hy);
  auto out = Tensor<float, Vec>::zeros(Vec(n));
  const float alpha = 0.75f, beta = 0.1f;

  // Triad arrays: same allocator as the tensors, first-touched before timing.
  auto ta = Tensor<float, Vec>::from_host(Vec(n), hx), tb = Tensor<float, Vec>::from_host(Vec(n), hy);
  auto tc = Tensor<float, Vec>::zeros(Vec(n));
  float* __restrict A = ta.data();
  float* __restrict B = tb.data();
  float* __restrict C = tc.data();
  const float s = 3.0f;
  auto triad = [&] {
    cpu_backend::parallel_for(n, cpu_backend::kElementwiseGrain, [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) C[i] = A[i] + s * B[i];
    });
  };

  std::vector<double> t_triad, t_chain, t_alloc, t_relu, t_mul;
  for (int r = -2; r < reps; ++r) {  // two warm-up rounds
    const double a = bench::time_once(triad);
    const double b = bench::time_once([&] { assign(out, gelu(x * alpha + beta) * y); });
    const double c = bench::time_once([&] {
      Tensor<float, Vec> fresh = gelu(x * alpha + beta) * y;
      bench::keep(fresh);
    });
    const double d = bench::time_once([&] { assign(out, relu(x * alpha + beta) * y); });
    const double e = bench::time_once([&] { assign(out, x * y); });
    if (r < 0) continue;
    t_triad.push_back(a), t_chain.push_back(b), t_alloc.push_back(c), t_relu.push_back(d), t_mul.push_back(e);
  }
  // Check the chain once against a scalar loop.
  assign(out, gelu(x * alpha + beta) * y);
  double err = 0;
  for (index_t i = 0; i < n; i += 4099) {
    const double v = alpha * hx[i] + beta, ref = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))) * hy[i];
    err = std::max(err, std::abs(ref - out.data()[i]));
  }
  if (err > 1e-4) {
    std::fprintf(stderr, "bench_fused: chain result wrong (max error %g)\n", err);
    return 1;
  }

  const double triad_gbs = bytes / bench::median(t_triad) / 1e9;
  auto gbs = [&](const std::vector<double>& t) { return bytes / bench::median(t) / 1e9; };
  bench::figure("triad" + tag + "_gbs", triad_gbs, "%.2f");
  bench::figure("fused_chain" + tag + "_gbs", gbs(t_chain), "%.2f");
  bench::figure("fused_chain" + tag + "_median_ms", 1e3 * bench::median(t_chain), "%.2f");
  bench::figure("triad" + tag + "_median_ms", 1e3 * bench::median(t_triad), "%.2f");
  bench::figure("fused_chain" + tag + "_fraction_of_triad", gbs(t_chain) / triad_gbs);
  bench::figure("fused_chain_new_output" + tag + "_fraction_of_triad", gbs(t_alloc) / triad_gbs);
  bench::figure("fused_relu_chain" + tag + "_fraction_of_triad", gbs(t_relu) / triad_gbs);
  bench::figure("fused_mul" + tag + "_fraction_of_triad", gbs(t_mul) / triad_gbs);
  return 0;
}
