// The GEMM shapes of one rank-r LoRA projection in a training step (bench_ttmm_expert_train's model:
// M = 4 x 256 tokens, hidden 512, k/v 256 wide, MLP 1376, r = 64), each timed alone through the CPU
// backend's gemm as ops/linear.hpp calls it, and the same products for q | k | v and gate | up sharing
// one A (r = 192 and 128). Prints `lora_gemm_<label>_gflops: value` (median over --reps calls) and
// `lora_gemm_<label>_cpu_gflops` (FLOPs over the process's CPU seconds for all calls, so a loaded
// machine's stolen time does not count). Labels: a_fwd (x A^T, N = r), b_fwd (xa (sB)^T, K = r),
// dxa (g sB, N = r), db (g^T xa, N = r, K = M), dx (dxa A, K = r), da (dxa^T x, M = r); _<in>x<out>
// the projection's widths, _r<r> the rank.
//   bench_lora_gemm [--threads 2] [--reps 15] [--tokens 1024] [--rank 64]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ttmoe/backend/cpu/gemm.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"

namespace {

using ttmoe::index_t;

/// Process CPU seconds (user + system, every thread).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/// One GEMM C [M, N] = op(A) op(B) with fresh random operands laid out as ops/linear.hpp passes them.
struct Case {
  std::string label;
  bool ta, tb;
  index_t M, N, K;
};

void run(const Case& c, int reps) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(std::size_t(c.M * c.K)), b(std::size_t(c.K * c.N)), out(std::size_t(c.M * c.N));
  for (auto& v : a) v = u(rng);
  for (auto& v : b) v = u(rng);
  const index_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
  auto once = [&] {
    ttmoe::cpu_backend::GemmKernels::gemm(c.ta, c.tb, c.M, c.N, c.K, 1.f, a.data(), lda, b.data(), ldb, 0.f, out.data(), c.N);
  };
  once();  // warm: packing buffers, pages
  std::vector<double> t;
  const double cpu0 = cpu_seconds();
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu = cpu_seconds() - cpu0;
  std::sort(t.begin(), t.end());
  const double flops = 2.0 * double(c.M) * double(c.N) * double(c.K);
  std::printf("lora_gemm_%s_gflops: %.2f\nlora_gemm_%s_cpu_gflops: %.2f\n", c.label.c_str(), flops / t[t.size() / 2] * 1e-9,
              c.label.c_str(), flops * reps / cpu * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t threads = 2;
  int reps = 15;
  index_t M = 1024, r = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoul(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--tokens") M = std::stol(v);
    else if (a == "--rank") r = std::stol(v);
    else {
      std::fprintf(stderr, "bench_lora_gemm: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  ttmoe::cpu_backend::ThreadPool::instance().set_num_threads(threads);
  std::vector<Case> cases;
  // The six products of one projection [in -> out] with rank rk (ops/linear.hpp's forward and VJP).
  auto projection = [&](index_t in, index_t out, index_t rk) {
    char buf[64];  // formatted, not concatenated: GCC 12's -Wrestrict misfires on "_" + std::string
    std::snprintf(buf, sizeof buf, "_%ldx%ld_r%ld", long(in), long(out), long(rk));
    const std::string s = buf;
    cases.push_back({"a_fwd" + s, false, true, M, rk, in});
    cases.push_back({"b_fwd" + s, false, true, M, out, rk});
    cases.push_back({"dxa" + s, false, false, M, rk, out});
    cases.push_back({"db" + s, true, false, out, rk, M});
    cases.push_back({"dx" + s, false, false, M, in, rk});
    cases.push_back({"da" + s, true, false, rk, in, M});
  };
  projection(512, 512, r);    // q, o
  projection(512, 256, r);    // k, v
  projection(512, 1376, r);   // gate, up
  projection(1376, 512, r);   // down
  // Shared input: only the A side changes (a_fwd, dx, da) for q | k | v and gate | up.
  for (index_t rk : {3 * r, 2 * r}) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "_512_r%ld", long(rk));
    const std::string s = buf;
    cases.push_back({"a_fwd" + s, false, true, M, rk, 512});
    cases.push_back({"dx" + s, false, false, M, 512, rk});
    cases.push_back({"da" + s, true, false, rk, 512, M});
  }
  for (const auto& c : cases) run(c, reps);
  return 0;
}
