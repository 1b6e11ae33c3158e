// ViT-B/16 on an NVIDIA GPU (device `ttmoe::cuda`, float32, cuBLAS FP32 GEMMs without TF32):
//  * the plain model's NoGrad forward through its static-shape entry ([B, 3, 224, 224] -> [B, 1000]);
//  * the exact MoETTA adaptation step, tta::MoETTA::adapt_and_predict on a second, converted
//    ViT-B/16 (9 experts, LayerNorms 1..24 converted, routers + experts trainable);
// alternated run by run after warm-up. Each time is host wall clock around the call up to
// cuda::synchronize() (the step already synchronises to read its entropies). Prints medians:
//   ttmoe_gpu_forward_s / ttmoe_gpu_forward_images_per_s
//   ttmoe_gpu_moetta_step_s / ttmoe_gpu_step_over_forward (median of the paired ratios)
//   ttmoe_gpu_step_peak_mb   (peak bytes in use in ttmoe's pool during the timed steps; the pool
//                             rounds blocks up to size classes, so this overstates the tensors' sum)
//   bench_vit_gpu [--batch 64] [--runs 10] [--warmup 3]
#include <ttmoe/cuda.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "ttmoe/models/vit.hpp"
#include "ttmoe/tta/moetta.hpp"

using namespace ttmoe;
using Dev = ttmoe::cuda;
using Model = models::VisionTransformer<float, Dev>;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
/// Seconds taken by f() up to the end of the GPU work it queued.
template <class F>
double timed(F&& f) {
  Dev::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  Dev::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
long arg(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], name)) return std::strtol(argv[i + 1], nullptr, 10);
  return fallback;
}
}  // namespace

int main(int argc, char** argv) {
  const index_t batch = index_t(arg(argc, argv, "--batch", 64));
  const int runs = int(arg(argc, argv, "--runs", 10)), warmup = int(arg(argc, argv, "--warmup", 3));
  const auto cfg = models::vit_base_patch16();
  Model plain(cfg, 0), adapted(cfg, 0);
  std::vector<float> host(batch * 3 * 224 * 224);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (auto& v : host) v = u(gen);
  using Images = Tensor<float, models::vit_b16_shapes::images, Dev>;
  const Images x = Images::from_host(models::vit_b16_shapes::images(batch), host);
  const auto x4 = x.as<DynShape<4>>();  // the DynShape<4> entry MoETTA uses
  tta::MoETTA<Model, float, Dev> method;

  auto forward = [&] {
    autograd::NoGrad ng;
    auto y = plain(x);
    (void)y;
  };
  auto step = [&] { (void)method.adapt_and_predict(adapted, x4); };
  for (int i = 0; i < warmup; ++i) {
    (void)timed(forward);
    (void)timed(step);
  }
  Dev::memory_pool().reset_peak();
  std::vector<double> fwd, stp, ratio;
  for (int i = 0; i < runs; ++i) {
    fwd.push_back(timed(forward));
    stp.push_back(timed(step));
    ratio.push_back(stp.back() / fwd.back());
  }
  const double f = median(fwd), s = median(stp);
  std::printf("batch: %zu, runs: %d (after %d warm-up)\n", std::size_t(batch), runs, warmup);
  std::printf("ttmoe_gpu_forward_s: %.5f\n", f);
  std::printf("ttmoe_gpu_forward_images_per_s: %.1f\n", double(batch) / f);
  std::printf("ttmoe_gpu_moetta_step_s: %.5f\n", s);
  std::printf("ttmoe_gpu_step_over_forward: %.3f\n", median(ratio));
  std::printf("ttmoe_gpu_step_peak_mb: %.0f\n", double(Dev::memory_pool().stats().peak_in_use_bytes) / 1048576.0);
  std::printf("moetta kept in the last step: %zu of %zu\n", std::size_t(method.last_step().kept), std::size_t(batch));
  return 0;
}
