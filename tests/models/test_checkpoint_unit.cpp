// Checkpoint loader: round trip through save_state, torchvision renaming, and one CheckpointError
// listing every problem (missing, unexpected, mis-shaped) with the module left unchanged.

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "ttmoe/backend/cpu/backend.hpp"  // the CPU kernels (the models here run on cpu)
#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/models/vit.hpp"

using namespace ttmoe;

// Helper names differ from test_gmoe_unit.cpp's: a unity build (CI) compiles the suite as one TU.
namespace {
models::ViTConfig tiny_vit() { return models::vit_test_tiny(8, 4, 8, 1, 2, 16, 3); }
std::filesystem::path ckpt_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("ttmoe_ckpt_" + std::to_string(::getpid()) + "_" + name);
}
std::vector<float> all_values(models::VisionTransformer<float>& m) {
  std::vector<float> v;
  for (auto& p : nn::named_parameters<float>(m))
    for (auto x : p.flat.to_vector()) v.push_back(x);
  return v;
}
}  // namespace

TEST_CASE("checkpoint: save_state / load_state round trip", "[unit]") {
  models::VisionTransformer<float> a(tiny_vit(), 1), b(tiny_vit(), 2);
  const auto path = ckpt_file("roundtrip.safetensors");
  nn::save_state(a, path);
  REQUIRE(all_values(a) != all_values(b));
  auto rep = nn::load_state(b, path);
  CHECK(rep.loaded.size() == nn::named_parameters<float>(a).size());
  CHECK(all_values(a) == all_values(b));
  CHECK(b.head.weight.requires_grad());  // loading writes in place: flags survive
  // The same weights through torchvision names (prefixed) load back into a third model.
  models::VisionTransformer<double> c(tiny_vit(), 3);
  const auto tv = ckpt_file("tv.safetensors");
  nn::save_state(a, tv, io::torchvision_vit_names("model."), io::DType::BF16);
  io::SafetensorsFile tf(tv);
  CHECK(tf.contains("model.encoder.layers.encoder_layer_0.self_attention.in_proj_weight"));
  CHECK(tf.contains("model.heads.head.bias"));
  CHECK(tf.contains("model.class_token"));
  nn::load_state(c, tf, io::torchvision_vit_names("model."));  // BF16 -> double
  CHECK(c.head.bias.to_vector()[0] == Approx(a.head.bias.to_vector()[0]).epsilon(1e-2));
  std::filesystem::remove(path);
  std::filesystem::remove(tv);
}

TEST_CASE("checkpoint: name maps", "[unit]") {
  auto tv = io::torchvision_vit_names();
  CHECK(tv.key_for("cls_token") == "class_token");
  CHECK(tv.key_for("pos_embed") == "encoder.pos_embedding");
  CHECK(tv.key_for("patch_embed.proj.weight") == "conv_proj.weight");
  CHECK(tv.key_for("blocks.11.norm1.bias") == "encoder.layers.encoder_layer_11.ln_1.bias");
  CHECK(tv.key_for("blocks.3.attn.qkv.weight") == "encoder.layers.encoder_layer_3.self_attention.in_proj_weight");
  CHECK(tv.key_for("blocks.3.attn.qkv.bias") == "encoder.layers.encoder_layer_3.self_attention.in_proj_bias");
  CHECK(tv.key_for("blocks.3.attn.proj.weight") == "encoder.layers.encoder_layer_3.self_attention.out_proj.weight");
  CHECK(tv.key_for("blocks.0.norm2.weight") == "encoder.layers.encoder_layer_0.ln_2.weight");
  CHECK(tv.key_for("blocks.0.mlp.fc1.bias") == "encoder.layers.encoder_layer_0.mlp.0.bias");
  CHECK(tv.key_for("blocks.0.mlp.fc2.weight") == "encoder.layers.encoder_layer_0.mlp.3.weight");
  CHECK(tv.key_for("norm.weight") == "encoder.ln.weight");
  CHECK(tv.key_for("head.weight") == "heads.head.weight");
  CHECK(io::timm_names("model.").key_for("blocks.0.norm1.weight") == "model.blocks.0.norm1.weight");
}

TEST_CASE("checkpoint: one error lists missing, unexpected and mis-shaped keys", "[unit]") {
  models::VisionTransformer<float> src(tiny_vit(), 1), dst(tiny_vit(), 2);
  const auto path = ckpt_file("broken.safetensors");
  {
    io::SafetensorsWriter w;
    for (auto& p : nn::named_parameters<float>(src)) {
      if (p.name == "head.bias") continue;  // missing
      auto v = p.flat.to_vector();
      std::vector<std::int64_t> shape(p.shape.begin(), p.shape.end());
      if (p.name == "norm.weight") {  // mis-shaped: [8] stored as [2, 4]
        shape = {2, 4};
      }
      w.add(p.name, std::span<const float>(v), shape);
    }
    std::vector<float> extra(4, 1.0f);
    w.add("blocks.7.attn.qkv.weight", std::span<const float>(extra), {2, 2});  // unexpected
    w.write(path);
  }
  const auto before = all_values(dst);
  try {
    nn::load_state(dst, path);
    FAIL("load_state accepted a broken checkpoint");
  } catch (const nn::CheckpointError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(e.problems().size() == 3);
    CHECK(msg.find(path.string()) != std::string::npos);
    CHECK(msg.find("missing key 'head.bias'") != std::string::npos);
    CHECK(msg.find("unexpected key 'blocks.7.attn.qkv.weight'") != std::string::npos);
    CHECK(msg.find("shape mismatch for 'norm.weight': file [2, 4], parameter norm.weight [8]") != std::string::npos);
  }
  CHECK(all_values(dst) == before);  // nothing was loaded
  // Tolerating missing / unexpected leaves only the shape problem.
  nn::LoadOptions lenient;
  lenient.allow_missing = lenient.ignore_unexpected = true;
  CHECK_THROWS_AS(nn::load_state(dst, path, io::timm_names(), lenient), nn::CheckpointError);
  // Skipping the mis-shaped norm too makes it load, reporting what it tolerated.
  lenient.skip = {"norm.*"};
  auto rep = nn::load_state(dst, path, io::timm_names(), lenient);
  CHECK(rep.missing == std::vector<std::string>{"head.bias"});
  CHECK(rep.unexpected == std::vector<std::string>{"blocks.7.attn.qkv.weight"});
  std::filesystem::remove(path);
}
