// Gradient checks of the dense layers and losses (include/ttmoe/nn): every module's forward with its
// parameters as harness inputs, so the gradient of the input AND of every parameter is compared with
// central finite differences in double, at random shapes (see tests/support/gradcheck.hpp). These
// replace the former fixed-shape checks of a layers_gradcheck.cpp; its shapes are kept as
// one variant each ("former fixed shape").

#include <gradcheck.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ttmoe/nn/nn.hpp"

using namespace ttmoe;
using namespace ttmoe::gradcheck;

namespace {

using T1 = Tensor<double, DynShape<1>>;
/// An undefined tensor: "no weight" / "no bias".
const T1 kNone;

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// Kink of act(x W^T + b) at act's kink 0 (relu), for x input `xi` [..., D], W input `wi` [H, D] and
/// b input `bi` [H]: the distance of the pre-activations to 0 divided by how much one input step can
/// move a pre-activation (h * max(1, |x|, |W|)), so a +-h step never crosses the kink.
Kink preactivation_kink(std::size_t xi, std::size_t wi, std::size_t bi) {
  return [=](const Draw& d) {
    if (d.values.size() <= bi) return std::numeric_limits<double>::infinity();
    const auto& x = d.values[xi];
    const auto& w = d.values[wi];
    const auto& b = d.values[bi];
    const index_t H = d.extents[wi][0], D = d.extents[wi][1], N = index_t(x.size()) / D;
    double m = std::numeric_limits<double>::infinity();
    for (index_t n = 0; n < N; ++n)
      for (index_t h = 0; h < H; ++h) {
        double s = b[h];
        for (index_t k = 0; k < D; ++k) s += x[n * D + k] * w[h * D + k];
        m = std::min(m, std::abs(s));
      }
    return m / std::max({1.0, max_abs(x), max_abs(w)});
  };
}

/// Random integer positions [n] / [a, b] in [0, bound).
template <std::size_t R>
IndexTensor<DynShape<R>> positions(const Inputs& in, const std::array<index_t, R>& e, index_t bound) {
  auto rng = in.rng(11);
  return random_indices<R>(rng, e, bound);
}

/// LayerNorm composed from the core's reductions and fused expressions, (x - mean) / sqrt(var + eps) *
/// weight + bias over the last axis: the readable definition, gradient-checked beside the fused op
/// (nn::layer_norm) so the two spellings of the same maths stay honest.
template <class T, class S, class SW>
Tensor<T, DynShape<S::rank>> layer_norm_reference(const Tensor<T, S>& x, const Tensor<T, SW>& weight,
                                                  const Tensor<T, SW>& bias, T eps) {
  using SD = DynShape<S::rank>;
  Tensor<T, SD> xc = x - mean<-1, true>(x);
  Tensor<T, SD> xn = xc * rsqrt(mean<-1, true>(square(xc)) + eps);
  return xn * weight + bias;
}

}  // namespace

// ---- normalisation ---------------------------------------------------------------------------------
GRADCHECK_CASE("layernorm") {
  // nn::LayerNorm and nn::layer_norm run the fused op (one "layer_norm" node); the composed
  // layer_norm_reference above and the per-group form layer_norm_rows (gamma / beta rows broadcast
  // over groups of rows) too.
  auto module = [](const Inputs& in, auto x) {
    nn::LayerNorm<double> ln;
    ln.weight = in.get<1>(1);
    ln.bias = in.get<1>(2);
    ln.eps = 1e-5;
    return ln(x);
  };
  return Case()
      .variant("module [N,D]", [](Rng& r) { auto d = r.ext(3, 8); return Shapes{{r.ext(1, 5), d}, {d}, {d}}; },
               [module](const Inputs& in) -> Output { return module(in, in.get<2>(0)); })
      .variant("module, static Shape<?,?,4>", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), 4}, {4}, {4}}; },
               [module](const Inputs& in) -> Output { return module(in, in.get_as<Shape<dyn, dyn, 4>>(0)); })
      .variant("former fixed shape [2,3,6]", [](Rng&) { return Shapes{{2, 3, 6}, {6}, {6}}; },
               [module](const Inputs& in) -> Output { return module(in, in.get<3>(0)); })
      .variant("weight only, rank 4", [](Rng& r) { auto d = r.ext(3, 6); return Shapes{{r.ext(1, 2), r.ext(1, 2), r.ext(1, 3), d}, {d}}; },
               [](const Inputs& in) -> Output { return nn::layer_norm(in.get<4>(0), in.get<1>(1), kNone, 1e-6); })
      .variant("no affine, rank 1", [](Rng& r) { return Shapes{{r.ext(3, 9)}}; },
               [](const Inputs& in) -> Output { return nn::layer_norm(in.get<1>(0), kNone, kNone, 1e-6); })
      .variant("per-group affine: layer_norm_rows, gamma/beta [G,D]",
               [](Rng& r) {
                 auto g = r.ext(1, 3), per = r.ext(1, 3), d = r.ext(3, 6);
                 return Shapes{{g * per, d}, {g, d}, {g, d}};
               },
               [](const Inputs& in) -> Output {
                 auto x = in.get<2>(0), gamma = in.get<2>(1);
                 return layer_norm_rows(x, gamma, in.get<2>(2), x.extent(0) / gamma.extent(0), 1e-6);
               })
      .variant("composed reference layer_norm_reference", [](Rng& r) { auto d = r.ext(3, 7); return Shapes{{r.ext(1, 4), d}, {d}, {d}}; },
               [](const Inputs& in) -> Output { return layer_norm_reference(in.get<2>(0), in.get<1>(1), in.get<1>(2), 1e-6); })
      .variant("consumer reads input and output: ln(x) * x", [](Rng& r) { auto d = r.ext(3, 6); return Shapes{{r.ext(1, 4), d}, {d}, {d}}; },
               [module](const Inputs& in) -> Output {
                 auto x = in.get<2>(0);
                 return module(in, x) * x;
               });
}
GRADCHECK_CASE("layernorm frozen affine") {
  // Weight and bias need no gradient: only dx is accumulated.
  return Case().constant_input(1).constant_input(2).variant(
      "module [B,T,D]", [](Rng& r) { auto d = r.ext(3, 7); return Shapes{{r.ext(1, 3), r.ext(1, 3), d}, {d}, {d}}; },
      [](const Inputs& in) -> Output { return nn::layer_norm(in.get<3>(0), in.get<1>(1), in.get<1>(2), 1e-6); });
}
GRADCHECK_CASE("layernorm frozen input") {
  // Only the affine parameters need a gradient (a frozen activation, LayerNorm-only adaptation).
  return Case().constant_input(0).variant(
      "module [N,D]", [](Rng& r) { auto d = r.ext(3, 7); return Shapes{{r.ext(1, 5), d}, {d}, {d}}; },
      [](const Inputs& in) -> Output { return nn::layer_norm(in.get<2>(0), in.get<1>(1), in.get<1>(2), 1e-6); });
}
GRADCHECK_CASE("rmsnorm") {
  return Case()
      .variant("module [N,D]", [](Rng& r) { auto d = r.ext(2, 8); return Shapes{{r.ext(1, 5), d}, {d}}; },
               [](const Inputs& in) -> Output {
                 nn::RMSNorm<double> rn;
                 rn.weight = in.get<1>(1);
                 return rn(in.get<2>(0));
               })
      .variant("former fixed shape [4,5]", [](Rng&) { return Shapes{{4, 5}, {5}}; },
               [](const Inputs& in) -> Output { return nn::rms_norm(in.get<2>(0), in.get<1>(1), 1e-6); })
      .variant("weight [D] broadcast over rank 4", [](Rng& r) { auto d = r.ext(2, 5); return Shapes{{r.ext(1, 2), r.ext(1, 3), r.ext(1, 2), d}, {d}}; },
               [](const Inputs& in) -> Output { return nn::rms_norm(in.get<4>(0), in.get<1>(1), 1e-5); })
      .variant("no weight, static Shape<?,5>", [](Rng& r) { return Shapes{{r.ext(1, 4), 5}}; },
               [](const Inputs& in) -> Output { return nn::rms_norm(in.get_as<Shape<dyn, 5>>(0), kNone, 1e-6); });
}

// ---- position encodings and attention -------------------------------------------------------------
GRADCHECK_CASE("rope") {
  auto x_shape = [](Rng& r) { return Shapes{{r.ext(1, 2), r.ext(1, 3), r.ext(1, 4), 2 * r.ext(1, 3)}}; };
  return Case()
      .variant("positions [T] (cos/sin broadcast over batch and heads)", x_shape,
               [](const Inputs& in) -> Output {
                 auto x = in.get<4>(0);
                 return nn::rope(x, positions<1>(in, {x.extent(2)}, 1000));
               })
      .variant("positions [B,T], theta 500", x_shape,
               [](const Inputs& in) -> Output {
                 auto x = in.get<4>(0);
                 return nn::rope(x, positions<2>(in, {x.extent(0), x.extent(2)}, 1000), 500.0);
               })
      .variant("former fixed shape [2,2,3,4], positions {0,1,2,10,11,300}", [](Rng&) { return Shapes{{2, 2, 3, 4}}; },
               [](const Inputs& in) -> Output {
                 auto pos = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 3), {0, 1, 2, 10, 11, 300});
                 return nn::rope(in.get<4>(0), pos);
               })
      .variant("apply_rope with trainable cos/sin [T,hd] (gradient summed over batch and heads)",
               [](Rng& r) {
                 auto t = r.ext(1, 4), hd = 2 * r.ext(1, 3);
                 return Shapes{{r.ext(1, 2), r.ext(1, 3), t, hd}, {t, hd}, {t, hd}};
               },
               [](const Inputs& in) -> Output { return nn::apply_rope(in.get<4>(0), in.get<2>(1), in.get<2>(2)); })
      .variant("apply_rope with trainable cos/sin [B,T,hd]",
               [](Rng& r) {
                 auto b = r.ext(1, 2), t = r.ext(1, 3), hd = 2 * r.ext(1, 2);
                 return Shapes{{b, r.ext(1, 3), t, hd}, {b, t, hd}, {b, t, hd}};
               },
               [](const Inputs& in) -> Output { return nn::apply_rope(in.get<4>(0), in.get<3>(1), in.get<3>(2)); });
}
GRADCHECK_CASE("sdpa") {
  // scaled_dot_product_attention: q [BH,T,hd], k/v [BH,S,hd]; the causal mask is an additive -inf.
  // free_keys: S drawn independently of T; else S = T + extra_keys.
  auto shapes = [](bool free_keys, index_t extra_keys) {
    return [=](Rng& r) {
      auto bh = r.ext(1, 3), t = r.ext(1, 4), hd = r.ext(1, 4), s = free_keys ? r.ext(1, 5) : t + extra_keys;
      return Shapes{{bh, t, hd}, {bh, s, hd}, {bh, s, hd}};
    };
  };
  auto f = [](bool causal) {
    return [causal](const Inputs& in) -> Output {
      return nn::scaled_dot_product_attention(in.get<3>(0), in.get<3>(1), in.get<3>(2), 0.7, causal);
    };
  };
  return Case()
      .variant("not causal, S != T", shapes(true, 0), f(false))
      .variant("causal, S == T", shapes(false, 0), f(true))
      .variant("causal with cached keys, S = T + 2", shapes(false, 2), f(true));
}
namespace {
Shapes timm_attention_shapes(Rng& r, index_t heads, index_t t) {
  const index_t d = heads * r.ext(1, 3);
  return {{r.ext(1, 2), t ? t : r.ext(1, 4), d}, {3 * d, d}, {3 * d}, {d, d}, {d}};
}
Output timm_attention(const Inputs& in, index_t heads) {
  nn::Attention<double> a;
  a.num_heads = heads;
  a.qkv.weight = in.get<2>(1);
  a.qkv.bias = in.get<1>(2);
  a.proj.weight = in.get<2>(3);
  a.proj.bias = in.get<1>(4);
  return a(in.get<3>(0));
}
}  // namespace
GRADCHECK_CASE("attention") {
  // timm Attention: fused qkv Linear, the fused attention op, output projection.
  return Case()
      .variant("1 head", [](Rng& r) { return timm_attention_shapes(r, 1, 0); },
               [](const Inputs& in) { return timm_attention(in, 1); })
      .variant("2 heads", [](Rng& r) { return timm_attention_shapes(r, 2, 0); },
               [](const Inputs& in) { return timm_attention(in, 2); })
      .variant("3 heads, one token", [](Rng& r) { return timm_attention_shapes(r, 3, 1); },
               [](const Inputs& in) { return timm_attention(in, 3); })
      .variant("former fixed shape: dim 8, 2 heads, x [2,3,8]",
               [](Rng&) { return Shapes{{2, 3, 8}, {24, 8}, {24}, {8, 8}, {8}}; },
               [](const Inputs& in) { return timm_attention(in, 2); });
}
namespace {
Shapes llama_shapes(Rng& r, index_t heads, index_t kv_heads, index_t hd) {
  const index_t d = heads * hd, dk = kv_heads * hd;
  return {{r.ext(1, 2), r.ext(1, 4), d}, {d, d}, {dk, d}, {dk, d}, {d, d}};
}
Output llama_attention(const Inputs& in, index_t heads, index_t kv_heads, bool batch_positions) {
  nn::LlamaAttention<double> a;
  auto x = in.get<3>(0);
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = x.extent(2) / heads;
  a.q_proj.weight = in.get<2>(1);
  a.k_proj.weight = in.get<2>(2);
  a.v_proj.weight = in.get<2>(3);
  a.o_proj.weight = in.get<2>(4);
  if (batch_positions) return a(x, positions<2>(in, {x.extent(0), x.extent(1)}, 64));
  return a(x, positions<1>(in, {x.extent(1)}, 64));
}
}  // namespace
GRADCHECK_CASE("llama_attention") {
  // Llama GQA attention: bias-free projections, RoPE on q and k, repeat_kv (index_select: the kv
  // gradient sums over the heads sharing it), causal sdpa.
  return Case()
      .variant("4 heads, 2 kv heads, hd 2, positions [T]", [](Rng& r) { return llama_shapes(r, 4, 2, 2); },
               [](const Inputs& in) { return llama_attention(in, 4, 2, false); })
      .variant("2 heads, 1 kv head, hd 4, positions [B,T]", [](Rng& r) { return llama_shapes(r, 2, 1, 4); },
               [](const Inputs& in) { return llama_attention(in, 2, 1, true); })
      .variant("2 heads, 2 kv heads (no sharing)", [](Rng& r) { return llama_shapes(r, 2, 2, 2); },
               [](const Inputs& in) { return llama_attention(in, 2, 2, false); })
      .variant("former fixed shape: dim 8, 4 heads, 2 kv heads, positions {0,5,6}",
               [](Rng&) { return Shapes{{1, 3, 8}, {8, 8}, {4, 8}, {4, 8}, {8, 8}}; },
               [](const Inputs& in) -> Output {
                 nn::LlamaAttention<double> a;
                 a.num_heads = 4;
                 a.num_kv_heads = 2;
                 a.head_dim = 2;
                 a.q_proj.weight = in.get<2>(1);
                 a.k_proj.weight = in.get<2>(2);
                 a.v_proj.weight = in.get<2>(3);
                 a.o_proj.weight = in.get<2>(4);
                 return a(in.get<3>(0), IndexTensor<DynShape<1>>::from_host(DynShape<1>(3), {0, 5, 6}));
               });
}
GRADCHECK_CASE("patch_embed") {
  // Conv2d(kernel = stride = P) as unfold (reshape + permute) and one GEMM; the [D,C,P,P] weight view.
  auto f = [](const Inputs& in) -> Output {
    nn::PatchEmbed<double> pe;
    pe.proj.weight = in.get<4>(1);
    pe.proj.bias = in.get<1>(2);
    pe.patch = pe.proj.weight.extent(2);
    return pe(in.get<4>(0));
  };
  return Case()
      .variant("random P, grid and channels",
               [](Rng& r) {
                 auto p = r.ext(1, 3), c = r.ext(1, 3), dm = r.ext(1, 4);
                 return Shapes{{r.ext(1, 2), c, r.ext(1, 2) * p, r.ext(1, 3) * p}, {dm, c, p, p}, {dm}};
               },
               f)
      .variant("former fixed shape: 2 channels, P 2, D 3, x [2,2,4,4]",
               [](Rng&) { return Shapes{{2, 2, 4, 4}, {3, 2, 2, 2}, {3}}; }, f);
}

// ---- embeddings and losses -----------------------------------------------------------------------
GRADCHECK_CASE("embedding") {
  // Random ids repeat rows (the gradient accumulates) and skip others (zero gradient).
  return Case()
      .variant("ids [n]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output {
                 nn::Embedding<double> e;
                 e.weight = in.get<2>(0);
                 auto rng = in.rng();
                 return e(random_indices<1>(rng, {1 + index_t(rng.next() % 8)}, e.weight.extent(0)));
               })
      .variant("ids [a,b]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output {
                 nn::Embedding<double> e;
                 e.weight = in.get<2>(0);
                 auto rng = in.rng();
                 const index_t a = 1 + index_t(rng.next() % 3), b = 1 + index_t(rng.next() % 4);
                 return e(random_indices<2>(rng, {a, b}, e.weight.extent(0)));
               });
}
GRADCHECK_CASE("cross_entropy") {
  auto targets = [](const Inputs& in, index_t n, index_t c) {
    auto rng = in.rng();
    return random_indices<1>(rng, {n}, c);
  };
  return Case()
      .variant("[N,C] random targets", [](Rng& r) { return Shapes{{r.ext(1, 6), r.ext(1, 7)}}; },
               [targets](const Inputs& in) -> Output {
                 auto z = in.get<2>(0);
                 return nn::cross_entropy(z, targets(in, z.extent(0), z.extent(1)));
               })
      .variant("large logits (x 15): log_softmax stays stable", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(2, 6)}}; },
               [targets](const Inputs& in) -> Output {
                 auto z = in.get<2>(0);
                 Tensor<double, DynShape<2>> big = z * 15.0;
                 return nn::cross_entropy(big, targets(in, z.extent(0), z.extent(1)));
               });
}
GRADCHECK_CASE("softmax_entropy") {
  return Case()
      .variant("[N,C]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 8)}}; },
               [](const Inputs& in) -> Output { return nn::softmax_entropy(in.get<2>(0)); })
      .variant("rank 3, entropy over the last axis", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), r.ext(2, 5)}}; },
               [](const Inputs& in) -> Output { return nn::softmax_entropy(in.get<3>(0)); })
      .variant("static Shape<?,4>", [](Rng& r) { return Shapes{{r.ext(1, 4), 4}}; },
               [](const Inputs& in) -> Output { return nn::softmax_entropy(in.get_as<Shape<dyn, 4>>(0)); });
}

// ---- linear layers, MLPs, dropout ----------------------------------------------------------------
namespace {
/// nn::Linear with weight = input 1 and, when `bias`, bias = input 2.
nn::Linear<double> linear_from(const Inputs& in, bool bias) {
  nn::Linear<double> l;
  l.weight = in.get<2>(1);
  if (bias) l.bias = in.get<1>(2);
  return l;
}
}  // namespace
GRADCHECK_CASE("nn_linear") {
  const auto layer = linear_from;
  return Case()
      .variant("[N,in] with bias", [](Rng& r) { auto i = r.ext(1, 5), o = r.ext(1, 5); return Shapes{{r.ext(1, 5), i}, {o, i}, {o}}; },
               [layer](const Inputs& in) -> Output { return layer(in, true)(in.get<2>(0)); })
      .variant("[B,T,in] without bias", [](Rng& r) { auto i = r.ext(1, 5), o = r.ext(1, 5); return Shapes{{r.ext(1, 3), r.ext(1, 3), i}, {o, i}}; },
               [layer](const Inputs& in) -> Output { return layer(in, false)(in.get<3>(0)); })
      .variant("rank 4 with bias", [](Rng& r) { auto i = r.ext(1, 4), o = r.ext(1, 4); return Shapes{{2, r.ext(1, 2), r.ext(1, 3), i}, {o, i}, {o}}; },
               [layer](const Inputs& in) -> Output { return layer(in, true)(in.get<4>(0)); });
}
namespace {
Shapes mlp_shapes(Rng& r) {
  const index_t d = r.ext(1, 4), h = r.ext(1, 6);
  return {{r.ext(1, 2), r.ext(1, 3), d}, {h, d}, {h}, {d, h}, {d}};
}
/// nn::Mlp with act and fc1.{weight,bias}, fc2.{weight,bias} = inputs 1-4.
nn::Mlp<double> mlp_from(const Inputs& in, nn::Activation act = nn::Activation::gelu) {
  nn::Mlp<double> m;
  m.act = act;
  m.fc1.weight = in.get<2>(1);
  m.fc1.bias = in.get<1>(2);
  m.fc2.weight = in.get<2>(3);
  m.fc2.bias = in.get<1>(4);
  return m;
}
Output mlp(const Inputs& in, nn::Activation act) { return mlp_from(in, act)(in.get<3>(0)); }
}  // namespace
GRADCHECK_CASE("mlp") {
  // timm Mlp fc2(act(fc1(x))) for each activation; relu's kink at 0 lies on fc1's output, so the
  // draw is rejected when a pre-activation is within 3h of 0 (scaled by how far a step can move it).
  return Case()
      .kink(preactivation_kink(0, 1, 2))
      .variant("gelu (exact)", mlp_shapes, [](const Inputs& in) { return mlp(in, nn::Activation::gelu); })
      .variant("gelu_tanh", mlp_shapes, [](const Inputs& in) { return mlp(in, nn::Activation::gelu_tanh); })
      .variant("silu", mlp_shapes, [](const Inputs& in) { return mlp(in, nn::Activation::silu); })
      .variant("relu", mlp_shapes, [](const Inputs& in) { return mlp(in, nn::Activation::relu); });
}
// The residual forms: r + linear(x) and r + mlp(x) are one op each (ops/linear.hpp, ops/mlp.hpp),
// the residual added in the GEMM's store and handed the output gradient's buffer backward.
namespace {
Shapes mlp_residual_shapes(Rng& r) {
  auto s = mlp_shapes(r);
  s.push_back(s[0]);  // r [B, T, d]
  return s;
}
Output mlp_residual(const Inputs& in, nn::Activation act) { return mlp_from(in, act)(in.get<3>(0), in.get<3>(5)); }
}  // namespace
GRADCHECK_CASE("mlp_residual") {
  return Case()
      .kink(preactivation_kink(0, 1, 2))
      .variant("r + mlp(x), gelu (exact)", mlp_residual_shapes,
               [](const Inputs& in) { return mlp_residual(in, nn::Activation::gelu); })
      .variant("gelu_tanh", mlp_residual_shapes, [](const Inputs& in) { return mlp_residual(in, nn::Activation::gelu_tanh); })
      .variant("silu", mlp_residual_shapes, [](const Inputs& in) { return mlp_residual(in, nn::Activation::silu); })
      .variant("relu", mlp_residual_shapes, [](const Inputs& in) { return mlp_residual(in, nn::Activation::relu); })
      .variant("residual is a computed activation (its gradient buffer taken over)", mlp_residual_shapes,
               [](const Inputs& in) -> Output {
                 // tanh(r) is a non-leaf that the fused op's output gradient reaches first.
                 Tensor<double, DynShape<3>> r = tanh(in.get<3>(5));
                 return mlp_from(in)(in.get<3>(0), r);
               })
      .variant("residual is the MLP's own input, used again after", mlp_residual_shapes, [](const Inputs& in) -> Output {
        Tensor<double, DynShape<3>> x = in.get<3>(0) * in.get<3>(5);
        return mlp_from(in)(x, x) * x;
      });
}
GRADCHECK_CASE("mlp_residual_frozen_fc1") {
  // x, W1, b1 frozen: no d(pre), so the forward applies the activation in place and keeps no pre.
  return Case()
      .constant_input(0)
      .constant_input(1)
      .constant_input(2)
      .variant("gradients to W2, b2 and r only", mlp_residual_shapes,
               [](const Inputs& in) { return mlp_residual(in, nn::Activation::gelu); });
}
GRADCHECK_CASE("mlp_residual_frozen_weights") {
  // MoETTA's situation: every weight frozen, gradients to the input and the residual stream.
  return Case()
      .constant_input(1)
      .constant_input(2)
      .constant_input(3)
      .constant_input(4)
      .variant("gradients to x and r only", mlp_residual_shapes,
               [](const Inputs& in) { return mlp_residual(in, nn::Activation::gelu); });
}
GRADCHECK_CASE("linear_residual") {
  const auto layer = linear_from;
  return Case()
      .variant("r + x W^T + b", [](Rng& r) {
                 auto n = r.ext(1, 4), t = r.ext(1, 3), i = r.ext(1, 5), o = r.ext(1, 5);
                 return Shapes{{n, t, i}, {o, i}, {o}, {n, t, o}};
               },
               [layer](const Inputs& in) -> Output { return layer(in, true)(in.get<3>(0), in.get<3>(3)); })
      .variant("r + x W^T (no bias)", [](Rng& r) {
                 auto n = r.ext(1, 4), i = r.ext(1, 5), o = r.ext(1, 5);
                 return Shapes{{n, i}, {o, i}, {n, o}};
               },
               [layer](const Inputs& in) -> Output { return layer(in, false)(in.get<2>(0), in.get<2>(2)); })
      .variant("x + x W^T + b (the residual is the input)", [](Rng& r) {
                 auto n = r.ext(1, 4), d = r.ext(1, 5);
                 return Shapes{{n, d}, {d, d}, {d}, {n, d}};
               },
               [layer](const Inputs& in) -> Output {
                 Tensor<double, DynShape<2>> x = in.get<2>(0) * in.get<2>(3);
                 return layer(in, true)(x, x);
               });
}
GRADCHECK_CASE("swiglu_mlp") {
  auto shapes = [](Rng& r) {
    const index_t d = r.ext(1, 4), h = r.ext(1, 5);
    return Shapes{{r.ext(1, 2), r.ext(1, 3), d}, {h, d}, {h, d}, {d, h}};
  };
  return Case().variant("down(silu(gate x) * up x)", shapes, [](const Inputs& in) -> Output {
    nn::SwiGLUMLP<double> m;
    m.gate_proj.weight = in.get<2>(1);
    m.up_proj.weight = in.get<2>(2);
    m.down_proj.weight = in.get<2>(3);
    return m(in.get<3>(0));
  });
}
GRADCHECK_CASE("dropout") {
  // Training mode; the mask comes from a generator seeded per draw, so every finite-difference
  // evaluation sees the same mask as the recorded pass (the gradient is mask * g).
  auto seeded = [](const Inputs& in) {
    auto r = in.rng(5);
    return nn::Rng(r.next());
  };
  return Case()
      .variant("dropout p = 0.3", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 9)}}; },
               [seeded](const Inputs& in) -> Output {
                 auto g = seeded(in);
                 return nn::dropout(in.get<2>(0), 0.3, true, g);
               })
      .variant("drop_path p = 0.5 (whole samples)", [](Rng& r) { return Shapes{{r.ext(2, 5), r.ext(1, 3), r.ext(1, 3)}}; },
               [seeded](const Inputs& in) -> Output {
                 auto g = seeded(in);
                 return nn::drop_path(in.get<3>(0), 0.5, true, g);
               })
      .variant("dropout of a computed activation", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 7)}}; },
               [seeded](const Inputs& in) -> Output {
                 auto g = seeded(in);
                 Tensor<double, DynShape<2>> h = tanh(in.get<2>(0));
                 return nn::dropout(h, 0.5, true, g) * in.get<2>(0);
               });
}

TEST_CASE("gradcheck nn kinks: the relu pre-activation kink re-draws at a coarse step", "[gradcheck][harness]") {
  // preactivation_kink must not be vacuous: at h = 1e-2 some pre-activations of fc1 lie within reach
  // of relu's kink, those draws are rejected, and every accepted draw still matches finite
  // differences (loose tolerance for the larger truncation error).
  const auto& reg = registry();
  auto it = std::find_if(reg.begin(), reg.end(), [](const Registered& r) { return r.name == "mlp"; });
  REQUIRE(it != reg.end());
  Case c = it->make();
  c.variants.erase(c.variants.begin(), c.variants.end() - 1);  // relu only
  REQUIRE(c.variants.front().label == "relu");
  c.step(1e-2).tolerance(1e-3, 1e-2).repeat(10);
  const Result r = run_case("mlp relu, coarse step", c);
  INFO(r.message << " (" << r.redraws << " re-draws)");
  CHECK(r.ok);
  CHECK(r.redraws > 0);
}
