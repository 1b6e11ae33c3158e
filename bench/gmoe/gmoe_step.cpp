// ttmoe GMoE-S/16 training step and evaluation throughput (random weights, random 224 px images), one
// side of bench/gmoe/run_gmoe_bench.sh's ttmoe-vs-PyTorch comparison (the other side is
// bench/gmoe/gmoe_torch.py, the same model and step in PyTorch).
//   --mode train: one DomainBed step of the GMoE algorithm on `--images` images (3 domains x 32 =
//     96 by default, concatenated into one batch as DomainBed does): the training forward (router
//     noise, expert dropout 0.1, drop-path 0.1 drawn from the model's generator), cross-entropy + 0.01
//     * sum of the MoE blocks' l_aux, the tape backward, one Adam update (lr 5e-5, as the authors' PACS
//     setting) and zero_grad. Prints the median seconds of the timed steps and the peak RSS.
//   --mode eval: NoGrad evaluation forwards (no noise, no dropout) of `--images` images (64 by
//     default); prints images per second (images / median seconds) and the peak RSS.
//   --mode gemm: the GEMM rate the model's arithmetic rests on: ttmoe::matmul on a ViT-S/16 block's
//     four linear shapes (qkv, proj, fc1, fc2) at images x 197 token rows, summed FLOPs over summed
//     median seconds; prints ttmoe_gemm_gflops (the eval figure's ceiling is that rate over the
//     forward's ~9.2 GFLOP per image).
// Prints
//   ttmoe_gmoe_step_s: X            (train)    ttmoe_gmoe_eval_images_per_s: X   (eval)
//   ttmoe_gemm_gflops: X            (gemm)
//   peak_rss_mb: X                  (VmHWM at the end: the timed work's peak)
// and on stderr every timed run and the tokens the capacity dropped. --profile (train) times the
// parts of one steady-state step (forward, loss, backward, Adam) after the warm-up instead.
// --cache-gb G fixes the CPU caching pool's cap on unused cached bytes at G GB (cpu::set_cache_limit);
// without it the pool's default holds: a cap that follows the working set (core/caching_pool.hpp), so
// a step's whole working set (~3 GB at 32 images, ~7 GB at 96) is reused by the next step with no
// knob. Under a fixed 2 GiB cap (--cache-gb 2.147, the default before the cap followed the working
// set) a 32-image step mapped ~110 new blocks and took ~3400 page faults per step, ~25% of its time
// (loaded EPYC). The train mode reports each timed step's page faults and new pool mappings on stderr.
//   bench_gmoe_step [--mode train|eval|gemm] [--images N] [--threads 2] [--runs 3] [--warmup 1] [--classes 7]
//                   [--profile] [--cache-gb G]

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common.hpp"
#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/backend/cpu/backend.hpp"  // the CPU kernels (the model runs on cpu)
#include "ttmoe/models/gmoe.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/nn/module.hpp"
#include "ttmoe/nn/optim_adam.hpp"

using namespace ttmoe;
using bench::Clock;
using bench::median;
using bench::seconds_since;
using bench::status_mb;
using Model = models::GMoEVisionTransformer<float>;
using Images = Tensor<float, DynShape<4>>;

namespace {
void list(const char* what, const std::vector<double>& v) {  // every timed run, to judge the noise
  std::fprintf(stderr, "(%s s:", what);
  for (double t : v) std::fprintf(stderr, " %.3f", t);
  std::fprintf(stderr, ")\n");
}
/// Minor page faults of this process so far.
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
/// --mode gemm: ttmoe::matmul at a ViT-S/16 block's linear shapes with `rows` token rows.
int gemm_rate(index_t rows, int runs, int warmup) {
  using Mat = Tensor<float, DynShape<2>>;
  const index_t shapes[4][2] = {{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}};  // {in, out}
  double flops = 0, seconds = 0;
  float sink = 0;
  for (const auto& io : shapes) {
    Mat a{DynShape<2>(rows, io[0])}, b{DynShape<2>(io[0], io[1])};
    nn::normal_(a, 1.0, 5);
    nn::normal_(b, 1.0, 6);
    std::vector<double> t;
    for (int i = 0; i < warmup + runs; ++i) {
      const auto t0 = Clock::now();
      Mat c = matmul(a, b);
      const double s = seconds_since(t0);
      sink += c.data()[0];
      if (i >= warmup) t.push_back(s);
    }
    const double f = 2.0 * double(rows) * double(io[0]) * double(io[1]);
    std::fprintf(stderr, "(gemm [%ld, %ld] x [%ld, %ld]: %.1f GFLOP/s)\n", long(rows), long(io[0]), long(io[0]),
                 long(io[1]), f / median(t) / 1e9);
    flops += f, seconds += median(t);
  }
  std::printf("ttmoe_gemm_gflops: %.1f\n", flops / seconds / 1e9);
  std::fprintf(stderr, "(checksum %g)\n", double(sink));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = "train";
  int images = -1, threads = 2, runs = 3, warmup = 1, classes = 7;
  bool profile = false;
  // A fixed cap on the pool's cached unused bytes (see the file comment); < 0 keeps the default cap,
  // which follows the working set.
  double cache_gb = -1;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : -1; };
    if (!std::strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
    else if (!std::strcmp(argv[i], "--images")) images = next();
    else if (!std::strcmp(argv[i], "--threads")) threads = next();
    else if (!std::strcmp(argv[i], "--runs")) runs = next();
    else if (!std::strcmp(argv[i], "--warmup")) warmup = next();
    else if (!std::strcmp(argv[i], "--classes")) classes = next();
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else if (!std::strcmp(argv[i], "--cache-gb") && i + 1 < argc) cache_gb = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "bench_gmoe_step: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  const bool train = mode == "train";
  if (images < 0) images = train ? 96 : 64;
  if ((!train && mode != "eval" && mode != "gemm") || images < 1 || threads < 1 || runs < 1 || warmup < 0 || classes < 2) {
    std::fprintf(stderr,
                 "usage: bench_gmoe_step [--mode train|eval|gemm] [--images N >= 1] [--threads >= 1] [--runs >= 1] "
                 "[--warmup >= 0] [--classes >= 2] [--profile] [--cache-gb GB]\n");
    return 2;
  }
  cpu_backend::set_num_threads(std::size_t(threads));
  if (cache_gb >= 0) cpu::set_cache_limit(std::size_t(cache_gb * 1e9));
  if (mode == "gemm") return gemm_rate(index_t(images) * 197, runs, warmup);
  Model model(models::gmoe_small_patch16(index_t(classes)), 1);
  Images x{DynShape<4>(index_t(images), 3, 224, 224)};
  nn::normal_(x, 1.0, 99);
  std::vector<std::int64_t> lab(static_cast<std::size_t>(images));
  std::mt19937_64 lrng(7);
  for (auto& l : lab) l = std::int64_t(lrng() % std::uint64_t(classes));
  const auto labels = IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(images)), lab);
  float sink = 0;

  if (!train) {
    model.training = false;
    autograd::NoGrad ng;
    auto forward = [&] {
      const auto t0 = Clock::now();
      auto y = model.forward(x);
      const double s = seconds_since(t0);
      sink += y.data()[0];
      return s;
    };
    for (int i = 0; i < warmup; ++i) forward();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) t.push_back(forward());
    std::printf("ttmoe_gmoe_eval_images_per_s: %.2f\n", double(images) / median(t));
    std::printf("ttmoe_gmoe_eval_s: %.4f\n", median(t));
    std::printf("peak_rss_mb: %.1f\n", status_mb("VmHWM:"));
    list("eval forwards", t);
    std::fprintf(stderr, "(checksum %g)\n", double(sink));
    return 0;
  }

  model.training = true;
  nn::Adam<float> adam(nn::trainable_parameters<float>(model), {.lr = 5e-5});
  std::int64_t dropped = 0;
  double last_loss = 0;
  // One step; `parts` (when non-null) receives the seconds of forward, loss, backward and update.
  auto step = [&](std::vector<double>* parts) {
    const auto t0 = Clock::now();
    auto mark = [&, tp = t0]() mutable {
      if (parts) parts->push_back(seconds_since(tp));
      tp = Clock::now();
    };
    {
      autograd::Tape tape;
      auto logits = model.forward(x);
      mark();
      Tensor<float, Shape<>> loss = nn::cross_entropy(logits, labels) + model.aux_loss();
      last_loss = double(loss.item());
      mark();
      autograd::backward(tape, loss);
      mark();
    }
    adam.step();
    adam.zero_grad();
    mark();
    dropped = 0;
    for (auto* l : model.moe_layers()) dropped += l->routing.plan.dropped();
    return seconds_since(t0);
  };
  for (int i = 0; i < warmup; ++i) step(nullptr);
  // Allocation churn of the timed steps: page faults (each one zeroes a fresh page, a 2 MiB one on
  // a pooled block) and the pool's new mappings, per step: 565 and 0 at 32 images once the pool's cap
  // holds a step's working set, against 3370 and 109 under a fixed 2 GiB cap.
  const long faults0 = minor_faults();
  const std::size_t maps0 = cpu::memory_pool().stats().raw_allocations;
  if (profile) {
    std::vector<double> parts;
    const double s = step(&parts);
    const char* names[] = {"forward (recorded)", "cross-entropy + aux loss", "backward", "Adam + zero_grad"};
    std::printf("profile: steady-state step %.3f s (%d images, %d threads, VmHWM %.0f MB)\n", s, images, threads,
                status_mb("VmHWM:"));
    for (std::size_t i = 0; i < parts.size(); ++i)
      std::printf("  %-28s %8.1f ms  %5.1f%%\n", names[i], 1e3 * parts[i], 100 * parts[i] / s);
    return 0;
  }
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(step(nullptr));
  std::printf("ttmoe_gmoe_step_s: %.4f\n", median(t));
  std::printf("peak_rss_mb: %.1f\n", status_mb("VmHWM:"));
  list("steps", t);
  std::fprintf(stderr, "(%d images, %d threads, last loss %.4f, last step dropped %ld of %ld picks)\n", images, threads,
               last_loss, long(dropped), long(images) * 197 * 2);
  std::fprintf(stderr, "(per timed step: %.0f minor page faults, %.1f new pool mappings; pool cache cap now %.1f GB%s)\n",
               double(minor_faults() - faults0) / runs,
               double(cpu::memory_pool().stats().raw_allocations - maps0) / runs, double(cpu::memory_pool().cache_limit()) / 1e9,
               cpu::memory_pool().follows_working_set() ? ", following the working set" : ", fixed");
  return 0;
}
