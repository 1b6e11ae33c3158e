#pragma once
// TTMM at test time: select experts for a prompt's embedding, fetch them through the LRU cache and
// put them on the base model for one request, either
//  (a) dense: merged into the weights in place (ttmm/exact_merge.hpp; exact restore afterwards), a
//      one-off cost of two GEMMs per adapted Linear (merge and restore), or one GEMM and a copy when
//      the checkpoint is still mapped (ttmm/mapped_weights.hpp), then base-model speed; or
//  (b) unmaterialised: one rank-(sum r_k) adapter beside the weights (models::AttachedAdapters in
//      unmerged mode), no one-off cost but two thin GEMMs per Linear for every token.
// (c) automatic: the cheaper of the two for the number of tokens the request will run, from costs
//     measured once per process (calibrate_merge_costs, cached):
//       dense          = g * sum over modules of 2 R out in  /  GEMM FLOP/s (F32, or the BF16
//                                                               products' rate: ttmm/bf16_merge.hpp)
//                        + (mapped restore) sum over modules of 8 out in  /  low-rank bytes/s
//         g = 2 (merge GEMM + restore GEMM) without a mapped checkpoint, 1 with one: the restore
//         then reads the weights back from the mapping (4 bytes read, 4 written per element,
//         priced at the bandwidth the batch-1 measurement sees);
//       unmaterialised = tokens * sum over modules of R (in + out) * 4 bytes  /  low-rank bytes/s
//     where R = sum r_k; decode at batch 1 streams the factors once per token, so (b) is priced
//     by bytes, (a) by FLOPs. Dense wins for long generations and few, large modules' deltas.
//     Both rates are measured at the sizes they run at: the bytes/s with factors far larger than
//     the last-level cache, since decode's factors are (see measure_merge_costs).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ttmoe/models/llama_lora.hpp"
#include "ttmoe/moe/lora_merge.hpp"
#include "ttmoe/ops/linear.hpp"
#include "ttmoe/ttmm/exact_merge.hpp"
#include "ttmoe/ttmm/expert_cache.hpp"
#include "ttmoe/ttmm/selection.hpp"

namespace ttmoe::ttmm {

/// How selected experts act on the model.
enum class MergeMode {
  dense,           ///< merged into the weights in place, restored exactly afterwards
  unmaterialised,  ///< one stacked low-rank adapter applied beside the weights
  automatic        ///< the cheaper of the two for the request's token count
};

/// Measured costs behind the automatic choice.
struct MergeCosts {
  double gemm_flops_per_second = 0;       ///< dense merge GEMMs (W += B_cat A_cat)
  double lowrank_bytes_per_second = 0;    ///< batch-1 application of stacked factors streamed from memory
  double gemm_bf16_flops_per_second = 0;  ///< the merge GEMM with BF16 products (ttmm/bf16_merge.hpp); 0: unknown
};

/// Bytes of stacked factors the low-rank calibration streams per pass: 4x the 32 MiB L3 of the
/// largest CPUs it is meant for, so no factor is still cached when its next use comes round, as in
/// decode, where every token streams sum_modules R (in + out) 4 bytes (450 MB at Llama-3.2-1B widths,
/// 4 layers, R = 640). Factors that fit in cache (the first calibration's 4 MiB) measured several
/// times the rate decode sees, and the rule then chose the unmaterialised adapter where a dense
/// merge was 2-3x cheaper (#15, docs/design.md "TTMM serving").
inline constexpr std::size_t lowrank_calibration_bytes = std::size_t(128) << 20;

/// Times the two calls the rule prices, at the shapes they run at, on device D:
///  - the dense merge's GEMM, W [2048, 2048] += B [2048, 256] A [256, 2048] (moe::add_merged_delta,
///    beta = 1, best of 3), and the same with BF16 products (add_merged_delta_bf16, CPU only);
///  - decode's unmerged update, y = r + (x A^T) B^T for one row x (the two ops::linear calls
///    nn::Linear makes), over 16 factor pairs of rank 512 at width 2048, 128 MiB in all, one after
///    another as decode walks the layers (best of 3 passes, each pass reading every pair once).
template <class D = cpu>
MergeCosts measure_merge_costs() {
  using clock = std::chrono::steady_clock;
  using Mat = Tensor<float, DynShape<2>, D>;
  auto best_of = [](int reps, auto&& f) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return best;
  };
  // Constant values: the timings do not depend on them, and a fill is cheaper than a pattern.
  autograd::NoGrad ng;
  const index_t wide = 2048, r_merge = 256, r_low = 512;
  auto W = Mat::full(DynShape<2>(wide, wide), 0.5f);
  const moe::StackedLoRA<float, D> merge{Mat::full(DynShape<2>(r_merge, wide), 1e-3f),
                                         Mat::full(DynShape<2>(wide, r_merge), 1e-3f)};
  const double t_gemm = best_of(3, [&] {
    moe::add_merged_delta(W, merge);
    if constexpr (!std::is_same_v<D, cpu>) (void)W.to_vector();  // wait for an asynchronous device
  });
  double t_bf16 = t_gemm;
  if constexpr (std::is_same_v<D, cpu>) t_bf16 = best_of(3, [&] { add_merged_delta_bf16(W, merge); });
  const std::size_t pair_bytes = std::size_t(2 * r_low * wide) * sizeof(float);
  const std::size_t pairs = lowrank_calibration_bytes / pair_bytes;
  std::vector<Mat> As, Bs;
  for (std::size_t i = 0; i < pairs; ++i) {
    As.push_back(Mat::full(DynShape<2>(r_low, wide), 1e-3f));
    Bs.push_back(Mat::full(DynShape<2>(wide, r_low), 1e-3f));
  }
  const auto x = Mat::full(DynShape<2>(1, wide), 1.f);
  const Tensor<float, DynShape<1>, D> none;
  const double t_low = best_of(3, [&] {
    Mat y = x;
    for (std::size_t i = 0; i < pairs; ++i) y = linear(linear(x, As[i], none), Bs[i], none, y);
    if constexpr (!std::is_same_v<D, cpu>) (void)y.to_vector();
  });
  const double flops = 2.0 * double(wide) * double(r_merge) * double(wide);
  return {flops / t_gemm, double(pairs * pair_bytes) / t_low, flops / t_bf16};
}

/// The measured costs on device D, taken on the first call and cached for the process.
template <class D = cpu>
const MergeCosts& calibrate_merge_costs() {
  static std::once_flag once;
  static MergeCosts costs;
  std::call_once(once, [] { costs = measure_merge_costs<D>(); });
  return costs;
}

/// What the automatic rule predicts each mode costs, in seconds.
struct MergeEstimate {
  double dense_s = 0;           ///< merge GEMMs + restore (GEMM or copy from the mapping)
  double unmaterialised_s = 0;  ///< `tokens` x one batch-1 pass over the stacked factors
};

/// The costs of the header comment for the modules `shapes` ([out, in] each), total rank R = sum r_k
/// and `tokens` tokens. `mapped_restore`: the restore copies from the mapped checkpoint instead of
/// a second GEMM. `bf16_products`: the merge GEMM runs with BF16 products (DenseMerge with
/// MergeArithmetic::bf16_products on a BF16 checkpoint), priced at that rate.
inline MergeEstimate estimate_merge_costs(const models::LinearShapes& shapes, index_t total_rank, index_t tokens,
                                          const MergeCosts& costs, bool mapped_restore = false,
                                          bool bf16_products = false) {
  const double gemms = mapped_restore ? 1.0 : 2.0;
  double flops = 0, bytes = 0, restore_bytes = 0;
  for (const auto& [name, s] : shapes) {
    flops += gemms * 2.0 * double(total_rank) * double(s.first) * double(s.second);
    bytes += double(total_rank) * double(s.first + s.second) * 4.0;
    if (mapped_restore) restore_bytes += 8.0 * double(s.first) * double(s.second);
  }
  const double rate = bf16_products && costs.gemm_bf16_flops_per_second > 0 ? costs.gemm_bf16_flops_per_second
                                                                            : costs.gemm_flops_per_second;
  return {flops / rate + restore_bytes / costs.lowrank_bytes_per_second,
          double(tokens) * bytes / costs.lowrank_bytes_per_second};
}

/// The automatic rule (see the header comment): dense when its one-off cost is below the
/// per-token cost of the unmaterialised adapter times `tokens` (estimate_merge_costs).
inline MergeMode choose_merge_mode(const models::LinearShapes& shapes, index_t total_rank, index_t tokens,
                                   const MergeCosts& costs, bool mapped_restore = false, bool bf16_products = false) {
  const auto e = estimate_merge_costs(shapes, total_rank, tokens, costs, mapped_restore, bf16_products);
  return e.dense_s < e.unmaterialised_s ? MergeMode::dense : MergeMode::unmaterialised;
}

template <class D>
class TestTimeMerger;

/// Selected experts acting on the model for one request; the model is restored when this object is
/// destroyed (or restore() is called). Movable, not copyable.
template <class D = cpu>
class ActiveExperts {
 public:
  ActiveExperts() = default;
  /// The selection behind it.
  const ExpertSelection& selection() const noexcept { return selection_; }
  /// The mode used (dense or unmaterialised; dense for the base model, which changes nothing).
  MergeMode mode() const noexcept { return mode_; }
  /// Entries in the dense merge's restore patch (0 for the unmaterialised mode).
  std::size_t patch_entries() const { return dense_ ? dense_->patch_entries() : 0; }
  /// Weight elements merged densely.
  std::size_t merged_elements() const { return dense_ ? dense_->merged_elements() : 0; }
  /// Gives the model back exactly.
  void restore() {
    if (dense_) dense_->restore();
    if (unmerged_) unmerged_->remove();
    dense_.reset();
    unmerged_.reset();
  }

 private:
  friend class TestTimeMerger<D>;
  ExpertSelection selection_;
  MergeMode mode_ = MergeMode::dense;
  std::unique_ptr<DenseMerge<D>> dense_;
  std::unique_ptr<models::AttachedAdapters<float, D>> unmerged_;
};

/// TTMM serving: a base model, its expert store and a cache of hot experts (CPU: the store's
/// centroids and the cached experts live in host memory).
template <class D = cpu>
class TestTimeMerger {
 public:
  /// `model` and `store` must outlive the merger; `cache_bytes` bounds the experts kept in memory.
  /// `origin`: the mapped checkpoint `model` was loaded from (MappedBaseWeights::open_model_folder),
  /// so dense merges restore by copying from it; nullptr keeps the GEMM + patch restore.
  /// `arithmetic`: the dense merges' (DenseMerge); bf16_products needs `origin` to store BF16.
  TestTimeMerger(models::LlamaForCausalLM<float, D>& model, const ExpertStore& store, std::size_t cache_bytes,
                 std::shared_ptr<const MappedBaseWeights> origin = nullptr,
                 MergeArithmetic arithmetic = MergeArithmetic::f32)
      : model_(&model), store_(&store), cache_(store, cache_bytes), origin_(std::move(origin)), arithmetic_(arithmetic) {}

  /// Selects experts for the query embedding `q` and puts them on the model for a request of
  /// `tokens` tokens in `mode` (automatic: calibrate_merge_costs and choose_merge_mode).
  ActiveExperts<D> activate(std::span<const float> q, index_t tokens, MergeMode mode = MergeMode::automatic,
                         const moe::SparseSoftmaxConfig& cfg = {}) {
    ActiveExperts<D> a;
    a.selection_ = select_experts(q, store_->centroids(), cfg);
    if (a.selection_.base_model()) return a;
    std::vector<std::shared_ptr<const ExpertCache::Expert>> held;
    std::vector<models::WeightedAdapter<float>> weighted;
    for (std::size_t k = 0; k < a.selection_.experts.size(); ++k) {
      held.push_back(cache_.get(a.selection_.experts[k]));
      weighted.push_back({held.back().get(), a.selection_.weights[k]});
    }
    if (mode == MergeMode::automatic) {
      models::LinearShapes adapted;
      const auto all = models::linear_shapes(*model_);
      for (const auto& h : held)
        for (const auto& [name, m] : h->modules) adapted[name] = all.at(name);
      index_t rank = 0;
      for (const auto& h : held) rank += h->modules.empty() ? 0 : h->modules.begin()->second.rank();
      const bool mapped = origin_ && origin_->unchanged();
      bool bf16 = mapped && arithmetic_ == MergeArithmetic::bf16_products;
      for (const auto& [name, s] : adapted) bf16 = bf16 && origin_->stores_bf16(name + ".weight");
      mode = choose_merge_mode(adapted, rank, tokens, calibrate_merge_costs<D>(), mapped, bf16);
    }
    a.mode_ = mode;
    if (mode == MergeMode::dense) a.dense_ = std::make_unique<DenseMerge<D>>(*model_, weighted, origin_, arithmetic_);
    else a.unmerged_ = std::make_unique<models::AttachedAdapters<float, D>>(*model_, weighted, models::LoraMode::unmerged);
    return a;
  }

  /// The expert cache.
  ExpertCache& cache() noexcept { return cache_; }

 private:
  models::LlamaForCausalLM<float, D>* model_;
  const ExpertStore* store_;
  ExpertCache cache_;
  std::shared_ptr<const MappedBaseWeights> origin_;
  MergeArithmetic arithmetic_;
};

}  // namespace ttmoe::ttmm
