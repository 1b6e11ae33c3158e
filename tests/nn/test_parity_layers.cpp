// Parity of the dense layers and losses with the PyTorch fixtures (tests/reference/README.md, §2).
// Each case runs in double (tolerance 1e-10 relative to max(1, |ref|)) and float (1e-4; attention
// gradients 1e-3 as the README suggests). The loss is sum over `loss_outputs` of sum(out * upstream).

#include "layers_common.hpp"

using namespace ttmoe;
using namespace ttmoe::test;

namespace {

/// Runs `body<T>()` in double and float as Catch sections.
#define BOTH_PRECISIONS(body) \
  SECTION("double") { body<double>(); } \
  SECTION("float") { body<float>(); }

template <class T>
void run_linear(const std::string& name, bool with_bias) {
  Fixture f(name);
  auto ws = f.shape("param.weight");
  nn::Linear<T> lin(ws[1], ws[0], with_bias);
  load_params<T>(f, lin);
  auto body = [&](auto x) {
    {
      autograd::Tape tape;
      auto y = lin(x);
      check(f, name, "out.y", y, tol<T>());
      autograd::backward(tape, loss_term(f, "y", y));
    }
    check(f, name, "grad.in.x", x.grad(), tol<T>());
    check_param_grads<T>(f, name, lin, tol<T>());
  };
  if (f.shape("in.x").size() == 3)
    body(input<3, T>(f, "x"));
  else
    body(input<2, T>(f, "x"));
}

template <class T>
void linear_case() { run_linear<T>("linear", true); }
template <class T>
void linear_nobias_case() { run_linear<T>("linear_nobias", false); }

template <class T>
void layernorm_case() {
  Fixture f("layernorm");
  nn::LayerNorm<T> ln(f.shape("param.weight")[0], T(f.meta_double("eps")));
  load_params<T>(f, ln);
  auto x = input<3, T>(f, "x");
  {
    autograd::Tape tape;
    auto y = ln(x);
    check(f, "layernorm", "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check(f, "layernorm", "grad.in.x", x.grad(), tol<T>());
  check_param_grads<T>(f, "layernorm", ln, tol<T>());
}

template <class T>
void rmsnorm_case() {
  Fixture f("rmsnorm");
  nn::RMSNorm<T> rn(f.shape("param.weight")[0], T(f.meta_double("eps")));
  load_params<T>(f, rn);
  auto x = input<3, T>(f, "x");
  {
    autograd::Tape tape;
    auto y = rn(x);
    check(f, "rmsnorm", "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check(f, "rmsnorm", "grad.in.x", x.grad(), tol<T>());
  check_param_grads<T>(f, "rmsnorm", rn, tol<T>());
}

template <class T>
void activation_case(const std::string& name, nn::Activation act) {
  Fixture f(name);
  auto x = input<2, T>(f, "x");
  {
    autograd::Tape tape;
    auto y = nn::activate(act, x);
    check(f, name, "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check(f, name, "grad.in.x", x.grad(), tol<T>());
}
template <class T>
void gelu_exact_case() { activation_case<T>("gelu_exact", nn::Activation::gelu); }
template <class T>
void gelu_tanh_case() { activation_case<T>("gelu_tanh", nn::Activation::gelu_tanh); }
template <class T>
void silu_case() { activation_case<T>("silu", nn::Activation::silu); }

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
template <class T>
void vit_residual_branches_case() {
  Fixture f("vit_residual_branches");
  const auto ws = f.shape("param.mlp.fc1.weight");
  ResidualBranches<T> m{nn::Linear<T>(ws[1], ws[1]), nn::Mlp<T>(ws[1], ws[0])};
  load_params<T>(f, m);
  auto x = input<3, T>(f, "x");
  auto r = input<3, T>(f, "r");
  {
    autograd::Tape tape;
    auto yp = m.proj(x, r);
    auto ym = m.mlp(x, r);
    check(f, "vit_residual_branches", "out.proj", yp, tol<T>());
    check(f, "vit_residual_branches", "out.mlp", ym, tol<T>());
    Tensor<T, Shape<>> loss = loss_term(f, "proj", yp) + loss_term(f, "mlp", ym);
    autograd::backward(tape, loss);
  }
  check(f, "vit_residual_branches", "grad.in.x", x.grad(), tol<T>());
  check(f, "vit_residual_branches", "grad.in.r", r.grad(), tol<T>());
  check_param_grads<T>(f, "vit_residual_branches", m, tol<T>());
}

template <class T>
void swiglu_case() {
  Fixture f("swiglu_mlp");
  auto gs = f.shape("param.gate_proj.weight");
  nn::SwiGLUMLP<T> mlp(gs[1], gs[0]);
  load_params<T>(f, mlp);
  auto x = input<3, T>(f, "x");
  {
    autograd::Tape tape;
    auto y = mlp(x);
    check(f, "swiglu_mlp", "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check(f, "swiglu_mlp", "grad.in.x", x.grad(), tol<T>());
  check_param_grads<T>(f, "swiglu_mlp", mlp, tol<T>());
}

template <class T>
void embedding_case() {
  Fixture f("embedding");
  auto ws = f.shape("param.weight");
  nn::Embedding<T> emb(ws[0], ws[1]);
  load_params<T>(f, emb);
  auto ids = index_input<2>(f, "ids");
  {
    autograd::Tape tape;
    auto y = emb(ids);
    check(f, "embedding", "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check_param_grads<T>(f, "embedding", emb, tol<T>());
}

template <class T>
void rope_case() {
  Fixture f("rope");
  auto q = input<4, T>(f, "q");
  auto k = input<4, T>(f, "k");
  auto pos = index_input<2>(f, "positions");
  const double theta = f.meta_double("theta");
  {
    autograd::Tape tape;
    auto [c, s] = nn::rope_cos_sin<T>(pos, q.extent(3), theta);
    check(f, "rope", "out.cos", c, tol<T>());
    check(f, "rope", "out.sin", s, tol<T>());
    auto qr = nn::apply_rope(q, c, s);
    auto kr = nn::rope(k, pos, theta);
    check(f, "rope", "out.q_rot", qr, tol<T>());
    check(f, "rope", "out.k_rot", kr, tol<T>());
    Tensor<T, Shape<>> loss = loss_term(f, "q_rot", qr) + loss_term(f, "k_rot", kr);
    autograd::backward(tape, loss);
  }
  check(f, "rope", "grad.in.q", q.grad(), tol<T>());
  check(f, "rope", "grad.in.k", k.grad(), tol<T>());
}

template <class T>
void run_patch_embed(const std::string& name) {
  Fixture f(name);
  auto ws = f.shape("param.proj.weight");
  nn::PatchEmbed<T> pe(ws[1], ws[0], ws[2]);
  load_params<T>(f, pe);
  auto x = input<4, T>(f, "x");
  {
    autograd::Tape tape;
    auto y = pe(x);
    check(f, name, "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check(f, name, "grad.in.x", x.grad(), tol<T>());
  check_param_grads<T>(f, name, pe, tol<T>());
}
template <class T>
void patch_embed_case() { run_patch_embed<T>("patch_embed"); }
template <class T>
void patch_embed_p4_case() { run_patch_embed<T>("patch_embed_p4"); }

template <class T>
void attention_case() {
  Fixture f("attention");
  const auto D = f.shape("in.x")[2];
  nn::Attention<T> attn(D, f.meta_int("num_heads"));
  load_params<T>(f, attn);
  auto x = input<3, T>(f, "x");
  {
    autograd::Tape tape;
    auto y = attn(x);
    check(f, "attention", "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check(f, "attention", "grad.in.x", x.grad(), tol<T>(1e-3));
  check_param_grads<T>(f, "attention", attn, tol<T>(1e-3));
}

template <class T>
void attention_gqa_case() {
  Fixture f("attention_gqa");
  const auto D = f.shape("in.x")[2];
  nn::LlamaAttention<T> attn(D, f.meta_int("num_heads"), f.meta_int("num_kv_heads"), 0, f.meta_double("rope_theta"));
  load_params<T>(f, attn);
  auto x = input<3, T>(f, "x");
  auto pos = index_input<1>(f, "positions");
  {
    autograd::Tape tape;
    auto y = attn(x, pos);
    check(f, "attention_gqa", "out.y", y, tol<T>());
    autograd::backward(tape, loss_term(f, "y", y));
  }
  check(f, "attention_gqa", "grad.in.x", x.grad(), tol<T>(1e-3));
  check_param_grads<T>(f, "attention_gqa", attn, tol<T>(1e-3));
}

template <class T>
void cross_entropy_case() {
  Fixture f("cross_entropy");
  auto z = input<2, T>(f, "logits");
  auto target = index_input<1>(f, "target");
  {
    autograd::Tape tape;
    auto loss = nn::cross_entropy(z, target);
    check(f, "cross_entropy", "out.loss", loss, tol<T>());
    autograd::backward(tape, loss_term(f, "loss", loss));
  }
  check(f, "cross_entropy", "grad.in.logits", z.grad(), tol<T>());
}

template <class T>
void softmax_entropy_case() {
  Fixture f("softmax_entropy");
  auto z = input<2, T>(f, "logits");
  {
    autograd::Tape tape;
    auto h = nn::softmax_entropy(z);
    check(f, "softmax_entropy", "out.entropy", h, tol<T>());
    autograd::backward(tape, loss_term(f, "entropy", h));
  }
  check(f, "softmax_entropy", "grad.in.logits", z.grad(), tol<T>());
}

}  // namespace

TEST_CASE("parity: linear") { BOTH_PRECISIONS(linear_case) }
TEST_CASE("parity: linear_nobias") { BOTH_PRECISIONS(linear_nobias_case) }
TEST_CASE("parity: layernorm") { BOTH_PRECISIONS(layernorm_case) }
TEST_CASE("parity: rmsnorm") { BOTH_PRECISIONS(rmsnorm_case) }
TEST_CASE("parity: gelu_exact") { BOTH_PRECISIONS(gelu_exact_case) }
TEST_CASE("parity: gelu_tanh") { BOTH_PRECISIONS(gelu_tanh_case) }
TEST_CASE("parity: silu") { BOTH_PRECISIONS(silu_case) }
TEST_CASE("parity: swiglu_mlp") { BOTH_PRECISIONS(swiglu_case) }
TEST_CASE("parity: vit_residual_branches") { BOTH_PRECISIONS(vit_residual_branches_case) }
TEST_CASE("parity: embedding") { BOTH_PRECISIONS(embedding_case) }
TEST_CASE("parity: rope") { BOTH_PRECISIONS(rope_case) }
TEST_CASE("parity: patch_embed") { BOTH_PRECISIONS(patch_embed_case) }
TEST_CASE("parity: patch_embed_p4") { BOTH_PRECISIONS(patch_embed_p4_case) }
TEST_CASE("parity: attention") { BOTH_PRECISIONS(attention_case) }
TEST_CASE("parity: attention_gqa") { BOTH_PRECISIONS(attention_gqa_case) }
TEST_CASE("parity: cross_entropy") { BOTH_PRECISIONS(cross_entropy_case) }
TEST_CASE("parity: softmax_entropy") { BOTH_PRECISIONS(softmax_entropy_case) }
