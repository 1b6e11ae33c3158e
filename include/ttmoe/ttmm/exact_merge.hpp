#pragma once
// Dense TTMM merging in place with an exact restore and no copy of the base weights.
// Per adapted Linear, delta = B_cat A_cat (ONE GEMM over the stacked factors, F32 accumulation, the
// weights w_k s_k folded into A's rows) is added in place: s = fl(W + delta). Restoring computes the
// same delta again and takes fl(s - delta), which equals W for almost every element; where it does
// not (rounding lost a bit of W, e.g. when |delta| is not small against |W| or s crosses a binade),
// the merge recorded (index, W) in a sparse patch list, applied after the subtraction. So restore is
// bit-identical while the extra memory is the patch (a tiny fraction of W for LoRA deltas) instead
// of ttmerge's full clone of the weights. The price is a second GEMM at restore time; the GEMM is
// deterministic (same shapes, same code path), and a checksum of delta taken at merge time is
// compared at restore so a different delta can never silently corrupt the weights.
//
// When the base weights came from a checkpoint that is still mapped (ttmm/mapped_weights.hpp),
// none of that is needed: the merge accumulates B_cat A_cat straight into W (the GEMM's beta = 1
// epilogue: no delta temporary, no separate add, no patch) and restore reads the original weights
// back from the mapping (one pass, no GEMM). The GEMM + patch path stays for weights without a
// mapping (trained in-process, sharded checkpoints) or whose file changed on disk before the merge.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/models/llama_lora.hpp"
#include "ttmoe/moe/lora_merge.hpp"
#include "ttmoe/ttmm/bf16_merge.hpp"
#include "ttmoe/ttmm/mapped_weights.hpp"

namespace ttmoe::ttmm {

namespace detail {

/// Order-dependent 64-bit checksum of a float buffer's bits (FNV-1a over 32-bit words).
inline std::uint64_t bits_checksum(const float* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, p + i, sizeof u);
    h = (h ^ u) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace detail

/// The record that undoes one in-place merge exactly: the elements whose value fl(s - delta) would
/// not give back, and a checksum of delta.
template <class T>
struct ExactUndo {
  std::vector<std::pair<std::uint32_t, T>> patch;  ///< (flat index, original value): 8 bytes for F32
  std::uint64_t delta_checksum = 0;
};

/// W += delta in place (W [out, in] contiguous, delta [out, in] in F32); returns what undo_exact
/// needs to give W back bit for bit. T is the weight type (float; its values may be BF16-valued).
template <class T, class D>
ExactUndo<T> add_exact(Tensor<T, DynShape<2>, D>& W, const Tensor<float, DynShape<2>, D>& delta) {
  if (W.extent(0) != delta.extent(0) || W.extent(1) != delta.extent(1))
    throw ShapeError("add_exact: weight and delta shapes differ");
  ExactUndo<T> u;
  T* w = W.data();
  const float* d = delta.data();
  const std::size_t n = std::size_t(W.numel());
  if (n > std::size_t(UINT32_MAX)) throw ValueError("add_exact: a weight of more than 2^32 elements");
  u.delta_checksum = detail::bits_checksum(d, n);
  for (std::size_t i = 0; i < n; ++i) {
    const T before = w[i];
    const T s = T(float(before) + d[i]);
    // Compare bits, not values: -0.0 vs 0.0 and NaN payloads must come back too.
    const T back = T(float(s) - d[i]);
    if (std::memcmp(&back, &before, sizeof(T)) != 0) u.patch.emplace_back(std::uint32_t(i), before);
    w[i] = s;
  }
  return u;
}

/// Undoes add_exact: W = fl(W - delta), then the patch. `delta` must be the very delta added (its
/// checksum is compared; a mismatch throws ValueError and leaves W as it was).
template <class T, class D>
void undo_exact(Tensor<T, DynShape<2>, D>& W, const Tensor<float, DynShape<2>, D>& delta, const ExactUndo<T>& u) {
  const float* d = delta.data();
  const std::size_t n = std::size_t(W.numel());
  if (W.extent(0) != delta.extent(0) || W.extent(1) != delta.extent(1) || detail::bits_checksum(d, n) != u.delta_checksum)
    throw ValueError("undo_exact: the delta differs from the one merged (non-deterministic GEMM?); weights left merged");
  T* w = W.data();
  for (std::size_t i = 0; i < n; ++i) w[i] = T(float(w[i]) - d[i]);
  for (const auto& [i, v] : u.patch) w[i] = v;
}

/// Experts merged densely into a Llama-family model, in place: every adapted Linear's weight
/// becomes W + sum_k w_k s_k B_k A_k. restore() (or the destructor) gives the weights back bit for
/// bit, keeping only the stacked factors and the sparse patches meanwhile. Attachments nest like
/// models::AttachedAdapters: the most recent must be restored first.
template <class D = cpu>
class DenseMerge {
 public:
  /// Merges `adapters` into `m` (which must outlive this object). Adapters that do not fit `m`
  /// throw nn::CheckpointError (models::stack_adapters) before anything changes.
  /// With `origin` (the still-mapped checkpoint `m` was loaded from, CPU only), modules whose weight
  /// the file holds and which is unchanged on disk are merged by accumulation and restored from the
  /// mapping; the others (and every module without `origin`) use the GEMM + patch path. A weight
  /// whose first row differs from the file's (an adapter already merged beneath this merge, weights
  /// trained in-process) also takes the GEMM + patch path, so nested merges restore in order.
  /// `arithmetic` bf16_products: modules merged by accumulation whose checkpoint stores BF16 run the
  /// merge GEMM with BF16-rounded factors and F32 sums (ttmm/bf16_merge.hpp); all others stay F32.
  DenseMerge(models::LlamaForCausalLM<float, D>& m, const std::vector<models::WeightedAdapter<float, D>>& adapters,
             std::shared_ptr<const MappedBaseWeights> origin = nullptr, MergeArithmetic arithmetic = MergeArithmetic::f32)
      : modules_(models::stack_adapters(m, adapters)) {
    autograd::NoGrad ng;
    const bool mapping_usable = std::is_same_v<D, cpu> && origin && origin->unchanged();
    for (auto& [name, sm] : modules_) {
      auto W = sm.linear->weight;  // shares storage: the merge is in place
      const std::string tensor = name + ".weight";
      if (mapping_usable && origin->holds(tensor, W.extent(0), W.extent(1)) &&
          origin->first_row_matches(tensor, std::span<const float>(W.data(), std::size_t(W.extent(1))))) {
        if constexpr (std::is_same_v<D, cpu>) {
          if (arithmetic == MergeArithmetic::bf16_products && origin->stores_bf16(tensor)) {
            add_merged_delta_bf16(W, sm.factors);
            ++bf16_modules_;
          } else {
            moe::add_merged_delta(W, sm.factors);
          }
        } else {
          moe::add_merged_delta(W, sm.factors);
        }
        from_mapping_.insert(name);
      } else {
        undo_[name] = add_exact(W, moe::merged_delta(sm.factors));
      }
    }
    if (!from_mapping_.empty()) origin_ = std::move(origin);
  }
  DenseMerge(const DenseMerge&) = delete;
  DenseMerge& operator=(const DenseMerge&) = delete;
  DenseMerge(DenseMerge&& o) noexcept
      : modules_(std::move(o.modules_)), undo_(std::move(o.undo_)), from_mapping_(std::move(o.from_mapping_)),
        origin_(std::move(o.origin_)), bf16_modules_(o.bf16_modules_) {
    o.modules_.clear();
  }
  DenseMerge& operator=(DenseMerge&&) = delete;
  ~DenseMerge() {
    try {
      restore();
    } catch (...) {  // only a checkpoint rewritten in place since loading fails here; a destructor must not throw
    }
  }

  /// Gives every merged weight back exactly (a no-op the second time). A merge that relied on the
  /// mapping throws ValueError, before changing anything, when the file was rewritten in place since
  /// it was opened (see ttmm/mapped_weights.hpp); the weights then stay merged.
  void restore() {
    autograd::NoGrad ng;
    if (origin_ && !origin_->unchanged())
      throw ValueError("DenseMerge::restore: " + origin_->path().string() +
                       " was modified in place since loading; refusing to restore from it (weights left merged)");
    for (auto it = modules_.rbegin(); it != modules_.rend(); ++it) {
      auto W = it->second.linear->weight;
      if (from_mapping_.count(it->first) != 0) {
        if constexpr (std::is_same_v<D, cpu>)
          origin_->read_back(it->first + ".weight", std::span<float>(W.data(), std::size_t(W.numel())));
      } else {
        undo_exact(W, moe::merged_delta(it->second.factors), undo_.at(it->first));
      }
    }
    modules_.clear();
    undo_.clear();
    from_mapping_.clear();
    origin_.reset();
  }

  /// How many modules were merged with BF16 products (MergeArithmetic::bf16_products).
  std::size_t bf16_modules() const { return bf16_modules_; }

  /// How many modules restore from the mapped checkpoint (the rest use GEMM + patch).
  std::size_t mapped_modules() const { return from_mapping_.size(); }

  /// How many Linear modules the merge changed.
  std::size_t module_count() const { return modules_.size(); }
  /// Total entries in the restore patches (elements whose subtraction alone would not restore).
  std::size_t patch_entries() const {
    std::size_t n = 0;
    for (const auto& [name, u] : undo_) n += u.patch.size();
    return n;
  }
  /// Total weight elements merged.
  std::size_t merged_elements() const {
    std::size_t n = 0;
    for (const auto& [name, sm] : modules_) n += std::size_t(sm.linear->weight.numel());
    return n;
  }

 private:
  std::map<std::string, models::StackedModule<float, D>> modules_;
  std::map<std::string, ExactUndo<float>> undo_;
  std::set<std::string> from_mapping_;             ///< modules merged by accumulation, restored from origin_
  std::shared_ptr<const MappedBaseWeights> origin_;  ///< held only while some module relies on it
  std::size_t bf16_modules_ = 0;                    ///< modules merged with BF16 products
};

}  // namespace ttmoe::ttmm
