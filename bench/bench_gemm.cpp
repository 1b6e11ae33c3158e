// ttmoe::matmul (float) vs OpenBLAS cblas_sgemm, both at the same thread count, in the same run.
// Sizes: 768^3 and a ViT-B MLP layer, [1576 x 768] @ [768 x 3072]. Repetitions alternate between the
// two libraries; figures are medians. Threads: $TTMOE_BENCH_THREADS (default 2).
// Built three ways by bench/CMakeLists.txt: the default Eigen path with -march=native, the CBLAS path
// (TTMOE_USE_CBLAS), and the Eigen path compiled for AVX2 only (BENCH_TAG names each).
#include <ttmoe/ttmoe.hpp>

#include <cblas.h>

#include <random>

#include "common.hpp"

#ifndef BENCH_TAG
#define BENCH_TAG ""
#endif

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename();

using namespace ttmoe;

static void run(index_t M, index_t K, index_t N, const std::string& label, int reps) {
  using Mat = Shape<dyn, dyn>;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> ha(M * K), hb(K * N);
  for (auto& v : ha) v = u(rng);
  for (auto& v : hb) v = u(rng);
  auto a = Tensor<float, Mat>::from_host(Mat(M, K), ha);
  auto b = Tensor<float, Mat>::from_host(Mat(K, N), hb);
  std::vector<float> c(M * N, 0.f);

  Tensor<float, Mat> last;
  std::vector<double> t_ttmoe, t_blas;
  for (int r = -2; r < reps; ++r) {
    const double t1 = bench::time_once([&] { last = matmul(a, b); });
    const double t2 = bench::time_once([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(N), int(K), 1.f, ha.data(), int(K), hb.data(),
                  int(N), 0.f, c.data(), int(N));
    });
    if (r >= 0) t_ttmoe.push_back(t1), t_blas.push_back(t2);
  }
  double err = 0, mag = 0;
  const float* lc = last.data();
  for (index_t i = 0; i < M * N; ++i) err = std::max(err, double(std::abs(lc[i] - c[i]))), mag = std::max(mag, double(std::abs(c[i])));
  if (err > 1e-3 * (1 + mag)) {
    std::fprintf(stderr, "bench_gemm: ttmoe and OpenBLAS disagree at %s (max error %g)\n", label.c_str(), err);
    std::exit(1);
  }
  const double flops = 2.0 * double(M) * double(N) * double(K);
  const double g1 = flops / bench::median(t_ttmoe) / 1e9, g2 = flops / bench::median(t_blas) / 1e9;
  const std::string tag = BENCH_TAG;
  bench::figure("gemm" + tag + "_gflops_" + label, g1, "%.1f");
  bench::figure("openblas" + tag + "_gflops_" + label, g2, "%.1f");
  bench::figure("gemm" + tag + "_fraction_of_openblas_" + label, g1 / g2);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--corename") {  // the kernel set OpenBLAS picked (bench/report)
    std::printf("%s\n", openblas_get_corename());
    return 0;
  }
  const int threads = bench::env_int("TTMOE_BENCH_THREADS", 2);
  const int reps = std::max(10, bench::env_int("TTMOE_BENCH_REPS", 15));
  cpu_backend::set_num_threads(threads);
  openblas_set_num_threads(threads);
  run(768, 768, 768, "768", reps);
  run(1576, 768, 3072, "1576x768x3072", reps);
  return 0;
}
