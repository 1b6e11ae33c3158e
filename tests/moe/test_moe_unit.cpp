// Unit tests of the MoE / TTMM modules' construction paths (initialisation, parameter names,
// merge round trips) that the fixtures do not cover.

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "fixture.hpp"
#include "ttmoe/moe/capacity.hpp"
#include "ttmoe/moe/cosine_router.hpp"
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

TEST_CASE("capacity formula and moe_ffn from_dense", "[moe]") {
  REQUIRE(moe::expert_capacity(13, 3, 1, 1.5) == 7);
  REQUIRE(moe::expert_capacity(14, 4, 1, 1.5) == 6);
  REQUIRE(moe::expert_capacity(14, 4, 2, 1.5) == 12);
  std::mt19937_64 rng(4);
  moe::FFNExpert<double> dense{{randn<2>(rng, {8, 4}), randn<1>(rng, {8})}, {randn<2>(rng, {4, 8}), randn<1>(rng, {4})}};
  auto m = moe::MoEFFN<double>::from_dense(dense, randn<2>(rng, {3, 4}));
  m.capacity_factor = 100;  // no drops: every token gets p_top * dense(x)
  auto x = randn<3>(rng, {2, 3, 4});
  auto y = m.forward(x);
  auto yd = dense(x.reshape(DynShape<2>(6, 4)));
  auto p = m.probs;
  for (index_t n = 0; n < 6; ++n)
    for (index_t d = 0; d < 4; ++d)
      REQUIRE(std::abs(y(n / 3, n % 3, d) - p(n, m.routing.top_index[n]) * yd(n, d)) < 1e-12);
}
