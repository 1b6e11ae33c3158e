// MoETTA parity: the C++ method against tests/reference/moetta_reference.py (float64 torch written
// from the paper and the implementation facts). Same tiny timm ViT, same initial routers / experts,
// same three batches; per step the returned (pre-update) logits, the kept count, threshold and alpha,
// and after the last step every router / expert tensor must agree (check_close: error relative to max(1, |ref|)
// at most 1e-8). The fixture is read through tests/support/fixture.hpp like every other.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "parity.hpp"
#include "ttmoe/backend/cpu/backend.hpp"  // the CPU kernels (the models here run on cpu)
#include "ttmoe/models/vit.hpp"
#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/tta/moetta.hpp"

using namespace ttmoe;
using test::Fixture;

TEST_CASE("parity: moetta 3 steps", "[parity]") {
  const Fixture f("moetta_tiny_vit", "tta");
  auto mi = [&](const char* k) { return index_t(f.meta_int(k)); };
  auto md_ = [&](const char* k) { return f.meta_double(k); };
  auto cfg = models::vit_test_tiny(mi("img_size"), mi("patch_size"), mi("embed_dim"), mi("depth"), mi("num_heads"),
                                   mi("mlp_hidden"), mi("num_classes"));
  using Model = models::VisionTransformer<double>;
  Model vit(cfg);
  nn::load_state(vit, f.file(), io::timm_names("model."));
  vit.convert_to_moe_layernorm(mi("num_experts"), mi("first_moe_index"), /*seed=*/0);
  REQUIRE(vit.moe_layers().size() == std::size_t(vit.num_layernorms() - mi("first_moe_index")));

  // The reference's seeded routers (and zero experts) replace the C++ Xavier draw.
  std::vector<std::string> moe_names;
  nn::for_each_parameter(vit, [&](const std::string& name, auto& t) {
    if (!f.has("init.param." + name)) return;
    f.file().read_as<double>("init.param." + name, std::span<double>(t.data(), std::size_t(t.numel())));
    moe_names.push_back(name);
  });
  REQUIRE(moe_names.size() == 4 * vit.moe_layers().size());

  tta::MoETTA<Model, double>::Options opt;
  opt.num_experts = mi("num_experts");
  opt.first_moe_index = mi("first_moe_index");
  opt.lambda = md_("lambda");
  opt.margin_factor = md_("e0_factor");
  opt.momentum = md_("momentum");
  opt.lr.fixed = md_("lr");
  tta::MoETTA<Model, double> method(opt);

  const index_t steps = mi("steps");
  for (index_t t = 0; t < steps; ++t) {
    const auto s = std::to_string(t);
    auto logits = method.adapt_and_predict(vit, f.get<4>("in.images." + s));
    const auto& info = method.last_step();
    INFO("step " << t << ": kept " << info.kept << ", threshold " << info.threshold << ", alpha " << info.alpha
                 << ", loss " << info.loss);
    test::check_close(f, "out.logits." + s, logits, 1e-8);
    CHECK(std::int64_t(info.kept) == f.scalar<std::int64_t>("out.kept." + s));
    CHECK(std::abs(info.threshold - f.scalar<double>("out.threshold." + s)) <= 1e-12);
    CHECK(std::abs(info.alpha - f.scalar<double>("out.alpha." + s)) <= 1e-12);
    CHECK(std::abs(info.loss - f.scalar<double>("out.loss." + s)) <= 1e-10);
    CHECK(info.updated);
    CHECK_FALSE(info.skipped_nonfinite);
  }

  double moved = 0;
  nn::for_each_parameter(vit, [&](const std::string& name, auto& t) {
    if (!f.has("out.param." + name)) return;
    moved = std::max(moved, test::max_rel_error(f.flat<double>("out.param." + name), f.flat<double>("init.param." + name)));
    test::check_close(f, "out.param." + name, t, 1e-8);
  });
  // The comparison is only meaningful if the three steps moved the parameters.
  CHECK(moved > 1e-3);
}
