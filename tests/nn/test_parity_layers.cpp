// Parity of the dense layers and losses with the PyTorch fixtures (tests/reference/README.md, §2).
// Each case is data: the fixture, how to build the module from it and how to call it; module_parity
// (tests/support/parity.hpp) runs it in double (tolerance 1e-10 relative to max(1, |ref|)) and float
// (1e-4; attention gradients 1e-3 as the README suggests) against outputs and every gradient. The
// loss is sum over `loss_outputs` of sum(out * upstream).

#include "parity.hpp"
#include "ttmoe/nn/nn.hpp"

using namespace ttmoe;
using namespace ttmoe::test;

namespace {

/// nn::Linear sized from the fixture's weight [out, in], with a bias when the fixture has one.
constexpr auto make_linear = []<class T>(const Fixture& f) {
  const auto ws = f.shape("param.weight");
  return nn::Linear<T>(ws[1], ws[0], f.has("param.bias"));
};
/// nn::PatchEmbed sized from the fixture's convolution weight [D, C, P, P].
constexpr auto make_patch_embed = []<class T>(const Fixture& f) {
  const auto ws = f.shape("param.proj.weight");
  return nn::PatchEmbed<T>(ws[1], ws[0], ws[2]);
};
/// Linear's forward for an input of rank 2 or 3 (whichever the fixture holds).
struct LinearForward {
  template <class T>
  void operator()(nn::Linear<T>& lin, ParityRun<T>& run) const {
    if (run.fixture().shape("in.x").size() == 3)
      run.output("y", lin(input<3>(run, "x")));
    else
      run.output("y", lin(input<2>(run, "x")));
  }
};

/// The activation `act` as a parity forward: out.y = act(in.x), in.x [N, D].
auto activation(nn::Activation act) {
  return [act](Functional, auto& run) { run.output("y", nn::activate(act, input<2>(run, "x"))); };
}

/// The two residual branches of a timm ViT block, each one op: r + proj(x) and r + mlp(x).
template <class T>
struct ResidualBranches {
  nn::Linear<T> proj;
  nn::Mlp<T> mlp;
  template <class V>
  void visit_parameters(V& v) {
    v.sub("proj", proj);
    v.sub("mlp", mlp);
  }
};

/// Attention gradients go through a softmax: 1e-3 in float (tests/reference/README.md).
constexpr ParityTolerance kAttentionTol{.float_grad = 1e-3};

}  // namespace

// Each case: the fixture, how to build the module from it, and how to call it.
TEST_CASE("parity: linear") { module_parity("linear", make_linear, LinearForward{}); }
TEST_CASE("parity: linear_nobias") { module_parity("linear_nobias", make_linear, LinearForward{}); }
TEST_CASE("parity: layernorm") {
  module_parity("layernorm",
                []<class T>(const Fixture& f) { return nn::LayerNorm<T>(f.shape("param.weight")[0], T(f.meta_double("eps"))); },
                unary<3>);
}
TEST_CASE("parity: rmsnorm") {
  module_parity("rmsnorm",
                []<class T>(const Fixture& f) { return nn::RMSNorm<T>(f.shape("param.weight")[0], T(f.meta_double("eps"))); },
                unary<3>);
}
TEST_CASE("parity: gelu_exact") { module_parity("gelu_exact", functional, activation(nn::Activation::gelu)); }
TEST_CASE("parity: gelu_tanh") { module_parity("gelu_tanh", functional, activation(nn::Activation::gelu_tanh)); }
TEST_CASE("parity: silu") { module_parity("silu", functional, activation(nn::Activation::silu)); }
TEST_CASE("parity: swiglu_mlp") {
  module_parity("swiglu_mlp",
                []<class T>(const Fixture& f) {
                  const auto gs = f.shape("param.gate_proj.weight");
                  return nn::SwiGLUMLP<T>(gs[1], gs[0]);
                },
                unary<3>);
}
TEST_CASE("parity: vit_residual_branches") {
  module_parity(
      "vit_residual_branches",
      []<class T>(const Fixture& f) {
        const auto ws = f.shape("param.mlp.fc1.weight");
        return ResidualBranches<T>{nn::Linear<T>(ws[1], ws[1]), nn::Mlp<T>(ws[1], ws[0])};
      },
      [](auto& m, auto& run) {
        auto x = input<3>(run, "x");
        auto r = input<3>(run, "r");
        run.output("proj", m.proj(x, r));
        run.output("mlp", m.mlp(x, r));
      });
}
TEST_CASE("parity: embedding") {
  module_parity(
      "embedding",
      []<class T>(const Fixture& f) {
        const auto ws = f.shape("param.weight");
        return nn::Embedding<T>(ws[0], ws[1]);
      },
      [](auto& emb, auto& run) { run.output("y", emb(indices<2>(run, "ids"))); });
}
TEST_CASE("parity: rope") {
  module_parity("rope", functional, [](Functional, auto& run) {
    using T = typename std::remove_cvref_t<decltype(run)>::value_type;
    auto q = input<4>(run, "q");
    auto k = input<4>(run, "k");
    auto pos = indices<2>(run, "positions");
    const double theta = run.fixture().meta_double("theta");
    auto [c, s] = nn::rope_cos_sin<T>(pos, q.extent(3), theta);
    run.output("cos", c);
    run.output("sin", s);
    run.output("q_rot", nn::apply_rope(q, c, s));
    run.output("k_rot", nn::rope(k, pos, theta));
  });
}
TEST_CASE("parity: patch_embed") { module_parity("patch_embed", make_patch_embed, unary<4>); }
TEST_CASE("parity: patch_embed_p4") { module_parity("patch_embed_p4", make_patch_embed, unary<4>); }
TEST_CASE("parity: attention") {
  module_parity(
      "attention",
      []<class T>(const Fixture& f) { return nn::Attention<T>(f.shape("in.x")[2], f.meta_int("num_heads")); }, unary<3>,
      kAttentionTol);
}
TEST_CASE("parity: attention_gqa") {
  module_parity(
      "attention_gqa",
      []<class T>(const Fixture& f) {
        return nn::LlamaAttention<T>(f.shape("in.x")[2], f.meta_int("num_heads"), f.meta_int("num_kv_heads"), 0,
                                     f.meta_double("rope_theta"));
      },
      [](auto& attn, auto& run) { run.output("y", attn(input<3>(run, "x"), indices<1>(run, "positions"))); },
      kAttentionTol);
}
TEST_CASE("parity: cross_entropy") {
  module_parity("cross_entropy", functional, [](Functional, auto& run) {
    run.output("loss", nn::cross_entropy(input<2>(run, "logits"), indices<1>(run, "target")));
  });
}
TEST_CASE("parity: softmax_entropy") {
  module_parity("softmax_entropy", functional,
                [](Functional, auto& run) { run.output("entropy", nn::softmax_entropy(input<2>(run, "logits"))); });
}
