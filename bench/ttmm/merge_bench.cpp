// TTMM test-time merging at Llama-3.2-1B shapes (hidden 2048, intermediate 8192, 32/8 heads of 64,
// vocab 128256, tied head; random weights; --layers of the 16, default 4 so that PyTorch fits
// beside it on a shared machine). Prints `name: value` lines for bench/ttmm/run_merge_bench.sh:
//   ttmoe_merge_restore_s      dense merge of --experts rank-64 experts into all 7 linears of every
//                              layer (ttmm::DenseMerge: one GEMM over the stacked factors per
//                              module, accumulated into W) plus the exact restore: with --checkpoint
//                              a copy from the mapped BF16 checkpoint, without it a second GEMM + patch
//   merge_limit_s              max(FLOPs of the GEMMs needed (1 mapped, 2 without) / GEMM peak,
//                              bytes / triad bandwidth), bytes
//                              = factors and weights read once, weights written once; the peak
//                              (ttmoe::matmul 2048^3) and the triad (bench/triad.hpp: c = a + s b,
//                              32M floats) are measured in this process
//   gemm_peak_gflops, triad_gbs, merge_patch_fraction (restore patch entries / merged weights)
//   base_token_s               per-token decode time of the base model (batch 1, KV cache)
//   base_token_<n>_s           the same measured again beside the n-expert adapter, one step of each
//                              in turn (the unit of the n-expert overhead figures); the adapter's
//                              extra seconds per token (median difference) in
//                              ttmm_unmaterialised_per_token_<n>_s
//   ttmm_overhead_tokens_<n>   (selection + merge-or-apply + restore, automatic choice for 100
//                              generated tokens) / base_token_<n>_s, for n active experts (--overhead),
//                              dense merges in --arithmetic; ttmm_overhead_tokens_f32_<n> the same
//                              with F32 merges (ttmm_mode_f32_<n> its choice)
//   ttmm_mode_<n>              the mode the automatic rule chose (0 dense, 1 unmaterialised)
//   ttmm_dense_<n>_s, ttmm_unmaterialised_<n>_s   both modes measured (the chosen one is the overhead),
//   ttmm_*_predicted_<n>_s     beside what the rule predicted for each (ttmm::estimate_merge_costs)
//   calibrated_gemm_gflops, calibrated_lowrank_gbs   the rates the rule measured (calibrate_merge_costs)
// With --write-experts DIR it only writes the experts as PEFT folders DIR/expert_<k> (F32) for the
// PyTorch peer (merge_peft.py) and exits.
// With --checkpoint DIR the base model is saved there as a BF16 HF folder (Llama-3.2-1B ships in
// BF16) unless DIR/model.safetensors exists, loaded back with models::load_llama and kept mapped
// (ttmm::MappedBaseWeights) for the restores and the automatic choice.
// --arithmetic bf16 runs the overhead's dense merges with BF16 products (ttmm::MergeArithmetic::
// bf16_products, for the BF16 checkpoint; needs --checkpoint); the merge figure above stays F32, the
// arithmetic of the PEFT peer. Both dense variants are printed either way (ttmm_dense_f32/bf16_<n>_s).
//   bench_ttmm_merge [--layers 4] [--experts 10] [--threads 2] [--write-experts DIR] [--overhead 3,10]
//                    [--checkpoint DIR] [--arithmetic f32|bf16]

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/ttmoe.hpp"
#include "ttmoe/models/llama_hf.hpp"
#include "ttmoe/ttmm/test_time_merge.hpp"
#include "../common.hpp"
#include "../triad.hpp"

using namespace ttmoe;
using bench::Clock;
using bench::seconds_since;

namespace {

models::LlamaConfig llama_1b_shapes(index_t layers) {
  nlohmann::json j{{"model_type", "llama"},          {"vocab_size", 128256},       {"hidden_size", 2048},
                   {"intermediate_size", 8192},      {"num_hidden_layers", layers}, {"num_attention_heads", 32},
                   {"num_key_value_heads", 8},       {"head_dim", 64},             {"max_position_embeddings", 4096},
                   {"rms_norm_eps", 1e-5},           {"rope_theta", 500000.0},     {"tie_word_embeddings", true},
                   {"hidden_act", "silu"}};
  return models::LlamaConfig::from_json(j);
}

/// A rank-64, alpha-16 expert on every linear; A ~ N(0, 1/in) and B ~ N(0, 0.01^2), so ten of them
/// at weight 0.1 move W by about a percent of its size, as trained LoRA experts do.
models::PeftAdapter<float> random_expert(models::LlamaForCausalLM<float>& m, std::uint64_t seed) {
  models::LoraAdapterConfig c;
  c.r = 64;
  c.lora_alpha = 16;
  c.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  auto a = models::make_lora_adapter(m, c, seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (auto& [name, mod] : a.modules) {
    auto& A = mod.lora_A.weight;
    auto& B = mod.lora_B.weight;
    const float sa = 1.f / std::sqrt(float(A.extent(1)));
    for (index_t i = 0; i < A.numel(); ++i) A.data()[i] = n(rng) * sa;
    for (index_t i = 0; i < B.numel(); ++i) B.data()[i] = n(rng) * 0.01f;
  }
  return a;
}

template <class F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

/// Median seconds per decoded token (batch 1) of `steps` single-token steps after a 16-token prefill.
double decode_token_seconds(const models::LlamaForCausalLM<float>& m, int steps) {
  autograd::NoGrad ng;
  auto cache = m.make_cache(1, 16 + index_t(steps) + 1);
  std::vector<std::int64_t> prompt(16);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = std::int64_t(100 + 7 * i);
  (void)m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 16), prompt), cache).to_vector();
  std::vector<double> t;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    const auto h = m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 1), {std::int64_t(5 + s)}), cache);
    (void)m.logits(h).to_vector();
    t.push_back(seconds_since(t0));
  }
  return bench::median(std::move(t));
}

/// Per-token decode seconds (batch 1, KV cache, 16-token prefill) of the base model and of the same
/// model with `chosen` attached unmerged, one step of each in turn (the order swapped every round)
/// for `rounds` rounds, so a change of load on a shared machine reaches both alike. Returns {median
/// base step, median of the per-round differences (adapter step - base step)}.
std::pair<double, double> paired_decode_seconds(models::LlamaForCausalLM<float>& m,
                                                const std::vector<models::WeightedAdapter<float>>& chosen, int rounds) {
  autograd::NoGrad ng;
  auto base_cache = m.make_cache(1, 16 + index_t(rounds) + 1), with_cache = m.make_cache(1, 16 + index_t(rounds) + 1);
  std::vector<std::int64_t> prompt(16);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = std::int64_t(100 + 7 * i);
  const auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 16), prompt);
  (void)m.forward_cached(ids, base_cache).to_vector();
  {
    models::AttachedAdapters<float> att(m, chosen, models::LoraMode::unmerged);
    (void)m.forward_cached(ids, with_cache).to_vector();
  }
  auto step = [&](decltype(base_cache)& cache, int s) {
    const auto t0 = Clock::now();
    const auto h = m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 1), {std::int64_t(5 + s)}), cache);
    (void)m.logits(h).to_vector();
    return seconds_since(t0);
  };
  std::vector<double> base, diff;
  for (int s = 0; s < rounds; ++s) {
    double b = 0, w = 0;
    if (s % 2 == 0) b = step(base_cache, s);
    {
      models::AttachedAdapters<float> att(m, chosen, models::LoraMode::unmerged);
      w = step(with_cache, s);
    }
    if (s % 2 == 1) b = step(base_cache, s);
    base.push_back(b);
    diff.push_back(w - b);
  }
  return {bench::median(std::move(base)), bench::median(std::move(diff))};
}

}  // namespace

int main(int argc, char** argv) {
  index_t layers = 4, n_experts = 10;
  int threads = 2;
  std::string write_dir, checkpoint;
  ttmm::MergeArithmetic arithmetic = ttmm::MergeArithmetic::f32;
  std::vector<index_t> overhead{3, 10};
  for (int i = 1; i < argc; ++i) {
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_ttmm_merge: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--layers")) layers = index_t(std::stol(next()));
    else if (!std::strcmp(argv[i], "--experts")) n_experts = index_t(std::stol(next()));
    else if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(next());
    else if (!std::strcmp(argv[i], "--write-experts")) write_dir = next();
    else if (!std::strcmp(argv[i], "--checkpoint")) checkpoint = next();
    else if (!std::strcmp(argv[i], "--arithmetic")) {
      const auto a = next();
      if (a != "f32" && a != "bf16") {
        std::fprintf(stderr, "bench_ttmm_merge: --arithmetic is f32 or bf16, not %s\n", a.c_str());
        return 2;
      }
      arithmetic = a == "bf16" ? ttmm::MergeArithmetic::bf16_products : ttmm::MergeArithmetic::f32;
    }
    else if (!std::strcmp(argv[i], "--overhead")) {
      overhead.clear();
      const auto s = next();
      for (std::size_t p = 0; p < s.size();) {
        const auto q = s.find(',', p);
        overhead.push_back(index_t(std::stol(s.substr(p, q - p))));
        p = q == std::string::npos ? s.size() : q + 1;
      }
    } else {
      std::fprintf(stderr, "bench_ttmm_merge: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  cpu_backend::set_num_threads(std::size_t(threads));
  models::LlamaForCausalLM<float> m(llama_1b_shapes(layers), 1);
  std::shared_ptr<const ttmm::MappedBaseWeights> origin;
  if (!checkpoint.empty()) {
    if (!std::filesystem::exists(std::filesystem::path(checkpoint) / "model.safetensors"))
      models::save_llama(m, checkpoint, io::DType::BF16);
    m = models::load_llama<float>(checkpoint);
    origin = ttmm::MappedBaseWeights::open_model_folder(checkpoint);
  }
  std::vector<models::PeftAdapter<float>> experts;
  for (index_t k = 0; k < n_experts; ++k) experts.push_back(random_expert(m, 500 + std::uint64_t(k)));
  if (!write_dir.empty()) {
    for (index_t k = 0; k < n_experts; ++k) models::save_peft_adapter(experts[k], write_dir + "/expert_" + std::to_string(k));
    std::fprintf(stderr, "wrote %ld experts to %s\n", long(n_experts), write_dir.c_str());
    return 0;
  }
  autograd::NoGrad ng;

  // The machine's GEMM peak and triad bandwidth, measured here.
  double peak = 0;
  {
    const index_t n = 2048;
    auto a = Tensor<float, DynShape<2>>::full(DynShape<2>(n, n), 0.5f), b = Tensor<float, DynShape<2>>::full(DynShape<2>(n, n), 0.25f);
    peak = 2.0 * double(n) * double(n) * double(n) / best_of(3, [&] { (void)matmul(a, b); });
  }
  const double triad = bench::triad_gbs();

  // Dense merge + exact restore of all experts.
  std::vector<models::WeightedAdapter<float>> ws;
  for (auto& e : experts) ws.push_back({&e, 1.0 / double(n_experts)});
  double flops = 0, bytes = 0;
  for (const auto& [name, lin] : models::adaptable_linears(m)) {
    const double out = double(lin->weight.extent(0)), in = double(lin->weight.extent(1)), R = 64.0 * double(n_experts);
    flops += (origin ? 1.0 : 2.0) * (2.0 * R * out * in);  // merge, and restore unless mapped
    bytes += 4.0 * (R * (out + in) + 2.0 * out * in);
  }
  double merge_s = 1e30, patch_fraction = 0;
  for (int rep = 0; rep < 2; ++rep) {  // the first also warms the pools
    const auto t0 = Clock::now();
    ttmm::DenseMerge<> merge(m, ws, origin);
    patch_fraction = double(merge.patch_entries()) / double(merge.merged_elements());
    merge.restore();
    merge_s = std::min(merge_s, seconds_since(t0));
  }
  const double limit = std::max(flops / peak, bytes / triad);
  std::printf("ttmoe_merge_restore_s: %.4f\nmerge_limit_s: %.4f\ngemm_peak_gflops: %.2f\ntriad_gbs: %.2f\n", merge_s, limit,
              peak * 1e-9, triad * 1e-9);
  std::printf("merge_flop_limit_s: %.4f\nmerge_byte_limit_s: %.4f\nmerge_patch_fraction: %.5f\n", flops / peak,
              bytes / triad, patch_fraction);

  // Overhead of n active experts for a 100-token request, in base-model decode tokens.
  const double base_token = decode_token_seconds(m, 8);
  std::printf("base_token_s: %.4f\n", base_token);
  const index_t K = 100, d = 768;
  std::vector<float> cents(std::size_t(K * d));
  {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> n(0.f, 1.f);
    for (auto& v : cents) v = n(rng);
    for (index_t k = 0; k < K; ++k) {
      double s = 0;
      for (index_t j = 0; j < d; ++j) s += double(cents[k * d + j]) * cents[k * d + j];
      for (index_t j = 0; j < d; ++j) cents[k * d + j] = float(cents[k * d + j] / std::sqrt(s));
    }
  }
  const auto centroids = Tensor<float, DynShape<2>>::from_host(DynShape<2>(K, d), cents);
  const auto& costs = ttmm::calibrate_merge_costs();
  std::printf("calibrated_gemm_gflops: %.2f\ncalibrated_gemm_bf16_gflops: %.2f\ncalibrated_lowrank_gbs: %.2f\n",
              costs.gemm_flops_per_second * 1e-9, costs.gemm_bf16_flops_per_second * 1e-9,
              costs.lowrank_bytes_per_second * 1e-9);
  std::printf("ttmm_arithmetic_bf16: %d\n", arithmetic == ttmm::MergeArithmetic::bf16_products ? 1 : 0);
  for (const index_t n : overhead) {
    if (n > n_experts) continue;
    // The query: the normalised mean of the first n centroids, so the rule keeps exactly those.
    std::vector<float> q(std::size_t(d), 0.f);
    for (index_t k = 0; k < n; ++k)
      for (index_t j = 0; j < d; ++j) q[j] += cents[k * d + j];
    double s = 0;
    for (float v : q) s += double(v) * v;
    for (float& v : q) v = float(v / std::sqrt(s));
    const auto t0 = Clock::now();
    const auto sel = ttmm::select_experts(q, centroids);
    const double t_select = seconds_since(t0);
    if (index_t(sel.experts.size()) != n) {
      std::fprintf(stderr, "bench_ttmm_merge: the rule kept %zu experts, not %ld\n", sel.experts.size(), long(n));
      return 1;
    }
    std::vector<models::WeightedAdapter<float>> chosen;
    for (std::size_t i = 0; i < sel.experts.size(); ++i) chosen.push_back({&experts[sel.experts[i]], sel.weights[i]});
    models::LinearShapes shapes = models::linear_shapes(m);
    // The bench's checkpoint is BF16, so bf16 arithmetic applies to every module (with --checkpoint).
    const bool bf16 = origin && arithmetic == ttmm::MergeArithmetic::bf16_products;
    const auto predicted = ttmm::estimate_merge_costs(shapes, 64 * n, 100, costs, origin != nullptr, bf16);
    const auto mode = ttmm::choose_merge_mode(shapes, 64 * n, 100, costs, origin != nullptr, bf16);
    // Both paths (and the dense merge in both arithmetics) are measured, so the rule's prediction can
    // be checked against each; the overhead figure is the chosen one's, in --arithmetic.
    double dense_s = 0, dense_f32_s = 0, dense_bf16_s = 0, unmaterialised_s = 0;
    for (const auto a : {ttmm::MergeArithmetic::f32, ttmm::MergeArithmetic::bf16_products}) {
      if (a == ttmm::MergeArithmetic::bf16_products && !origin) continue;
      const auto t1 = Clock::now();
      ttmm::DenseMerge<> merge(m, chosen, origin, a);
      merge.restore();
      (a == ttmm::MergeArithmetic::f32 ? dense_f32_s : dense_bf16_s) = seconds_since(t1);
    }
    dense_s = bf16 ? dense_bf16_s : dense_f32_s;
    {
      const auto t1 = Clock::now();
      models::AttachedAdapters<float> att(m, chosen, models::LoraMode::unmerged);
      att.remove();
      unmaterialised_s = seconds_since(t1);
    }
    // The base token is measured again here, beside the adapter's, and divides this n's figures: a
    // shared machine's load drifts between the start and now.
    const auto [base_n, extra] = paired_decode_seconds(m, chosen, 12);
    unmaterialised_s += 100.0 * std::max(0.0, extra);
    std::printf("base_token_%ld_s: %.4f\nttmm_unmaterialised_per_token_%ld_s: %.5f\n", long(n), base_n, long(n), extra);
    const double cost = t_select + (mode == ttmm::MergeMode::dense ? dense_s : unmaterialised_s);
    // The same request with F32 merges (the library's default arithmetic), chosen and priced as such.
    const auto mode_f32 = ttmm::choose_merge_mode(shapes, 64 * n, 100, costs, origin != nullptr);
    const double cost_f32 = t_select + (mode_f32 == ttmm::MergeMode::dense ? dense_f32_s : unmaterialised_s);
    std::printf("ttmm_overhead_tokens_f32_%ld: %.3f\nttmm_mode_f32_%ld: %d\n", long(n), cost_f32 / base_n, long(n),
                mode_f32 == ttmm::MergeMode::dense ? 0 : 1);
    std::printf("ttmm_overhead_tokens_%ld: %.3f\nttmm_overhead_%ld_s: %.4f\nttmm_mode_%ld: %d\n", long(n), cost / base_n,
                long(n), cost, long(n), mode == ttmm::MergeMode::dense ? 0 : 1);
    std::printf("ttmm_select_%ld_s: %.6f\n", long(n), t_select);
    std::printf("ttmm_dense_%ld_s: %.4f\nttmm_dense_predicted_%ld_s: %.4f\n", long(n), dense_s, long(n), predicted.dense_s);
    std::printf("ttmm_dense_f32_%ld_s: %.4f\nttmm_dense_bf16_%ld_s: %.4f\n", long(n), dense_f32_s, long(n), dense_bf16_s);
    std::printf("ttmm_unmaterialised_%ld_s: %.4f\nttmm_unmaterialised_predicted_%ld_s: %.4f\n", long(n), unmaterialised_s,
                long(n), predicted.unmaterialised_s);
  }
  std::fprintf(stderr, "(%ld layers, %ld experts, %d threads)\n", long(layers), long(n_experts), threads);
  return 0;
}
