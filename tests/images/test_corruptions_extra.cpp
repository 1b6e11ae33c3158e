// Tests of ImageNet-C's four extra (validation) corruptions. Closed forms (speckle statistics,
// Gaussian weights, the HSV saturation change, spatter's blend colours, histogram equalisation)
// are computed here from the published parameters, typed in again rather than read from the library.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "corruption_checks.hpp"
#include "synthetic_images.hpp"
#include "ttmoe/data/corruptions/corrupt.hpp"

using ttmoe::data::corruptions::Corruption;
using ttmoe::data::corruptions::CorruptionOptions;
using ttmoe::io::Image;
using ttmoe::data::corruptions::ParameterTable;

namespace {

using ttmoe_test::mean_abs_change;

Image constant(int h, int w, int c, float v) {
  Image im = ttmoe::io::make_image(h, w, c);
  std::fill(im.pixels.begin(), im.pixels.end(), v);
  return im;
}

CorruptionOptions table(ParameterTable t) {
  CorruptionOptions o;
  o.table = t;
  return o;
}

}  // namespace

TEST_CASE("extra corruptions: names round-trip and are disjoint from the fifteen", "[corruption]") {
  const std::vector<std::string> expected{"speckle_noise", "gaussian_blur", "spatter", "saturate"};
  REQUIRE(ttmoe::data::corruptions::extra_corruptions.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(std::string(ttmoe::data::corruptions::corruption_name(ttmoe::data::corruptions::extra_corruptions[i])) == expected[i]);
    CHECK(ttmoe::data::corruptions::parse_corruption(expected[i]) == ttmoe::data::corruptions::extra_corruptions[i]);
    for (Corruption c : ttmoe::data::corruptions::all_corruptions) CHECK(c != ttmoe::data::corruptions::extra_corruptions[i]);
  }
  CHECK_THROWS_WITH(ttmoe::data::corruptions::parse_corruption("speckle"), Catch::Contains("speckle_noise") && Catch::Contains("saturate"));
}

TEST_CASE("extra corruptions: deterministic, shape kept, values in [0,1], image changed", "[corruption]") {
  const std::vector<Image> images{ttmoe_test::scene(224, 224), ttmoe_test::scene(28, 28), ttmoe_test::scene(40, 56),
                                  ttmoe::data::to_gray(ttmoe_test::scene(72, 100)),
                                  ttmoe::data::to_gray(ttmoe_test::scene(28, 28))};
  for (const Image& im : images)
    for (Corruption c : ttmoe::data::corruptions::extra_corruptions)
      for (int s = 1; s <= 5; ++s) {
        INFO(ttmoe::data::corruptions::corruption_name(c) << " severity " << s << " on " << im.height << "x" << im.width << "x" << im.channels);
        const Image a = ttmoe::data::corruptions::corrupt(im, c, s, 7);
        const Image b = ttmoe::data::corruptions::corrupt(im, c, s, 7);
        ttmoe_test::check_corrupted_image(im, a, b);
        const bool gray_identity = c == Corruption::saturate && im.channels == 1 && s <= 3;  // no saturation to scale
        if (gray_identity) CHECK(a.pixels == im.pixels);
        else CHECK(mean_abs_change(im, a) > 0.0);
      }
  CHECK(ttmoe::data::corruptions::corrupt(images[0], Corruption::spatter, 0, 1).pixels == images[0].pixels);
  CHECK_THROWS_AS(ttmoe::data::corruptions::corrupt(images[0], Corruption::speckle_noise, 6, 1), std::invalid_argument);
  CHECK_THROWS_WITH(ttmoe::data::corruptions::corrupt(images[0], Corruption::saturate, -1, 1), Catch::Contains("saturate"));
}

TEST_CASE("extra corruptions: speckle noise is multiplicative with the tabulated deviation", "[corruption]") {
  const std::array<double, 5> imagenet{.15, .2, .35, .45, .6};
  const std::array<double, 5> cifar{.06, .1, .12, .16, .2};
  for (ParameterTable t : {ParameterTable::imagenet, ParameterTable::cifar})
    for (int s = 1; s <= 2; ++s) {  // small c: clipping at 0 and 1 is negligible for x = 0.4
      const double c = (t == ParameterTable::cifar ? cifar : imagenet)[std::size_t(s - 1)];
      const Image im = constant(200, 200, 1, 0.4f);
      const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::speckle_noise, s, 3, table(t));
      double m = 0, q = 0;
      for (float v : out.pixels) m += (v - 0.4) / 0.4;
      m /= double(out.pixels.size());
      for (float v : out.pixels) q += ((v - 0.4) / 0.4 - m) * ((v - 0.4) / 0.4 - m);
      const double sd = std::sqrt(q / double(out.pixels.size()));
      INFO("severity " << s << " c " << c);
      CHECK(std::fabs(m) < 4 * c / 200.0);
      CHECK(sd == Approx(c).epsilon(0.02));
    }
  // Black stays black: the noise is proportional to the value.
  CHECK(ttmoe::data::corruptions::corrupt(constant(16, 16, 3, 0.0f), Corruption::speckle_noise, 5, 1).pixels ==
        constant(16, 16, 3, 0.0f).pixels);
}

TEST_CASE("extra corruptions: gaussian blur is scikit-image's nearest-border Gaussian", "[corruption]") {
  // Direct 2-D sum with SciPy's kernel (radius int(4 sigma + 0.5)), borders replicated.
  const Image im = ttmoe_test::scene(24, 30);  // CIFAR table, length scale 24/32
  const std::array<double, 5> cifar{.4, .6, .7, .8, 1};
  for (int s : {1, 5}) {
    const double sigma = cifar[std::size_t(s - 1)] * 24.0 / 32.0;
    const int r = int(4.0 * sigma + 0.5);
    std::vector<double> k(std::size_t(2 * r + 1));
    double ks = 0;
    for (int i = -r; i <= r; ++i) ks += k[std::size_t(i + r)] = std::exp(-0.5 * i * i / (sigma * sigma));
    for (auto& v : k) v /= ks;
    const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::gaussian_blur, s, 0);
    double worst = 0;
    for (int y = 0; y < im.height; ++y)
      for (int x = 0; x < im.width; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          double acc = 0;
          for (int dy = -r; dy <= r; ++dy)
            for (int dx = -r; dx <= r; ++dx)
              acc += k[std::size_t(dy + r)] * k[std::size_t(dx + r)] *
                     im.at(std::clamp(y + dy, 0, im.height - 1), std::clamp(x + dx, 0, im.width - 1), ch);
          worst = std::max(worst, std::fabs(acc - out.at(y, x, ch)));
        }
    INFO("severity " << s);
    CHECK(worst < 1e-5);
  }
  const Image flat = constant(40, 40, 3, 0.3f);
  for (float v : ttmoe::data::corruptions::corrupt(flat, Corruption::gaussian_blur, 5, 0, table(ParameterTable::imagenet)).pixels)
    CHECK(v == Approx(0.3f).margin(1e-6));
}

TEST_CASE("extra corruptions: saturate scales HSV saturation at fixed hue and value", "[corruption]") {
  // At fixed hue and value, every channel moves along v - (v - x) * s'/s, s = (v - min) / v.
  Image im = ttmoe_test::scene(32, 48);
  im.at(0, 0, 0) = im.at(0, 0, 1) = im.at(0, 0, 2) = 0.5f;  // gray: s = 0, hue 0 (red) as scikit-image
  const std::array<std::array<double, 2>, 5> imagenet{{{.3, 0}, {.1, 0}, {2, 0}, {5, .1}, {20, .2}}};
  const std::array<std::array<double, 2>, 5> cifar{{{.3, 0}, {.1, 0}, {1.5, 0}, {2, .1}, {2.5, .2}}};
  for (ParameterTable t : {ParameterTable::imagenet, ParameterTable::automatic})  // 32 px: CIFAR
    for (int s = 1; s <= 5; ++s) {
      const auto c = (t == ParameterTable::imagenet ? imagenet : cifar)[std::size_t(s - 1)];
      const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::saturate, s, 0, table(t));
      double worst = 0;
      for (std::size_t p = 0; p < im.pixels.size(); p += 3) {
        const double r = im.pixels[p], g = im.pixels[p + 1], b = im.pixels[p + 2];
        const double v = std::max({r, g, b}), mn = std::min({r, g, b});
        const double sat = v > 0 ? (v - mn) / v : 0;
        const double s2 = std::clamp(sat * c[0] + c[1], 0.0, 1.0);
        std::array<double, 3> expect{};
        if (sat > 0)
          for (int k = 0; k < 3; ++k) expect[std::size_t(k)] = v - (v - im.pixels[p + std::size_t(k)]) * s2 / sat;
        else
          expect = {v, v * (1 - s2), v * (1 - s2)};
        for (std::size_t k = 0; k < 3; ++k) worst = std::max(worst, std::fabs(expect[k] - out.pixels[p + k]));
      }
      INFO("severity " << s);
      CHECK(worst < 1e-5);
    }
  // Gray 1-channel images: the red tint of severities 4-5 seen through OpenCV's gray weights.
  const Image g = ttmoe::data::to_gray(im);
  const Image og = ttmoe::data::corruptions::corrupt(g, Corruption::saturate, 5, 0, table(ParameterTable::imagenet));
  for (std::size_t i = 0; i < g.pixels.size(); i += 37)
    CHECK(og.pixels[i] == Approx(g.pixels[i] * (0.299 + 0.701 * 0.8)).margin(1e-6));
}

TEST_CASE("extra corruptions: spatter adds turquoise water or blends towards brown mud", "[corruption]") {
  const Image im = ttmoe_test::scene(224, 224);
  // Water (severities 1-3): a non-negative amount m times (175,238,238)/255 is added per pixel
  // (before clipping at 1, so compare only where nothing clipped).
  for (int s = 1; s <= 3; ++s) {
    const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::spatter, s, 5);
    std::size_t wet = 0;
    double worst = 0;
    for (std::size_t p = 0; p < im.pixels.size(); p += 3) {
      const double d0 = out.pixels[p] - im.pixels[p], d1 = out.pixels[p + 1] - im.pixels[p + 1],
                   d2 = out.pixels[p + 2] - im.pixels[p + 2];
      CHECK(d0 >= -1e-6);
      if (out.pixels[p + 1] >= 1.0f || out.pixels[p + 2] >= 1.0f || out.pixels[p] >= 1.0f) continue;
      if (d1 > 1e-4) ++wet;
      worst = std::max({worst, std::fabs(d0 * 238.0 / 175.0 - d1), std::fabs(d1 - d2)});
    }
    INFO("severity " << s << " wet pixels " << wet);
    CHECK(wet > 100);
    CHECK(worst < 1e-5);
  }
  // Mud (severities 4-5): out = x (1 - m) + brown m with m = 0 or m in [0.8, 1], the same m for
  // all three channels.
  const std::array<double, 3> brown{63 / 255.0, 42 / 255.0, 20 / 255.0};
  for (int s = 4; s <= 5; ++s) {
    const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::spatter, s, 5);
    std::size_t muddy = 0;
    for (std::size_t p = 0; p < im.pixels.size(); p += 3) {
      std::array<double, 3> m{};
      for (std::size_t k = 0; k < 3; ++k) {
        const double den = brown[k] - im.pixels[p + k];
        m[k] = std::fabs(den) > 0.05 ? (out.pixels[p + k] - im.pixels[p + k]) / den : std::nan("");
      }
      double mk = std::nan("");
      for (double v : m)
        if (!std::isnan(v)) mk = v;
      if (std::isnan(mk)) continue;
      for (double v : m)
        if (!std::isnan(v)) CHECK(v == Approx(mk).margin(1e-4));
      CHECK((std::fabs(mk) < 1e-4 || (mk > 0.8 - 1e-4 && mk < 1 + 1e-4)));
      muddy += mk > 0.5;
    }
    INFO("severity " << s);
    CHECK(muddy > 100);
  }
}

TEST_CASE("extra corruptions: spatter's 8-bit helpers follow OpenCV", "[corruption]") {
  namespace sd = ttmoe::data::corruptions::spatter_detail;
  // equalizeHist: levels {3,3,5,9}: first occupied level 3 (2 pixels), scale 255/(4-2);
  // 5 -> round(1 * 127.5) = 128 (half to even), 9 -> 255, 3 -> 0.
  const sd::Plane p{2, 2, {3, 3, 5, 9}};
  CHECK(sd::equalize_hist(p).v == std::vector<float>{0, 0, 128, 255});
  CHECK(sd::equalize_hist(sd::Plane{1, 3, {7, 7, 7}}).v == std::vector<float>{7, 7, 7});
  // Canny on a vertical step 0 | 200: a single-pixel-wide edge on one side of the step, nothing
  // elsewhere; distance to it grows by one pixel per column and is capped.
  sd::Plane step{12, 16, std::vector<float>(12 * 16, 0.0f)};
  for (int y = 0; y < 12; ++y)
    for (int x = 8; x < 16; ++x) step.at(y, x) = 200.0f;
  const sd::Plane e = sd::canny(step, 50, 150);
  for (int y = 0; y < 12; ++y)
    for (int x = 0; x < 16; ++x) {
      INFO(y << "," << x);
      CHECK(e.at(y, x) == (x == 7 ? 255.0f : 0.0f));  // non-maximum suppression keeps the first of the tie
    }
  const sd::Plane d = sd::capped_edge_distance(e, 4);
  for (int x = 0; x < 16; ++x) CHECK(d.at(5, x) == float(std::min(std::abs(x - 7), 4)));
}
