// ttmoe MoETTA adaptation step on ViT-B/16 (random weights, batch 8 by default): the exact
// tta::MoETTA::adapt_and_predict (9 experts, LayerNorms 1..24 converted, routers + experts trainable,
// entropy filter with the running-mean threshold, re-weighting, balance loss, SGD momentum step).
// After warm-up, timed steps alternate with ttmoe's own no-adapt forward of the same batch
// (tta::NoAdapt on the plain, unconverted ViT-B/16: NoGrad, the same DynShape<4> entry MoETTA uses),
// so drift of a shared machine's speed hits both; the peak RSS (VmHWM) is read right after them (a
// NoGrad forward holds less than a step, so it is the steps' peak). Then, unpaired, it times NoGrad
// forwards of the MoE-converted model and, with --plain-forward, the plain ViT-B/16 through its
// static-shape entry, the one bench/vit times.
// Prints (medians over the timed runs):
//   ttmoe_moetta_step_s: X
//   peak_rss_mb: X                            (VmHWM after warm-up + the paired runs)
//   ttmoe_noadapt_forward_s: X                (plain model, tta::NoAdapt, paired with the steps)
//   ttmoe_step_over_noadapt_forward_paired: X (median over i of step_i / noadapt_forward_i)
//   ttmoe_converted_forward_s: X              (NoGrad forward of the MoE-converted model)
//   ttmoe_plain_forward_s: X                  (only with --plain-forward; static-shape entry)
// --profile instead runs two steps (a fresh process's first, then a steady-state one), the ops of adapt_and_predict split
// by timers (forward, entropy + loss assembly, backward, optimiser, zero_grad), the VmRSS / VmHWM
// after each part and the tape's node histogram, then exits.
//   bench_moetta_step [--batch 8] [--threads 2] [--steps 3] [--warmup 1] [--runs 3] [--plain-forward] [--profile]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../common.hpp"
#include "ttmoe/backend/cpu/backend.hpp"  // the CPU kernels (the models here run on cpu)
#include "ttmoe/models/vit.hpp"
#include "ttmoe/tta/metrics.hpp"
#include "ttmoe/tta/moetta.hpp"
#include "ttmoe/tta/no_adapt.hpp"

using namespace ttmoe;
using bench::Clock;
using bench::median;
using bench::seconds_since;
using bench::status_mb;
using Model = models::VisionTransformer<float>;
using Images = Tensor<float, DynShape<4>>;

namespace {
// --profile: one MoETTA step on a fresh process (right after conversion, so RSS growth is not hidden
// by memory the allocator kept from earlier steps), with the same ops as
// tta::MoETTA::adapt_and_predict, timed by part, with VmRSS / VmHWM after each part and the tape's
// node histogram after the recorded forward. Its own TrainableSet/optimiser (same parameters).
void profile_step(Model& vit, const Images& x) {
  auto rss = [] { return status_mb("VmRSS:"); };
  std::printf("profile: VmRSS after model construction %.0f MB\n", rss());
  vit.convert_to_moe_layernorm(9, 1, 0);
  tta::select_trainable(vit, {"*.experts.weight_delta", "*.experts.bias_delta", "*.router.weight", "*.router.bias"});
  tta::TrainableSet<float> set(vit);
  std::size_t ntrain = 0;
  for (auto& p : set.params()) ntrain += std::size_t(p.flat.numel());
  std::printf("profile: VmRSS after conversion %.0f MB (%zu trainable tensors, %zu values)\n", rss(),
              set.params().size(), ntrain);
  auto& sgd = set.optimizer(tta::LearningRate{1e-3, 64, {}}, 0.9, x.extent(0));
  for (int pass = 0; pass < 2; ++pass) {  // first in a fresh process, then in steady state
    std::vector<std::pair<std::string, double>> parts;
    double rss0 = rss();
    auto mark = [&](const char* name, Clock::time_point t0) {
      const double s = seconds_since(t0), r = rss();
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s (VmRSS %.0f MB, %+.0f; VmHWM %.0f)", name, r, r - rss0, status_mb("VmHWM:"));
      parts.emplace_back(buf, s);
      rss0 = r;
    };
    const auto total0 = Clock::now();
    auto t0 = Clock::now();
    autograd::Tape tape;
    Tensor<float, DynShape<2>> logits = vit.forward(x);
    mark("forward (recorded)", t0);
    std::map<std::string, int> hist;
    for (auto& n : tape.node_names()) ++hist[n];
    t0 = Clock::now();
    const double e0 = tta::entropy_margin(logits.extent(1), 0.4);
    auto h = tta::entropies(logits);
    const auto hv = tta::host_values(h);
    const double running = tta::mean_of(hv);  // first batch: the running mean is this batch's mean
    index_t kept = 0;
    for (double v : hv) kept += v <= running;
    Tensor<float, Shape<>> loss = vit.balance_loss() * float(0.2 * running);
    if (kept > 0) {
      std::vector<double> coef(hv.size(), 0.0);
      for (std::size_t b = 0; b < hv.size(); ++b)
        if (hv[b] <= running) coef[b] = std::exp(e0 - hv[b]) / double(kept);
      loss = loss + tta::weighted_entropy_sum(h, coef);
    }
    const double lv = double(loss.item());
    mark("entropy + filter + loss", t0);
    const std::size_t nodes = tape.size();
    std::vector<std::pair<std::string, double>> node_times;
    tape.time_nodes_into(&node_times);
    t0 = Clock::now();
    autograd::backward(tape, loss);
    mark("backward", t0);
    std::map<std::string, std::pair<int, double>> by_name;
    for (auto& [n, sec] : node_times) by_name[n].first++, by_name[n].second += sec;
    t0 = Clock::now();
    sgd.step();
    mark("sgd step", t0);
    t0 = Clock::now();
    set.zero_grad();
    mark("zero_grad", t0);
    const double total = seconds_since(total0);
    std::printf("profile (%s MoETTA step, %.3f s, kept %ld, loss %.4f, %zu tape nodes):\n",
                pass ? "second (steady-state)" : "first (fresh process)", total, long(kept), lv, nodes);
    for (auto& [k, v] : parts) std::printf("  %-62s %8.1f ms  %5.1f%%\n", k.c_str(), 1e3 * v, 100 * v / total);
    std::printf("  backward time by node kind:");
    for (auto& [k, v] : by_name) std::printf(" %s x%d %.0f ms;", k.c_str(), v.first, 1e3 * v.second);
    std::printf("\n");
    std::printf("  tape nodes after the forward:");
    for (auto& [k, v] : hist) std::printf(" %s x%d", k.c_str(), v);
    std::printf("\n");
  }
}
}  // namespace

int main(int argc, char** argv) {
  index_t batch = 8;
  int threads = 2, steps = 3, warmup = 1, runs = 3;
  bool prof = false, plain_static = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--batch")) batch = next();
    else if (!std::strcmp(argv[i], "--threads")) threads = next();
    else if (!std::strcmp(argv[i], "--steps")) steps = next();
    else if (!std::strcmp(argv[i], "--warmup")) warmup = next();
    else if (!std::strcmp(argv[i], "--runs")) runs = next();
    else if (!std::strcmp(argv[i], "--profile")) prof = true;
    else if (!std::strcmp(argv[i], "--plain-forward")) plain_static = true;
  }
  if (batch < 1 || threads < 1 || steps < 1 || warmup < 0 || runs < 0) {
    std::fprintf(stderr, "bench_moetta_step: need --batch, --threads and --steps >= 1, --warmup and --runs >= 0\n");
    return 2;
  }
  cpu_backend::set_num_threads(std::size_t(threads));
  Model vit(models::vit_base_patch16(1000), 1);
  Images x{DynShape<4>(batch, 3, 224, 224)};
  nn::uniform_(x, 1.0, 99);
  if (prof) {  // profile-only run (fresh process), see profile_step
    profile_step(vit, x);
    return 0;
  }

  // ttmoe's no-adapt baseline: the same pretrained model, unconverted. A copy taken before MoETTA
  // converts `vit` shares every parameter tensor (handles are shallow), and MoETTA trains only the
  // experts and routers it adds, so `plain` keeps computing the pretrained function and adds no
  // memory to the peak RSS below.
  Model plain = vit;
  tta::NoAdapt<Model> noadapt;
  typename tta::MoETTA<Model>::Options opt;  // 9 experts, first MoE index 1, lambda 0.2, lr 1e-3*B/64, mom 0.9
  tta::MoETTA<Model> method(opt);            // converts `vit` on its first call
  float sink = 0;
  auto timed = [&](auto&& f) {  // seconds of one call of f, whose logits feed the checksum
    const auto t0 = Clock::now();
    auto y = f();
    const double s = seconds_since(t0);
    sink += y.data()[0];
    return s;
  };
  auto step = [&] { return method.adapt_and_predict(vit, x); };
  auto noadapt_forward = [&] { return noadapt.adapt_and_predict(plain, x); };

  // Also the no-adapt path's warm-up: the pool and caches then hold what a forward needs.
  const std::vector<float> plain_logits = noadapt_forward().to_vector();  // for the check below
  for (int i = 0; i < warmup; ++i) timed(step);
  // Steps and no-adapt forwards alternate (step, forward, step, forward, ...) so that the machine's
  // speed drifting during the run weighs on both alike; the ratio figure is the median of the pairs.
  std::vector<double> st, ft, ratio;
  index_t kept_total = 0;
  for (int i = 0; i < std::max(steps, runs); ++i) {
    if (i < steps) st.push_back(timed(step)), kept_total += method.last_step().kept;
    if (i < runs) ft.push_back(timed(noadapt_forward));
    if (i < steps && i < runs) ratio.push_back(st.back() / ft.back());
  }
  // The adaptation must not have reached the shared tensors: the baseline is still the pretrained model.
  const std::vector<float> after = noadapt_forward().to_vector();
  for (std::size_t i = 0; i < after.size(); ++i)
    if (after[i] != plain_logits[i]) {
      std::fprintf(stderr, "bench_moetta_step: the no-adapt model changed during adaptation (logit %zu)\n", i);
      return 1;
    }
  // Read before the unpaired forwards below: the steps' peak (a NoGrad forward holds less).
  std::printf("ttmoe_moetta_step_s: %.4f\n", median(st));
  std::printf("peak_rss_mb: %.1f\n", status_mb("VmHWM:"));
  if (!ft.empty()) std::printf("ttmoe_noadapt_forward_s: %.4f\n", median(ft));
  if (!ratio.empty()) std::printf("ttmoe_step_over_noadapt_forward_paired: %.4f\n", median(ratio));
  std::fprintf(stderr, "(batch %ld, %d threads, moe layers %zu, kept %ld/%ld, last loss %.4f)\n", long(batch), threads,
               vit.moe_layers().size(), long(kept_total), long(batch) * steps, method.last_step().loss);
  auto list = [](const char* what, const std::vector<double>& v) {  // every timed run, to judge the noise
    std::fprintf(stderr, "(%s s:", what);
    for (double t : v) std::fprintf(stderr, " %.3f", t);
    std::fprintf(stderr, ")\n");
  };
  list("steps", st), list("no-adapt forwards", ft);

  // Unpaired extras: how much the MoE-LayerNorms cost in a forward, and the bench/vit forward.
  {
    autograd::NoGrad ng;
    std::vector<double> ct;
    for (int i = 0; i < runs; ++i) ct.push_back(timed([&] { return vit.forward(x); }));
    if (!ct.empty()) std::printf("ttmoe_converted_forward_s: %.4f\n", median(ct));
    list("converted forwards", ct);
  }
  if (plain_static) {
    using In = Tensor<float, models::vit_b16_shapes::images>;
    In xs{models::vit_b16_shapes::images(batch)};
    nn::uniform_(xs, 1.0, 99);
    autograd::NoGrad ng;
    auto forward = [&] { return plain.forward(xs); };  // no warm-up: the paired runs warmed the pool
    std::vector<double> pt;
    for (int i = 0; i < runs; ++i) pt.push_back(timed(forward));
    if (!pt.empty()) std::printf("ttmoe_plain_forward_s: %.4f\n", median(pt));
    list("plain static-shape forwards", pt);
  }
  std::fprintf(stderr, "(checksum %g)\n", double(sink));
  return 0;
}
