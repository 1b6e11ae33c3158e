#pragma once
// Hyper-parameters of a GMoE vision transformer (Li et al., "Sparse Mixture-of-Experts are Domain
// Generalizable Learners"): a ViT (vit_config.hpp) whose chosen blocks carry a cosine-routed MoE-FFN
// instead of the dense MLP. Defaults are the authors' code: MoE in blocks 8 and 10 of 12
// (moe_layers = ['F']*8 + ['S','F']*2), 6 experts, top-1 with the gate not renormalised, capacity
// factor 1.5, gate noise 1.0 (std 1/E), expert dropout 0.1, drop-path 0.1, aux-loss weight 0.01.

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/models/vit_config.hpp"

namespace ttmoe::models {

/// Architecture and training-time regularisation of a GMoE ViT.
struct GMoEConfig {
  ViTConfig vit = vit_small_patch16();
  std::vector<index_t> moe_blocks{8, 10};  ///< 0-based blocks whose MLP becomes an MoE-FFN
  index_t num_experts = 6;
  index_t router_dim = 256;        ///< the cosine router's projection size (Tutel: cosine_projector)
  index_t top_k = 1;               ///< the code routes top-1; the paper says top-2
  bool renormalize = false;        ///< divide the k gates by their sum (the code: no, for top-1)
  double capacity_factor = 1.5;    ///< C = k * int(cf * ceil(tokens / E)) over the whole batch
  double gate_noise = 1.0;         ///< training noise std = gate_noise / E, added to the router logits
  double expert_dropout = 0.1;     ///< Dropout after each expert's GELU, training only
  double drop_path = 0.1;          ///< stochastic depth of the last block (linear from 0, timm's rule)
  double aux_weight = 0.01;        ///< loss = CE + aux_weight * sum over MoE blocks of l_aux

  /// Whether block i carries an MoE-FFN.
  bool is_moe_block(index_t i) const { return std::find(moe_blocks.begin(), moe_blocks.end(), i) != moe_blocks.end(); }

  /// Drop-path rate of block i: drop_path * i / (depth - 1) (torch.linspace(0, drop_path, depth)).
  double drop_path_rate(index_t i) const {
    return vit.depth > 1 ? drop_path * double(i) / double(vit.depth - 1) : drop_path;
  }

  /// Throws std::invalid_argument naming the first inconsistency (the ViT's own checks included).
  void validate() const {
    vit.validate();
    auto bad = [](const std::string& m) { throw std::invalid_argument("GMoEConfig: " + m); };
    for (index_t b : moe_blocks)
      if (b >= vit.depth)  // index_t is unsigned: a negative block wraps and is caught here
        bad("MoE block " + std::to_string(b) + " is outside [0, " + std::to_string(vit.depth) + ")");
    if (num_experts < 1) bad("num_experts = " + std::to_string(num_experts) + " must be >= 1");
    if (top_k < 1 || top_k > num_experts)
      bad("top_k = " + std::to_string(top_k) + " must lie in [1, num_experts = " + std::to_string(num_experts) + "]");
    if (router_dim < 1) bad("router_dim = " + std::to_string(router_dim) + " must be >= 1");
    if (!(capacity_factor > 0)) bad("capacity_factor = " + std::to_string(capacity_factor) + " must be > 0");
    if (!(gate_noise >= 0)) bad("gate_noise = " + std::to_string(gate_noise) + " must be >= 0");
    if (!(expert_dropout >= 0 && expert_dropout < 1)) bad("expert_dropout must lie in [0, 1)");
    if (!(drop_path >= 0 && drop_path < 1)) bad("drop_path must lie in [0, 1)");
  }
};

/// GMoE-S/16: DeiT-S / ViT-S/16 (384 wide, 12 blocks, 6 heads, MLP 1536) with MoE in blocks 8 and 10.
inline GMoEConfig gmoe_small_patch16(index_t num_classes = 1000, index_t img_size = 224) {
  GMoEConfig c;
  c.vit = vit_small_patch16(num_classes, img_size);
  return c;
}

/// GMoE-B/16: ViT-B/16 (768 wide, 12 blocks, 12 heads, MLP 3072) with MoE in blocks 8 and 10.
inline GMoEConfig gmoe_base_patch16(index_t num_classes = 1000, index_t img_size = 224) {
  GMoEConfig c;
  c.vit = vit_base_patch16(num_classes, img_size);
  return c;
}

/// A small GMoE for tests and small images: vit_test_tiny's ViT (depth 5 by default) with MoE in
/// blocks depth-4 and depth-2 (GMoE's pattern: 8 and 10 of 12, a dense block last; depth >= 4),
/// 6 experts, router size 8.
inline GMoEConfig gmoe_test_tiny(index_t img_size = 16, index_t patch_size = 4, index_t embed_dim = 32,
                                 index_t depth = 5, index_t num_classes = 10) {
  GMoEConfig c;
  c.vit = vit_test_tiny(img_size, patch_size, embed_dim, depth, 4, 2 * embed_dim, num_classes);
  c.moe_blocks = {depth - 4, depth - 2};
  c.router_dim = 8;
  return c;
}

}  // namespace ttmoe::models
