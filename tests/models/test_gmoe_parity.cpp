// GMoE parity against PyTorch (fixtures from tests/reference/gmoe_reference.py: timm's VisionTransformer
// with GMoE MoE layers written from the paper and the authors' code facts, in Tutel's dense
// dispatch formulation). The model is loaded from a checkpoint with the authors' key names under
// DomainBed's `model.` prefix; with the fixture's noise the logits, the weighted aux loss, the loss and
// the gradient of every parameter must match, and without noise (evaluation) the logits.
// Metric: normwise relative error max_i |a_i - ref_i| / max_i |ref_i| per tensor, against float64.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "parity.hpp"
#include "ttmoe/models/gmoe_checkpoint.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;
using ttmoe::test::normwise_rel_error;
using ttmoe::test::Fixture;
using ttmoe::test::read_tensor;

namespace {

/// The fixture's configuration from its metadata.
models::GMoEConfig fixture_config(const io::SafetensorsFile& f) {
  const auto md = f.metadata();
  auto i = [&](const char* k) { return index_t(std::stol(md.at(k))); };
  auto d = [&](const char* k) { return std::stod(md.at(k)); };
  models::GMoEConfig c;
  c.vit = models::vit_test_tiny(i("img_size"), i("patch_size"), i("embed_dim"), i("depth"), i("num_heads"),
                                i("mlp_hidden"), i("num_classes"));
  c.moe_blocks.clear();
  const std::string blocks = md.at("moe_blocks");
  for (std::size_t at = 0; at < blocks.size();) {
    const auto comma = blocks.find(',', at);
    c.moe_blocks.push_back(index_t(std::stol(blocks.substr(at, comma - at))));
    at = comma == std::string::npos ? blocks.size() : comma + 1;
  }
  c.num_experts = i("num_experts");
  c.router_dim = i("router_dim");
  c.top_k = i("top_k");
  c.renormalize = i("renormalize") != 0;
  c.capacity_factor = d("capacity_factor");
  c.gate_noise = d("gate_noise");
  c.aux_weight = d("aux_weight");
  c.expert_dropout = 0;  // random masks cannot be compared; the parity runs the deterministic parts
  c.drop_path = 0;
  return c;
}

template <class T>
void gmoe_case(const std::string& name, double tol, double gtol) {
  const Fixture fixture_file(name, "models");
  const auto& f = fixture_file.file();
  const auto cfg = fixture_config(f);
  models::GMoEVisionTransformer<T> model(cfg, 123);
  // Every key of the authors' checkpoint used, every parameter present (no tolerance options).
  auto rep = models::load_gmoe(model, Fixture(name + ".ckpt", "models").path());
  std::size_t n_params = 0;
  nn::for_each_parameter(model, [&](const std::string&, auto&) { ++n_params; });
  REQUIRE(rep.loaded.size() == n_params);

  const auto images = read_tensor<4, T>(f, "images");
  std::vector<std::int64_t> lab(f.info("labels").numel());
  f.read_as<std::int64_t>("labels", std::span<std::int64_t>(lab));
  const auto labels = IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(lab.size())), lab);
  std::vector<Tensor<T, DynShape<2>>> noise;
  for (std::size_t m = 0; m < cfg.moe_blocks.size(); ++m) noise.push_back(read_tensor<2, T>(f, "noise." + std::to_string(m)));

  model.training = true;  // noise from the fixture; dropout and drop-path are 0 in this config
  {
    autograd::Tape tape;
    auto logits = model.forward(images, noise);
    auto aux = model.aux_loss();
    Tensor<T, Shape<>> loss = nn::cross_entropy(logits, labels) + aux;
    const auto layers = model.moe_layers();
    for (std::size_t m = 0; m < layers.size(); ++m) {
      std::int64_t dropped = 0;
      f.read_as<std::int64_t>("dropped." + std::to_string(m), std::span<std::int64_t>(&dropped, 1));
      INFO("MoE block " << cfg.moe_blocks[m]);
      REQUIRE(layers[m]->routing.plan.dropped() == dropped);
      REQUIRE(dropped > 0);
    }
    const double e_logits = normwise_rel_error(logits, read_tensor<2, double>(f, "logits"));
    const double e_aux = normwise_rel_error(aux, read_tensor<0, double>(f, "aux"));
    const double e_loss = normwise_rel_error(loss, read_tensor<0, double>(f, "loss"));
    INFO("logits " << e_logits << ", aux " << e_aux << ", loss " << e_loss << " (tolerance " << tol << ")");
    REQUIRE(e_logits <= tol);
    REQUIRE(e_aux <= tol);
    REQUIRE(e_loss <= tol);
    autograd::backward(tape, loss);
  }
  // The gradients, stored under the authors' keys, read back through the same name mapping.
  const Fixture grads_file(name + ".grads", "models");
  models::GMoECheckpointSource grads(grads_file.file());
  REQUIRE(grads.names().size() == n_params);
  std::size_t unreached = 0;
  nn::for_each_parameter(model, [&](const std::string& pname, auto& t) {
    INFO("gradient of " << pname);
    REQUIRE(grads.contains(pname));
    std::vector<double> ref(std::size_t(t.numel()));
    grads.read_as<double>(pname, std::span<double>(ref));
    if (!t.grad().defined()) {  // an expert no token reached: the reference's gradient is zero too
      ++unreached;
      for (double r : ref) REQUIRE(r == 0.0);
      return;
    }
    const auto got = t.grad().to_vector();
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      diff = std::max(diff, std::abs(double(got[i]) - ref[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
    INFO("max|a-b| = " << diff << ", max|ref| = " << scale << " (tolerance " << gtol << " relative)");
    REQUIRE(diff <= gtol * std::max(scale, 1e-30));
  });
  INFO(unreached << " of " << n_params << " parameters without a gradient");
  REQUIRE(unreached * 4 <= n_params);  // most of the model is checked

  // Evaluation: no noise (the aux loss still exists but the routing is the clean one).
  model.training = false;
  autograd::NoGrad ng;
  const double e_eval = normwise_rel_error(model(images), read_tensor<2, double>(f, "logits_eval"));
  INFO("eval logits " << e_eval);
  REQUIRE(e_eval <= tol);
}

}  // namespace

TEST_CASE("parity: gmoe tiny top1 double", "[parity][gmoe]") { gmoe_case<double>("gmoe_tiny_top1", 1e-10, 1e-9); }
TEST_CASE("parity: gmoe tiny top1 float", "[parity][gmoe]") { gmoe_case<float>("gmoe_tiny_top1", 1e-4, 1e-3); }
TEST_CASE("parity: gmoe tiny top2 double", "[parity][gmoe]") { gmoe_case<double>("gmoe_tiny_top2", 1e-10, 1e-9); }
TEST_CASE("parity: gmoe tiny top2 float", "[parity][gmoe]") { gmoe_case<float>("gmoe_tiny_top2", 1e-4, 1e-3); }
