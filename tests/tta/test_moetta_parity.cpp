// MoETTA parity: the C++ method against tests/reference/moetta_reference.py (float64 torch written
// from the paper and the implementation facts). Same tiny timm ViT, same initial routers / experts,
// same three batches; per step the returned (pre-update) logits, the kept count, threshold and alpha,
// and after the last step every router / expert tensor must agree. Tolerance: max abs error 1e-8.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "ttmoe/backend/cpu/backend.hpp"  // the CPU kernels (the models here run on cpu)
#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/models/vit.hpp"
#include "ttmoe/tta/moetta.hpp"

using namespace ttmoe;

namespace {

io::SafetensorsFile open_fixture() {
  const std::string path = std::string(TTMOE_TEST_DATA_DIR) + "/tta/moetta_tiny_vit.safetensors";
  if (!std::filesystem::exists(path))
    throw std::runtime_error("missing fixture " + path + " (run the generate_moetta_fixture CTest step)");
  return io::SafetensorsFile(std::filesystem::path(path));
}

template <std::size_t R, class T = double>
Tensor<T, DynShape<R>> read(const io::SafetensorsFile& f, const std::string& key) {
  const auto& s = f.info(key).shape;
  REQUIRE(s.size() == R);
  std::array<index_t, R> e{};
  for (std::size_t i = 0; i < R; ++i) e[i] = s[i];
  Tensor<T, DynShape<R>> t(DynShape<R>::from_extents(e));
  f.read_as<T>(key, std::span<T>(t.data(), std::size_t(t.numel())));
  return t;
}

template <class T>
T read_scalar(const io::SafetensorsFile& f, const std::string& key) {
  T v{};
  f.read_as<T>(key, std::span<T>(&v, 1));
  return v;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return std::isnan(m) ? INFINITY : m;
}

}  // namespace

TEST_CASE("parity: moetta 3 steps", "[parity]") {
  auto f = open_fixture();
  const auto& md = f.metadata();
  auto mi = [&](const char* k) { return index_t(std::stol(md.at(k))); };
  auto md_ = [&](const char* k) { return std::stod(md.at(k)); };
  auto cfg = models::vit_test_tiny(mi("img_size"), mi("patch_size"), mi("embed_dim"), mi("depth"), mi("num_heads"),
                                   mi("mlp_hidden"), mi("num_classes"));
  using Model = models::VisionTransformer<double>;
  Model vit(cfg);
  io::load_state(vit, f, io::timm_names("model."));
  vit.convert_to_moe_layernorm(mi("num_experts"), mi("first_moe_index"), /*seed=*/0);
  REQUIRE(vit.moe_layers().size() == std::size_t(vit.num_layernorms() - mi("first_moe_index")));

  // The reference's seeded routers (and zero experts) replace the C++ Xavier draw.
  std::vector<std::string> moe_names;
  nn::for_each_parameter(vit, [&](const std::string& name, auto& t) {
    if (!f.contains("init.param." + name)) return;
    f.read_as<double>("init.param." + name, std::span<double>(t.data(), std::size_t(t.numel())));
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
    auto logits = method.adapt_and_predict(vit, read<4>(f, "in.images." + s));
    const auto& info = method.last_step();
    const double err = max_abs_diff(logits.to_vector(), read<2>(f, "out.logits." + s).to_vector());
    INFO("step " << t << ": max |logit - ref| = " << err << ", kept " << info.kept << ", threshold " << info.threshold
                 << ", alpha " << info.alpha << ", loss " << info.loss);
    CHECK(err <= 1e-8);
    CHECK(std::int64_t(info.kept) == read_scalar<std::int64_t>(f, "out.kept." + s));
    CHECK(std::abs(info.threshold - read_scalar<double>(f, "out.threshold." + s)) <= 1e-12);
    CHECK(std::abs(info.alpha - read_scalar<double>(f, "out.alpha." + s)) <= 1e-12);
    CHECK(std::abs(info.loss - read_scalar<double>(f, "out.loss." + s)) <= 1e-10);
    CHECK(info.updated);
    CHECK_FALSE(info.skipped_nonfinite);
  }

  double moved = 0;
  nn::for_each_parameter(vit, [&](const std::string& name, auto& t) {
    if (!f.contains("out.param." + name)) return;
    std::vector<double> ref(std::size_t(t.numel())), init(std::size_t(t.numel()));
    f.read_as<double>("out.param." + name, std::span<double>(ref));
    f.read_as<double>("init.param." + name, std::span<double>(init));
    const auto got = t.to_vector();
    const double err = max_abs_diff(got, ref);
    moved = std::max(moved, max_abs_diff(ref, init));
    INFO(name << ": max |param - ref| = " << err);
    CHECK(err <= 1e-8);
  });
  // The comparison is only meaningful if the three steps moved the parameters.
  CHECK(moved > 1e-3);
}
