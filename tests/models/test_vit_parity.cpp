// ViT forward parity against PyTorch (fixtures from tests/reference/vit_models.py). Metric: normwise
// relative error max_i |logit_i - ref_i| / max_i |ref_i| over all logits of the batch, against the
// float64 torch forward of the same float32 weights.

#include <catch2/catch.hpp>

#include "parity.hpp"
#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/models/vit.hpp"

using namespace ttmoe;
using ttmoe::test::normwise_rel_error;
using ttmoe::test::Fixture;
using ttmoe::test::read_tensor;

TEST_CASE("parity: vit_b16 torchvision", "[parity]") {
  const Fixture fixture_file("vit_b16_torchvision", "models");
  const auto& f = fixture_file.file();
  models::VisionTransformer<float> vit(models::vit_base_patch16(1000));
  // Every key under model. must be used and every parameter present (no tolerance options).
  auto rep = nn::load_state(vit, f, io::torchvision_vit_names("model."));
  REQUIRE(rep.loaded.size() == 152);  // 4 + 12 * 12 + 4 tensors
  autograd::NoGrad ng;
  auto images = read_tensor<4, float>(f, "in.images").as<models::vit_b16_shapes::images>();
  Tensor<float, models::vit_b16_shapes::logits> logits = vit.forward(images);  // static ViT-B/16 entry
  auto ref = read_tensor<2, double>(f, "out.logits_f64");
  const double err = normwise_rel_error(logits, ref);
  INFO("ViT-B/16 float vs torch float64: max|a-b| / max|ref| = " << err);
  REQUIRE(err <= 1e-4);
}

template <class T>
void tiny_timm_case(const char* fixture, double tol) {
  const Fixture fixture_file(fixture, "models");
  const auto& f = fixture_file.file();
  auto md = f.metadata();
  auto meta = [&](const char* k) { return index_t(std::stol(md.at(k))); };
  auto cfg = models::vit_test_tiny(meta("img_size"), meta("patch_size"), meta("embed_dim"), meta("depth"),
                                   meta("num_heads"), meta("mlp_hidden"), meta("num_classes"));
  models::VisionTransformer<T> vit(cfg);
  nn::load_state(vit, f, io::timm_names("model."));  // every key used, every parameter present
  autograd::NoGrad ng;
  auto logits = vit(read_tensor<4, T>(f, "in.images"));
  auto ref = read_tensor<2, double>(f, "out.logits_f64");
  const double err = normwise_rel_error(logits, ref);
  INFO("tiny timm ViT: max|a-b| / max|ref| = " << err << " (tolerance " << tol << ")");
  REQUIRE(err <= tol);
}

TEST_CASE("parity: vit_tiny timm double", "[parity]") { tiny_timm_case<double>("vit_tiny_timm", 1e-10); }
TEST_CASE("parity: vit_tiny timm float", "[parity]") { tiny_timm_case<float>("vit_tiny_timm", 1e-4); }

// The same tiny configuration run by timm's own timm.models.vision_transformer.VisionTransformer
// (tests/reference/reference_libs.py, the pinned reference environment), its state_dict as timm names it.
TEST_CASE("parity: vit_tiny timm library double", "[parity]") { tiny_timm_case<double>("vit_tiny_timm_lib", 1e-10); }
TEST_CASE("parity: vit_tiny timm library float", "[parity]") { tiny_timm_case<float>("vit_tiny_timm_lib", 1e-4); }
