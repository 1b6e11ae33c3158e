// ttmoe::matmul (float) vs OpenBLAS cblas_sgemm at the same thread count, in the same run (Google
// Benchmark; bench/figures.py turns its JSON into bench/report's figures). Sizes: 768^3 and a ViT-B
// MLP layer, [1576 x 768] @ [768 x 3072]; benchmarks gemm/<size> and openblas/<size>, counter flops.
// Threads: $TTMOE_BENCH_THREADS for both libraries. `--corename` prints OpenBLAS's kernel set instead.
// Built three ways by bench/CMakeLists.txt: the default path with -march=native (ttmoe's packed kernel,
// backend/cpu/gemm_packed.hpp, on AVX-512 and AVX2+FMA machines), the CBLAS path (TTMOE_USE_CBLAS),
// and the default path compiled for AVX2+FMA only (the packed kernel's AVX2 tiles).
#include <ttmoe/ttmoe.hpp>

#include <cblas.h>

#include <cstdio>
#include <cstring>
#include <deque>
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

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--corename")) {  // the kernel set OpenBLAS picked (bench/report)
    std::printf("%s\n", openblas_get_corename());
    return 0;
  }
  cpu_backend::set_num_threads(bench::threads());
  openblas_set_num_threads(bench::threads());
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
