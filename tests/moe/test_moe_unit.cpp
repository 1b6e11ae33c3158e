// Unit tests of the MoE / TTMM modules' construction paths (initialisation, parameter names,
// merge round trips) and of the MoE-FFN's routing rules (top-k capacity rounds, dropping, upcycling,
// configuration errors) that the fixtures do not cover.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "parity.hpp"
#include "ttmoe/moe/capacity.hpp"
#include "ttmoe/moe/cosine_router.hpp"
#include "ttmoe/moe/dispatch_rows.hpp"
#include "ttmoe/moe/expert_schedule.hpp"
#include "ttmoe/moe/gated_combine.hpp"
#include "ttmoe/moe/lora.hpp"
#include "ttmoe/moe/moe_ffn.hpp"
#include "ttmoe/moe/moe_layernorm.hpp"
#include "ttmoe/nn/module.hpp"

using namespace ttmoe;

namespace {
template <std::size_t R>
Tensor<double, DynShape<R>> randn(std::mt19937_64& rng, std::array<index_t, R> e) {
  std::normal_distribution<double> n;
  std::vector<double> v(extent_product(e, 0, R));
  for (auto& x : v) x = n(rng);
  return Tensor<double, DynShape<R>>::from_host(DynShape<R>::from_extents(e), v);
}
}  // namespace

TEST_CASE("moe_layernorm init equals the frozen LayerNorm", "[moe]") {
  std::mt19937_64 rng(1);
  auto w = randn<1>(rng, {7}), b = randn<1>(rng, {7});
  auto m = moe::MoELayerNorm<double>::from_layernorm(w, b, 4, rng);
  std::vector<std::string> names;
  for (auto& p : nn::named_parameters<double>(m)) names.push_back(p.name);
  REQUIRE(names == std::vector<std::string>{"weight", "bias", "experts.weight_delta", "experts.bias_delta",
                                            "router.weight", "router.bias"});
  REQUIRE(nn::parameter_count(m, true) == 4 * 7 * 3 + 4);  // deltas + router; shared affine frozen
  auto x = randn<3>(rng, {2, 3, 7});
  auto y = m.forward(x);
  for (index_t i = 0; i < 2; ++i)
    for (index_t t = 0; t < 3; ++t) {
      double mu = 0, var = 0;
      for (index_t d = 0; d < 7; ++d) mu += x(i, t, d) / 7;
      for (index_t d = 0; d < 7; ++d) var += (x(i, t, d) - mu) * (x(i, t, d) - mu) / 7;
      for (index_t d = 0; d < 7; ++d)
        REQUIRE(std::abs(y(i, t, d) - ((x(i, t, d) - mu) / std::sqrt(var + 1e-6) * w(d) + b(d))) < 1e-12);
    }
  // A perfectly balanced router gives a balance loss of 1 at uniform probabilities: here it is >= 0.
  REQUIRE(m.balance_loss().item() >= 0);
}

TEST_CASE("lora wrap starts as the base layer and merge round-trips", "[lora]") {
  std::mt19937_64 rng(2);
  auto W = randn<2>(rng, {5, 6});
  auto b = randn<1>(rng, {5});
  auto l = moe::LoRALinear<double>::wrap(W, b, 3, 6.0, rng);
  REQUIRE(l.scaling == 2.0);
  for (double a : l.lora_A.weight.to_vector()) REQUIRE(std::abs(a) <= 1 / std::sqrt(6.0));
  auto x = randn<2>(rng, {4, 6});
  Tensor<double, DynShape<2>> base = matmul<false, true>(x, W) + b;
  REQUIRE(test::max_rel_error(l.forward(x), base) < 1e-14);
  l.lora_B.weight = randn<2>(rng, {5, 3});
  auto y = l.forward(x);
  l.merge();
  REQUIRE(test::max_rel_error(l.forward(x), y) < 1e-12);
  l.unmerge();
  REQUIRE(test::max_rel_error(l.forward(x), y) < 1e-12);
}

TEST_CASE("cosine_router init", "[moe]") {
  std::mt19937_64 rng(3);
  auto r = moe::CosineRouter<double>::init(10, 16, 4, rng);
  REQUIRE(std::abs(r.log_scale.item() - std::log(2.0)) < 1e-15);
  std::vector<std::string> names;
  for (auto& p : nn::named_parameters<double>(r)) names.push_back(p.name);
  REQUIRE(names == std::vector<std::string>{"proj.weight", "proj.bias", "codebook", "log_scale"});
  auto o = r.forward(randn<2>(rng, {5, 10}), moe::CosineRouter<double>::draw_noise(5, 4, rng));
  REQUIRE(o.indices.extent(1) == 1);
}

TEST_CASE("normalized_rows_matmul equals l2_normalize<1>(h) @ c: values and both gradients, a zero row as torch",
          "[moe]") {
  // Sizes past the GEMMs' serial cut-off (GMoE's K = 256, E = 6), so the fused op's backward runs the
  // same parallel kernels as in training; the composition it replaced is the reference.
  std::mt19937_64 rng(12);
  const index_t N = 300, K = 256, E = 6;
  auto h0 = randn<2>(rng, {N, K});
  auto hv = h0.to_vector();
  for (index_t j = 0; j < K; ++j) hv[std::size_t(7 * K + j)] = 0.0;  // row 7 is zero: the norm's clamp
  auto c = randn<2>(rng, {K, E});
  const auto g = randn<2>(rng, {N, E});
  auto run = [&](bool fused) {
    auto h = Tensor<double, DynShape<2>>::from_host(DynShape<2>(N, K), hv);
    auto cc = Tensor<double, DynShape<2>>::from_host(DynShape<2>(K, E), c.to_vector());
    h.set_requires_grad();
    cc.set_requires_grad();
    autograd::Tape tape;
    Tensor<double, DynShape<2>> out = fused ? moe::normalized_rows_matmul(h, cc) : matmul(moe::l2_normalize<1>(h), cc);
    const auto values = out.to_vector();
    Tensor<double, Shape<>> loss = sum_all(out * g);
    autograd::backward(tape, loss);
    return std::tuple{values, h.grad().to_vector(), cc.grad().to_vector()};
  };
  auto [v1, dh1, dc1] = run(true);
  auto [v0, dh0, dc0] = run(false);
  auto close = [](const std::vector<double>& a, const std::vector<double>& b, double tol) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
    return worst <= tol;
  };
  CHECK(close(v1, v0, 1e-13));
  CHECK(close(dc1, dc0, 1e-12));
  // The zero row: the composition's sqrt VJP at 0 makes NaN there; the fused op gives torch's
  // F.normalize gradient, (g / eps) c^T (the clamp passes nothing to the norm), relative to its size.
  const auto cv = c.to_vector(), gv = g.to_vector();
  for (index_t j = 0; j < K; ++j) {
    double want = 0;
    for (index_t e = 0; e < E; ++e) want += gv[std::size_t(7 * E + e)] * cv[std::size_t(j * E + e)] / 1e-12;
    CHECK(std::abs(dh1[std::size_t(7 * K + j)] / want - 1) < 1e-12);
  }
  for (index_t j = 0; j < K; ++j) dh1[std::size_t(7 * K + j)] = dh0[std::size_t(7 * K + j)] = 0;
  CHECK(close(dh1, dh0, 1e-12));
  CHECK_THROWS_AS(moe::normalized_rows_matmul(h0, randn<2>(rng, {K + 1, E})), ShapeError);
}

// ---- MoE-FFN: capacity with top-k, generic routers, upcycling, dropping, configuration errors -------

namespace {
/// Builds a MoE-FFN over E random experts (nn::Mlp D -> H -> D, exact GELU) with the given router.
template <class Router>
moe::MoEFFN<double, cpu, Router> make_ffn(Router r, index_t D, index_t H, std::uint64_t seed) {
  moe::MoEFFN<double, cpu, Router> m;
  m.router = std::move(r);
  for (index_t e = 0; e < m.router.num_experts(); ++e)
    m.experts.push_back(moe::FFNExpert<double>(D, H, nn::Activation::gelu, seed + 10 * std::uint64_t(e)));
  return m;
}

moe::LinearRouter<double> linear_router(std::mt19937_64& rng, index_t E, index_t D, index_t k, bool renorm) {
  moe::LinearRouter<double> r;
  r.weight = randn<2>(rng, {E, D});
  r.bias = randn<1>(rng, {E});
  r.weight.set_requires_grad();
  r.bias.set_requires_grad();
  r.top_k = k;
  r.renormalize = renorm;
  return r;
}

/// Requires `f` to throw exactly type Err with `needle` in its message (a clear error, not any error).
template <class Err, class F>
void require_error(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const Err& e) {
    INFO(e.what());
    REQUIRE(std::string(e.what()).find(needle) != std::string::npos);
    return;
  } catch (const std::exception& e) {
    FAIL("wrong exception type: " << e.what());
  }
  FAIL("no exception; expected one mentioning '" << needle << "'");
}
}  // namespace

TEST_CASE("capacity formula", "[moe]") {
  REQUIRE(moe::expert_capacity(13, 3, 1, 1.5) == 7);
  REQUIRE(moe::expert_capacity(14, 4, 1, 1.5) == 6);
  REQUIRE(moe::expert_capacity(14, 4, 2, 1.5) == 12);
  REQUIRE(moe::expert_capacity(14, 4, 2, 0.25) == 2);  // int(0.25 * 4) = 1 per round
  REQUIRE(moe::expert_capacity(14, 4, 2, std::numeric_limits<double>::infinity()) == 14);
  REQUIRE_THROWS_AS(moe::expert_capacity(14, 4, 1, 0.0), ValueError);
  REQUIRE_THROWS_AS(moe::expert_capacity(14, 4, 1, -1.5), ValueError);
  REQUIRE_THROWS_AS(moe::expert_capacity(14, 4, 1, std::nan("")), ValueError);
}

TEST_CASE("capacity plan: top-2 rounds share one priority order and count dropped picks", "[moe]") {
  // Token picks (first, second) and priorities; C = 2 * int(0.75 * ceil(4 / 2)) = 2.
  const std::vector<std::int64_t> picks{0, 1, /*t1*/ 0, 1, /*t2*/ 1, 0, /*t3*/ 0, 1};
  const std::vector<double> prio{0.9, 0.5, 0.8, 0.7};
  auto p = moe::plan_capacity(picks, prio, 2, 2, 0.75);
  REQUIRE(p.capacity == 2);
  REQUIRE(p.order == std::vector<std::int64_t>{0, 2, 3, 1});
  // Round 1 in priority order: t0 e0 s0, t2 e1 s0, t3 e0 s1, t1 e0 s2 (dropped). Round 2 continues
  // every expert's count: t0 e1 s1, t2 e0 s3 (dropped: e0 overflowed in round 1), t3 e1 s2, t1 e1 s3.
  REQUIRE(p.slot == std::vector<std::int64_t>{0, 1, 2, 3, 0, 3, 1, 2});
  REQUIRE(p.kept == std::vector<std::int64_t>{1, 1, 0, 0, 1, 0, 1, 0});
  REQUIRE(p.expert_load == std::vector<std::int64_t>{2, 2});
  REQUIRE(p.dropped() == 4);
  REQUIRE(p.is_kept(2, 0));
  REQUIRE(!p.is_kept(2, 1));
  // Without a limit nothing is dropped; k = 1 keeps the top-1 semantics (slot = rank among the expert's tokens).
  auto q = moe::plan_capacity(picks, prio, 2, 2, std::numeric_limits<double>::infinity());
  REQUIRE(q.dropped() == 0);
  auto r = moe::plan_capacity(std::vector<std::int64_t>{1, 1, 0, 1}, prio, 2, 1, 1.0);  // C = 2
  REQUIRE(r.slot == std::vector<std::int64_t>{0, 2, 0, 1});
  REQUIRE(r.kept == std::vector<std::int64_t>{1, 0, 1, 1});
  REQUIRE_THROWS_AS(moe::plan_capacity(picks, prio, 2, 1, 1.0), ValueError);  // 8 picks for 4 tokens at k = 1
  REQUIRE_THROWS_AS(moe::plan_capacity(picks, prio, 2, 3, 1.0), ValueError);  // k > E
}

TEST_CASE("moe_ffn top-2 without capacity limit is the gated mixture of its experts", "[moe]") {
  std::mt19937_64 rng(5);
  const index_t B = 2, T = 3, D = 4, H = 5, E = 3, N = B * T;
  auto m = make_ffn(linear_router(rng, E, D, 2, true), D, H, 11);
  m.capacity_factor = std::numeric_limits<double>::infinity();
  auto x = randn<3>(rng, {B, T, D});
  auto y = m.forward(x);
  REQUIRE(m.routing.plan.dropped() == 0);
  auto xf = x.reshape(DynShape<2>(N, D));
  const auto& o = m.routing.out;
  for (index_t n = 0; n < N; ++n) {
    REQUIRE(std::abs(o.top_gates(n, 0) + o.top_gates(n, 1) - 1.0) < 1e-12);  // renormalised
    REQUIRE(o.indices(n, 0) != o.indices(n, 1));
  }
  std::vector<Tensor<double, DynShape<2>>> full;
  for (index_t e = 0; e < E; ++e) full.push_back(m.experts[e](xf));
  for (index_t n = 0; n < N; ++n)
    for (index_t d = 0; d < D; ++d) {
      double ref = 0;
      for (index_t j = 0; j < 2; ++j) ref += o.top_gates(n, j) * full[o.indices(n, j)](n, d);
      REQUIRE(std::abs(y(n / T, n % T, d) - ref) < 1e-12);
    }
}

TEST_CASE("moe_ffn from_dense with a cosine router: top-2 renormalised copies reproduce the dense MLP", "[moe]") {
  std::mt19937_64 rng(6);
  const index_t B = 2, T = 4, D = 6, H = 7, E = 4, N = B * T;
  moe::FFNExpert<double> dense(D, H, nn::Activation::gelu, 3);
  auto router = moe::CosineRouter<double>::init(D, 8, E, rng);
  router.top_k = 2;
  router.renormalize = true;
  auto m = moe::GMoEFFN<double>::from_dense(dense, router, std::numeric_limits<double>::infinity());
  std::vector<std::string> names;
  for (auto& p : nn::named_parameters<double>(m)) names.push_back(p.name);
  REQUIRE(names.size() == std::size_t(4 + 4 * E));
  REQUIRE(names[0] == "router.proj.weight");
  REQUIRE(names[3] == "router.log_scale");
  REQUIRE(names[4] == "experts.0.fc1.weight");
  REQUIRE(names.back() == "experts.3.fc2.bias");
  // Deep copies: the experts are fresh trainable leaves, not views of the dense weights.
  REQUIRE(m.experts[1].fc1.weight.data() != dense.fc1.weight.data());
  REQUIRE(m.experts[1].fc1.weight.requires_grad());
  auto x = randn<3>(rng, {B, T, D});
  auto noise = moe::draw_router_noise<double>(N, E, rng);
  auto y = m.forward(x, noise);
  REQUIRE(test::max_rel_error(y.reshape(DynShape<2>(N, D)), dense(x.reshape(DynShape<2>(N, D)))) < 1e-12);
}

TEST_CASE("moe_ffn drops overflow picks: a dropped token outputs exactly zero", "[moe]") {
  std::mt19937_64 rng(7);
  const index_t B = 1, T = 6, D = 3, H = 4, E = 3, N = B * T;
  moe::LinearRouter<double> r;
  r.weight = Tensor<double, DynShape<2>>::zeros(DynShape<2>(E, D));  // every token: the same probabilities,
  r.bias = Tensor<double, DynShape<1>>::from_host(DynShape<1>(E), {2.0, 0.0, -1.0});  // expert 0 first
  auto m = make_ffn(r, D, H, 21);
  m.capacity_factor = 1.0;  // C = int(1 * ceil(6 / 3)) = 2
  auto x = randn<3>(rng, {B, T, D});
  auto y = m.forward(x);
  // Equal priorities: the lower token wins, so tokens 0 and 1 keep expert 0's two slots.
  REQUIRE(m.routing.plan.kept == std::vector<std::int64_t>{1, 1, 0, 0, 0, 0});
  auto ye = m.experts[0](x.reshape(DynShape<2>(N, D)));
  const double p0 = m.routing.out.probs(0, 0);
  for (index_t n = 0; n < N; ++n)
    for (index_t d = 0; d < D; ++d) {
      if (n < 2)
        REQUIRE(std::abs(y(0, n, d) - p0 * ye(n, d)) < 1e-14);
      else
        REQUIRE(y(0, n, d) == 0.0);  // exactly: the residual alone carries a dropped token
    }
}

TEST_CASE("moe_ffn aux losses come from the routing state, and the linear router noise option", "[moe]") {
  std::mt19937_64 rng(8);
  const index_t B = 2, T = 5, D = 4, H = 3, E = 4, N = B * T;
  auto m = make_ffn(linear_router(rng, E, D, 2, false), D, H, 31);
  m.router.gate_noise = 0.5;
  auto x = randn<3>(rng, {B, T, D});
  auto noise = moe::draw_router_noise<double>(N, E, rng);
  m.forward(x, noise);
  const auto& o = m.routing.out;
  REQUIRE(o.noise_std == 0.5 / E);
  Tensor<double, DynShape<2>> expect_noisy = o.logits + noise * (0.5 / E);
  REQUIRE(test::max_rel_error(o.noisy_logits, expect_noisy) < 1e-15);
  Tensor<double, DynShape<2>> expect_probs = softmax<-1>(expect_noisy);
  REQUIRE(test::max_rel_error(o.probs, expect_probs) < 1e-15);
  auto a = m.aux_losses();
  auto b = moe::gmoe_aux_losses(o.logits, noise, 2, 0.5);
  REQUIRE(std::abs(a.l_aux.item() - b.l_aux.item()) < 1e-14);
  REQUIRE(a.l_aux.item() > 0);
  // Evaluation (no noise): the noisy logits are the clean ones; the CDF scale stays gate_noise / E.
  m.forward(x);
  REQUIRE(test::max_rel_error(m.routing.out.noisy_logits, m.routing.out.logits) == 0);
  REQUIRE(m.routing.out.noise_std == 0.5 / E);
}

TEST_CASE("moe_ffn expert dropout: fused act*mask equals fc2(dropout(act(fc1(x)))) per expert, values and input grad",
          "[moe]") {
  std::mt19937_64 rng(8);
  const index_t B = 2, T = 5, D = 4, H = 9, E = 3, N = B * T;
  const double p = 0.4;
  auto m = make_ffn(linear_router(rng, E, D, 1, false), D, H, 31);
  m.capacity_factor = std::numeric_limits<double>::infinity();
  m.expert_dropout = p;
  auto x = randn<3>(rng, {B, T, D});
  auto x_ref = Tensor<double, DynShape<3>>::from_host(DynShape<3>(B, T, D), x.to_vector());
  x.set_requires_grad();
  x_ref.set_requires_grad();
  const auto up = randn<2>(rng, {N, D});
  nn::Rng drop_rng(77), ref_rng(77);  // the same seed: the layer and the reference draw the same masks
  std::vector<double> y;
  {
    autograd::Tape tape;
    auto yt = m.forward(x, {}, &drop_rng);
    y = yt.to_vector();
    Tensor<double, Shape<>> loss = sum_all(yt.reshape(DynShape<2>(N, D)) * up);
    autograd::backward(tape, loss);
  }
  REQUIRE(m.routing.plan.dropped() == 0);
  // Reference: per expert in order, its tokens (ascending) through the unfused composition, gated.
  const auto top = m.routing.top_index;
  std::vector<double> y_ref(std::size_t(N * D), 0.0);
  std::size_t zeros = 0;
  {
    autograd::Tape tape;
    auto xf = x_ref.reshape(DynShape<2>(N, D));
    auto gates = m.router.forward(xf, {}).top_gates;  // [N, 1], recomputed on the reference's tape
    Tensor<double, Shape<>> loss = sum_all(xf * 0.0);
    for (index_t e = 0; e < E; ++e) {
      std::vector<std::int64_t> rows;
      for (index_t n = 0; n < N; ++n)
        if (top[std::size_t(n)] == std::int64_t(e)) rows.push_back(std::int64_t(n));
      if (rows.empty()) continue;
      auto idx = IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(rows.size())), rows);
      const auto& ex = m.experts[std::size_t(e)];
      auto hidden = nn::dropout(nn::activate(ex.act, ex.fc1(index_select(xf, idx))), p, true, ref_rng);
      for (double v : hidden.to_vector()) zeros += (v == 0.0);
      Tensor<double, DynShape<2>> ye = ex.fc2(hidden) * index_select(gates, idx);
      loss = loss + sum_all(ye * index_select(up, idx));
      for (std::size_t r = 0; r < rows.size(); ++r)
        for (index_t d = 0; d < D; ++d) y_ref[std::size_t(rows[r]) * D + d] = ye(index_t(r), d);
    }
    autograd::backward(tape, loss);
  }
  REQUIRE(zeros > 0);  // the masks did drop activations, so the comparison below sees them
  for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(std::abs(y[i] - y_ref[i]) < 1e-12);
  REQUIRE(test::max_rel_error(x.grad(), x_ref.grad()) < 1e-10);
}

TEST_CASE("moe_ffn configuration errors name the problem", "[moe]") {
  std::mt19937_64 rng(9);
  const index_t D = 4, H = 3, E = 3;
  auto x = randn<3>(rng, {2, 3, D});
  {
    moe::MoEFFN<double> fresh;
    require_error<ValueError>([&] { fresh.aux_losses(); }, "no forward");
  }
  {
    auto m = make_ffn(linear_router(rng, E, D, 4, false), D, H, 1);  // k > E
    require_error<ValueError>([&] { m.forward(x); }, "top_k = 4");
    m.router.top_k = 0;
    require_error<ValueError>([&] { m.forward(x); }, "top_k = 0");
  }
  {
    auto m = make_ffn(linear_router(rng, E, D, 1, false), D, H, 1);
    m.capacity_factor = 0;
    require_error<ValueError>([&] { m.forward(x); }, "capacity_factor");
    m.capacity_factor = -1.5;
    require_error<ValueError>([&] { m.forward(x); }, "capacity_factor");
  }
  {
    auto m = make_ffn(linear_router(rng, E, D + 1, 1, false), D, H, 1);  // router expects D + 1 features
    require_error<ShapeError>([&] { m.forward(x); }, "router takes 5 features");
  }
  {
    auto r = moe::CosineRouter<double>::init(D, 8, E, rng);
    auto m = make_ffn(r, D, H, 1);
    m.experts.pop_back();
    require_error<ValueError>([&] { m.forward(x); }, "3 outputs but there are 2 experts");
  }
  {
    auto m = make_ffn(linear_router(rng, E, D, 1, false), D, H, 1);
    m.experts[2] = moe::FFNExpert<double>(D + 1, H);
    require_error<ShapeError>([&] { m.forward(x); }, "expert 2");
  }
  {
    auto m = make_ffn(linear_router(rng, E, D, 1, false), D, H, 1);
    require_error<ShapeError>([&] { m.forward(x, moe::draw_router_noise<double>(5, E, rng)); }, "noise");
  }
  {
    auto r = moe::CosineRouter<double>::init(D, 8, E, rng);
    r.gate_noise = 0;
    auto m = make_ffn(r, D, H, 1);
    m.forward(x);
    require_error<ValueError>([&] { m.aux_losses(); }, "noise std > 0");
  }
}

TEST_CASE("schedule_experts: side by side only where the experts spread evenly over the threads", "[moe]") {
  // Six near-equal experts on 2 threads (GMoE-S/16's layer): 1139 + 1041 + 974 against 1104 + 1060 + 986.
  auto s = moe::schedule_experts({1104, 1139, 1060, 1041, 974, 986}, 2);
  CHECK(s.side_by_side);
  CHECK(s.longest_first == std::vector<index_t>{1, 0, 2, 3, 5, 4});
  // One expert holding half the tokens on 3 threads: 500 > 1.05 * 1000 / 3.
  s = moe::schedule_experts({500, 100, 100, 100, 100, 100}, 3);
  CHECK_FALSE(s.side_by_side);
  CHECK(s.longest_first.front() == 0);
  // Fewer experts with tokens than threads, one thread, one expert: one by one.
  CHECK_FALSE(moe::schedule_experts({100, 100, 100}, 4).side_by_side);
  CHECK_FALSE(moe::schedule_experts({100, 100, 100, 100}, 1).side_by_side);
  s = moe::schedule_experts({0, 300, 0}, 2);
  CHECK_FALSE(s.side_by_side);
  CHECK(s.longest_first == std::vector<index_t>{1});  // experts without tokens are left out
  // The imbalance bound: 3 x 100 + 1 x 130 on 2 threads finishes at 230 against an even 215 (1.07).
  CHECK_FALSE(moe::schedule_experts({100, 100, 100, 130}, 2).side_by_side);
  CHECK(moe::schedule_experts({100, 100, 100, 130}, 2, 1.1).side_by_side);
}

TEST_CASE("gated_combine equals stacking the parts and reading the picks times the gates", "[moe]") {
  // Values and both gradients against the composition, k = 1 and k = 2 with dropped picks; the picks
  // read every row of every part once, in a shuffled order.
  std::mt19937_64 rng(31);
  for (const index_t k : {index_t(1), index_t(2)}) {
    INFO("k = " << k);
    const index_t N = 11, D = 5;
    const std::vector<index_t> rows = {4, 3, N * k - 4 - 3 - 3};  // 3 picks are dropped
    std::vector<std::int64_t> part, row;
    for (std::size_t p = 0; p < rows.size(); ++p)
      for (index_t r = 0; r < rows[p]; ++r) part.push_back(std::int64_t(p)), row.push_back(r);
    for (int d = 0; d < 3; ++d) part.push_back(-1), row.push_back(0);
    std::vector<std::size_t> perm(part.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<std::int64_t> part_q(perm.size()), row_q(perm.size());
    for (std::size_t q = 0; q < perm.size(); ++q) part_q[q] = part[perm[q]], row_q[q] = row[perm[q]];
    std::vector<Tensor<double, DynShape<2>>> parts;
    for (const index_t r : rows) {
      parts.push_back(randn<2>(rng, {r, D}));
      parts.back().set_requires_grad();
    }
    auto gates = randn<2>(rng, {N, k});
    gates.set_requires_grad();
    const auto up = randn<2>(rng, {N, D});
    auto run = [&](bool fused) {
      for (auto& p : parts) p.zero_grad();
      gates.zero_grad();
      autograd::Tape tape;
      Tensor<double, DynShape<2>> y;
      if (fused) {
        y = moe::gated_combine(parts, part_q, row_q, gates);
      } else {  // the composition, written out here
        std::vector<Tensor<double, DynShape<2>>> stack = parts;
        stack.push_back(Tensor<double, DynShape<2>>::zeros(DynShape<2>(1, D)));
        std::vector<std::int64_t> offset = {0}, src;
        for (const index_t r : rows) offset.push_back(offset.back() + std::int64_t(r));
        for (std::size_t q = 0; q < part_q.size(); ++q)
          src.push_back(part_q[q] < 0 ? offset[3] : offset[std::size_t(part_q[q])] + row_q[q]);
        auto picked = index_select(concat<0>(stack), IndexTensor<DynShape<1>>::from_host(DynShape<1>(N * k), src));
        y = sum<1>(picked.reshape(DynShape<3>(N, k, D)) * gates.reshape(DynShape<3>(N, k, 1)));
      }
      Tensor<double, Shape<>> loss = sum_all(y * up);
      autograd::backward(tape, loss);
      std::vector<std::vector<double>> out = {y.to_vector(), gates.grad().to_vector()};
      for (auto& p : parts) out.push_back(p.grad().to_vector());
      return out;
    };
    const auto want = run(false), got = run(true);
    for (std::size_t i = 0; i < want.size(); ++i)
      for (std::size_t j = 0; j < want[i].size(); ++j) REQUIRE(got[i][j] == Approx(want[i][j]).margin(1e-12));
  }
}

TEST_CASE("gated_combine names the pick or part that breaks its contract", "[moe][errors]") {
  std::mt19937_64 rng(32);
  const std::vector<Tensor<double, DynShape<2>>> parts = {randn<2>(rng, {2, 3}), randn<2>(rng, {1, 3})};
  const auto gates = randn<2>(rng, {4, 1});
  CHECK_THROWS_WITH(moe::gated_combine(parts, {0, 0, 1}, {0, 1, 0}, gates), Catch::Contains("need 4 picks, got 3"));
  CHECK_THROWS_WITH(moe::gated_combine(parts, {0, 0, 1, 2}, {0, 1, 0, 0}, gates),
                    Catch::Contains("pick 3 reads row 0 of part 2, which does not exist"));
  CHECK_THROWS_WITH(moe::gated_combine(parts, {0, 0, 1, -1}, {0, 2, 0, 0}, gates),
                    Catch::Contains("pick 1 reads row 2 of part 0"));
  CHECK_THROWS_WITH(moe::gated_combine(parts, {0, 0, 1, 0}, {0, 1, 0, 1}, gates),
                    Catch::Contains("row 1 of part 0 is read by more than one pick"));
  CHECK_THROWS_WITH(moe::gated_combine(parts, {0, -1, 1, -1}, {0, 0, 0, 0}, gates),
                    Catch::Contains("row 1 of part 0 is read by no pick"));
  const std::vector<Tensor<double, DynShape<2>>> ragged = {randn<2>(rng, {2, 3}), randn<2>(rng, {2, 4})};
  CHECK_THROWS_WITH(moe::gated_combine(ragged, {0, 0, 1, 1}, {0, 1, 0, 1}, gates),
                    Catch::Contains("part 1 [2, 4] is not 3 wide"));
}

TEST_CASE("moe_ffn: experts side by side give the values and gradients of one by one bit for bit", "[moe][threads]") {
  // GMoE's layer in training (router noise, expert dropout, capacity with drops) at 1-3 threads: the
  // tasks' own generators must give the masks of drawing in expert order, and the per-thread GEMMs
  // the sums of the split ones.
  const std::size_t threads_before = cpu_backend::num_threads();
  for (std::size_t threads : {std::size_t(1), std::size_t(2), std::size_t(3)}) {
    cpu_backend::set_num_threads(threads);
    INFO("threads " << threads);
    const index_t B = 3, T = 37, D = 24, H = 40, E = 5;
    std::mt19937_64 init(7);
    nn::Mlp<float> dense(D, H, nn::Activation::gelu, 1);
    std::vector<float> w1(std::size_t(H * D)), w2(std::size_t(D * H));
    std::normal_distribution<float> nd(0.f, 0.2f);
    for (auto& v : w1) v = nd(init);
    for (auto& v : w2) v = nd(init);
    dense.fc1.weight = Tensor<float, DynShape<2>>::from_host(DynShape<2>(H, D), w1);
    dense.fc2.weight = Tensor<float, DynShape<2>>::from_host(DynShape<2>(D, H), w2);
    auto layer = moe::GMoEFFN<float>::from_dense(dense, moe::CosineRouter<float>::init(D, 16, E, init), 1.0);
    layer.expert_dropout = 0.25;
    std::vector<float> xv(std::size_t(B * T * D));
    for (auto& v : xv) v = nd(init) * 5.f;
    auto x = Tensor<float, DynShape<3>>::from_host(DynShape<3>(B, T, D), xv);
    x.set_requires_grad();
    auto run = [&](moe::ExpertThreads mode) {
      layer.expert_threads = mode;
      x.zero_grad();
      nn::zero_grad(layer);
      nn::Rng rng(5);
      autograd::Tape tape;
      auto noise = moe::draw_router_noise<float>(B * T, E, rng);
      auto y = layer.forward(x, noise, &rng);
      Tensor<float, Shape<>> loss = sum_all(y * y) + layer.aux_losses().l_aux * 0.01f;
      autograd::backward(tape, loss);
      std::vector<std::vector<float>> out = {y.to_vector(), x.grad().to_vector()};
      for (auto& p : nn::named_parameters<float>(layer)) out.push_back(p.flat.grad().to_vector());
      out.push_back({float(layer.routing.plan.dropped())});
      return out;
    };
    const auto one = run(moe::ExpertThreads::one_by_one), side = run(moe::ExpertThreads::side_by_side);
    REQUIRE(one.back()[0] > 0);  // the capacity dropped picks
    REQUIRE(one.size() == side.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      REQUIRE(one[i].size() == side[i].size());
      for (std::size_t j = 0; j < one[i].size(); ++j) REQUIRE(side[i][j] == one[i][j]);
    }
  }
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("dispatch_rows names the pick that disagrees with the experts' rows", "[moe][errors]") {
  std::mt19937_64 rng(33);
  const auto x = randn<2>(rng, {3, 2});
  const std::vector<std::vector<std::int64_t>> rows = {{0, 2}, {1}};
  CHECK(moe::dispatch_rows(x, rows, {0, 1, 0}, {0, 0, 1}, 1).size() == 2);
  CHECK_THROWS_WITH(moe::dispatch_rows(x, rows, {0, 1}, {0, 0}, 1), Catch::Contains("need as many parts and rows, got 2"));
  CHECK_THROWS_WITH(moe::dispatch_rows(x, rows, {0, 1, 1}, {0, 0, 1}, 1),
                    Catch::Contains("pick 2 (expert 1, row 1) is not token 2's place"));
  CHECK_THROWS_WITH(moe::dispatch_rows(x, rows, {0, 1, 0}, {1, 0, 0}, 1), Catch::Contains("pick 0 (expert 0, row 1)"));
  CHECK_THROWS_WITH(moe::dispatch_rows(x, rows, {0, 1, -1}, {0, 0, 0}, 1),
                    Catch::Contains("the experts list 3 rows but 2 picks are kept"));
}
