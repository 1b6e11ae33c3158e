#pragma once
// Device-generic parity cases for the layers, the papers' components and the ViT + MoETTA pipeline:
// each computes outputs and gradients on device D. The thrust suite runs them on `cpu` and
// `thrust_host`; tests/cuda runs them on `cuda` (nvcc TU) and `cpu` (host TU). The CPU results are
// themselves checked against PyTorch and finite differences elsewhere, so agreement here carries
// those checks over to the other backends. No Eigen, no fmt, no Catch (nvcc-safe).
//
// finite_difference_cases<D>() checks gradients against central differences on D itself (double),
// so a backend's VJP kernels are also tested without reference to the CPU.

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cases.hpp"
#include "ttmoe/models/llama.hpp"
#include "ttmoe/models/vit.hpp"
#include "ttmoe/moe/aux_losses.hpp"
#include "ttmoe/moe/cosine_router.hpp"
#include "ttmoe/moe/lora.hpp"
#include "ttmoe/moe/lora_merge.hpp"
#include "ttmoe/moe/moe_ffn.hpp"
#include "ttmoe/moe/moe_layernorm.hpp"
#include "ttmoe/moe/router.hpp"
#include "ttmoe/moe/sparse_softmax.hpp"
#include "ttmoe/nn/attention.hpp"
#include "ttmoe/nn/layernorm.hpp"
#include "ttmoe/nn/llama_attention.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/nn/mlp.hpp"
#include "ttmoe/nn/rmsnorm.hpp"
#include "ttmoe/tta/moetta.hpp"

namespace ttmoe_parity {

/// Appends `prefix.<name>` gradient results for every named tensor that received a gradient.
template <class... Ts>
void add_grads(Results& r, const std::string& prefix, const std::vector<std::string>& names, const Ts&... ts) {
  std::size_t i = 0;
  (
      [&](const auto& t) {
        r.emplace_back(prefix + ".grad_" + names[i++], host(t.grad()));
      }(ts),
      ...);
}

/// Plain LayerNorm (large and ragged rows, with and without affine) and the grouped LayerNorm of
/// MoE-LayerNorm (per sample and per token): outputs and every gradient.
template <class D, class T>
Results layer_norms() {
  using namespace ttmoe;
  Results r;
  {
    auto x = make<T, D>(DynShape<3>(3, 197, 40), 60, 2.0).set_requires_grad();
    auto w = make<T, D>(DynShape<1>(40), 61).set_requires_grad();
    auto b = make<T, D>(DynShape<1>(40), 62).set_requires_grad();
    auto up = make<T, D>(DynShape<3>(3, 197, 40), 63);
    autograd::Tape tape;
    auto y = nn::layer_norm(x, w, b, T(1e-6));
    r.emplace_back("layer_norm.y", host(y));
    autograd::backward(tape, sum_all(y * up));
    add_grads(r, "layer_norm", {"x", "w", "b"}, x, w, b);
  }
  {
    auto x = make<T, D>(DynShape<2>(5, 1000), 64).set_requires_grad();  // a row longer than a warp's stride
    autograd::Tape tape;
    auto y = nn::layer_norm(x, Tensor<T, DynShape<1>, D>(), Tensor<T, DynShape<1>, D>(), T(1e-5));
    r.emplace_back("layer_norm_no_affine.y", host(y));
    autograd::backward(tape, sum_all(square(y) * T(0.5) + y));
    add_grads(r, "layer_norm_no_affine", {"x"}, x);
  }
  for (index_t rows_per_group : {index_t(7), index_t(1)}) {  // per sample, per token
    const std::string tag = "grouped_layernorm_rpg" + std::to_string(rows_per_group);
    const index_t N = 28, Dm = 33, G = N / rows_per_group;
    auto x = make<T, D>(DynShape<2>(N, Dm), 65, 3.0).set_requires_grad();
    auto g = make<T, D>(DynShape<2>(G, Dm), 66).set_requires_grad();
    auto b = make<T, D>(DynShape<2>(G, Dm), 67).set_requires_grad();
    auto up = make<T, D>(DynShape<2>(N, Dm), 68);
    autograd::Tape tape;
    auto y = layer_norm_rows(x, g, b, rows_per_group, T(1e-6), "grouped_layernorm");
    r.emplace_back(tag + ".y", host(y));
    autograd::backward(tape, sum_all(y * up));
    add_grads(r, tag, {"x", "gamma", "beta"}, x, g, b);
  }
  return r;
}

/// timm attention, Llama GQA attention with RoPE and causal mask, RMSNorm, SwiGLU and GELU MLPs,
/// cross-entropy and softmax entropy: outputs and every parameter gradient.
template <class D, class T>
Results layers() {
  using namespace ttmoe;
  Results r;
  auto x = make<T, D>(DynShape<3>(2, 6, 16), 70).set_requires_grad();
  {
    nn::Attention<T, D> attn(16, 4, 71);
    nn::Mlp<T, D> mlp(16, 32, nn::Activation::gelu, 72);
    autograd::Tape tape;
    auto y = mlp(attn(x));
    r.emplace_back("attention_mlp.y", host(y));
    autograd::backward(tape, sum_all(square(y)));
    add_grads(r, "attention_mlp", {"x", "qkv_w", "proj_w", "fc1_w", "fc2_b"}, x, attn.qkv.weight, attn.proj.weight,
              mlp.fc1.weight, mlp.fc2.bias);
  }
  {
    // More samples than heads: the unfused attention batches each head over the samples.
    auto xw = make<T, D>(DynShape<3>(5, 6, 16), 74).set_requires_grad();
    nn::Attention<T, D> attn(16, 4, 75);
    autograd::Tape tape;
    auto y = attn(xw);
    r.emplace_back("attention_wide.y", host(y));
    autograd::backward(tape, sum_all(square(y)));
    add_grads(r, "attention_wide", {"x", "qkv_w"}, xw, attn.qkv.weight);
  }
  x.zero_grad();
  {
    nn::LlamaAttention<T, D> attn(16, 4, 2, 73);
    nn::RMSNorm<T, D> norm(16);
    nn::SwiGLUMLP<T, D> mlp(16, 24, 74);
    auto pos = make_idx<D>(DynShape<1>(6), {0, 1, 2, 3, 4, 5});
    autograd::Tape tape;
    auto h = attn(norm(x), pos);
    auto y = mlp(h);
    r.emplace_back("llama_block.y", host(y));
    autograd::backward(tape, sum_all(square(y)));
    add_grads(r, "llama_block", {"x", "q_w", "k_w", "v_w", "o_w", "norm_w", "gate_w", "down_w"}, x,
              attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.o_proj.weight, norm.weight,
              mlp.gate_proj.weight, mlp.down_proj.weight);
  }
  {
    auto logits = make<T, D>(DynShape<2>(5, 7), 75, 2.0).set_requires_grad();
    auto labels = make_idx<D>(DynShape<1>(5), {0, 6, 3, 3, 1});
    autograd::Tape tape;
    auto loss = eval(mean_all(nn::cross_entropy(logits, labels)) + mean_all(nn::softmax_entropy(logits)));
    r.emplace_back("ce_entropy.loss", host(loss));
    autograd::backward(tape, loss);
    add_grads(r, "ce_entropy", {"logits"}, logits);
  }
  return r;
}

/// A tiny Llama-family LM (Qwen2 biases, GQA, head_dim != hidden / heads, llama3 rope, tied head):
/// logits and gradients from the embedding to the head.
template <class D, class T>
Results llama_lm() {
  using namespace ttmoe;
  Results r;
  {
    // A tiny Llama-family LM (Qwen2 biases, GQA, head_dim != hidden / heads, llama3 rope, tied head).
    models::LlamaConfig c;
    c.model_type = "qwen2";
    c.vocab_size = 20;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 6;
    c.qkv_bias = true;
    c.tie_word_embeddings = true;
    c.max_position_embeddings = 32;
    c.rope_scaling = {nn::RopeScaling::Type::llama3, 4.0, 1.0, 4.0, 8};
    models::LlamaForCausalLM<T, D> lm(c, 80);
    auto ids = make_idx<D>(DynShape<2>(2, 5), {1, 19, 3, 3, 7, 0, 2, 11, 5, 8});
    autograd::Tape tape;
    auto logits = lm(ids);
    r.emplace_back("llama_lm.logits", host(logits));
    autograd::backward(tape, sum_all(square(logits)));
    const auto& l0 = lm.model.layers[0];
    add_grads(r, "llama_lm", {"embed", "q_b", "k_w", "o_w", "down_w", "norm_w"}, lm.model.embed_tokens.weight,
              l0.self_attn.q_proj.bias, l0.self_attn.k_proj.weight, l0.self_attn.o_proj.weight, l0.mlp.down_proj.weight,
              lm.model.norm.weight);
  }
  return r;
}

/// MoE-LayerNorm with its balance loss; linear and cosine routers with GMoE's auxiliary losses;
/// GMoE's MoE-FFN; LoRA, the two forms of merging K adapters, and the TTMM sparse-softmax weights.
template <class D, class T>
Results moe_components() {
  using namespace ttmoe;
  Results r;
  {
    std::mt19937_64 rng(80);
    auto w = make<T, D>(DynShape<1>(12), 81);
    auto b = make<T, D>(DynShape<1>(12), 82);
    auto m = moe::MoELayerNorm<T, D>::from_layernorm(w, b, 4, rng);
    // Non-zero expert deltas so that the expert choice shows in the output.
    m.experts.weight_delta = make<T, D>(DynShape<2>(4, 12), 83, 0.5).set_requires_grad();
    m.experts.bias_delta = make<T, D>(DynShape<2>(4, 12), 84, 0.5).set_requires_grad();
    auto x = make<T, D>(DynShape<3>(5, 6, 12), 85, 2.0).set_requires_grad();
    auto up = make<T, D>(DynShape<3>(5, 6, 12), 86);
    autograd::Tape tape;
    auto y = m.forward(x);
    auto loss = eval(sum_all(y * up) + m.balance_loss() * T(0.3));
    r.emplace_back("moe_layernorm.y", host(y));
    r.emplace_back("moe_layernorm.picks", host(m.top_index));
    r.emplace_back("moe_layernorm.loss", host(loss));
    autograd::backward(tape, loss);
    add_grads(r, "moe_layernorm", {"x", "wd", "bd", "router_w", "router_b"}, x, m.experts.weight_delta,
              m.experts.bias_delta, m.router.weight, m.router.bias);
  }
  {
    std::mt19937_64 rng(90);
    auto x = make<T, D>(DynShape<2>(10, 12), 91).set_requires_grad();
    auto cr = moe::CosineRouter<T, D>::init(12, 8, 4, rng);
    cr.top_k = 2;
    auto noise = make<T, D>(DynShape<2>(10, 4), 92);
    moe::LinearRouter<T, D> lr;
    lr.weight = make<T, D>(DynShape<2>(4, 12), 93).set_requires_grad();
    lr.bias = make<T, D>(DynShape<1>(4), 94).set_requires_grad();
    lr.top_k = 2;
    lr.renormalize = true;
    auto up = make<T, D>(DynShape<2>(10, 4), 95);
    autograd::Tape tape;
    auto co = cr.forward(x, noise);
    auto lo = lr.forward(x);
    auto aux = moe::gmoe_aux_losses(co.logits, noise, 2);
    auto loss = eval(sum_all(co.gates * up) + sum_all(lo.gates * up) + (aux.l_imp + aux.l_load) * T(0.5));
    r.emplace_back("routers.cos_gates", host(co.gates));
    r.emplace_back("routers.lin_gates", host(lo.gates));
    r.emplace_back("routers.loss", host(loss));
    autograd::backward(tape, loss);
    add_grads(r, "routers", {"x", "proj_w", "codebook", "log_scale", "lin_w", "lin_b"}, x, cr.proj.weight,
              cr.codebook, cr.log_scale, lr.weight, lr.bias);
  }
  {
    std::mt19937_64 rng(100);
    auto base_w = make<T, D>(DynShape<2>(9, 11), 101);
    auto base_b = make<T, D>(DynShape<1>(9), 102);
    auto lora = moe::LoRALinear<T, D>::wrap(base_w, base_b, 3, 6.0, rng);
    lora.lora_B.weight = make<T, D>(DynShape<2>(9, 3), 103).set_requires_grad();
    auto x = make<T, D>(DynShape<2>(4, 11), 104);
    std::vector<Tensor<T, DynShape<2>, D>> As, Bs;
    for (unsigned k = 0; k < 3; ++k) {
      As.push_back(make<T, D>(DynShape<2>(2, 11), 105 + k).set_requires_grad());
      Bs.push_back(make<T, D>(DynShape<2>(9, 2), 110 + k).set_requires_grad());
    }
    autograd::Tape tape;
    auto y = lora.forward(x);
    auto st = moe::stack_lora(As, Bs, std::vector<T>{T(0.5), T(0.3), T(0.2)}, std::vector<T>{T(2), T(2), T(4)});
    auto dw = moe::merged_delta(st);
    auto ya = moe::apply_stacked(x, base_w, st);
    auto loss = eval(sum_all(square(y)) + sum_all(square(dw)) + sum_all(ya));
    r.emplace_back("lora.y", host(y));
    r.emplace_back("lora_merge.delta", host(dw));
    r.emplace_back("lora_merge.apply", host(ya));
    autograd::backward(tape, loss);
    add_grads(r, "lora", {"A", "B", "A0", "B2"}, lora.lora_A.weight, lora.lora_B.weight, As[0], Bs[2]);
    lora.merge();
    r.emplace_back("lora.merged_weight", host(lora.weight));
  }
  {
    // GMoE's MoE-FFN: cosine router, top-2, noisy, capacity tight enough to drop picks.
    std::mt19937_64 rng(150);
    nn::Mlp<T, D> dense(12, 20, nn::Activation::gelu, 151);
    auto router = moe::CosineRouter<T, D>::init(12, 8, 4, rng);
    router.top_k = 2;
    auto ffn = moe::MoEFFN<T, D, moe::CosineRouter<T, D>>::from_dense(dense, router, 0.75);
    auto x = make<T, D>(DynShape<3>(2, 9, 12), 152).set_requires_grad();
    auto noise = make<T, D>(DynShape<2>(18, 4), 153);
    autograd::Tape tape;
    auto y = ffn.forward(x, noise);
    auto loss = eval(sum_all(square(y)) + ffn.aux_losses().l_aux);
    r.emplace_back("moe_ffn.y", host(y));
    r.emplace_back("moe_ffn.loss", host(loss));
    autograd::backward(tape, loss);
    add_grads(r, "moe_ffn", {"x", "proj_w", "codebook", "fc1_w0", "fc2_w3"}, x, ffn.router.proj.weight,
              ffn.router.codebook, ffn.experts[0].fc1.weight, ffn.experts[3].fc2.weight);
  }
  {
    auto q = make<T, D>(DynShape<2>(3, 6), 120);
    auto c = make<T, D>(DynShape<2>(8, 6), 121);
    auto s = moe::sparse_softmax_weights(moe::l2_normalize<1>(q), moe::l2_normalize<1>(c));
    r.emplace_back("sparse_softmax.weights", host(s.weights));
    r.emplace_back("sparse_softmax.selected", host(s.selected));
  }
  return r;
}

/// A tiny ViT: logits, then three MoETTA adaptation steps (predictions, and the routers and
/// experts afterwards). Exercises the whole pipeline the GPU runs at full scale.
template <class D, class T>
Results vit_moetta() {
  using namespace ttmoe;
  using Model = models::VisionTransformer<T, D>;
  Results r;
  Model model(models::vit_test_tiny(16, 4, 32, 2, 4, 64, 10), 130);
  std::vector<Tensor<T, DynShape<4>, D>> batches;
  for (unsigned k = 0; k < 3; ++k) batches.push_back(make<T, D>(DynShape<4>(4, 3, 16, 16), 131 + k, 2.0));
  {
    autograd::NoGrad ng;
    r.emplace_back("vit.logits", host(model.forward(batches[0])));
  }
  typename tta::MoETTA<Model, T, D>::Options opt;
  opt.num_experts = 3;
  opt.router_seed = 7;
  opt.lr = tta::LearningRate{0.05, 4, {}};
  tta::MoETTA<Model, T, D> method(opt);
  for (std::size_t k = 0; k < batches.size(); ++k)
    r.emplace_back("moetta.pred" + std::to_string(k), host(method.adapt_and_predict(model, batches[k])));
  const auto layers = model.moe_layers();
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string p = "moetta.layer" + std::to_string(l);
    r.emplace_back(p + ".router_w", host(layers[l]->router.weight));
    r.emplace_back(p + ".weight_delta", host(layers[l]->experts.weight_delta));
    r.emplace_back(p + ".bias_delta", host(layers[l]->experts.bias_delta));
  }
  return r;
}

/// ViT-B/16 through its static-shape entry (Shape<dyn, 197, 768> activations) at batch 1: logits.
/// Not part of component_cases (thrust_host's generic GEMM would take minutes); the CUDA test runs
/// it, which also keeps the static-shape path compiling under nvcc.
template <class D>
Results vit_b16_static() {
  using namespace ttmoe;
  models::VisionTransformer<float, D> model(models::vit_base_patch16(), 160);
  const auto x = make<float, D>(models::vit_b16_shapes::images(1), 161, 2.0);  // Shape<dyn, 3, 224, 224>
  autograd::NoGrad ng;
  Tensor<float, models::vit_b16_shapes::logits, D> logits = model(x);
  return {{"vit_b16.logits", host(logits)}};
}

/// Every component case group on device D with element type T.
template <class D, class T>
Results component_cases() {
  Results r;
  for (auto* f : {&layer_norms<D, T>, &layers<D, T>, &moe_components<D, T>, &vit_moetta<D, T>})
    for (auto& kv : f()) r.push_back(std::move(kv));
  return r;
}

/// Largest |analytic - central difference| / max(1, |fd|) over up to `probes` elements of `param`,
/// for the scalar `loss()` (evaluated without recording) and the analytic gradient `grad`.
template <class T, class S, class D>
double max_fd_error(ttmoe::Tensor<T, S, D>& param, const std::vector<T>& grad, const std::function<double()>& loss,
                    std::size_t probes = 9, double h = 1e-6) {
  auto v = param.to_vector();
  const std::size_t n = v.size(), step = std::max<std::size_t>(1, n / probes);
  double worst = 0;
  for (std::size_t i = 0; i < n; i += step) {
    const T keep = v[i];
    v[i] = keep + T(h);
    D::template copy_from_host<T>(param.data(), v.data(), n);
    const double up = loss();
    v[i] = keep - T(h);
    D::template copy_from_host<T>(param.data(), v.data(), n);
    const double down = loss();
    v[i] = keep;
    D::template copy_from_host<T>(param.data(), v.data(), n);
    const double fd = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(double(grad[i]) - fd) / std::max(1.0, std::abs(fd)));
  }
  return worst;
}

/// Finite-difference checks (double) on device D of composites that go through the row kernels,
/// attention, indexing and the fused expressions' VJPs. Returns "" or the first failure.
template <class D>
std::string finite_difference_cases(double tol = 1e-6) {
  using namespace ttmoe;
  using T = double;
  std::string failures;
  // Each case: the parameter to probe and a builder of the scalar loss (recorded when a tape is active).
  auto run = [&](const std::string& name, auto& param, auto&& make_loss) {
    param.zero_grad();
    {
      autograd::Tape tape;
      auto loss = make_loss();
      autograd::backward(tape, loss);
    }
    const auto grad = param.grad().to_vector();
    const double err = max_fd_error<T>(param, grad, [&] {
      autograd::NoGrad ng;
      return double(make_loss().item());
    });
    if (!(err <= tol)) failures += name + ": max error " + std::to_string(err) + "; ";
  };
  auto x = make<T, D>(DynShape<2>(12, 9), 140, 2.0).set_requires_grad();
  auto g = make<T, D>(DynShape<2>(3, 9), 141).set_requires_grad();
  auto b = make<T, D>(DynShape<2>(3, 9), 142).set_requires_grad();
  auto up = make<T, D>(DynShape<2>(12, 9), 143);
  auto grouped = [&] { return eval(sum_all(tanh(layer_norm_rows(x, g, b, 4, T(1e-6))) * up)); };
  run("grouped_layernorm x", x, grouped);
  run("grouped_layernorm gamma", g, grouped);
  run("grouped_layernorm beta", b, grouped);

  auto qkv = make<T, D>(DynShape<3>(2, 5, 24), 144).set_requires_grad();
  auto up3 = make<T, D>(DynShape<3>(2, 5, 8), 145);
  run("fused_qkv_attention", qkv, [&] { return eval(sum_all(fused_qkv_attention(qkv, 2, T(0.5)) * up3)); });
  // The unfused path's launch grid: more samples than heads (one launch per head over the samples),
  // fewer (one per sample over the heads), and a backward whose scratch holds one sample at a time.
  auto qkv_wide = make<T, D>(DynShape<3>(3, 4, 12), 148).set_requires_grad();
  auto up_wide = make<T, D>(DynShape<3>(3, 4, 4), 149);
  auto wide = [&] { return eval(sum_all(fused_qkv_attention(qkv_wide, 2, T(0.7)) * up_wide)); };
  run("fused_qkv_attention, samples > heads", qkv_wide, wide);
  auto qkv_tall = make<T, D>(DynShape<3>(2, 4, 18), 150).set_requires_grad();
  auto up_tall = make<T, D>(DynShape<3>(2, 4, 6), 151);
  run("fused_qkv_attention, samples < heads", qkv_tall,
      [&] { return eval(sum_all(fused_qkv_attention(qkv_tall, 3, T(0.7)) * up_tall)); });
  {
    const index_t keep = detail::attention_scratch_elements;
    detail::attention_scratch_elements = 2 * 4 * 4;  // heads x T x T: one sample per chunk
    run("fused_qkv_attention, backward in one-sample chunks", qkv_wide, wide);
    detail::attention_scratch_elements = keep;
  }

  auto logits = make<T, D>(DynShape<2>(6, 5), 146, 2.0).set_requires_grad();
  auto labels = make_idx<D>(DynShape<1>(6), {0, 4, 2, 2, 1, 3});
  run("cross_entropy + log_softmax + entropy", logits, [&] {
    return eval(mean_all(nn::cross_entropy(logits, labels)) + mean_all(nn::softmax_entropy(logits)) +
                sum_all(log_softmax<0>(logits) * T(0.1)));
  });

  auto w = make<T, D>(DynShape<2>(7, 9), 147).set_requires_grad();
  auto ids = make_idx<D>(DynShape<1>(5), {6, 0, 6, 3, 1});
  run("index_select + matmul + gelu + broadcast", w, [&] {
    auto rows = index_select(w, ids);                             // [5, 9], row 6 twice
    auto h = gelu(matmul<false, true>(x, rows) + sum<1>(rows));   // [12, 5] + broadcast [5]
    return eval(mean_all(h));
  });
  return failures;
}

}  // namespace ttmoe_parity
