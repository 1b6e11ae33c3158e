#pragma once
// timm-layout VisionTransformer (ViT-B/16 and friends): patch embedding, class token + learned
// position embedding, pre-norm blocks `x = x + attn(norm1(x)); x = x + mlp(norm2(x))`, final norm,
// class-token pooling, linear head. Parameter names are timm's, so a timm state dict loads with the
// identity name map (io/checkpoint_names.hpp maps torchvision's vit_b_16 onto them).
//
// The activation's shape type is a template parameter of the block loop: the ViT-B/16 entry point
// runs it as Shape<dyn, 197, 768> (batch the only dynamic extent; `.as<>` checks at block
// boundaries), any other configuration as DynShape<3>.
//
// MoETTA hook: every LayerNorm is a ViTNorm; convert_to_moe_layernorm() turns those with index >=
// first_index (module order: blocks.i.norm1 = 2i, blocks.i.norm2 = 2i+1, norm = 2*depth) into
// MoE-LayerNorms and moe_layers() / balance_loss() expose them.

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/models/vit_config.hpp"
#include "ttmoe/models/vit_norm.hpp"
#include "ttmoe/nn/attention.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/nn/mlp.hpp"
#include "ttmoe/nn/module.hpp"
#include "ttmoe/nn/patch_embed.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::models {

/// One pre-norm transformer block (timm `Block`, no layer scale, no drop path: eval / TTA use).
template <class T = float, class D = cpu>
struct ViTBlock {
  ViTNorm<T, D> norm1;
  nn::Attention<T, D> attn;
  ViTNorm<T, D> norm2;
  nn::Mlp<T, D> mlp;

  ViTBlock() = default;
  ViTBlock(const ViTConfig& c, std::uint64_t seed)
      : norm1(c.embed_dim, T(c.eps)),
        attn(c.embed_dim, c.num_heads, seed),
        norm2(c.embed_dim, T(c.eps)),
        mlp(c.embed_dim, c.mlp_hidden, nn::Activation::gelu, seed + 2) {}

  /// x [B, T, D] -> same shape type.
  template <class ST>
  Tensor<T, ST, D> forward(const Tensor<T, ST, D>& x) const {
    // Each residual add rides on the store of the GEMM that closes its branch (ops/linear.hpp,
    // ops/mlp.hpp): no pass of its own forward, no gradient copy backward.
    Tensor<T, ST, D> h = attn(norm1(x), x).template as<ST>("ViTBlock attn");
    return mlp(norm2(h), h).template as<ST>("ViTBlock mlp");
  }

  /// The class token's output only, x [B, T, D] -> [B, 1, D], for a block whose norm2 is a plain
  /// LayerNorm (a MoE one routes from the mean over all tokens). Keys and values come from every
  /// token, but the output projection, norm2 and the MLP are per token, so they run on the class
  /// token alone: the same values as forward(x)'s row 0 (what the head reads of the last block).
  template <class ST>
  Tensor<T, DynShape<3>, D> forward_class_token(const Tensor<T, ST, D>& x) const {
    if (norm2.is_moe()) throw std::logic_error("ViTBlock::forward_class_token: norm2 is a MoE-LayerNorm");
    const Tensor<T, DynShape<3>, D> x0 = narrow<1>(x, 0, 1);
    const Tensor<T, DynShape<3>, D> a0 = narrow<1>(attn.heads(norm1(x)), 0, 1);
    Tensor<T, DynShape<3>, D> h0 = attn.proj(a0, x0);
    return mlp(norm2(h0), h0);
  }

  /// What a last block must hand a sample-routed final MoE-LayerNorm: x [B, T, D] -> [B, 2, D],
  /// row 0 the class token's output (normalised for the head), row 1 the mean over tokens of the
  /// output (the router's input). The MLP's second layer is linear, so the token mean of
  /// h + fc2(g) + b is mean(h) + fc2(mean(g)) + b: fc2 runs on 2 rows instead of T; everything
  /// before it (attention, norm2, fc1 and the activation) still runs on every token.
  template <class ST>
  Tensor<T, DynShape<3>, D> forward_class_token_and_mean(const Tensor<T, ST, D>& x) const {
    const Tensor<T, DynShape<3>, D> h = attn(norm1(x), x);
    const index_t B = h.extent(0), Dm = h.extent(2), H = mlp.fc1.weight.extent(0);
    const Tensor<T, DynShape<3>, D> g = nn::activate(mlp.act, mlp.fc1(norm2(h)));
    using T2 = Tensor<T, DynShape<2>, D>;
    using T3 = Tensor<T, DynShape<3>, D>;
    const T3 g2 = concat<1>(std::vector<T3>{narrow<1>(g, 0, 1), T2(mean<1>(g)).reshape(DynShape<3>(B, 1, H))});
    const T3 h2 = concat<1>(std::vector<T3>{narrow<1>(h, 0, 1), T2(mean<1>(h)).reshape(DynShape<3>(B, 1, Dm))});
    return mlp.fc2(g2, h2);
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("norm1", norm1);
    v.sub("attn", attn);
    v.sub("norm2", norm2);
    v.sub("mlp", mlp);
  }
};

/// timm VisionTransformer with class-token pooling. Copies are shallow (share parameters).
template <class T = float, class D = cpu>
struct VisionTransformer {
  ViTConfig config;
  Tensor<T, DynShape<3>, D> cls_token;  ///< [1, 1, D]
  Tensor<T, DynShape<3>, D> pos_embed;  ///< [1, N + 1, D] (includes the class token's position)
  nn::PatchEmbed<T, D> patch_embed;
  std::vector<ViTBlock<T, D>> blocks;
  ViTNorm<T, D> norm;
  nn::Linear<T, D> head;

  VisionTransformer() = default;
  /// Random initialisation (seeded; torch-style Kaiming-uniform Linear/Conv, N(0, 0.02) for the
  /// class token and position embedding). Meant for tests and benchmarks; real use loads a checkpoint.
  explicit VisionTransformer(const ViTConfig& c, std::uint64_t seed = 0) : config(c) {
    c.validate();
    const index_t Dm = c.embed_dim;
    cls_token = normal(DynShape<3>(1, 1, Dm), seed ^ 0xC15ull);
    pos_embed = normal(DynShape<3>(1, c.num_tokens(), Dm), seed ^ 0x905ull);
    patch_embed = nn::PatchEmbed<T, D>(c.in_chans, Dm, c.patch_size, seed + 1);
    blocks.reserve(std::size_t(c.depth));
    for (index_t i = 0; i < c.depth; ++i) blocks.emplace_back(c, seed + 1000 * std::uint64_t(i + 1));
    norm = ViTNorm<T, D>(Dm, T(c.eps));
    head = nn::Linear<T, D>(Dm, c.num_classes, true, seed + 7);
  }

  // ---- forward ------------------------------------------------------------------------------

  /// images [B, C, H, W] -> logits [B, num_classes]; activations typed DynShape<3>.
  template <class S>
  Tensor<T, DynShape<2>, D> forward(const Tensor<T, S, D>& images) const {
    return run<DynShape<3>>(images);
  }
  /// ViT-B/16 entry: [B, 3, 224, 224] -> [B, 1000] with activations typed Shape<dyn, 197, 768>
  /// (when the config has those extents; another 224x224 / 1000-class config runs dynamically).
  Tensor<T, vit_b16_shapes::logits, D> forward(const Tensor<T, vit_b16_shapes::images, D>& images) const {
    const bool b16 = config.embed_dim == 768 && config.num_tokens() == 197;
    auto logits = b16 ? run<vit_b16_shapes::tokens>(images) : run<DynShape<3>>(images);
    return logits.template as<vit_b16_shapes::logits>("VisionTransformer::forward (ViT-B/16 entry)");
  }
  template <class S>
  auto operator()(const Tensor<T, S, D>& images) const {
    return forward(images);
  }

  /// Token embedding: patches, class token prepended, position embedding added -> [B, N + 1, D].
  template <class S>
  Tensor<T, DynShape<3>, D> embed(const Tensor<T, S, D>& images) const {
    const index_t B = images.extent(0), Dm = config.embed_dim;
    Tensor<T, DynShape<3>, D> patches = patch_embed(images);
    // Broadcast-add onto zeros expands the class token to the batch and sums its gradient back.
    Tensor<T, DynShape<3>, D> cls = cls_token + Tensor<T, DynShape<3>, D>::zeros(DynShape<3>(B, 1, Dm));
    auto tokens = concat<1>(std::vector<Tensor<T, DynShape<3>, D>>{cls, patches});
    if (tokens.extent(1) != pos_embed.extent(1))
      throw ShapeError("VisionTransformer: " + std::to_string(tokens.extent(1)) + " tokens but pos_embed " +
                       pos_embed.shape().to_string() + " (image size differs from the config?)");
    return tokens + pos_embed;
  }

  /// The block loop with activation shape type ST, then final norm, class-token pooling and head.
  template <class ST, class S>
  Tensor<T, DynShape<2>, D> run(const Tensor<T, S, D>& images) const {
    static_assert(S::rank == 4, "VisionTransformer: images are [B, C, H, W]");
    const index_t B = images.extent(0), Dm = config.embed_dim;
    Tensor<T, ST, D> x = embed(images).template as<ST>("VisionTransformer tokens");
    for (std::size_t i = 0; i + 1 < blocks.size(); ++i) x = blocks[i].forward(x);
    return head(last_block_class_token(x).reshape(DynShape<2>(B, Dm)));
  }

  /// The last block and the final norm, computing only what the head reads: the normalised class
  /// token [B, 1, D]. Which shortcut applies depends on the final norm (see the ViTBlock methods):
  ///  * plain final norm and plain last norm2 (a plain model, Tent, EATA, SAR): everything after
  ///    the attention core runs on the class token alone;
  ///  * sample-routed MoE final norm (MoETTA): the last MLP's fc2 runs on the class token and the
  ///    token mean (the router's input), and only the class token is normalised;
  ///  * otherwise (per-token routing, whose balance loss reads every token): every token.
  template <class ST>
  Tensor<T, DynShape<3>, D> last_block_class_token(const Tensor<T, ST, D>& x) const {
    using T3 = Tensor<T, DynShape<3>, D>;
    if (blocks.empty()) return norm.is_moe() ? T3(narrow<1>(norm(x), 0, 1)) : norm(T3(narrow<1>(x, 0, 1)));
    const auto& last = blocks.back();
    if (!norm.is_moe() && !last.norm2.is_moe()) return norm(last.forward_class_token(x));
    if (norm.is_moe() && !norm.moe->per_token) {
      const T3 y2 = last.forward_class_token_and_mean(x);
      const index_t B = y2.extent(0), Dm = y2.extent(2);
      return norm.forward_routed(T3(narrow<1>(y2, 0, 1)), T3(narrow<1>(y2, 1, 1)).reshape(DynShape<2>(B, Dm)));
    }
    const T3 y = last.forward(x);
    return norm.is_moe() ? T3(narrow<1>(norm(y), 0, 1)) : norm(T3(narrow<1>(y, 0, 1)));
  }

  // ---- MoETTA hook --------------------------------------------------------------------------

  /// Number of LayerNorms (2 * depth + 1).
  index_t num_layernorms() const { return 2 * index_t(blocks.size()) + 1; }
  /// LayerNorm slot `k` in module order (blocks.i.norm1 = 2i, blocks.i.norm2 = 2i+1, norm = 2*depth).
  ViTNorm<T, D>& layernorm(index_t k) {
    if (k >= num_layernorms()) throw std::out_of_range("VisionTransformer::layernorm: index out of range");
    if (k == 2 * index_t(blocks.size())) return norm;
    return k % 2 ? blocks[std::size_t(k / 2)].norm2 : blocks[std::size_t(k / 2)].norm1;
  }
  const ViTNorm<T, D>& layernorm(index_t k) const { return const_cast<VisionTransformer*>(this)->layernorm(k); }
  /// Dotted module name of LayerNorm slot `k` ("blocks.3.norm2", "norm").
  std::string layernorm_name(index_t k) const {
    if (k == 2 * index_t(blocks.size())) return "norm";
    return "blocks." + std::to_string(k / 2) + (k % 2 ? ".norm2" : ".norm1");
  }

  /// MoETTA: converts every LayerNorm with index >= first_index into a MoE-LayerNorm with
  /// `num_experts` zero-delta experts (routers drawn in module order from one generator seeded with
  /// `seed`); the others are untouched. Returns the MoE layers (see moe_layers()).
  std::vector<moe::MoELayerNorm<T, D>*> convert_to_moe_layernorm(index_t num_experts, index_t first_index = 1,
                                                                 std::uint64_t seed = 0, index_t top_k = 1,
                                                                 bool per_token = false) {
    std::mt19937_64 rng(seed);
    for (index_t k = first_index; k < num_layernorms(); ++k)
      layernorm(k).convert_to_moe(num_experts, rng, top_k, per_token);
    return moe_layers();
  }

  /// All MoE-LayerNorms in module order (for the balance loss and expert heat maps).
  std::vector<moe::MoELayerNorm<T, D>*> moe_layers() const {
    std::vector<moe::MoELayerNorm<T, D>*> out;
    for (index_t k = 0; k < num_layernorms(); ++k)
      if (layernorm(k).is_moe()) out.push_back(layernorm(k).moe.get());
    return out;
  }
  /// LayerNorm indices that are MoE, in module order (parallel to moe_layers()).
  std::vector<index_t> moe_layer_indices() const {
    std::vector<index_t> out;
    for (index_t k = 0; k < num_layernorms(); ++k)
      if (layernorm(k).is_moe()) out.push_back(k);
    return out;
  }

  /// MoETTA load-balancing loss: the SUM over MoE layers of each layer's balance loss for the last
  /// forward (differentiable through the routers). Throws if nothing is converted.
  Tensor<T, Shape<>, D> balance_loss() const {
    auto layers = moe_layers();
    if (layers.empty()) throw std::logic_error("VisionTransformer::balance_loss: no MoE-LayerNorm layers");
    Tensor<T, Shape<>, D> total = layers[0]->balance_loss();
    for (std::size_t i = 1; i < layers.size(); ++i) total = total + layers[i]->balance_loss();
    return total;
  }

  template <class V>
  void visit_parameters(V& v) {
    v("cls_token", cls_token);
    v("pos_embed", pos_embed);
    v.sub("patch_embed", patch_embed);
    for (std::size_t i = 0; i < blocks.size(); ++i) v.sub("blocks." + std::to_string(i), blocks[i]);
    v.sub("norm", norm);
    v.sub("head", head);
  }

 private:
  static Tensor<T, DynShape<3>, D> normal(DynShape<3> shape, std::uint64_t seed) {
    Tensor<T, DynShape<3>, D> t(shape);
    nn::normal_(t, 0.02, seed);
    t.set_requires_grad();
    return t;
  }
};

}  // namespace ttmoe::models
