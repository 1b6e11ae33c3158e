// ViT structure tests: timm parameter names, static ViT-B/16 typing, MoE-LayerNorm conversion
// (which LayerNorms, identical output at init, gradient reaching only experts and routers).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
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

namespace {
// The textbook path the class-token shortcuts must equal: every block and the final norm on every
// token, then class-token pooling and the head.
template <class T>
Tensor<T, DynShape<2>> logits_from_every_token(const models::VisionTransformer<T>& vit, const Tensor<T, DynShape<4>>& x) {
  Tensor<T, DynShape<3>> h = vit.embed(x);
  for (const auto& b : vit.blocks) h = b.forward(h);
  const Tensor<T, DynShape<3>> y = vit.norm(h);
  const Tensor<T, DynShape<3>> cls = narrow<1>(y, 0, 1);
  return vit.head(cls.reshape(DynShape<2>(x.extent(0), vit.config.embed_dim)));
}

// Logits, the loss sum(logits * weights) (+ the balance loss when converted) and every trainable
// parameter's gradient after one backward of it, by parameter name.
struct ForwardBackward {
  std::vector<double> logits, balance;
  std::map<std::string, std::vector<double>> grads;
};
template <class F>
ForwardBackward forward_backward(models::VisionTransformer<double>& vit, F&& forward) {
  ForwardBackward r;
  nn::zero_grad(vit);
  {
    autograd::Tape tape;
    Tensor<double, DynShape<2>> logits = forward();
    std::vector<double> w(std::size_t(logits.numel()));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.7 * double(i) + 0.3);
    auto wt = Tensor<double, DynShape<2>>::from_host(logits.shape(), w);
    Tensor<double, Shape<>> loss = sum_all(logits * wt);
    if (!vit.moe_layers().empty()) {
      const auto bl = vit.balance_loss();
      r.balance.push_back(bl.item());
      loss = loss + bl * 0.3;
    }
    autograd::backward(tape, loss);
    r.logits = logits.detach().to_vector();
  }
  nn::for_each_parameter(vit, [&](const std::string& name, auto& t) {
    if (t.requires_grad() && t.grad().defined()) r.grads[name] = t.grad().to_vector();
  });
  return r;
}
void check_same(const ForwardBackward& a, const ForwardBackward& b) {
  REQUIRE(a.logits.size() == b.logits.size());
  for (std::size_t i = 0; i < a.logits.size(); ++i) CHECK(a.logits[i] == Approx(b.logits[i]).margin(1e-12));
  REQUIRE(a.balance.size() == b.balance.size());
  for (std::size_t i = 0; i < a.balance.size(); ++i) CHECK(a.balance[i] == Approx(b.balance[i]).margin(1e-12));
  REQUIRE(a.grads.size() == b.grads.size());
  for (const auto& [name, g] : a.grads) {
    INFO(name);
    REQUIRE(b.grads.count(name));
    const auto& h = b.grads.at(name);
    REQUIRE(g.size() == h.size());
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < g.size(); ++i) diff = std::max(diff, std::abs(g[i] - h[i])), scale += std::abs(h[i]);
    CHECK(diff <= 1e-10 * (1 + scale));
  }
}
}  // namespace

TEST_CASE("vit: the last block computes only what the head reads, with every-token logits and gradients", "[unit]") {
  models::VisionTransformer<double> vit(models::vit_test_tiny(8, 4, 16, 3, 2, 32, 5), 11);
  auto x = random_images<double>(3, 8, 12);
  SECTION("plain model: everything after the last attention core on the class token alone") {
    // Every parameter trainable (Tent-like use reaches the last block's norms, MLP and head too).
    const auto fast = forward_backward(vit, [&] { return vit(x); });
    const auto full = forward_backward(vit, [&] { return logits_from_every_token(vit, x); });
    CHECK(fast.grads.size() == nn::named_parameters<double>(vit).size());
    check_same(fast, full);
  }
  SECTION("sample-routed MoE final norm: fc2 on the class token and the token mean only") {
    vit.convert_to_moe_layernorm(3, 1, 5);
    nn::freeze(vit);
    nn::set_trainable(vit, "*.experts.*", true);
    nn::set_trainable(vit, "*.router.*", true);
    // Distinct expert deltas, so a wrong routing input would change the logits.
    std::uint64_t seed = 100;
    for (auto* m : vit.moe_layers()) {
      nn::uniform_(m->experts.weight_delta, 0.5, seed++);
      nn::uniform_(m->experts.bias_delta, 0.5, seed++);
    }
    const auto fast = forward_backward(vit, [&] { return vit(x); });
    const auto fast_picks = vit.moe_layers().back()->top_index.to_vector();
    const auto full = forward_backward(vit, [&] { return logits_from_every_token(vit, x); });
    CHECK(fast_picks == vit.moe_layers().back()->top_index.to_vector());
    CHECK(fast.grads.size() == 4 * vit.moe_layers().size());
    check_same(fast, full);
  }
  SECTION("per-token routing reads every token: the full path") {
    vit.convert_to_moe_layernorm(3, 1, 5, 1, /*per_token=*/true);
    CHECK_THROWS_AS(vit.norm.forward_routed(Tensor<double, DynShape<3>>(DynShape<3>(3, 1, 16)),
                                            Tensor<double, DynShape<2>>(DynShape<2>(3, 16))),
                    std::logic_error);
    check_same(forward_backward(vit, [&] { return vit(x); }),
               forward_backward(vit, [&] { return logits_from_every_token(vit, x); }));
  }
}

TEST_CASE("vit: a MoETTA step records no VJP below the first trainable parameter", "[unit]") {
  // MoETTA's trainable set on a ViT-B-deep model: routers and experts from blocks.0.norm2 on.
  models::VisionTransformer<float> vit(deep_narrow(), 5);
  vit.convert_to_moe_layernorm(3, 1, 7);
  nn::freeze(vit);
  nn::set_trainable(vit, "*.experts.*", true);
  nn::set_trainable(vit, "*.router.*", true);
  auto x = random_images<float>(2, 8, 9);
  {
    // Below blocks.0.norm2: patch embedding, class token, position embedding, blocks.0.norm1 and
    // the first attention (qkv, attention core, projection with its residual) record nothing.
    autograd::Tape tape;
    const Tensor<float, DynShape<3>> t = vit.embed(x);
    const Tensor<float, DynShape<3>> h = vit.blocks[0].attn(vit.blocks[0].norm1(t), t);
    CHECK(tape.size() == 0);
    CHECK_FALSE(h.requires_grad());
  }
  autograd::Tape tape;
  auto logits = vit(x);
  Tensor<float, Shape<>> loss = mean_all(nn::softmax_entropy(logits)) + vit.balance_loss() * 0.1f;
  const auto names = tape.node_names();
  // One attention core per block above the first: blocks.0's is not on the tape.
  CHECK(index_t(std::count(names.begin(), names.end(), "fused_qkv_attention")) == vit.config.depth - 1);
  autograd::backward(tape, loss);
  nn::for_each_parameter(vit, [&](const std::string& name, auto& t) {
    INFO(name);
    if (!t.requires_grad()) CHECK_FALSE(t.grad().defined());  // no gradient buffer below or beside
  });
}
