// Built with clang++ by the `clang_build` test: every public header in one translation unit (g++
// builds everything else), then a tiny ViT is converted to MoE-LayerNorms and adapted for one MoETTA
// step. Conversion must not change the function (zero expert deltas), and the step must update only
// routers and experts. Exits non-zero on a mismatch.
#include <ttmoe/ttmoe.hpp>
#include <ttmoe/data/augment.hpp>
#include <ttmoe/data/corruptions/corrupt.hpp>
#include <ttmoe/data/datasets.hpp>
#include <ttmoe/data/domainbed.hpp>
#include <ttmoe/data/domainbed_loader.hpp>
#include <ttmoe/data/domainbed_split.hpp>
#include <ttmoe/data/glyph_frame.hpp>
#include <ttmoe/data/image_transforms.hpp>
#include <ttmoe/data/seed_mix.hpp>
#include <ttmoe/data/streams.hpp>
#include <ttmoe/io/safetensors.hpp>
#include <ttmoe/models/gmoe_checkpoint.hpp>
#include <ttmoe/models/vit.hpp>
#include <ttmoe/moe/bisecting_kmeans.hpp>
#include <ttmoe/moe/lora_merge.hpp>
#include <ttmoe/moe/moe_ffn.hpp>
#include <ttmoe/moe/sparse_softmax.hpp>
#include <ttmoe/nn/checkpoint.hpp>
#include <ttmoe/nn/nn.hpp>
#include <ttmoe/plot/canvas.hpp>
#include <ttmoe/plot/heatmap.hpp>
#include <ttmoe/plot/lines.hpp>
#include <ttmoe/tta/tta.hpp>

#include <algorithm>
#include <cmath>

using namespace ttmoe;
using Model = models::VisionTransformer<float>;

int main() {
  Model plain(models::vit_test_tiny(16, 4, 32, 2, 4, 64, 10), 3), adapted(models::vit_test_tiny(16, 4, 32, 2, 4, 64, 10), 3);
  std::vector<float> px(2 * 3 * 16 * 16);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = float(std::sin(0.37 * double(i)));
  auto x = Tensor<float, DynShape<4>>::from_host(DynShape<4>(2, 3, 16, 16), px);
  std::vector<float> ref;
  {
    autograd::NoGrad ng;
    ref = plain(x).to_vector();
  }
  tta::MoETTA<Model, float> method;
  const auto got = method.adapt_and_predict(adapted, x).to_vector();  // the prediction before the update
  double err = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) err = std::max(err, double(std::abs(got[i] - ref[i])));
  const auto& step = method.last_step();
  const float head_change = std::abs(adapted.head.weight.to_vector()[0] - plain.head.weight.to_vector()[0]);
  fmt::print("clang build: MoE-converted logits vs plain max |diff| {:.2e}, step updated {}, head unchanged {}\n", err,
             step.updated, head_change == 0.f);
  return (err < 1e-5 && step.updated && head_change == 0.f) ? 0 : 1;
}
