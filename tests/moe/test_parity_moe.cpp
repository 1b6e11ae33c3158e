// Parity of the MoE components (MoE-LayerNorm, routers, aux losses, capacity routing, MoE-FFN with a
// linear router and in GMoE's cosine-router configuration) against the PyTorch fixtures described in
// tests/reference/README.md.

#include "parity.hpp"
#include "ttmoe/moe/moe_layernorm.hpp"
#include "ttmoe/nn/module.hpp"

using namespace ttmoe;
using namespace ttmoe::test;

namespace {

template <class T>
void run_moe_layernorm(const std::string& file, bool per_token, double tol, double gtol) {
  Fixture f(file);
  moe::MoELayerNorm<T> m;
  m.weight = f.get<1, T>("param.weight");
  m.bias = f.get<1, T>("param.bias");
  m.experts.weight_delta = leaf<2, T>(f, "param.experts.weight_delta");
  m.experts.bias_delta = leaf<2, T>(f, "param.experts.bias_delta");
  m.router.weight = leaf<2, T>(f, "param.router.weight");
  m.router.bias = leaf<1, T>(f, "param.router.bias");
  m.per_token = per_token;
  m.eps = f.meta_double("eps");
  auto x = leaf<3, T>(f, "in.x");
  {
    autograd::Tape tape;
    auto y = m.forward(x);
    auto bl = m.balance_loss();
    Tensor<T, Shape<>> loss = upstream_term(f, "y", y) + upstream_term(f, "balance_loss", bl);
    if (per_token) {
      auto p3 = m.probs.reshape(DynShape<3>(x.extent(0), x.extent(1), m.num_experts()));
      loss = loss + upstream_term(f, "probs", p3);
      check_close(f, "out.probs", p3, tol);
      require_equal_ints(f, "out.top_index", m.top_index.reshape(DynShape<2>(x.extent(0), x.extent(1))));
    } else {
      loss = loss + upstream_term(f, "probs", m.probs);
      check_close(f, "out.probs", m.probs, tol);
      require_equal_ints(f, "out.top_index", m.top_index.reshape(DynShape<1>(x.extent(0))));
    }
    check_close(f, "out.y", y, tol);
    check_close(f, "out.balance_loss", bl, tol);
    autograd::backward(tape, loss);
  }
  check_close(f, "grad.in.x", x.grad(), gtol);
  check_close(f, "grad.param.experts.weight_delta", grad_or_zero(m.experts.weight_delta), gtol);
  check_close(f, "grad.param.experts.bias_delta", grad_or_zero(m.experts.bias_delta), gtol);
  check_close(f, "grad.param.router.weight", m.router.weight.grad(), gtol);
  check_close(f, "grad.param.router.bias", m.router.bias.grad(), gtol);
}

}  // namespace

TEST_CASE("parity moe_layernorm double", "[parity][moe]") { run_moe_layernorm<double>("moe_layernorm", false, 1e-9, 1e-9); }
TEST_CASE("parity moe_layernorm float", "[parity][moe]") { run_moe_layernorm<float>("moe_layernorm", false, 1e-4, 1e-3); }
TEST_CASE("parity moe_layernorm_per_token double", "[parity][moe]") {
  run_moe_layernorm<double>("moe_layernorm_per_token", true, 1e-9, 1e-9);
}
TEST_CASE("parity moe_layernorm_per_token float", "[parity][moe]") {
  run_moe_layernorm<float>("moe_layernorm_per_token", true, 1e-4, 1e-3);
}

// ---- routers ---------------------------------------------------------------------------------------
#include "ttmoe/moe/aux_losses.hpp"
#include "ttmoe/moe/capacity.hpp"
#include "ttmoe/moe/cosine_router.hpp"
#include "ttmoe/moe/moe_ffn.hpp"
#include "ttmoe/moe/router.hpp"

namespace {

// Each runs in double (tolerance 1e-9) and in float against the same float64 references: outputs
// within 1e-5 and gradients within 1e-4, relative to max(1, |ref|) (float32 rounding through a
// softmax, an L2 normalisation or erf; measured at most 1.4e-6 and 7.9e-6, both on the clamped cosine
// router whose logits reach 100); the picks must match exactly in both.
// Named apart from test_parity_ttmm.cpp's Tol: a unity build (CI) compiles the suite as one TU.
struct RouterTol {
  double out, grad;
};
constexpr RouterTol kRouterDoubleTol{1e-9, 1e-9}, kRouterFloatTol{1e-5, 1e-4};

template <class T>
void check_router_outputs(const Fixture& f, const moe::RouterOutput<T>& o, Tensor<T, Shape<>>& loss, double tol) {
  check_close(f, "out.logits", o.logits, tol);
  check_close(f, "out.probs", o.probs, tol);
  check_close(f, "out.gates", o.gates, tol);
  require_equal_ints(f, "out.indices", o.indices);
  loss = upstream_term(f, "logits", o.logits) + upstream_term(f, "probs", o.probs) +
         upstream_term(f, "gates", o.gates);
}

template <class T = double>
void run_linear_router(const std::string& file, RouterTol tol = kRouterDoubleTol) {
  Fixture f(file);
  moe::LinearRouter<T> r;
  r.weight = leaf<2, T>(f, "param.weight");
  const bool has_bias = f.has("param.bias");
  if (has_bias) r.bias = leaf<1, T>(f, "param.bias");
  r.top_k = f.meta_int("top_k");
  r.renormalize = f.meta("renormalize") == "true";
  auto x = leaf<2, T>(f, "in.x");
  {
    autograd::Tape tape;
    auto o = r.forward(x);
    Tensor<T, Shape<>> loss;
    check_router_outputs(f, o, loss, tol.out);
    autograd::backward(tape, loss);
  }
  check_close(f, "grad.in.x", x.grad(), tol.grad);
  check_close(f, "grad.param.weight", r.weight.grad(), tol.grad);
  if (has_bias) check_close(f, "grad.param.bias", r.bias.grad(), tol.grad);
}

template <class T = double>
void run_cosine_router(const std::string& file, RouterTol tol = kRouterDoubleTol) {
  Fixture f(file);
  moe::CosineRouter<T> r;
  r.proj.weight = leaf<2, T>(f, "param.proj.weight");
  r.proj.bias = leaf<1, T>(f, "param.proj.bias");
  r.codebook = leaf<2, T>(f, "param.codebook");
  r.log_scale = leaf<0, T>(f, "param.log_scale");
  r.top_k = f.meta_int("top_k");
  r.gate_noise = f.meta_double("gate_noise");
  auto x = leaf<2, T>(f, "in.x");
  Tensor<T, DynShape<2>> noise;
  if (f.meta("training") == "true") noise = f.get<2, T>("in.noise");
  {
    autograd::Tape tape;
    auto o = r.forward(x, noise);
    Tensor<T, Shape<>> loss;
    check_router_outputs(f, o, loss, tol.out);
    autograd::backward(tape, loss);
  }
  check_close(f, "grad.in.x", x.grad(), tol.grad);
  check_close(f, "grad.param.proj.weight", r.proj.weight.grad(), tol.grad);
  check_close(f, "grad.param.proj.bias", r.proj.bias.grad(), tol.grad);
  check_close(f, "grad.param.codebook", r.codebook.grad(), tol.grad);
  check_close(f, "grad.param.log_scale", grad_or_zero(r.log_scale), tol.grad);
}

template <class T = double>
void run_aux(const std::string& file, RouterTol tol = kRouterDoubleTol) {
  Fixture f(file);
  auto logits = leaf<2, T>(f, "in.logits");
  auto noise = f.get<2, T>("in.noise");
  {
    autograd::Tape tape;
    auto a = moe::gmoe_aux_losses(logits, noise, f.meta_int("top_k"), f.meta_double("gate_noise"));
    check_close(f, "out.noisy_logits", a.noisy_logits, tol.out);
    check_close(f, "out.threshold", a.threshold, tol.out);
    check_close(f, "out.importance", a.importance, tol.out);
    check_close(f, "out.load", a.load, tol.out);
    check_close(f, "out.l_imp", a.l_imp, tol.out);
    check_close(f, "out.l_load", a.l_load, tol.out);
    check_close(f, "out.l_aux", a.l_aux, tol.out);
    autograd::backward(tape, a.l_aux);  // upstream is exactly 1.0
  }
  check_close(f, "grad.in.logits", logits.grad(), tol.grad);
}

}  // namespace

TEST_CASE("parity linear_router", "[parity][moe]") { run_linear_router("linear_router"); }
TEST_CASE("parity linear_router_top1", "[parity][moe]") { run_linear_router("linear_router_top1"); }
TEST_CASE("parity cosine_router", "[parity][moe]") { run_cosine_router("cosine_router"); }
TEST_CASE("parity cosine_router_clamp", "[parity][moe]") { run_cosine_router("cosine_router_clamp"); }
TEST_CASE("parity moe_aux_losses", "[parity][moe]") { run_aux("moe_aux_losses"); }
TEST_CASE("parity moe_aux_losses_k2", "[parity][moe]") { run_aux("moe_aux_losses_k2"); }
TEST_CASE("parity linear_router float", "[parity][moe]") { run_linear_router<float>("linear_router", kRouterFloatTol); }
TEST_CASE("parity linear_router_top1 float", "[parity][moe]") { run_linear_router<float>("linear_router_top1", kRouterFloatTol); }
TEST_CASE("parity cosine_router float", "[parity][moe]") { run_cosine_router<float>("cosine_router", kRouterFloatTol); }
TEST_CASE("parity cosine_router_clamp float", "[parity][moe]") { run_cosine_router<float>("cosine_router_clamp", kRouterFloatTol); }
TEST_CASE("parity moe_aux_losses float", "[parity][moe]") { run_aux<float>("moe_aux_losses", kRouterFloatTol); }
TEST_CASE("parity moe_aux_losses_k2 float", "[parity][moe]") { run_aux<float>("moe_aux_losses_k2", kRouterFloatTol); }

TEST_CASE("parity capacity_routing", "[parity][moe]") {
  Fixture f("capacity_routing");
  auto logits = f.get<2>("in.logits");
  const index_t N = logits.extent(0), E = logits.extent(1);
  Tensor<double, DynShape<2>> scores = softmax<-1>(logits);
  auto [ts, ti] = topk(scores, 1);
  auto plan = moe::plan_capacity(ti.to_vector(), ts.to_vector(), E, f.meta_int("top_k"), f.meta_double("capacity_factor"));
  auto i1 = [&](const std::vector<std::int64_t>& v) {
    return IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(v.size())), v);
  };
  std::vector<double> gate(N);
  for (index_t n = 0; n < N; ++n) gate[n] = ts(n, 0) * double(plan.kept[n]);
  check_close(f, "out.scores", scores, 1e-9);
  require_equal_ints(f, "out.top_index", ti.reshape(DynShape<1>(N)));
  check_close(f, "out.top_score", ts.reshape(DynShape<1>(N)), 1e-9);
  require_equal_ints(f, "out.order", i1(plan.order));
  require_equal_ints(f, "out.slot", i1(plan.slot));
  require_equal_ints(f, "out.kept", i1(plan.kept));
  require_equal_ints(f, "out.expert_load", i1(plan.expert_load));
  check_close(f, "out.gate", Tensor<double, DynShape<1>>::from_host(DynShape<1>(N), gate), 1e-12);
  REQUIRE(plan.capacity == f.get<0, std::int64_t>("out.capacity").item());
}

namespace {

/// Loads experts.{e}.fc1/fc2 of a MoE-FFN fixture as trainable leaves of type T.
template <class T>
std::vector<moe::FFNExpert<T>> load_experts(const Fixture& f, index_t E) {
  std::vector<moe::FFNExpert<T>> xs;
  for (index_t e = 0; e < E; ++e) {
    const std::string p = "param.experts." + std::to_string(e) + ".";
    moe::FFNExpert<T> x;
    x.fc1.weight = leaf<2, T>(f, p + "fc1.weight");
    x.fc1.bias = leaf<1, T>(f, p + "fc1.bias");
    x.fc2.weight = leaf<2, T>(f, p + "fc2.weight");
    x.fc2.bias = leaf<1, T>(f, p + "fc2.bias");
    xs.push_back(std::move(x));
  }
  return xs;
}

template <class T, class R>
void check_expert_grads(const Fixture& f, moe::MoEFFN<T, cpu, R>& m, double gtol) {
  for (std::size_t e = 0; e < m.experts.size(); ++e) {
    const std::string p = "grad.param.experts." + std::to_string(e) + ".";
    check_close(f, p + "fc1.weight", grad_or_zero(m.experts[e].fc1.weight), gtol);
    check_close(f, p + "fc1.bias", grad_or_zero(m.experts[e].fc1.bias), gtol);
    check_close(f, p + "fc2.weight", grad_or_zero(m.experts[e].fc2.weight), gtol);
    check_close(f, p + "fc2.bias", grad_or_zero(m.experts[e].fc2.bias), gtol);
  }
}

/// The GMoE-configured layer: cosine router, fixed noise (none in evaluation), top-k with/without
/// renormalisation, capacity small enough to drop; output, routing decisions, aux losses and every gradient.
template <class T>
void run_moe_ffn_gmoe(const std::string& file, double tol, double gtol) {
  Fixture f(file);
  moe::GMoEFFN<T> m;
  m.router.proj.weight = leaf<2, T>(f, "param.router.proj.weight");
  m.router.proj.bias = leaf<1, T>(f, "param.router.proj.bias");
  m.router.codebook = leaf<2, T>(f, "param.router.codebook");
  m.router.log_scale = leaf<0, T>(f, "param.router.log_scale");
  m.router.top_k = f.meta_int("top_k");
  m.router.renormalize = f.meta("renormalize") == "true";
  m.router.gate_noise = f.meta_double("gate_noise");
  const index_t E = m.router.num_experts(), k = m.router.top_k;
  REQUIRE(E == index_t(f.meta_int("num_experts")));
  m.experts = load_experts<T>(f, E);
  m.capacity_factor = f.meta_double("capacity_factor");
  auto names = nn::named_parameters<T>(m);
  REQUIRE(names.size() == std::size_t(4 + 4 * E));
  for (auto& p : names) REQUIRE(f.has("param." + p.name));
  auto x = leaf<3, T>(f, "in.x");
  // Evaluation fixtures hold a zero noise; the layer gets none (the undefined tensor) as in evaluation.
  Tensor<T, DynShape<2>> noise;
  if (f.meta("training") == "true") noise = f.get<2, T>("in.noise");
  const index_t N = x.extent(0) * x.extent(1);
  {
    autograd::Tape tape;
    auto y = m.forward(x, noise);
    auto aux = m.aux_losses();
    const auto& o = m.routing.out;
    REQUIRE(m.routing.plan.capacity == std::int64_t(f.meta_int("capacity")));
    require_equal_ints(f, "out.top_index", o.indices);
    auto i2 = [&](const std::vector<std::int64_t>& v) {
      return IndexTensor<DynShape<2>>::from_host(DynShape<2>(N, k), v);
    };
    require_equal_ints(f, "out.slot", i2(m.routing.plan.slot));
    require_equal_ints(f, "out.kept", i2(m.routing.plan.kept));
    check_close(f, "out.y", y, tol);
    check_close(f, "out.logits", o.logits, tol);
    check_close(f, "out.probs", o.probs, tol);
    check_close(f, "out.gates", o.top_gates, tol);
    check_close(f, "out.l_imp", aux.l_imp, tol);
    check_close(f, "out.l_load", aux.l_load, tol);
    check_close(f, "out.l_aux", aux.l_aux, tol);
    Tensor<T, Shape<>> loss = upstream_term(f, "y", y) + upstream_term(f, "l_aux", aux.l_aux);
    autograd::backward(tape, loss);
  }
  check_close(f, "grad.in.x", x.grad(), gtol);
  check_close(f, "grad.param.router.proj.weight", m.router.proj.weight.grad(), gtol);
  check_close(f, "grad.param.router.proj.bias", m.router.proj.bias.grad(), gtol);
  check_close(f, "grad.param.router.codebook", m.router.codebook.grad(), gtol);
  check_close(f, "grad.param.router.log_scale", m.router.log_scale.grad(), gtol);
  check_expert_grads(f, m, gtol);
}

}  // namespace

// The original fixture: a bias-less linear router (moe::LinearRouter without bias), top-1, no noise.
TEST_CASE("parity moe_ffn", "[parity][moe]") {
  Fixture f("moe_ffn");
  moe::MoEFFN<double> m;
  m.router.weight = leaf<2>(f, "param.router.weight");
  const index_t E = m.router.num_experts();
  m.experts = load_experts<double>(f, E);
  m.capacity_factor = f.meta_double("capacity_factor");
  // Parameter names follow the fixture's (the absent router bias is not visited).
  auto names = nn::named_parameters<double>(m);
  REQUIRE(names.size() == std::size_t(1 + 4 * E));
  for (auto& p : names) REQUIRE(f.has("param." + p.name));
  auto x = leaf<3>(f, "in.x");
  const index_t B = x.extent(0), T = x.extent(1);
  {
    autograd::Tape tape;
    auto y = m.forward(x);
    check_close(f, "out.y", y, 1e-9);
    check_close(f, "out.probs", m.routing.out.probs.reshape(DynShape<3>(B, T, E)), 1e-9);
    auto i2 = [&](const std::vector<std::int64_t>& v) {
      return IndexTensor<DynShape<2>>::from_host(DynShape<2>(B, T), v);
    };
    require_equal_ints(f, "out.top_index", i2(m.routing.top_index));
    require_equal_ints(f, "out.slot", i2(m.routing.plan.slot));
    require_equal_ints(f, "out.kept", i2(m.routing.plan.kept));
    autograd::backward(tape, upstream_term(f, "y", y));
  }
  check_close(f, "grad.in.x", x.grad(), 1e-9);
  check_close(f, "grad.param.router.weight", m.router.weight.grad(), 1e-9);
  check_expert_grads(f, m, 1e-9);
}

TEST_CASE("parity moe_ffn_gmoe_top1 double", "[parity][moe]") { run_moe_ffn_gmoe<double>("moe_ffn_gmoe_top1", 1e-9, 1e-9); }
TEST_CASE("parity moe_ffn_gmoe_top1_eval double", "[parity][moe]") { run_moe_ffn_gmoe<double>("moe_ffn_gmoe_top1_eval", 1e-9, 1e-9); }
TEST_CASE("parity moe_ffn_gmoe_top1_eval float", "[parity][moe]") { run_moe_ffn_gmoe<float>("moe_ffn_gmoe_top1_eval", 1e-4, 1e-3); }
TEST_CASE("parity moe_ffn_gmoe_top2 double", "[parity][moe]") { run_moe_ffn_gmoe<double>("moe_ffn_gmoe_top2", 1e-9, 1e-9); }
TEST_CASE("parity moe_ffn_gmoe_top1 float", "[parity][moe]") { run_moe_ffn_gmoe<float>("moe_ffn_gmoe_top1", 1e-4, 1e-3); }
TEST_CASE("parity moe_ffn_gmoe_top2 float", "[parity][moe]") { run_moe_ffn_gmoe<float>("moe_ffn_gmoe_top2", 1e-4, 1e-3); }
