#pragma once
// One LayerNorm slot of a ViT that MoETTA can turn into a MoE-LayerNorm in place. Until converted it
// is a plain nn::LayerNorm (parameters `weight`, `bias`); after convert_to_moe() the shared affine
// is the LayerNorm's own weight/bias (cloned, frozen) plus E zero-initialised expert deltas and a
// router, so the converted model computes exactly the pretrained function at init. Parameter names
// then follow moe::MoELayerNorm: `weight`, `bias`, `experts.{weight,bias}_delta`, `router.{weight,bias}`.

#include <memory>
#include <random>
#include <stdexcept>

#include "ttmoe/moe/moe_layernorm.hpp"
#include "ttmoe/nn/layernorm.hpp"

namespace ttmoe::models {

/// A LayerNorm with an optional MoE-LayerNorm extension.
template <class T = float, class D = cpu>
struct ViTNorm {
  nn::LayerNorm<T, D> ln;
  /// Set once converted. Held by pointer because the MoE layer records routing state (probs,
  /// picks) in its forward, and ViT::forward is const; copies of a model share it, as they share
  /// every parameter tensor (handles are shallow).
  std::shared_ptr<moe::MoELayerNorm<T, D>> moe;

  ViTNorm() = default;
  ViTNorm(index_t dim, T eps) : ln(dim, eps) {}

  /// True once convert_to_moe() ran.
  bool is_moe() const { return static_cast<bool>(moe); }

  /// Replaces the plain LayerNorm by a MoE-LayerNorm with `num_experts` experts (router drawn from
  /// `rng`); no-op if already converted. The pretrained affine becomes the frozen shared part.
  void convert_to_moe(index_t num_experts, std::mt19937_64& rng, index_t top_k = 1, bool per_token = false) {
    if (moe) return;
    auto m = moe::MoELayerNorm<T, D>::from_layernorm(ln.weight, ln.bias, num_experts, rng);
    m.eps = double(ln.eps);
    m.top_k = top_k;
    m.per_token = per_token;
    moe = std::make_shared<moe::MoELayerNorm<T, D>>(std::move(m));
  }

  /// x [B, T, D] -> same shape type. The MoE path routes per sample from the token mean of x.
  template <class S>
  Tensor<T, S, D> forward(const Tensor<T, S, D>& x) const {
    if (!moe) return ln(x);
    static_assert(S::rank == 3, "ViTNorm: a MoE-LayerNorm needs x as [B, T, D]");
    return moe->forward(Tensor<T, DynShape<3>, D>(x)).template as<S>("ViTNorm");
  }
  /// A converted, sample-routed slot applied to some tokens x [B, T', D] with the routing read from
  /// `token_mean` [B, D], the mean over ALL the input's tokens (which the caller computed without
  /// materialising them); see moe::MoELayerNorm::forward_routed.
  Tensor<T, DynShape<3>, D> forward_routed(const Tensor<T, DynShape<3>, D>& x,
                                           const Tensor<T, DynShape<2>, D>& token_mean) const {
    if (!moe) throw std::logic_error("ViTNorm::forward_routed: not a MoE-LayerNorm");
    return moe->forward_routed(x, token_mean);
  }
  template <class S>
  Tensor<T, S, D> operator()(const Tensor<T, S, D>& x) const {
    return forward(x);
  }

  template <class V>
  void visit_parameters(V& v) {
    if (moe) {
      moe->visit_parameters(v);
    } else {
      v("weight", ln.weight);
      v("bias", ln.bias);
    }
  }
};

}  // namespace ttmoe::models
