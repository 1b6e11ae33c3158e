// Tests of the method registry (tta/registry.hpp) and of make_method / AnyMethod
// (tta/make_method.hpp): the entries, unknown keys, and that a method built by key adapts exactly as
// the concrete class built by hand does (same logits, same parameters, bit for bit).

#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "toy_model.hpp"
#include "ttmoe/tta/tta.hpp"

using namespace ttmoe;
using Toy = test::ToyClassifier<double>;
using Images = Tensor<double, DynShape<4>>;

namespace {

Images images(index_t B, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> v(std::size_t(B * 1 * 4 * 4));
  for (auto& x : v) x = nd(g);
  return Images::from_host(DynShape<4>(B, 1, 4, 4), std::span<const double>(v));
}

/// Runs `method` over three batches; returns every logit it predicted followed by the parameters.
template <class M>
std::vector<double> trace(M& method) {
  Toy model(16, 5, 3);
  std::vector<double> out;
  for (std::uint64_t b = 0; b < 3; ++b)
    for (double v : method.adapt_and_predict(model, images(8, 10 + b)).to_vector()) out.push_back(v);
  for (auto& p : nn::named_parameters<double>(model))  // then every parameter value
    for (double v : p.flat.to_vector()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("tta registry: entries, reference, display names, unknown keys", "[tta][registry]") {
  CHECK(tta::method_keys() == std::vector<std::string>{"noadapt", "tent", "eata", "sar", "moetta"});
  CHECK(tta::reference_method().key == "noadapt");
  CHECK_FALSE(tta::reference_method().adapts);
  CHECK(tta::display_name("moetta") == "MoETTA");
  CHECK(tta::display_name("custom") == "custom");  // unregistered rows print as themselves
  CHECK(tta::method_info("eata").needs_fisher);
  CHECK(tta::method_info("eata").has.d_margin);
  CHECK_FALSE(tta::method_info("tent").has.margin);
  CHECK(tta::method_info("moetta").has.lambda);
  CHECK(tta::method_info("moetta").has.experts);
  CHECK(tta::method_info("moetta").paper.lr == 1e-3);
  CHECK(tta::method_info("sar").paper.lr == 5e-4);
  CHECK(tta::find_method("bogus") == nullptr);
  CHECK_THROWS_AS(tta::method_info("bogus"), std::invalid_argument);
  CHECK_THROWS_WITH(tta::method_info("bogus"), Catch::Contains("bogus") && Catch::Contains("moetta"));
  CHECK_THROWS_AS((tta::make_method<Toy, double>("bogus", tta::Hyper{})), std::invalid_argument);
  // The toy has no MoE-LayerNorm conversion: a typed error naming what is missing, not a crash.
  CHECK_THROWS_WITH((tta::make_method<Toy, double>("moetta", tta::Hyper{})), Catch::Contains("convert_to_moe_layernorm"));
}

TEST_CASE("tta registry: make_method builds what the concrete class does, bit for bit", "[tta][registry]") {
  for (const auto& info : tta::method_registry()) {
    // SAR's and MoETTA's parameters are named by ViT blocks: the toy has none (the MoETTA example's
    // unchanged tables cover them through make_method).
    if (info.kind == tta::MethodKind::moetta || info.kind == tta::MethodKind::sar) continue;
    tta::Hyper h = info.paper;
    h.lr = 0.05;  // large enough that three steps move the toy's parameters
    h.margin = 2, h.d_margin = 2;  // E0 = 2 ln C above every entropy, |cos| < 2: every sample kept
    auto any = tta::make_method<Toy, double>(info, h);
    CHECK(any.name() == info.key);
    const auto got = trace(any);
    std::vector<double> want;
    switch (info.kind) {
      case tta::MethodKind::no_adapt: {
        tta::NoAdapt<Toy, double> m;
        want = trace(m);
        break;
      }
      case tta::MethodKind::tent: {
        tta::Tent<Toy, double>::Options o;
        o.lr.at_reference = 0.05;
        tta::Tent<Toy, double> m(o);
        want = trace(m);
        break;
      }
      case tta::MethodKind::eata: {
        tta::EATA<Toy, double>::Options o;
        o.lr.at_reference = 0.05, o.margin_factor = 2, o.d_margin = 2;
        tta::EATA<Toy, double> m(o);
        want = trace(m);
        break;
      }
      case tta::MethodKind::sar:
      case tta::MethodKind::moetta:
        break;
    }
    INFO(info.key);
    CHECK(got == want);
    CHECK(any.last_step().updated == info.adapts);  // the adapting ones did adapt
  }
}
