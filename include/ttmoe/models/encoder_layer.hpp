#pragma once
// The post-LayerNorm transformer encoder layer shared by BERT and MPNet (inference only):
//   h = LayerNorm(x + O(attention(Q x, K x, V x)))      attention over packed sequences
//   y = LayerNorm(h + W2 GELU(W1 h + b1) + b2)          exact-erf GELU
// The two architectures differ only in their Hugging Face parameter names (BERT
// `attention.self.query` / `attention.output.dense` / `attention.output.LayerNorm`, MPNet
// `attention.attn.q` / `attention.attn.o` / `attention.LayerNorm`) and in MPNet's relative-position
// bias, which the caller passes in. q, k and v are loaded as the three Linears of the checkpoint and
// fused into one [3 width, width] projection by fuse() (one GEMM instead of three).

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ttmoe/expr/ops.hpp"
#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/nn/layernorm.hpp"
#include "ttmoe/nn/linear.hpp"
#include "ttmoe/nn/packed_attention.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/mlp.hpp"

namespace ttmoe::models {

/// Which checkpoint spelling an EncoderLayer's parameters use.
enum class EncoderNames { bert, mpnet };

/// Widths of an encoder layer.
struct EncoderLayerShape {
  index_t hidden = 0, heads = 1, intermediate = 0;
  double layer_norm_eps = 1e-12;
};

/// One post-LN encoder layer (HF BertLayer / MPNetLayer).
template <class T = float, class D = cpu>
struct EncoderLayer {
  EncoderNames names = EncoderNames::bert;
  index_t heads = 1;
  nn::Linear<T, D> query, key, value, attention_out, intermediate, output;
  nn::LayerNorm<T, D> attention_norm, output_norm;
  nn::Linear<T, D> qkv;  ///< query | key | value stacked by fuse(); not a checkpoint parameter

  EncoderLayer() = default;
  /// A randomly initialised layer (seeded) of the given widths.
  EncoderLayer(EncoderNames n, const EncoderLayerShape& s, std::uint64_t seed)
      : names(n), heads(s.heads), query(s.hidden, s.hidden, true, seed), key(s.hidden, s.hidden, true, seed + 1),
        value(s.hidden, s.hidden, true, seed + 2), attention_out(s.hidden, s.hidden, true, seed + 3),
        intermediate(s.hidden, s.intermediate, true, seed + 4), output(s.intermediate, s.hidden, true, seed + 5),
        attention_norm(s.hidden, T(s.layer_norm_eps)), output_norm(s.hidden, T(s.layer_norm_eps)) {
    if (s.hidden % s.heads) throw ShapeError("EncoderLayer: hidden size not divisible by the number of heads");
    fuse();
  }

  /// Rebuilds the fused q | k | v projection from query, key and value (after loading them).
  void fuse() {
    qkv.weight = concat<0>(std::vector<Tensor<T, DynShape<2>, D>>{query.weight, key.weight, value.weight});
    qkv.bias = concat<0>(std::vector<Tensor<T, DynShape<1>, D>>{query.bias, key.bias, value.bias});
  }

  /// x [N, hidden] (packed sequences `seqs`) -> [N, hidden]; `bias` as nn::packed_qkv_attention's.
  Tensor<T, DynShape<2>, D> forward(const Tensor<T, DynShape<2>, D>& x, const nn::PackedSequences& seqs,
                                    const Tensor<T, DynShape<3>, D>& bias = {}) const {
    const index_t hd = x.extent(1) / heads;
    const auto ctx = nn::packed_qkv_attention(qkv(x), heads, T(1.0 / std::sqrt(double(hd))), seqs, bias);
    const Tensor<T, DynShape<2>, D> h = attention_norm(attention_out(ctx, x));
    return output_norm(fused_mlp<op::gelu>(h, intermediate.weight, intermediate.bias, output.weight, output.bias, h));
  }

  template <class V>
  void visit_parameters(V& v) {
    if (names == EncoderNames::bert) {
      v.sub("attention.self.query", query);
      v.sub("attention.self.key", key);
      v.sub("attention.self.value", value);
      v.sub("attention.output.dense", attention_out);
      v.sub("attention.output.LayerNorm", attention_norm);
    } else {
      v.sub("attention.attn.q", query);
      v.sub("attention.attn.k", key);
      v.sub("attention.attn.v", value);
      v.sub("attention.attn.o", attention_out);
      v.sub("attention.LayerNorm", attention_norm);
    }
    v.sub("intermediate.dense", intermediate);
    v.sub("output.dense", output);
    v.sub("output.LayerNorm", output_norm);
  }
};

namespace detail {
/// Loads the weights of the HF folder `dir` (model.safetensors, HF key names) into the encoder `m`
/// through nn::load_state, so every missing, unknown or mis-shaped tensor comes in ONE
/// nn::CheckpointError; then re-fuses each layer's q | k | v and freezes the parameters (inference).
/// The pooler (BertModel's / MPNetModel's `pooler.*`, unused by mean pooling) and the stored
/// `embeddings.position_ids` buffer are not parameters here and are allowed in the file.
template <class M>
void load_encoder_state(M& m, const std::filesystem::path& dir) {
  const auto file = dir / "model.safetensors";
  if (!std::filesystem::exists(file))
    throw io::SafetensorsError(io::ErrorKind::Io, file.string(), "no model.safetensors in the encoder folder");
  nn::LoadOptions opt;
  opt.ignore_keys = {"pooler.*", "embeddings.position_ids"};
  nn::load_state(m, io::SafetensorsFile(file), io::timm_names(), opt);
  for (auto& layer : m.layers) layer.fuse();
  nn::freeze(m);
}
}  // namespace detail

}  // namespace ttmoe::models
