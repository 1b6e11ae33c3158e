// ttmoe ViT-B/16 float forward throughput (random weights, batch 8 by default, no autograd).
// Prints `ttmoe_vit_b16_images_per_s: X` (median over the timed runs after warm-up) and, with
// --profile, a per-stage wall-time split of one extra forward (GEMM-bound layers vs LayerNorm vs
// the fused attention op vs the MLP with its fused GELU and residual) measured with plain timers.
//   bench_vit_forward [--batch 8] [--threads 2] [--runs 7] [--warmup 2] [--profile]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../common.hpp"
#include "ttmoe/backend/cpu/backend.hpp"  // the CPU kernels (the models here run on cpu)
#include "ttmoe/models/vit.hpp"

using namespace ttmoe;
using bench::Clock;
using bench::seconds_since;

namespace {
// One forward with timers around each stage (same ops as VisionTransformer::run / ViTBlock; the
// residual adds and GELU ride on the GEMMs' stores, so they are timed with them).
void profile(const models::VisionTransformer<float>& vit, const Tensor<float, models::vit_b16_shapes::images>& x) {
  using ST = models::vit_b16_shapes::tokens;
  std::map<std::string, double> t;
  auto timed = [&](const char* k, auto&& f) {
    auto t0 = Clock::now();
    auto r = f();
    t[k] += seconds_since(t0);
    return r;
  };
  const auto total0 = Clock::now();
  Tensor<float, ST> h = timed("embed (patch GEMM + concat)", [&] { return vit.embed(x).as<ST>(); });
  const index_t B = x.extent(0), T = 197, Dm = 768, H = 12;
  for (const auto& b : vit.blocks) {
    auto n1 = timed("layernorm", [&] { return b.norm1(h); });
    auto qkv = timed("gemm qkv (+bias)", [&] { return b.attn.qkv(n1); });
    auto merged = timed("attention (fused: qk^T, softmax, pv)", [&] {
      return fused_qkv_attention(qkv, H, 1.0f / 8.0f).reshape(DynShape<3>(B, T, Dm));
    });
    h = timed("gemm proj (+bias, +residual)", [&] { return b.attn.proj(merged, h).as<ST>(); });
    auto n2 = timed("layernorm", [&] { return b.norm2(h); });
    h = timed("mlp: fc1 (+bias, gelu) + fc2 (+bias, +residual)", [&] { return b.mlp(n2, h).as<ST>(); });
  }
  timed("head (norm + linear)", [&] { return vit.head(vit.norm(Tensor<float, DynShape<3>>(narrow<1>(h, 0, 1))).reshape(DynShape<2>(B, Dm))); });
  const double total = seconds_since(total0);
  std::printf("profile (one forward, %.3f s):\n", total);
  for (auto& [k, v] : t) std::printf("  %-50s %7.1f ms  %5.1f%%\n", k.c_str(), 1e3 * v, 100 * v / total);
}
}  // namespace

int main(int argc, char** argv) {
  index_t batch = 8;
  int threads = 2, runs = 7, warmup = 2;
  bool prof = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--batch")) batch = next();
    else if (!std::strcmp(argv[i], "--threads")) threads = next();
    else if (!std::strcmp(argv[i], "--runs")) runs = next();
    else if (!std::strcmp(argv[i], "--warmup")) warmup = next();
    else if (!std::strcmp(argv[i], "--profile")) prof = true;
  }
  cpu_backend::set_num_threads(std::size_t(threads));
  models::VisionTransformer<float> vit(models::vit_base_patch16(1000), 1);
  nn::freeze(vit);  // inference: nothing requires grad, nothing is recorded
  using In = Tensor<float, models::vit_b16_shapes::images>;
  In x{models::vit_b16_shapes::images(batch)};
  nn::uniform_(x, 1.0, 99);
  autograd::NoGrad ng;
  float sink = 0;
  for (int i = 0; i < warmup; ++i) sink += vit.forward(x).data()[0];
  std::vector<double> ips;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    auto y = vit.forward(x);
    const double s = seconds_since(t0);
    sink += y.data()[0];
    ips.push_back(double(batch) / s);
  }
  std::sort(ips.begin(), ips.end());
  std::printf("ttmoe_vit_b16_images_per_s: %.3f\n", ips[ips.size() / 2]);
  std::fprintf(stderr, "(batch %ld, %d threads, %d runs, min %.3f max %.3f, checksum %g)\n", long(batch), threads, runs,
               ips.front(), ips.back(), double(sink));
  if (prof) profile(vit, x);
  return 0;
}
