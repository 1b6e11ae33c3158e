// ttmoe::matmul (float) vs OpenBLAS cblas_sgemm at the same thread count, in the same run (Google
// Benchmark; bench/figures.py turns its JSON into bench/report's figures). Sizes: 768^3 and a ViT-B
// MLP layer, [1576 x 768] @ [768 x 3072]; benchmarks gemm/<size> and openblas/<size>, counter flops.
// Threads: $TTMOE_BENCH_THREADS for both libraries. `--corename` prints OpenBLAS's kernel set instead.
// Built three ways by bench/CMakeLists.txt: the default path with -march=native (ttmoe's packed kernel,
// backend/cpu/gemm_packed.hpp, on AVX-512 and AVX2+FMA machines), the CBLAS path (TTMOE_USE_CBLAS),
// and the default path compiled for AVX2+FMA only (the packed kernel's AVX2 tiles).
// `--llm-prefill` instead times the projections of a 512-token prefill at Llama-3.2-1B widths (x [512, K]
// times W^T, W [N, K] for q/o, k/v, gate/up and down) through ttmoe's packed kernel with F32 and BF16
// weights and through cblas_sgemm (F32, transposed B), in alternating rounds ($TTMOE_BENCH_REPS, default
// 5), and prints `llm_prefill_gemm_<N>x<K>_{f32,bf16,openblas}_gflops: value` lines (medians); AVX512-BF16
// builds add `_bf16dot_`: the BF16 weight times BF16-rounded x through `vdpbf16ps` (gemm_bf16dot.hpp).
#include <ttmoe/ttmoe.hpp>

#include <cblas.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <random>

#include "gbench.hpp"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename();

using namespace ttmoe;
using Mat = Shape<dyn, dyn>;

namespace {

/// Operands of one GEMM size, held by both libraries: ttmoe tensors and the same values on the host.
struct Problem {
  index_t M, K, N;
  std::string label;
  std::vector<float> ha, hb, c;
  Tensor<float, Mat> a, b, last;

  Problem(index_t m, index_t k, index_t n, std::string l) : M(m), K(k), N(n), label(std::move(l)) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    ha.resize(M * K), hb.resize(K * N), c.assign(M * N, 0.f);
    for (auto& v : ha) v = u(rng);
    for (auto& v : hb) v = u(rng);
    a = Tensor<float, Mat>::from_host(Mat(M, K), ha);
    b = Tensor<float, Mat>::from_host(Mat(K, N), hb);
  }
  /// ttmoe's product (a new output tensor each call, as a caller of matmul gets it).
  void run_ttmoe() { last = matmul(a, b); }
  /// OpenBLAS's product into the preallocated c.
  void run_openblas() {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(N), int(K), 1.f, ha.data(), int(K), hb.data(),
                int(N), 0.f, c.data(), int(N));
  }
  /// True when the two libraries agree (one call each), so no figure times a wrong product.
  bool agree() {
    run_ttmoe(), run_openblas();
    double err = 0, mag = 0;
    const float* lc = last.data();
    for (index_t i = 0; i < M * N; ++i) err = std::max(err, double(std::abs(lc[i] - c[i]))), mag = std::max(mag, double(std::abs(c[i])));
    const bool ok = err <= 1e-3 * (1 + mag);
    if (!ok) std::fprintf(stderr, "bench_gemm: ttmoe and OpenBLAS disagree at %s (max error %g)\n", label.c_str(), err);
    return ok;
  }
};

#if defined(TTMOE_PACKED_GEMM)
/// --llm-prefill: GFLOP/s of y = x W^T at the prefill shapes, ttmoe (F32 and BF16 W) and OpenBLAS.
int llm_prefill_mode() {
  const index_t M = 512;
  const std::vector<std::pair<index_t, index_t>> shapes{{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
  const int rounds = bench::env_int("TTMOE_BENCH_REPS", 5);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto [N, K] : shapes) {
    std::vector<float> x(std::size_t(M * K)), w(std::size_t(N * K)), y(std::size_t(M * N)), ref(y.size());
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = u(rng);
    const auto wb = io::Bf16Matrix::from_floats(w.data(), N, K);
    const double flops = 2.0 * double(M) * double(N) * double(K);
    auto f32 = [&] { cpu_backend::packed::gemm(false, true, M, N, K, 1.f, x.data(), K, w.data(), K, 0.f, y.data(), N); };
    auto bf16 = [&] { cpu_backend::linear_bf16_packed(x.data(), M, wb, nullptr, nullptr, y.data()); };
    auto blas = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.f, x.data(), int(K), w.data(),
                  int(K), 0.f, ref.data(), int(N));
    };
    f32(), blas();  // warm-up, and a check that both compute the same product
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < y.size(); ++i) err = std::max(err, double(std::abs(y[i] - ref[i]))), mag = std::max(mag, double(std::abs(ref[i])));
    if (err > 1e-4 * (1 + mag)) {
      std::fprintf(stderr, "bench_gemm: ttmoe and OpenBLAS disagree at %zux%zu (max error %g)\n", std::size_t(N), std::size_t(K), err);
      return 1;
    }
    bf16();
    std::vector<const char*> names{"f32", "bf16", "openblas"};
    std::vector<std::function<void()>> fns{f32, bf16, blas};
#if defined(TTMOE_BF16DOT_GEMM)
    names.push_back("bf16dot");
    fns.push_back([&] { cpu_backend::bf16dot::linear(x.data(), M, wb, nullptr, nullptr, y.data()); });
    fns.back()();
    // Rounding x to BF16 moves each product by up to 2^-9 of it: far inside 1% of the largest output.
    err = 0;
    for (std::size_t i = 0; i < y.size(); ++i) err = std::max(err, double(std::abs(y[i] - ref[i])));
    if (err > 1e-2 * (1 + mag)) {
      std::fprintf(stderr, "bench_gemm: bf16dot and OpenBLAS disagree at %zux%zu (max error %g)\n", std::size_t(N), std::size_t(K), err);
      return 1;
    }
#endif
    std::vector<std::vector<double>> rate(fns.size());
    for (int r = 0; r < rounds; ++r)
      for (std::size_t i = 0; i < fns.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fns[i]();
        rate[i].push_back(flops / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
      }
    for (std::size_t i = 0; i < fns.size(); ++i) {
      std::sort(rate[i].begin(), rate[i].end());
      std::printf("llm_prefill_gemm_%zux%zu_%s_gflops: %.1f\n", std::size_t(N), std::size_t(K), names[i], rate[i][rate[i].size() / 2]);
    }
    std::fflush(stdout);
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--corename")) {  // the kernel set OpenBLAS picked (bench/report)
    std::printf("%s\n", openblas_get_corename());
    return 0;
  }
  cpu_backend::set_num_threads(bench::threads());
  openblas_set_num_threads(bench::threads());
#if defined(TTMOE_PACKED_GEMM)
  if (argc > 1 && !std::strcmp(argv[1], "--llm-prefill")) return llm_prefill_mode();
#endif
  std::deque<Problem> problems;  // deque: the registered lambdas keep pointers to its elements
  problems.emplace_back(768, 768, 768, "768");
  problems.emplace_back(1576, 768, 3072, "1576x768x3072");
  for (auto& p : problems) {
    if (!p.agree()) return 1;
    const double flops = 2.0 * double(p.M) * double(p.N) * double(p.K);
    bench::add("gemm/" + p.label, "flops", flops, [&p] { p.run_ttmoe(); });
    bench::add("openblas/" + p.label, "flops", flops, [&p] { p.run_openblas(); });
  }
  return bench::run_benchmarks(argc, argv);
}
