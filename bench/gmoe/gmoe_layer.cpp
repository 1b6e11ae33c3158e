// GMoE MoE-FFN layer vs the dense FFN it replaces, forward + backward on the same tokens (GMoE-S/16
// sizes: 384 wide, MLP 1536; tokens = images x 197). The MoE side is a training step's layer work:
// router noise drawn, cosine router, top-1 (gate not renormalised), capacity factor 1.5 with
// batch-prioritised dropping, 6 experts upcycled from the dense FFN, expert dropout 0.1, the residual
// add (inside the combine's pass, as the GMoE model's blocks add it), and 0.01 * l_aux in the loss.
// The dense side is the block's fused fc2(gelu(fc1(x))) + residual.
// Both sides reduce their output against the same upstream tensor and run the tape backward; runs
// alternate (dense, MoE) so the drift of a shared machine hits both. Prints (medians over runs):
//   gmoe_dense_ffn_fwd_bwd_ms: X
//   gmoe_moe_layer_fwd_bwd_ms: X
//   gmoe_moe_layer_over_dense_ffn: X          (median over runs of moe_i / dense_i)
//   gmoe_dense_ffn_cpu_ms, gmoe_moe_layer_cpu_ms, gmoe_moe_layer_over_dense_ffn_cpu: X
//       the same from the process's CPU time (all threads) per step: on a loaded machine wall time
//       counts the minutes other processes held the cores, CPU time only this process's work (plus
//       the pool's short spin at each barrier), so at --threads 1 it is the steadier A/B figure
//   bench_gmoe_layer [--images 32] [--threads 2] [--runs 7] [--warmup 2] [--expert-dropout 0.1]

#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "../common.hpp"
#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/moe/moe_ffn.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;
using bench::Clock;
using bench::median;
using bench::seconds_since;
using Tokens = Tensor<float, DynShape<3>>;

namespace {
/// CPU seconds this process has used so far (every thread).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

Tokens random_tokens(index_t b, index_t t, index_t d, std::uint64_t seed, bool grad) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n;
  std::vector<float> v(std::size_t(b * t * d));
  for (auto& x : v) x = n(rng);
  auto out = Tokens::from_host(DynShape<3>(b, t, d), v);
  if (grad) out.set_requires_grad();
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  int images = 32, threads = 2, runs = 7, warmup = 2;
  double expert_dropout = 0.1;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : -1; };
    if (!std::strcmp(argv[i], "--images")) images = next();
    else if (!std::strcmp(argv[i], "--threads")) threads = next();
    else if (!std::strcmp(argv[i], "--runs")) runs = next();
    else if (!std::strcmp(argv[i], "--warmup")) warmup = next();
    else if (!std::strcmp(argv[i], "--expert-dropout") && i + 1 < argc) expert_dropout = std::atof(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: bench_gmoe_layer [--images 32] [--threads 2] [--runs 7] [--warmup 2] [--expert-dropout 0.1]\n");
      return 2;
    }
  }
  if (images < 1 || threads < 1 || runs < 1 || warmup < 0 || !(expert_dropout >= 0 && expert_dropout < 1)) {
    std::fprintf(stderr,
                 "bench_gmoe_layer: need --images, --threads, --runs >= 1, --warmup >= 0, --expert-dropout in [0, 1)\n");
    return 2;
  }
  cpu_backend::set_num_threads(std::size_t(threads));
  const index_t Dm = 384, H = 1536, T = 197, E = 6;
  nn::Mlp<float> dense(Dm, H, nn::Activation::gelu, 1);
  dense.fc1.weight.set_requires_grad();
  dense.fc2.weight.set_requires_grad();
  std::mt19937_64 init(2);
  auto moe = moe::GMoEFFN<float>::from_dense(dense, moe::CosineRouter<float>::init(Dm, 256, E, init), 1.5);
  moe.expert_dropout = expert_dropout;
  nn::Rng rng(3);

  auto x = random_tokens(index_t(images), T, Dm, 4, true);
  const auto up = random_tokens(index_t(images), T, Dm, 5, false);
  const index_t N = index_t(images) * T;

  // Each step starts from no input gradient, as a block's input (an activation) does in a model, so
  // neither side adds into a gradient left by the step before.
  auto dense_step = [&] {
    x.zero_grad();
    autograd::Tape tape;
    Tokens y = dense(x, x);
    Tensor<float, Shape<>> loss = sum_all(y * up);
    autograd::backward(tape, loss);
  };
  std::int64_t dropped = 0;
  auto moe_step = [&] {
    x.zero_grad();
    autograd::Tape tape;
    auto noise = moe::draw_router_noise<float>(N, E, rng);
    Tokens y = moe.forward(x, noise, &rng, x);  // x + MoE(x), the residual added in the combine's pass
    Tensor<float, Shape<>> loss = sum_all(y * up) + moe.aux_losses().l_aux * 0.01f;
    autograd::backward(tape, loss);
    dropped = moe.routing.plan.dropped();
  };

  for (int w = 0; w < warmup; ++w) {
    dense_step();
    moe_step();
  }
  std::vector<double> td, tm, ratio, cd, cm, cratio;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    double c0 = process_cpu_seconds();
    dense_step();
    td.push_back(seconds_since(t0));
    cd.push_back(process_cpu_seconds() - c0);
    t0 = Clock::now();
    c0 = process_cpu_seconds();
    moe_step();
    tm.push_back(seconds_since(t0));
    cm.push_back(process_cpu_seconds() - c0);
    ratio.push_back(tm.back() / td.back());
    cratio.push_back(cm.back() / cd.back());
  }
  std::printf("gmoe_dense_ffn_fwd_bwd_ms: %.2f\n", 1e3 * median(td));
  std::printf("gmoe_moe_layer_fwd_bwd_ms: %.2f\n", 1e3 * median(tm));
  std::printf("gmoe_moe_layer_over_dense_ffn: %.3f\n", median(ratio));
  std::printf("gmoe_dense_ffn_cpu_ms: %.2f\n", 1e3 * median(cd));
  std::printf("gmoe_moe_layer_cpu_ms: %.2f\n", 1e3 * median(cm));
  std::printf("gmoe_moe_layer_over_dense_ffn_cpu: %.3f\n", median(cratio));
  std::fprintf(stderr,
               "(%d images x %ld tokens = %ld tokens, %d threads, %d runs, expert dropout %.2f, last run dropped %ld of "
               "%ld tokens)\n",
               images, long(T), long(N), threads, runs, expert_dropout, long(dropped), long(N));
  return 0;
}
