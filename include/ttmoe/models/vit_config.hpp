#pragma once
// Hyper-parameters of a timm / torchvision VisionTransformer and the standard sizes. Plain data so
// a config can be built from checkpoint metadata as easily as from a factory.

#include <stdexcept>
#include <string>

#include "ttmoe/core/shape.hpp"

namespace ttmoe::models {

/// Architecture of a ViT (timm `VisionTransformer`, global class-token pooling, pre-norm blocks).
struct ViTConfig {
  index_t img_size = 224;    ///< square input side
  index_t patch_size = 16;   ///< square patch side (img_size % patch_size == 0)
  index_t in_chans = 3;
  index_t embed_dim = 768;
  index_t depth = 12;
  index_t num_heads = 12;
  index_t mlp_hidden = 3072;  ///< fc1 width (timm: embed_dim * mlp_ratio)
  index_t num_classes = 1000;
  double eps = 1e-6;          ///< LayerNorm eps (timm ViT and torchvision vit_b_16 both use 1e-6)
  bool class_token = true;    ///< prepend a class token and pool it (only mode implemented)

  /// Patches per image, (img / patch)^2.
  index_t num_patches() const { return (img_size / patch_size) * (img_size / patch_size); }
  /// Tokens per image including the class token.
  index_t num_tokens() const { return num_patches() + (class_token ? 1 : 0); }
  /// Number of LayerNorms in module order (norm1/norm2 per block + the final norm).
  index_t num_layernorms() const { return 2 * depth + 1; }

  /// Throws std::invalid_argument naming the first inconsistency.
  void validate() const {
    auto bad = [](const std::string& m) { throw std::invalid_argument("ViTConfig: " + m); };
    if (img_size <= 0 || patch_size <= 0 || img_size % patch_size) bad("img_size must be a positive multiple of patch_size");
    if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads) bad("num_heads must divide embed_dim");
    if (mlp_hidden <= 0 || num_classes <= 0 || in_chans <= 0) bad("non-positive size");
    if (!class_token) bad("class_token=false (global average pooling) is not implemented");
  }
};

/// Sets mlp_hidden = embed_dim * ratio (timm's mlp_ratio).
inline ViTConfig with_mlp_ratio(ViTConfig c, double ratio) {
  c.mlp_hidden = static_cast<index_t>(double(c.embed_dim) * ratio);
  return c;
}

/// ViT-Ti/16 (192, 12 blocks, 3 heads, MLP 768).
inline ViTConfig vit_tiny_patch16(index_t num_classes = 1000, index_t img_size = 224) {
  return {img_size, 16, 3, 192, 12, 3, 768, num_classes};
}
/// ViT-S/16 = DeiT-S (384, 12 blocks, 6 heads, MLP 1536).
inline ViTConfig vit_small_patch16(index_t num_classes = 1000, index_t img_size = 224) {
  return {img_size, 16, 3, 384, 12, 6, 1536, num_classes};
}
/// ViT-B/16 (768, 12 blocks, 12 heads, MLP 3072): timm vit_base_patch16_224, torchvision vit_b_16.
inline ViTConfig vit_base_patch16(index_t num_classes = 1000, index_t img_size = 224) {
  return {img_size, 16, 3, 768, 12, 12, 3072, num_classes};
}
/// ViT-L/16 (1024, 24 blocks, 16 heads, MLP 4096).
inline ViTConfig vit_large_patch16(index_t num_classes = 1000, index_t img_size = 224) {
  return {img_size, 16, 3, 1024, 24, 16, 4096, num_classes};
}
/// A small ViT for tests and small images (any img / patch; defaults match the tiny timm fixture).
inline ViTConfig vit_test_tiny(index_t img_size = 16, index_t patch_size = 4, index_t embed_dim = 32, index_t depth = 2,
                               index_t num_heads = 4, index_t mlp_hidden = 64, index_t num_classes = 10) {
  return {img_size, patch_size, 3, embed_dim, depth, num_heads, mlp_hidden, num_classes};
}

/// Static shape types of ViT-B/16 at 224x224 (only the batch is dynamic).
struct vit_b16_shapes {
  using images = Shape<dyn, 3, 224, 224>;
  using tokens = Shape<dyn, 197, 768>;
  using logits = Shape<dyn, 1000>;
};

}  // namespace ttmoe::models
