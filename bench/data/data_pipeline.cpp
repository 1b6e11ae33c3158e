// Throughput of the DomainBed data path on one thread, the background loader's single producer:
//   data_decode_augment_224_images_per_s   decode a 227x227 JPEG (PACS's size) + the training augmentation
//   data_decode_eval_224_images_per_s      decode + Resize((224, 224)) + Normalize
//   data_digit_set_build_s                 building the 4 x 5,000-image digit set in memory
// Medians over --runs timed runs of --images images each. A GMoE-S/16 step of 3 x 32 images needs 96
// augmented images, so 96 / (images per second) is the loader's time per step, to compare with the step.
//   bench_data_pipeline [--images 96] [--runs 5]

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../common.hpp"
#include "ttmoe/data/augment.hpp"
#include "ttmoe/data/digit_domains.hpp"

using namespace ttmoe;
using namespace ttmoe::data;

int main(int argc, char** argv) {
  int images = 96, runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--images")) images = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
  }
  // A photo-like 227x227 JPEG: smooth colour gradients plus fine texture, quality 90.
  io::Image src = io::make_image(227, 227, 3);
  std::mt19937 noise(1);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (int y = 0; y < 227; ++y)
    for (int x = 0; x < 227; ++x)
      for (int c = 0; c < 3; ++c)
        src.at(y, x, c) = std::clamp(0.5f + 0.4f * float(std::sin(0.03 * x * (c + 1) + 0.05 * y)) + u(noise), 0.0f, 1.0f);
  const auto jpeg = io::encode_jpeg(src, 90);

  TrainAugment aug;
  EvalTransform ev;
  std::vector<float> out(3 * 224 * 224);
  std::vector<double> t_aug, t_eval;
  std::mt19937_64 rng(0);
  for (int r = 0; r < runs + 1; ++r) {  // the first run warms up
    auto t0 = bench::Clock::now();
    for (int i = 0; i < images; ++i) augment_into(io::decode_image(jpeg, 3), aug, rng, out);
    const double a = bench::seconds_since(t0);
    t0 = bench::Clock::now();
    for (int i = 0; i < images; ++i) eval_transform_into(io::decode_image(jpeg, 3), ev, out);
    const double e = bench::seconds_since(t0);
    if (r > 0) {
      t_aug.push_back(a);
      t_eval.push_back(e);
    }
  }
  auto t0 = bench::Clock::now();
  const auto set = build_digit_set();
  const double build = bench::seconds_since(t0);
  std::printf("data_decode_augment_224_images_per_s: %.1f\n", images / bench::median(t_aug));
  std::printf("data_decode_eval_224_images_per_s: %.1f\n", images / bench::median(t_eval));
  std::printf("data_digit_set_build_s: %.2f (%zu domains x %zu images)\n", build, set.size(), set.front().images.size());
  return 0;
}
