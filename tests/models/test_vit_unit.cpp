// ViT structure tests: timm parameter names, static ViT-B/16 typing, MoE-LayerNorm conversion
// (which LayerNorms, identical output at init, gradient reaching only experts and routers).

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ttmoe/models/vit.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;

namespace {
template <class T>
Tensor<T, DynShape<4>> random_images(index_t b, index_t s, std::uint64_t seed) {
  Tensor<T, DynShape<4>> x(DynShape<4>(b, 3, s, s));
  nn::uniform_(x, 1.0, seed);
  return x;
}
std::vector<std::string> names_of(models::VisionTransformer<double>& vit) {
  std::vector<std::string> out;
  for (auto& p : nn::named_parameters<double>(vit)) out.push_back(p.name);
  return out;
}
// ViT-B's depth (12 blocks -> 25 LayerNorms) at a tiny width so the test is cheap.
models::ViTConfig deep_narrow() { return models::vit_test_tiny(8, 4, 16, 12, 2, 32, 5); }
}  // namespace

TEST_CASE("vit: parameter names equal timm's", "[unit]") {
  models::VisionTransformer<double> vit(models::vit_test_tiny(16, 4, 32, 2, 4, 64, 10));
  std::vector<std::string> want = {"cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias"};
  for (int i = 0; i < 2; ++i)
    for (const char* s : {"norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                          "attn.proj.bias", "norm2.weight", "norm2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
                          "mlp.fc2.weight", "mlp.fc2.bias"})
      want.push_back("blocks." + std::to_string(i) + "." + s);
  for (const char* s : {"norm.weight", "norm.bias", "head.weight", "head.bias"}) want.push_back(s);
  CHECK(names_of(vit) == want);
  auto ps = nn::named_parameters<double>(vit);
  CHECK(ps[1].shape == std::vector<index_t>{1, 17, 32});      // pos_embed [1, N + 1, D]
  CHECK(ps[2].shape == std::vector<index_t>{32, 3, 4, 4});    // conv weight
  CHECK(ps[6].shape == std::vector<index_t>{96, 32});         // fused qkv
}

TEST_CASE("vit: forward shapes, dynamic and static ViT-B/16 entry", "[unit]") {
  autograd::NoGrad ng;
  models::VisionTransformer<float> vit(models::vit_test_tiny(16, 4, 32, 2, 4, 64, 10), 3);
  auto y = vit(random_images<float>(2, 16, 1));
  CHECK(y.extents() == std::array<index_t, 2>{2, 10});
  static_assert(std::is_same_v<decltype(y), Tensor<float, DynShape<2>>>);
  using In = Tensor<float, models::vit_b16_shapes::images>;
  using Out = decltype(std::declval<models::VisionTransformer<float>&>().forward(std::declval<In>()));
  static_assert(std::is_same_v<Out, Tensor<float, Shape<dyn, 1000>>>, "ViT-B/16 entry gives static logits");
  CHECK_THROWS(vit(random_images<float>(1, 20, 1)));  // 20 is not a multiple of the patch
}

TEST_CASE("vit: MoE-LayerNorm conversion converts 24 of 25 and keeps the output", "[unit]") {
  models::VisionTransformer<double> vit(deep_narrow(), 11);
  auto x = random_images<double>(3, 8, 2);
  Tensor<double, DynShape<2>> before;
  {
    autograd::NoGrad ng;
    before = vit(x);
  }
  auto layers = vit.convert_to_moe_layernorm(4, 1, 42);
  REQUIRE(vit.num_layernorms() == 25);
  CHECK(layers.size() == 24);
  CHECK_FALSE(vit.layernorm(0).is_moe());
  for (index_t k = 1; k < 25; ++k) CHECK(vit.layernorm(k).is_moe());
  CHECK(vit.moe_layer_indices().front() == 1);
  CHECK(vit.layernorm_name(1) == "blocks.0.norm2");
  CHECK(vit.layernorm_name(24) == "norm");
  auto names = names_of(vit);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("blocks.0.norm1.weight"));
  CHECK_FALSE(has("blocks.0.norm1.experts.weight_delta"));
  for (const char* n : {"blocks.0.norm2.weight", "blocks.0.norm2.experts.weight_delta", "blocks.0.norm2.experts.bias_delta",
                        "blocks.11.norm1.router.weight", "blocks.11.norm1.router.bias", "norm.experts.weight_delta",
                        "norm.router.weight", "norm.bias"})
    CHECK(has(n));
  Tensor<double, DynShape<2>> after;
  {
    autograd::NoGrad ng;
    after = vit(x);
  }
  const auto a = before.to_vector(), b = after.to_vector();
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  CHECK(worst <= 1e-12);  // zero expert deltas: the MoE model is the pretrained one
  // Routing state is exposed per layer (for heat maps) and the summed balance loss is finite.
  CHECK(layers[0]->probs.extents() == std::array<index_t, 2>{3, 4});
  CHECK(std::isfinite(vit.balance_loss().item()));
  // first_index = 15 (ViT-L's convention) on a fresh model converts only 10 of 25.
  models::VisionTransformer<double> vit2(deep_narrow(), 11);
  CHECK(vit2.convert_to_moe_layernorm(4, 15, 1).size() == 10);
}

TEST_CASE("vit: backward through a converted ViT reaches only routers and experts", "[unit]") {
  models::VisionTransformer<float> vit(deep_narrow(), 5);
  vit.convert_to_moe_layernorm(3, 1, 7);
  nn::freeze(vit);
  CHECK(nn::set_trainable(vit, "*.experts.*", true) == 48);
  CHECK(nn::set_trainable(vit, "*.router.*", true) == 48);
  auto x = random_images<float>(4, 8, 9);
  {
    autograd::Tape tape;
    auto logits = vit(x);
    Tensor<float, Shape<>> loss = mean_all(nn::softmax_entropy(logits)) + vit.balance_loss() * 0.1f;
    autograd::backward(tape, loss);
  }
  int reached = 0;
  nn::for_each_parameter(vit, [&](const std::string& name, auto& t) {
    const bool moe_param = name.find(".experts.") != std::string::npos || name.find(".router.") != std::string::npos;
    INFO(name);
    CHECK(t.requires_grad() == moe_param);
    if (!moe_param) {
      CHECK_FALSE(t.grad().defined());
      return;
    }
    REQUIRE(t.grad().defined());
    double s = 0;
    for (auto v : t.grad().to_vector()) s += std::abs(double(v));
    if (s > 0) ++reached;
  });
  // Every router gets a gradient (entropy via c = p / sg(p), and the balance loss); expert deltas
  // of the picked expert get one too, so nearly all 96 tensors are non-zero.
  CHECK(reached >= 48);
}
