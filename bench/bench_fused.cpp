// Fused elementwise chain vs a STREAM-style triad, both over 16M floats on the ttmoe thread pool
// (Google Benchmark; bench/figures.py turns its JSON into bench/report's figures).
//   triad:        c[i] = a[i] + s * b[i]           (reads 2 arrays, writes 1)
//   fused_chain:  out = gelu(alpha * x + beta) * y (reads 2 tensors, writes 1; alpha, beta scalars)
// Both write into preallocated outputs; fused_chain_new_output (`Tensor out = expr`) allocates a new
// output every time (fresh pages: the cost a caller pays when not reusing buffers). fused_relu_chain
// and fused_mul separate the cost of erf from the fused loop's memory traffic. Every variant moves
// the same 3 x 64 MiB, reported as the counter bytes_per_second. Threads: $TTMOE_BENCH_THREADS.
#include <ttmoe/ttmoe.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "gbench.hpp"

using namespace ttmoe;

int main(int argc, char** argv) {
  cpu_backend::set_num_threads(bench::threads());
  const index_t n = index_t{1} << 24;  // 16M floats = 64 MiB per array
  const double bytes = 3.0 * sizeof(float) * double(n);

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

  // Check the chain once against a scalar loop before timing anything.
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

  const char* rate = "bytes_per_second";
  bench::add("triad", rate, bytes, [&] {
    cpu_backend::parallel_for(n, cpu_backend::kElementwiseGrain, [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) C[i] = A[i] + s * B[i];
    });
  });
  bench::add("fused_chain", rate, bytes, [&] { assign(out, gelu(x * alpha + beta) * y); });
  bench::add("fused_chain_new_output", rate, bytes, [&] {
    Tensor<float, Vec> fresh = gelu(x * alpha + beta) * y;
    benchmark::DoNotOptimize(fresh.data());
  });
  bench::add("fused_relu_chain", rate, bytes, [&] { assign(out, relu(x * alpha + beta) * y); });
  bench::add("fused_mul", rate, bytes, [&] { assign(out, x * y); });
  return bench::run_benchmarks(argc, argv);
}
