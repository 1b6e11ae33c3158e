// GMoE model and checkpoints: parameter names, upcycling, the authors' checkpoint layout (save / load
// round trip, DeiT initialisation), typed errors for wrong expert counts and shapes, and the
// training-only randomness. Numerical agreement with PyTorch is test_gmoe_parity.cpp's job.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "ttmoe/models/gmoe_checkpoint.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;

namespace {
models::GMoEConfig tiny(index_t experts = 6, index_t hidden = 16) {
  auto c = models::gmoe_test_tiny(8, 4, 8, 5, 3);
  c.vit.mlp_hidden = hidden;
  c.num_experts = experts;
  return c;
}
std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("ttmoe_gmoe_" + std::to_string(::getpid()) + "_" + name);
}
Tensor<float, DynShape<4>> images(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n;
  std::vector<float> v(2 * 3 * 8 * 8);
  for (auto& x : v) x = n(rng);
  return Tensor<float, DynShape<4>>::from_host(DynShape<4>(2, 3, 8, 8), v);
}
std::vector<float> eval_logits(models::GMoEVisionTransformer<float>& m, std::uint64_t seed = 5) {
  autograd::NoGrad ng;
  m.training = false;
  return m(images(seed)).to_vector();
}
std::set<std::string> names_of(models::GMoEVisionTransformer<float>& m) {
  std::set<std::string> s;
  nn::for_each_parameter(m, [&](const std::string& n, auto&) { s.insert(n); });
  return s;
}
}  // namespace

TEST_CASE("gmoe: configs and parameter names", "[unit][gmoe]") {
  const auto s = models::gmoe_small_patch16(7);
  CHECK(s.vit.embed_dim == 384);
  CHECK(s.vit.mlp_hidden == 1536);
  CHECK(s.moe_blocks == std::vector<index_t>{8, 10});
  CHECK(s.num_experts == 6);
  CHECK(s.router_dim == 256);
  CHECK(s.top_k == 1);
  CHECK_FALSE(s.renormalize);
  CHECK(s.capacity_factor == 1.5);
  CHECK(s.drop_path_rate(11) == Approx(0.1));
  CHECK(s.drop_path_rate(0) == 0.0);
  CHECK(models::gmoe_base_patch16().vit.embed_dim == 768);
  auto bad = tiny();
  bad.moe_blocks = {5};
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);

  models::GMoEVisionTransformer<float> m(tiny(), 1);
  const auto names = names_of(m);
  CHECK(names.count("blocks.0.mlp.fc1.weight"));
  CHECK_FALSE(names.count("blocks.1.mlp.fc1.weight"));  // the experts own the MoE blocks' weights
  CHECK(names.count("blocks.1.mlp.router.proj.weight"));
  CHECK(names.count("blocks.3.mlp.router.codebook"));
  CHECK(names.count("blocks.3.mlp.experts.5.fc2.bias"));
  CHECK_FALSE(names.count("blocks.3.mlp.experts.6.fc2.bias"));
  CHECK(m.moe_layers().size() == 2);
  const auto& r = m.moe_layers()[0]->router;
  CHECK(r.codebook.extent(0) == 8);
  CHECK(r.log_scale.item() == Approx(std::log(2.0)));
  CHECK(m.moe_layers()[0]->expert_dropout == 0.1);
}

TEST_CASE("gmoe: every expert starts as a deep copy of its block's dense MLP", "[unit][gmoe]") {
  models::VisionTransformer<float> vit(tiny().vit, 3);
  const auto fc1 = vit.blocks[1].mlp.fc1.weight.to_vector();
  const auto fc2b = vit.blocks[1].mlp.fc2.bias.to_vector();
  auto g = models::GMoEVisionTransformer<float>::from_vit(vit, tiny(), 3);
  auto& layer = *g.moe[1];
  REQUIRE(layer.experts.size() == 6);
  for (auto& e : layer.experts) {
    CHECK(e.fc1.weight.to_vector() == fc1);
    CHECK(e.fc2.bias.to_vector() == fc2b);
  }
  layer.experts[0].fc1.weight.data()[0] += 1.0f;
  CHECK(layer.experts[1].fc1.weight.to_vector() == fc1);
  CHECK(vit.blocks[1].mlp.fc1.weight.to_vector() == fc1);
}

TEST_CASE("gmoe: save_gmoe writes the authors' keys and load_gmoe reads them back", "[unit][gmoe]") {
  models::GMoEVisionTransformer<float> a(tiny(), 1), b(tiny(), 2);
  REQUIRE(eval_logits(a) != eval_logits(b));
  for (const std::string prefix : {"", "model."}) {
    const auto path = temp_file("roundtrip.safetensors");
    models::save_gmoe(a, path, prefix);
    {
      io::SafetensorsFile f(path);
      const std::string blk = prefix + "blocks.3.mlp.";
      CHECK(f.info(blk + "gates.0.cosine_projector.weight").shape == std::vector<std::int64_t>{8, 8});
      CHECK(f.info(blk + "gates.0.sim_matrix").shape == std::vector<std::int64_t>{8, 6});
      CHECK(f.info(blk + "gates.0.temperature").shape == std::vector<std::int64_t>{1});
      CHECK(f.info(blk + "experts.batched_fc1_w").shape == std::vector<std::int64_t>{6, 16, 8});
      CHECK(f.info(blk + "experts.batched_fc2_w").shape == std::vector<std::int64_t>{6, 16, 8});
      CHECK(f.info(blk + "experts.batched_fc1_bias").shape == std::vector<std::int64_t>{6, 16});
      CHECK(f.info(blk + "experts.batched_fc2_bias").shape == std::vector<std::int64_t>{6, 8});
      CHECK(f.contains(prefix + "blocks.0.mlp.fc1.weight"));
      CHECK_FALSE(f.contains(prefix + "blocks.3.mlp.experts.0.fc1.weight"));
      std::int64_t n = 0;
      f.read_as<std::int64_t>(blk + "_num_global_experts", std::span<std::int64_t>(&n, 1));
      CHECK(n == 6);
      // fc2 is stored transposed: element [e=2, h=3, d=5] is expert 2's fc2.weight[5, 3].
      std::vector<float> w(6 * 16 * 8);
      f.read_as<float>(blk + "experts.batched_fc2_w", std::span<float>(w));
      CHECK(w[(2 * 16 + 3) * 8 + 5] == a.moe[3]->experts[2].fc2.weight.to_vector()[5 * 16 + 3]);
    }
    auto rep = models::load_gmoe(b, path);
    CHECK(rep.loaded.size() == names_of(a).size());
    CHECK(eval_logits(a) == eval_logits(b));
    std::filesystem::remove(path);
  }
}

TEST_CASE("gmoe: wrong expert count or shape is a CheckpointError naming the keys", "[unit][gmoe]") {
  models::GMoEVisionTransformer<float> four(tiny(4), 1), six(tiny(6), 2), wide(tiny(6, 24), 3);
  const auto path = temp_file("four.safetensors");
  models::save_gmoe(four, path, "model.");
  const auto before = eval_logits(six);
  try {
    models::load_gmoe(six, path);
    FAIL("loaded 4 experts into a 6-expert model");
  } catch (const nn::CheckpointError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("missing key 'blocks.1.mlp.experts.4.fc1.weight'") != std::string::npos);
    CHECK(what.find("shape mismatch for 'blocks.1.mlp.router.codebook'") != std::string::npos);
  }
  CHECK(eval_logits(six) == before);  // nothing was written
  models::save_gmoe(six, path);
  try {
    models::load_gmoe(wide, path);
    FAIL("loaded hidden 16 into hidden 24");
  } catch (const nn::CheckpointError& e) {
    CHECK(std::string(e.what()).find("shape mismatch for 'blocks.3.mlp.experts.0.fc1.weight'") != std::string::npos);
  }
  // A _num_global_experts that disagrees with the batched tensors names both.
  {
    io::SafetensorsFile f(path);
    io::SafetensorsWriter w;
    for (const auto& k : f.names()) {
      if (k.ends_with("_num_global_experts")) {
        const std::int64_t n = 5;
        w.add(k, std::span<const std::int64_t>(&n, 1), {}, io::DType::I64);
        continue;
      }
      std::vector<float> v(f.info(k).numel());
      f.read_as<float>(k, std::span<float>(v));
      w.add(k, std::span<const float>(v), f.info(k).shape);
    }
    w.write(temp_file("count.safetensors"));
  }
  try {
    models::load_gmoe(six, temp_file("count.safetensors"));
    FAIL("accepted _num_global_experts = 5 beside 6 batched experts");
  } catch (const nn::CheckpointError& e) {
    CHECK(std::string(e.what()).find("'blocks.1.mlp._num_global_experts' = 5 but the batched expert tensors hold 6") !=
          std::string::npos);
  }
  std::filesystem::remove(path);
  std::filesystem::remove(temp_file("count.safetensors"));
}

TEST_CASE("gmoe: a timm / DeiT ViT checkpoint initialises the model, dense MLPs copied into the experts",
          "[unit][gmoe]") {
  models::VisionTransformer<float> deit(tiny().vit, 9);
  const auto path = temp_file("deit.safetensors");
  nn::save_state(deit, path);  // timm names, as deit_small_patch16_224.safetensors
  auto g = models::gmoe_from_vit_checkpoint<float>(path, tiny(), 4);
  CHECK(g.vit.blocks[0].mlp.fc1.weight.to_vector() == deit.blocks[0].mlp.fc1.weight.to_vector());
  CHECK(g.vit.head.weight.to_vector() == deit.head.weight.to_vector());
  for (auto& e : g.moe[3]->experts) CHECK(e.fc2.weight.to_vector() == deit.blocks[3].mlp.fc2.weight.to_vector());
  // A fresh head for another class count: LoadOptions skip it.
  auto other = tiny();
  other.vit.num_classes = 5;
  CHECK_THROWS_AS(models::gmoe_from_vit_checkpoint<float>(path, other, 4), nn::CheckpointError);
  nn::LoadOptions opt;
  opt.skip = {"head.*"};
  auto g5 = models::gmoe_from_vit_checkpoint<float>(path, other, 4, opt);
  CHECK(g5.vit.head.weight.extent(0) == 5);
  std::filesystem::remove(path);
}

TEST_CASE("gmoe: noise, expert dropout and drop-path only in training", "[unit][gmoe]") {
  models::GMoEVisionTransformer<float> m(tiny(), 1);
  const auto e1 = eval_logits(m), e2 = eval_logits(m);
  CHECK(e1 == e2);
  m.training = true;
  std::vector<float> t1, t2;
  {
    autograd::Tape tape;
    t1 = m(images(5)).to_vector();
    const float aux = m.aux_loss().item();
    CHECK(std::isfinite(aux));
    CHECK(aux > 0);
  }
  {
    autograd::NoGrad ng;
    t2 = m(images(5)).to_vector();
  }
  CHECK(t1 != t2);
  CHECK(t1 != e1);
  // With every source of randomness off, training equals evaluation.
  auto c = tiny();
  c.gate_noise = 0;
  c.expert_dropout = 0;
  c.drop_path = 0;
  models::GMoEVisionTransformer<float> q(c, 1);
  const auto qe = eval_logits(q);
  q.training = true;
  autograd::NoGrad ng;
  const auto qt = q(images(5)).to_vector();
  REQUIRE(qt.size() == qe.size());
  for (std::size_t i = 0; i < qt.size(); ++i) CHECK(qt[i] == Approx(qe[i]).margin(1e-6));
  CHECK_THROWS_AS(q.forward(images(5), {Tensor<float, DynShape<2>>::zeros(DynShape<2>(34, 6))}), ValueError);
  // Expert dropout alone changes the training forward.
  c.expert_dropout = 0.5;
  models::GMoEVisionTransformer<float> p(c, 1);
  p.training = true;
  CHECK(p(images(5)).to_vector() != qe);
  p.moe_layers()[0]->expert_dropout = 1.0;
  CHECK_THROWS_AS(p(images(5)), ValueError);
}
