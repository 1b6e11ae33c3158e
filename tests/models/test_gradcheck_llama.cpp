// Gradient checks of the Llama-family pieces added for issue 14: RoPE with llama3-scaled frequencies,
// LlamaAttention in its general form (q/k/v biases as in Qwen2, head_dim != dim / heads, an o_proj
// bias as with Llama's attention_bias) and a whole decoder layer (pre-norm attention and SwiGLU MLP
// whose down projection adds the residual as it stores), every weight a harness input; and nn::Linear
// with an unmerged low-rank (LoRA) update, the path PEFT adapters take; and the LoRA training loss
// (training/llama_lora.hpp) of a whole tiny causal LM with respect to the factors only.

#include <gradcheck.hpp>

#include "ttmoe/models/llama.hpp"
#include "ttmoe/training/llama_lora.hpp"

using namespace ttmoe;
using namespace ttmoe::gradcheck;

namespace {

const nn::RopeScaling kLlama3{nn::RopeScaling::Type::llama3, 8.0, 1.0, 4.0, 16};

/// x [B, T, d] plus q/k/v/o weights and biases for `heads` query heads, `kv` kv heads of width hd.
Shapes attention_shapes(Rng& r, index_t heads, index_t kv, index_t hd) {
  const index_t d = r.ext(2, 5);
  return {{r.ext(1, 2), r.ext(1, 4), d}, {heads * hd, d}, {heads * hd}, {kv * hd, d}, {kv * hd},
          {kv * hd, d},                   {kv * hd},       {d, heads * hd}, {d}};
}

/// Fills `a` from inputs [first, first + 9) laid out as attention_shapes.
void set_attention(nn::LlamaAttention<double>& a, const Inputs& in, std::size_t first, index_t heads, index_t kv,
                   index_t hd, bool o_bias) {
  a.num_heads = heads;
  a.num_kv_heads = kv;
  a.head_dim = hd;
  a.inv_freq = nn::rope_inv_freq(hd, 500.0, kLlama3);
  a.q_proj.weight = in.get<2>(first + 1);
  a.q_proj.bias = in.get<1>(first + 2);
  a.k_proj.weight = in.get<2>(first + 3);
  a.k_proj.bias = in.get<1>(first + 4);
  a.v_proj.weight = in.get<2>(first + 5);
  a.v_proj.bias = in.get<1>(first + 6);
  a.o_proj.weight = in.get<2>(first + 7);
  if (o_bias) a.o_proj.bias = in.get<1>(first + 8);
}

IndexTensor<DynShape<2>> positions(const Inputs& in, index_t b, index_t t) {
  auto rng = in.rng(13);
  return random_indices<2>(rng, {b, t}, 40);  // past original_max_position_embeddings / high_freq_factor
}

}  // namespace

GRADCHECK_CASE("rope_llama3") {
  // The scaled frequencies are constants: the gradient is rotate-by-minus-angle of the seed, but the
  // angles differ from plain RoPE in all three bands (kept, interpolated, divided by factor).
  return Case().variant(
      "x [B,H,T,hd], hd up to 12, positions [B,T] in [0,40)",
      [](Rng& r) { return Shapes{{r.ext(1, 2), r.ext(1, 3), r.ext(1, 4), 2 * r.ext(2, 6)}}; },
      [](const Inputs& in) -> Output {
        auto x = in.get<4>(0);
        auto [c, s] = nn::rope_cos_sin<double>(positions(in, x.extent(0), x.extent(2)),
                                               nn::rope_inv_freq(x.extent(3), 500.0, kLlama3));
        return nn::apply_rope(x, c, s);
      });
}

GRADCHECK_CASE("llama_attention_general") {
  auto f = [](index_t heads, index_t kv, index_t hd, bool o_bias) {
    return [=](const Inputs& in) -> Output {
      nn::LlamaAttention<double> a;
      set_attention(a, in, 0, heads, kv, hd, o_bias);
      auto x = in.get<3>(0);
      return a(x, positions(in, x.extent(0), x.extent(1)));
    };
  };
  return Case()
      .variant("Qwen2: q/k/v biases, 4 heads, 2 kv, hd 4 (!= d / heads), llama3 rope",
               [](Rng& r) { return attention_shapes(r, 4, 2, 4); }, f(4, 2, 4, false))
      .variant("Llama attention_bias: all four biases, 2 heads, 1 kv, hd 2",
               [](Rng& r) { return attention_shapes(r, 2, 1, 2); }, f(2, 1, 2, true));
}

GRADCHECK_CASE("llama_decoder_layer") {
  // x, two RMSNorm weights, attention (9), gate / up / down weights.
  auto shapes = [](Rng& r) {
    Shapes s = attention_shapes(r, 2, 1, 2);
    const index_t d = s[0][2], h = r.ext(1, 4);
    s.push_back({d});
    s.push_back({d});
    s.push_back({h, d});
    s.push_back({h, d});
    s.push_back({d, h});
    return s;
  };
  return Case().variant("pre-norm GQA attention + SwiGLU, both residuals", shapes, [](const Inputs& in) -> Output {
    models::LlamaDecoderLayer<double> layer;
    set_attention(layer.self_attn, in, 0, 2, 1, 2, false);
    layer.input_layernorm.weight = in.get<1>(9);
    layer.post_attention_layernorm.weight = in.get<1>(10);
    layer.mlp.gate_proj.weight = in.get<2>(11);
    layer.mlp.up_proj.weight = in.get<2>(12);
    layer.mlp.down_proj.weight = in.get<2>(13);
    auto x = in.get<3>(0);
    auto pos = positions(in, x.extent(0), x.extent(1));
    return layer.block(Tensor<double, DynShape<3>>(x), [&](const auto& n) { return layer.self_attn(n, pos); });
  });
}

GRADCHECK_CASE("linear_low_rank_update") {
  // nn::Linear with an unmerged LoRA update (delta_A [R, in], delta_B [out, R], as PEFT adapters are
  // attached): y = [residual +] x W^T + b + (x delta_A^T) delta_B^T; gradients reach x, W, b, both
  // factors and the residual (LoRA training differentiates the factors).
  auto shapes = [](Rng& r) {
    const index_t in = r.ext(1, 5), out = r.ext(1, 5), R = r.ext(1, 3);
    return Shapes{{r.ext(1, 2), r.ext(1, 3), in}, {out, in}, {out}, {R, in}, {out, R}};
  };
  auto layer = [](const Inputs& in) {
    nn::Linear<double> l;
    l.weight = in.get<2>(1);
    l.bias = in.get<1>(2);
    l.delta_A = in.get<2>(3);
    l.delta_B = in.get<2>(4);
    return l;
  };
  return Case()
      .variant("x [B,T,in], rank 1..3", shapes,
               [=](const Inputs& in) -> Output { return layer(in)(in.get<3>(0)); })
      .variant("with a residual [B,T,out] added on the store",
               [=](Rng& r) {
                 Shapes s = shapes(r);
                 s.push_back({s[0][0], s[0][1], s[1][0]});
                 return s;
               },
               [=](const Inputs& in) -> Output { return layer(in)(in.get<3>(0), in.get<3>(5)); });
}

GRADCHECK_CASE("linear_group_shared_low_rank") {
  // nn::linear_group: layers on one x whose low-rank updates share x [A_1; ...; A_n]^T (one concat,
  // one linear, a narrow per layer). The ranks differ, so a wrong offset into the stacked product
  // shows; the output is the layers' outputs side by side. Gradients reach x, every weight and bias
  // and every factor. Inputs: x, then per layer W [out, in], b [out], A [r, in], B [out, r].
  auto shapes = [](std::size_t layers) {
    return [layers](Rng& r) {
      const index_t in = r.ext(1, 5);
      Shapes s{{r.ext(1, 2), r.ext(1, 3), in}};
      for (std::size_t i = 0; i < layers; ++i) {
        const index_t out = r.ext(1, 4), rank = index_t(i) + 1;
        s.push_back({out, in});
        s.push_back({out});
        s.push_back({rank, in});
        s.push_back({out, rank});
      }
      return s;
    };
  };
  auto layer = [](const Inputs& in, std::size_t i) {
    nn::Linear<double> l;
    l.weight = in.get<2>(1 + 4 * i);
    l.bias = in.get<1>(2 + 4 * i);
    l.delta_A = in.get<2>(3 + 4 * i);
    l.delta_B = in.get<2>(4 + 4 * i);
    return l;
  };
  return Case()
      .variant("q | k | v: three layers, ranks 1, 2, 3", shapes(3),
               [=](const Inputs& in) -> Output {
                 const auto q = layer(in, 0), k = layer(in, 1), v = layer(in, 2);
                 auto [yq, yk, yv] = nn::linear_group(in.get<3>(0), std::array<const nn::Linear<double>*, 3>{&q, &k, &v});
                 return concat<-1>(std::vector<Tensor<double, DynShape<3>>>{yq, yk, yv});
               })
      .variant("gate | up: two layers, ranks 1, 2", shapes(2), [=](const Inputs& in) -> Output {
        const auto g = layer(in, 0), u = layer(in, 1);
        auto [yg, yu] = nn::linear_group(in.get<3>(0), std::array<const nn::Linear<double>*, 2>{&g, &u});
        return concat<-1>(std::vector<Tensor<double, DynShape<3>>>{yg, yu});
      });
}

GRADCHECK_CASE("lora_causal_lm_loss") {
  // The masked, shifted cross-entropy of a 1-layer causal LM (base frozen) as a function of LoRA
  // factors, bound as train_lora binds them (delta_A = A, delta_B = s B). Inputs: A [r, in] and
  // B [out, r] of each adapted module in `modules` order (hidden 8, q 8 wide, k / v 4, MLP 12).
  struct Module {
    const char* name;
    index_t in, out;
    double scaling;
  };
  auto shapes = [](std::vector<Module> modules, bool rank_per_module) {
    return [=](Rng& r) {
      Shapes s;
      const index_t rank = r.ext(1, 3);
      for (const auto& m : modules) {
        const index_t rk = rank_per_module ? r.ext(1, 3) : rank;
        s.push_back({rk, m.in});
        s.push_back({m.out, rk});
      }
      return s;
    };
  };
  auto loss = [](std::vector<Module> modules) {
    return [=](const Inputs& in) -> Output {
      models::LlamaConfig c;
      c.vocab_size = 13;
      c.hidden_size = 8;
      c.intermediate_size = 12;
      c.num_hidden_layers = 1;
      c.num_attention_heads = 2;
      c.num_key_value_heads = 1;
      c.head_dim = 4;
      c.max_position_embeddings = 16;
      models::LlamaForCausalLM<double> m(c, 5);
      models::PeftAdapter<double> a;
      for (std::size_t i = 0; i < modules.size(); ++i) {
        auto& f = a.modules[std::string("model.layers.0.") + modules[i].name];
        f.lora_A.weight = in.get<2>(2 * i);
        f.lora_B.weight = in.get<2>(2 * i + 1);
        f.scaling = modules[i].scaling;
      }
      training::LoraTrainingAttachment<double, cpu> attach(m, a);
      attach.bind();
      const auto batch = models::CausalLMBatch<>::from_rows({{1, 7, 3, 12, 5}, {4, 9, 2}}, {2, 1}, 0);
      return models::causal_lm_loss(m, batch);
    };
  };
  const std::vector<Module> two{{"self_attn.q_proj", 8, 8, 1.5}, {"mlp.down_proj", 12, 8, 0.5}};
  // All seven: q | k | v and gate | up share their low-rank product with the input (nn/linear_group.hpp).
  const std::vector<Module> seven{{"self_attn.q_proj", 8, 8, 1.5}, {"self_attn.k_proj", 8, 4, 0.75},
                                  {"self_attn.v_proj", 8, 4, 2.0}, {"self_attn.o_proj", 8, 8, 1.0},
                                  {"mlp.gate_proj", 8, 12, 0.5},   {"mlp.up_proj", 8, 12, 1.25},
                                  {"mlp.down_proj", 12, 8, 0.5}};
  return Case()
      .variant("q and down, rank 1..3, prompt and padding masked", shapes(two, false), loss(two))
      .variant("all seven projections, a rank 1..3 per module (shared-input groups)", shapes(seven, true), loss(seven));
}
