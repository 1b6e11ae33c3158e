#pragma once
// GMoE vision transformer: a timm ViT (vit.hpp) whose chosen blocks carry a GMoE MoE-FFN
// (moe/moe_ffn.hpp with the cosine router) in place of the dense MLP:
//   h = x + drop_path(attn(norm1(x)));   x = h + drop_path(ffn(norm2(h)))
// with ffn the dense MLP or the MoE-FFN over all B * T tokens of the batch (they compete for the
// experts' capacity together, as in Tutel). Each MoE-FFN starts as E copies of its block's dense MLP
// (upcycling, so a pretrained DeiT initialises every expert) and a fresh cosine router.
//
// Training (`training = true`): router noise N(0, 1) * gate_noise / E, expert dropout and drop-path
// are drawn from the model's seeded generator `rng`; evaluation uses none of them. The auxiliary
// loss of the last forward is aux_loss() = aux_weight * sum over MoE blocks of l_aux.
//
// Parameter names are timm's for the dense parts and `blocks.{i}.mlp.router.*`,
// `blocks.{i}.mlp.experts.{e}.fc{1,2}.*` for the MoE blocks; gmoe_checkpoint.hpp maps them onto the
// authors' (Tutel's) batched keys.

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/models/gmoe_config.hpp"
#include "ttmoe/models/vit.hpp"
#include "ttmoe/moe/moe_ffn.hpp"
#include "ttmoe/nn/drop_path_branch.hpp"
#include "ttmoe/nn/dropout.hpp"

namespace ttmoe::models {

/// ViT with MoE-FFN blocks (GMoE). Copies share parameters (tensors are shallow) but not routing state.
template <class T = float, class D = cpu>
struct GMoEVisionTransformer {
  using Tokens = Tensor<T, DynShape<3>, D>;
  using Noise = Tensor<T, DynShape<2>, D>;

  GMoEConfig config;
  /// Embedding, attention, norms, head and the dense MLPs; the MLPs of MoE blocks are left empty
  /// (undefined tensors, so they are neither visited nor saved).
  VisionTransformer<T, D> vit;
  std::vector<std::optional<moe::GMoEFFN<T, D>>> moe;  ///< per block; set for the MoE blocks
  bool training = false;  ///< noise, expert dropout and drop-path on
  nn::Rng rng{0};         ///< the training randomness (seeded by the constructors)

  GMoEVisionTransformer() = default;

  /// Random initialisation (tests, training from scratch): a seeded ViT, then upcycled.
  explicit GMoEVisionTransformer(const GMoEConfig& c, std::uint64_t seed = 0)
      : GMoEVisionTransformer(from_vit(VisionTransformer<T, D>(c.vit, seed), c, seed)) {}

  /// GMoE from a (pretrained) dense ViT: every block in c.moe_blocks gets E deep copies of its MLP and
  /// a fresh cosine router (projection U(+-1/sqrt(dim)), codebook N(0, 0.01), temperature ln 2), drawn
  /// in block order from a generator seeded with `seed`. c.vit is replaced by the ViT's own config.
  static GMoEVisionTransformer from_vit(VisionTransformer<T, D> dense, GMoEConfig c, std::uint64_t seed = 0) {
    c.vit = dense.config;
    c.validate();
    GMoEVisionTransformer g;
    g.config = c;
    g.vit = std::move(dense);
    g.rng.seed(seed ^ 0x6d6f65ull);
    g.moe.resize(std::size_t(c.vit.depth));
    std::mt19937_64 init_rng(seed);
    for (index_t i = 0; i < c.vit.depth; ++i) {
      if (!c.is_moe_block(i)) continue;
      auto& block = g.vit.blocks[std::size_t(i)];
      auto router = moe::CosineRouter<T, D>::init(c.vit.embed_dim, c.router_dim, c.num_experts, init_rng);
      router.top_k = c.top_k;
      router.renormalize = c.renormalize;
      router.gate_noise = c.gate_noise;
      auto layer = moe::GMoEFFN<T, D>::from_dense(block.mlp, std::move(router), c.capacity_factor);
      layer.expert_dropout = c.expert_dropout;
      g.moe[std::size_t(i)] = std::move(layer);
      block.mlp = nn::Mlp<T, D>{};  // the experts own the weights now
    }
    return g;
  }

  /// Whether block i carries an MoE-FFN.
  bool is_moe_block(index_t i) const { return moe[std::size_t(i)].has_value(); }

  /// The MoE-FFNs in block order.
  std::vector<moe::GMoEFFN<T, D>*> moe_layers() {
    std::vector<moe::GMoEFFN<T, D>*> out;
    for (auto& m : moe)
      if (m) out.push_back(&*m);
    return out;
  }

  /// images [B, C, H, W] -> logits [B, num_classes]. `noise` is empty (drawn from rng when training,
  /// none in evaluation) or one standard-normal [B * tokens, E] tensor per MoE block in block order
  /// (a fixed noise for reproducible tests; used in training and evaluation alike).
  template <class S>
  Tensor<T, DynShape<2>, D> forward(const Tensor<T, S, D>& images, const std::vector<Noise>& noise = {}) {
    const auto layers = moe_layers();
    if (!noise.empty() && noise.size() != layers.size())
      throw ValueError("GMoEVisionTransformer: " + std::to_string(noise.size()) + " noise tensors for " +
                       std::to_string(layers.size()) + " MoE blocks");
    const index_t B = images.extent(0), Dm = config.vit.embed_dim;
    Tokens x = vit.embed(images);
    const index_t N = B * x.extent(1);
    // The head reads only the class token: a dense last block (GMoE's block 11) runs everything
    // after its attention core on that token alone (class_token_tail), ~6% of a GMoE-S/16 forward.
    const index_t depth = index_t(vit.blocks.size());
    const bool dense_last = depth > 0 && !is_moe_block(depth - 1);
    std::size_t m = 0;
    for (index_t i = 0; i < depth - index_t(dense_last); ++i) {
      const auto& b = vit.blocks[std::size_t(i)];
      const double dp = training ? config.drop_path_rate(i) : 0.0;
      if (!is_moe_block(i) && dp <= 0.0) {
        x = b.forward(x);  // the fused dense block (residuals on the GEMM stores)
        continue;
      }
      // Under drop-path the attention branch (and a dense block's MLP branch) runs on the kept
      // samples only (nn/drop_path_branch.hpp); the MoE-FFN sees every sample, since all tokens of
      // the batch compete for its capacity, and is masked afterwards as timm does.
      Tokens h = dp > 0.0 ? nn::residual_drop_path(x, dp, true, rng, [&](const Tokens& s) { return b.attn(b.norm1(s)); })
                          : Tokens(b.attn(b.norm1(x), x));
      if (!is_moe_block(i)) {
        x = nn::residual_drop_path(h, dp, true, rng, [&](const Tokens& s) { return b.mlp(b.norm2(s)); });
        continue;
      }
      auto& layer = *moe[std::size_t(i)];
      Noise z;
      if (!noise.empty()) z = noise[m];
      else if (training && config.gate_noise > 0) z = moe::draw_router_noise<T, D>(N, layer.num_experts(), rng);
      if (dp <= 0.0) {  // the skip connection added inside the MoE's combine pass
        x = layer.forward(b.norm2(h), z, training ? &rng : nullptr, h);
      } else {
        const Tokens f = layer.forward(b.norm2(h), z, &rng);
        x = h + nn::drop_path(f, dp, training, rng);
      }
      ++m;
    }
    // LayerNorm is per token: normalising only the class token gives the same logits.
    Tokens cls = dense_last ? class_token_tail(x) : vit.norm(Tokens(narrow<1>(x, 0, 1)));
    return vit.head(cls.reshape(DynShape<2>(B, Dm)));
  }

  /// The dense last block and the final norm on the class token only: x [B, T, D] (the last block's
  /// input) -> the normalised class token [B, 1, D], equal to row 0 of norm(block(x)). Keys and values
  /// need every token; the output projection, norm2, the MLP, the residuals and the final norm are
  /// per token. Drop-path masks are per sample ([B, 1, 1]), so they draw what the full block draws.
  Tokens class_token_tail(const Tokens& x) {
    const auto& b = vit.blocks.back();
    const double dp = training ? config.drop_path_rate(index_t(vit.blocks.size()) - 1) : 0.0;
    if (dp <= 0.0) return vit.last_block_class_token(x);
    const Tokens x0 = narrow<1>(x, 0, 1);
    const Tokens a0 = narrow<1>(b.attn.heads(b.norm1(x)), 0, 1);
    const Tokens h0 = x0 + nn::drop_path(b.attn.proj(a0), dp, true, rng);
    return vit.norm(Tokens(h0 + nn::drop_path(b.mlp(b.norm2(h0)), dp, true, rng)));
  }
  template <class S>
  auto operator()(const Tensor<T, S, D>& images) {
    return forward(images);
  }

  /// aux_weight * sum over MoE blocks of l_aux (importance + load, Tutel's) of the last forward;
  /// add it to the task loss. Call within the forward's tape.
  Tensor<T, Shape<>, D> aux_loss() {
    auto layers = moe_layers();
    if (layers.empty()) throw ValueError("GMoEVisionTransformer::aux_loss: the model has no MoE block");
    Tensor<T, Shape<>, D> total = layers[0]->aux_losses().l_aux;
    for (std::size_t i = 1; i < layers.size(); ++i) total = total + layers[i]->aux_losses().l_aux;
    return total * T(config.aux_weight);
  }

  /// timm's names for the dense parts, then `blocks.{i}.mlp.*` of each MoE block.
  template <class V>
  void visit_parameters(V& v) {
    vit.visit_parameters(v);
    for (std::size_t i = 0; i < moe.size(); ++i)
      if (moe[i]) v.sub("blocks." + std::to_string(i) + ".mlp", *moe[i]);
  }
};

}  // namespace ttmoe::models
