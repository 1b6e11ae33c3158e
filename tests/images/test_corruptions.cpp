// Tests of the ImageNet-C corruptions. Where a corruption has a closed form (noise statistics,
// brightness, contrast, frost blend, kernel weights) the expected values are computed here
// from the published parameters, typed in again rather than read from the library.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "corruption_checks.hpp"
#include "synthetic_images.hpp"
#include "ttmoe/data/corruptions/corrupt.hpp"
#include "ttmoe/data/image_transforms.hpp"

using ttmoe::data::corruptions::Corruption;
using ttmoe::data::corruptions::CorruptionOptions;
using ttmoe::io::Image;
using ttmoe::data::corruptions::ParameterTable;

namespace {

using ttmoe_test::mean_abs_change;

// 1 - Pearson correlation between two images: how much of the clean structure is lost,
// insensitive to the global brightness shifts of blend-type corruptions.
double decorrelation(const Image& a, const Image& b) {
  const double n = static_cast<double>(a.pixels.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) ma += a.pixels[i], mb += b.pixels[i];
  ma /= n, mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) {
    const double da = a.pixels[i] - ma, db = b.pixels[i] - mb;
    sab += da * db, saa += da * da, sbb += db * db;
  }
  return 1.0 - sab / std::sqrt(saa * sbb);
}

bool uses_randomness(Corruption c) {
  switch (c) {
    case Corruption::defocus_blur:
    case Corruption::zoom_blur:
    case Corruption::brightness:
    case Corruption::contrast:
    case Corruption::pixelate:
    case Corruption::jpeg_compression: return false;
    default: return true;
  }
}

std::string name(Corruption c) { return std::string(ttmoe::data::corruptions::corruption_name(c)); }

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.14159265358979323846); }

// Mean metric over severities 1..5 and seeds 11..10+seeds. The same seeds serve every severity
// (common random numbers), so differences between severities come from the parameters.
template <class Metric>
std::array<double, 5> per_severity(const Image& im, Corruption c, Metric metric, int seeds = 2) {
  std::array<double, 5> out{};
  if (!uses_randomness(c)) seeds = 1;  // the seed is not used: one evaluation is the average
  for (int s = 1; s <= 5; ++s)
    for (int k = 0; k < seeds; ++k)
      out[static_cast<std::size_t>(s - 1)] +=
          metric(im, ttmoe::data::corruptions::corrupt(im, c, s, static_cast<std::uint64_t>(11 + k))) / seeds;
  return out;
}

}  // namespace

TEST_CASE("corruption: names round-trip and are the ImageNet-C folder names", "[corruption]") {
  const std::vector<std::string> expected{"gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur",
                                          "glass_blur",     "motion_blur", "zoom_blur",    "snow",
                                          "frost",          "fog",         "brightness",   "contrast",
                                          "elastic_transform", "pixelate", "jpeg_compression"};
  REQUIRE(ttmoe::data::corruptions::all_corruptions.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(name(ttmoe::data::corruptions::all_corruptions[i]) == expected[i]);
    CHECK(ttmoe::data::corruptions::parse_corruption(expected[i]) == ttmoe::data::corruptions::all_corruptions[i]);
  }
  CHECK_THROWS_AS(ttmoe::data::corruptions::parse_corruption("gaussian"), std::invalid_argument);
  CHECK_THROWS_WITH(ttmoe::data::corruptions::parse_corruption("Fog"), Catch::Contains("valid names") && Catch::Contains("fog"));
}

TEST_CASE("corruption: the 64-px rule picks the table and the length scale", "[corruption]") {
  auto scale = [](int h, int w, ParameterTable t = ParameterTable::automatic) {
    return ttmoe::data::corruptions::corruption_scale(ttmoe::io::make_image(h, w, 3), t);
  };
  CHECK(scale(32, 32).cifar);
  CHECK(scale(32, 32).scale == 1.0);
  CHECK(scale(64, 200).cifar);  // shorter side decides
  CHECK(scale(64, 200).scale == 2.0);
  CHECK_FALSE(scale(65, 65).cifar);
  CHECK(scale(65, 65).scale == Approx(65.0 / 224.0));
  CHECK(scale(224, 300).scale == 1.0);
  CHECK(scale(448, 448).scale == 2.0);
  CHECK_FALSE(scale(32, 32, ParameterTable::imagenet).cifar);
  CHECK(scale(224, 224, ParameterTable::cifar).cifar);
  CHECK(scale(224, 224, ParameterTable::cifar).scale == 7.0);
}

TEST_CASE("corruption: every corruption is deterministic, keeps the shape and stays in [0,1]", "[corruption]") {
  const std::vector<Image> images{ttmoe_test::scene(224, 224), ttmoe_test::scene(40, 56),
                                  ttmoe::data::to_gray(ttmoe_test::scene(72, 100))};
  for (const Image& im : images)
    for (Corruption c : ttmoe::data::corruptions::all_corruptions) {
      INFO(name(c) << " on " << im.height << "x" << im.width << "x" << im.channels);
      const int severity = im.height == 224 ? 5 : 3;
      const Image a = ttmoe::data::corruptions::corrupt(im, c, severity, 7);
      const Image b = ttmoe::data::corruptions::corrupt(im, c, severity, 7);
      ttmoe_test::check_corrupted_image(im, a, b);
      CHECK(mean_abs_change(im, a) > 0.0);
    }
}

TEST_CASE("corruption: tiny and odd-shaped images are handled", "[corruption]") {
  for (auto [h, w] : {std::pair{1, 1}, std::pair{2, 3}, std::pair{5, 4}, std::pair{7, 130}})
    for (Corruption c : ttmoe::data::corruptions::all_corruptions) {
      INFO(name(c) << " on " << h << "x" << w);
      const Image im = ttmoe_test::scene(h, w);
      Image out;
      REQUIRE_NOTHROW(out = ttmoe::data::corruptions::corrupt(im, c, 5, 1));
      CHECK(out.height == h);
      CHECK(out.width == w);
      CHECK(std::all_of(out.pixels.begin(), out.pixels.end(), [](float v) { return v >= 0.0f && v <= 1.0f; }));
    }
}

TEST_CASE("corruption: random corruptions change with the seed, deterministic ones do not", "[corruption]") {
  const Image im = ttmoe_test::scene(96, 96);
  for (Corruption c : ttmoe::data::corruptions::all_corruptions) {
    INFO(name(c));
    const Image a = ttmoe::data::corruptions::corrupt(im, c, 3, 1);
    const Image b = ttmoe::data::corruptions::corrupt(im, c, 3, 2);
    if (uses_randomness(c))
      CHECK(a.pixels != b.pixels);
    else
      CHECK(a.pixels == b.pixels);
  }
}

TEST_CASE("corruption: severity 0 is the identity and bad severities or images throw", "[corruption]") {
  const Image im = ttmoe_test::scene(48, 48);
  Image two_channel = ttmoe::io::make_image(16, 16, 2, 0.5f);
  for (Corruption c : ttmoe::data::corruptions::all_corruptions) {
    INFO(name(c));
    CHECK(ttmoe::data::corruptions::corrupt(im, c, 0, 3).pixels == im.pixels);
    CHECK_THROWS_AS(ttmoe::data::corruptions::corrupt(im, c, 6, 3), std::invalid_argument);
    CHECK_THROWS_AS(ttmoe::data::corruptions::corrupt(im, c, -1, 3), std::invalid_argument);
    CHECK_THROWS_AS(ttmoe::data::corruptions::corrupt(two_channel, c, 1, 3), std::invalid_argument);
  }
}

TEST_CASE("corruption: ImageNet-table severities increase the mean absolute change", "[corruption]") {
  // Frost, fog, snow and elastic_transform are tested separately: their published tables are
  // not strictly ordered by this metric (see those tests).
  const Image im = ttmoe_test::scene(224, 224);
  for (Corruption c : ttmoe::data::corruptions::all_corruptions) {
    if (c == Corruption::frost || c == Corruption::fog || c == Corruption::snow || c == Corruption::elastic_transform)
      continue;
    const auto m = per_severity(im, c, mean_abs_change);
    for (int s = 1; s < 5; ++s) {
      INFO(name(c) << " severity " << s << " -> " << s + 1 << ": " << m[static_cast<std::size_t>(s - 1)] << " vs "
                   << m[static_cast<std::size_t>(s)]);
      CHECK(m[static_cast<std::size_t>(s)] > m[static_cast<std::size_t>(s - 1)]);
    }
  }
}

TEST_CASE("corruption: CIFAR-table severities increase the mean absolute change on 32 px images", "[corruption]") {
  // Excluded: glass_blur (the CIFAR table alternates blur strength and iterations), pixelate
  // (on 32 px, 30/28/27-px intermediates alias differently), elastic_transform (its CIFAR table
  // shrinks the affine range with severity), frost (blend; tested by correlation below).
  const Image im = ttmoe_test::scene(32, 32);
  for (Corruption c : {Corruption::gaussian_noise, Corruption::shot_noise, Corruption::impulse_noise,
                       Corruption::defocus_blur, Corruption::motion_blur, Corruption::zoom_blur, Corruption::snow,
                       Corruption::fog, Corruption::brightness, Corruption::contrast, Corruption::jpeg_compression}) {
    const auto m = per_severity(im, c, mean_abs_change);
    for (int s = 1; s < 5; ++s) {
      INFO(name(c) << " severity " << s << " -> " << s + 1 << ": " << m[static_cast<std::size_t>(s - 1)] << " vs "
                   << m[static_cast<std::size_t>(s)]);
      // motion_blur 3 -> 4 only lengthens a Gaussian tail (radius 6 -> 8 at sigma 2): nearly equal.
      CHECK(m[static_cast<std::size_t>(s)] >= 0.999 * m[static_cast<std::size_t>(s - 1)]);
    }
    CHECK(m[4] > m[0]);
  }
}

TEST_CASE("corruption: frost and fog severities reduce the correlation with the clean image", "[corruption]") {
  // Frost is a blend a*x + b*frost; the published (a, b) trade image for texture
  // (a/b = 2.5, 1.33, 1, .93, .8 on ImageNet), which lowers the correlation with the clean image
  // monotonically, while the mean absolute change depends on how bright the frost is.
  // Fog severities 3 and 4 share the strength 2.5 and differ in roughness (decay 1.7 vs 1.5):
  // the rougher fog hides more structure on average, but one fractal draw varies a lot, so fog
  // is averaged over 16 seeds; its mean absolute change is a near tie between 3 and 4.
  for (Corruption c : {Corruption::frost, Corruption::fog})
    for (int size : {224, 32}) {
      const Image im = ttmoe_test::scene(size, size);
      const int seeds = c == Corruption::fog ? 16 : 2;
      std::array<double, 5> d{}, m{};
      for (int s = 1; s <= 5; ++s)
        for (int k = 0; k < seeds; ++k) {
          const Image out = ttmoe::data::corruptions::corrupt(im, c, s, static_cast<std::uint64_t>(11 + k));
          d[static_cast<std::size_t>(s - 1)] += decorrelation(im, out) / seeds;
          m[static_cast<std::size_t>(s - 1)] += mean_abs_change(im, out) / seeds;
        }
      for (int s = 1; s < 5; ++s) {
        INFO(name(c) << " " << size << " px severity " << s << " -> " << s + 1);
        CHECK(d[static_cast<std::size_t>(s)] > d[static_cast<std::size_t>(s - 1)]);
        // Fog's mean absolute change still rises within 1% between neighbours.
        if (c == Corruption::fog) CHECK(m[static_cast<std::size_t>(s)] > 0.99 * m[static_cast<std::size_t>(s - 1)]);
      }
      if (c == Corruption::fog) CHECK(m[4] > m[0]);
    }
}

TEST_CASE("corruption: frost with a supplied texture is the tabulated blend", "[corruption]") {
  // A constant texture t makes the result clip(a*x + b*t) with the published (a, b).
  CorruptionOptions opt;
  opt.frost_textures.push_back(ttmoe::io::make_image(300, 420, 3, 0.5f));
  const std::array<std::array<double, 2>, 5> imagenet{{{1, .4}, {.8, .6}, {.7, .7}, {.65, .7}, {.6, .75}}};
  const std::array<std::array<double, 2>, 5> cifar{{{1, .2}, {1, .3}, {.9, .4}, {.85, .4}, {.75, .45}}};
  for (int size : {224, 32})
    for (int s = 1; s <= 5; ++s) {
      const Image im = ttmoe_test::scene(size, size);
      const auto& ab = (size == 32 ? cifar : imagenet)[static_cast<std::size_t>(s - 1)];
      const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::frost, s, 5, opt);
      double worst = 0;
      for (std::size_t i = 0; i < im.pixels.size(); ++i) {
        const double expect = std::clamp(ab[0] * im.pixels[i] + ab[1] * 0.5, 0.0, 1.0);
        worst = std::max(worst, std::fabs(expect - out.pixels[i]));
      }
      INFO(size << " px severity " << s);
      CHECK(worst < 1e-5);
    }
  // A texture smaller than the image is enlarged to cover it.
  opt.frost_textures = {ttmoe::io::make_image(20, 20, 3, 0.25f)};
  const Image out = ttmoe::data::corruptions::corrupt(ttmoe_test::scene(100, 120), Corruption::frost, 2, 1, opt);
  CHECK(out.height == 100);
  CHECK(out.width == 120);
}

TEST_CASE("corruption: snow only adds light on top of the whitened image", "[corruption]") {
  // out = clip(blend*x + (1-blend)*max(x, 1.5*gray + .5) + flakes) with flakes >= 0, so the
  // whitened image is a lower bound; the published blends are .8,.7,.7,.65,.55.
  const Image im = ttmoe_test::scene(224, 224);
  const std::array<double, 5> blend{.8, .7, .7, .65, .55};
  for (int s = 1; s <= 5; ++s) {
    const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::snow, s, 3);
    double violations = 0;
    for (int y = 0; y < 224; ++y)
      for (int x = 0; x < 224; ++x) {
        const double gray = 0.299 * im.at(y, x, 0) + 0.587 * im.at(y, x, 1) + 0.114 * im.at(y, x, 2);
        for (int c = 0; c < 3; ++c) {
          const double v = im.at(y, x, c);
          const double b = blend[static_cast<std::size_t>(s - 1)];
          const double floor_v = std::min(1.0, b * v + (1 - b) * std::max(v, 1.5 * gray + 0.5));
          if (out.at(y, x, c) < floor_v - 1e-5) ++violations;
        }
      }
    INFO("severity " << s);
    CHECK(violations == 0);
  }
  // Severity ordering is approximate in this metric: severity 3 trades flake count (threshold .9)
  // for flake size (zoom 4) against severity 2, so allow 5% slack between neighbours.
  const auto m = per_severity(im, Corruption::snow, mean_abs_change);
  for (int s = 1; s < 5; ++s) CHECK(m[static_cast<std::size_t>(s)] > 0.95 * m[static_cast<std::size_t>(s - 1)]);
  CHECK(m[4] > 1.5 * m[0]);
}

TEST_CASE("corruption: elastic severities 3-5 grow with the displacement scale", "[corruption]") {
  // ImageNet-C severities 1-2 are a large affine warp with a very smooth field, 3-5 a small warp
  // (same range) with displacement scale alpha = 244 * (.05, .07, .12): only 3 < 4 < 5 is ordered.
  // With the same seed the random fields are shared, so the change must grow with alpha.
  const Image im = ttmoe_test::scene(224, 224);
  const auto m = per_severity(im, Corruption::elastic_transform, mean_abs_change);
  CHECK(m[3] > m[2]);
  CHECK(m[4] > m[3]);
  CHECK(m[0] > m[2]);  // the big affine warps change more than the local jitter
}

TEST_CASE("corruption: gaussian noise has the tabulated standard deviation", "[corruption]") {
  const Image gray = ttmoe::io::make_image(256, 256, 3, 0.5f);
  const std::array<double, 5> c{.08, .12, .18, .26, .38};
  for (int s = 1; s <= 5; ++s) {
    const Image out = ttmoe::data::corruptions::corrupt(gray, Corruption::gaussian_noise, s, 99);
    double m = 0, m2 = 0;
    for (std::size_t i = 0; i < out.pixels.size(); ++i) {
      const double d = out.pixels[i] - 0.5;
      m += d, m2 += d * d;
    }
    const double n = static_cast<double>(out.pixels.size());
    const double sd = std::sqrt(m2 / n - (m / n) * (m / n));
    // Clipping to [0,1] truncates the normal at k = .5/c: E[X^2] of clip(cZ, -.5, .5).
    const double sigma = c[static_cast<std::size_t>(s - 1)];
    const double k = 0.5 / sigma;
    const double ex2 = sigma * sigma * ((2 * normal_cdf(k) - 1) - 2 * k * normal_pdf(k)) + 2 * 0.25 * (1 - normal_cdf(k));
    INFO("severity " << s << " empirical " << sd << " clipped-normal " << std::sqrt(ex2));
    CHECK(sd == Approx(std::sqrt(ex2)).epsilon(0.02));
    if (s <= 3) CHECK(sd == Approx(sigma).epsilon(0.05));  // clipping negligible (k >= 2.8)
    CHECK(std::fabs(m / n) < 4 * sigma / std::sqrt(n));
  }
}

TEST_CASE("corruption: shot noise follows the Poisson law", "[corruption]") {
  // out = min(K / c, 1), K ~ Poisson(x c). Exact mean and variance summed over the pmf.
  const Image gray = ttmoe::io::make_image(256, 256, 3, 0.5f);
  struct Table {
    ParameterTable table;
    std::array<double, 5> c;
  };
  for (const Table& t : {Table{ParameterTable::imagenet, {60, 25, 12, 5, 3}},
                         Table{ParameterTable::cifar, {500, 250, 100, 75, 50}}}) {
    CorruptionOptions opt;
    opt.table = t.table;
    for (int s = 1; s <= 5; ++s) {
      const double c = t.c[static_cast<std::size_t>(s - 1)];
      const double lambda = 0.5 * c;
      double em = 0, ev = 0, p = std::exp(-lambda);
      for (int k = 0; k < lambda + 30 * std::sqrt(lambda) + 30; ++k) {
        if (k > 0) p *= lambda / k;
        const double v = std::min(k / c, 1.0);
        em += p * v, ev += p * v * v;
      }
      ev -= em * em;
      const Image out = ttmoe::data::corruptions::corrupt(gray, Corruption::shot_noise, s, 4, opt);
      double m = 0, m2 = 0;
      for (float v : out.pixels) m += v, m2 += double(v) * v;
      const double n = static_cast<double>(out.pixels.size());
      m /= n;
      const double var = m2 / n - m * m;
      INFO((t.table == ParameterTable::cifar ? "CIFAR" : "ImageNet") << " severity " << s << " c=" << c);
      CHECK(std::fabs(m - em) < 5 * std::sqrt(ev / n));
      CHECK(var == Approx(ev).epsilon(0.05));
    }
  }
}

TEST_CASE("corruption: impulse noise replaces the tabulated fraction of values", "[corruption]") {
  const Image gray = ttmoe::io::make_image(256, 256, 3, 0.5f);
  const std::array<double, 5> amount{.03, .06, .09, .17, .27};
  for (int s = 1; s <= 5; ++s) {
    const Image out = ttmoe::data::corruptions::corrupt(gray, Corruption::impulse_noise, s, 8);
    double salt = 0, pepper = 0, other = 0;
    for (float v : out.pixels) {
      if (v == 1.0f)
        ++salt;
      else if (v == 0.0f)
        ++pepper;
      else if (v != 0.5f)
        ++other;
    }
    const double n = static_cast<double>(out.pixels.size());
    const double a = amount[static_cast<std::size_t>(s - 1)];
    const double se = std::sqrt(a * (1 - a) / n);
    INFO("severity " << s);
    CHECK(other == 0);
    CHECK(std::fabs((salt + pepper) / n - a) < 5 * se);
    CHECK(std::fabs(salt / n - a / 2) < 5 * se);
  }
}

TEST_CASE("corruption: brightness is the closed-form HSV value shift", "[corruption]") {
  // Raising V = max(r,g,b) to min(V + c, 1) at fixed hue and saturation scales the pixel by
  // min(V + c, 1) / V; black pixels become grey min(c, 1).
  Image im = ttmoe_test::scene(64, 80);
  im.at(0, 0, 0) = im.at(0, 0, 1) = im.at(0, 0, 2) = 0.0f;                     // black
  im.at(0, 1, 0) = 0.3f, im.at(0, 1, 1) = 0.3f, im.at(0, 1, 2) = 0.1f;         // tie of maxima
  im.at(0, 2, 0) = 0.95f, im.at(0, 2, 1) = 0.5f, im.at(0, 2, 2) = 0.2f;        // saturates V
  const std::array<double, 5> imagenet{.1, .2, .3, .4, .5};
  const std::array<double, 5> cifar{.05, .1, .15, .2, .3};
  for (ParameterTable table : {ParameterTable::imagenet, ParameterTable::cifar}) {
    CorruptionOptions opt;
    opt.table = table;
    for (int s = 1; s <= 5; ++s) {
      const double c = (table == ParameterTable::cifar ? cifar : imagenet)[static_cast<std::size_t>(s - 1)];
      const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::brightness, s, 0, opt);
      double worst = 0;
      for (std::size_t p = 0; p < im.pixels.size(); p += 3) {
        const double v = std::max({im.pixels[p], im.pixels[p + 1], im.pixels[p + 2]});
        const double v2 = std::min(v + c, 1.0);
        for (std::size_t k = 0; k < 3; ++k) {
          const double expect = v > 0 ? im.pixels[p + k] * v2 / v : v2;
          worst = std::max(worst, std::fabs(expect - out.pixels[p + k]));
        }
      }
      INFO("severity " << s);
      CHECK(worst < 1e-5);
    }
  }
  // Gray images: V is the value itself.
  const Image g = ttmoe::data::to_gray(im);
  const Image og = ttmoe::data::corruptions::corrupt(g, Corruption::brightness, 3, 0, {ParameterTable::imagenet, {}});
  for (std::size_t i = 0; i < g.pixels.size(); ++i) CHECK(og.pixels[i] == Approx(std::min(g.pixels[i] + 0.3, 1.0)));
}

TEST_CASE("corruption: contrast shrinks every channel towards its mean", "[corruption]") {
  const Image im = ttmoe_test::scene(50, 70);
  const std::array<double, 5> imagenet{.4, .3, .2, .1, .05};
  const std::array<double, 5> cifar{.75, .5, .4, .3, .15};
  double mean[3] = {0, 0, 0};
  for (std::size_t i = 0; i < im.pixels.size(); ++i) mean[i % 3] += im.pixels[i];
  for (double& m : mean) m /= 50.0 * 70.0;
  for (ParameterTable table : {ParameterTable::imagenet, ParameterTable::automatic}) {  // 50 px: CIFAR
    CorruptionOptions opt;
    opt.table = table;
    const auto& c = table == ParameterTable::imagenet ? imagenet : cifar;
    for (int s = 1; s <= 5; ++s) {
      const Image out = ttmoe::data::corruptions::corrupt(im, Corruption::contrast, s, 0, opt);
      double worst = 0;
      for (std::size_t i = 0; i < im.pixels.size(); ++i) {
        const double expect =
            std::clamp((im.pixels[i] - mean[i % 3]) * c[static_cast<std::size_t>(s - 1)] + mean[i % 3], 0.0, 1.0);
        worst = std::max(worst, std::fabs(expect - out.pixels[i]));
      }
      CHECK(worst < 1e-6);
    }
  }
}

TEST_CASE("corruption: pixelate reduces the number of distinct colours", "[corruption]") {
  const Image im = ttmoe_test::scene(224, 224);
  auto distinct = [](const Image& x) {
    std::set<std::tuple<float, float, float>> colours;
    for (std::size_t p = 0; p < x.pixels.size(); p += 3) colours.emplace(x.pixels[p], x.pixels[p + 1], x.pixels[p + 2]);
    return colours.size();
  };
  const std::size_t before = distinct(im);
  const std::array<double, 5> c{.6, .5, .4, .3, .25};
  std::size_t previous = before;
  for (int s = 1; s <= 5; ++s) {
    const std::size_t after = distinct(ttmoe::data::corruptions::corrupt(im, Corruption::pixelate, s, 0));
    const auto side = static_cast<std::size_t>(224 * c[static_cast<std::size_t>(s - 1)]);
    INFO("severity " << s << ": " << before << " -> " << after);
    CHECK(after <= side * side);  // at most one colour per block of the small image
    CHECK(after < previous);
    previous = after;
  }
}

TEST_CASE("corruption: jpeg_compression encodes at the tabulated quality", "[corruption]") {
  const Image im = ttmoe_test::scene(224, 224);
  const std::array<int, 5> imagenet{25, 18, 15, 10, 7};
  for (int s = 1; s <= 5; ++s) {
    const Image expect = ttmoe::io::decode_image(ttmoe::io::encode_jpeg(im, imagenet[static_cast<std::size_t>(s - 1)]));
    CHECK(ttmoe::data::corruptions::corrupt(im, Corruption::jpeg_compression, s, 0).pixels == expect.pixels);
  }
  const Image small = ttmoe_test::scene(32, 32);
  const std::array<int, 5> cifar{80, 65, 58, 50, 40};
  for (int s = 1; s <= 5; ++s) {
    const Image expect = ttmoe::io::decode_image(ttmoe::io::encode_jpeg(small, cifar[static_cast<std::size_t>(s - 1)]));
    CHECK(ttmoe::data::corruptions::corrupt(small, Corruption::jpeg_compression, s, 0).pixels == expect.pixels);
  }
}

TEST_CASE("corruption: blurs keep a constant image constant", "[corruption]") {
  const Image flat = ttmoe::io::make_image(96, 120, 3, 0.4f);
  for (Corruption c : {Corruption::defocus_blur, Corruption::motion_blur, Corruption::zoom_blur, Corruption::glass_blur,
                       Corruption::elastic_transform, Corruption::pixelate}) {
    for (int s : {1, 3, 5}) {
      if (c == Corruption::defocus_blur && s > 3) continue;  // rim quirk: see the defocus kernel test
      const Image out = ttmoe::data::corruptions::corrupt(flat, c, s, 2);
      double worst = 0;
      for (float v : out.pixels) worst = std::max(worst, std::fabs(v - 0.4));
      INFO(name(c) << " severity " << s);
      // glass_blur truncates to 8 bits once, as the reference's np.uint8 does.
      CHECK(worst <= (c == Corruption::glass_blur ? 1.0 / 255 + 1e-6 : 1e-5));
    }
  }
}

TEST_CASE("corruption: defocus kernel at severity 1 is the radius-3 lattice disk", "[corruption]") {
  // Radius 3 contains 29 lattice points (Gauss circle problem: N(3) = 29); the 0.1-sigma
  // anti-alias blur only moves ~e^-50 of weight, so the kernel is 29 equal weights.
  const auto [kernel, side] = ttmoe::data::corruptions::defocus_disk(3, 0.1);
  CHECK(side == 7);
  int nonzero = 0;
  double total = 0;
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x) {
      const float w = kernel[static_cast<std::size_t>(y * side + x)];
      total += w;
      const int dy = y - 3, dx = x - 3;
      if (dx * dx + dy * dy <= 9) {
        ++nonzero;
        CHECK(w == Approx(1.0 / 29).epsilon(1e-6));
      } else {
        CHECK(w == 0.0f);
      }
    }
  CHECK(nonzero == 29);
  CHECK(total == Approx(1.0));
}

TEST_CASE("corruption: defocus kernels reproduce the reference's rim quirk at radius >= 8", "[corruption]") {
  // For radius >= 8 the reference's disk touches its grid edge and OpenCV's reflect-101 blur
  // keeps the rim bright, so the kernel sums to more than 1. Sums computed independently with
  // numpy (17x17 grid and 3x3 blur for radius 8, 21x21 and 5x5 for radius 10, sigma .5).
  auto sum = [](double r, double a) {
    const auto [k, side] = ttmoe::data::corruptions::defocus_disk(r, a);
    double s = 0;
    for (float v : k) s += v;
    return s;
  };
  CHECK(sum(6, 0.5) == Approx(1.0).epsilon(1e-6));
  CHECK(sum(8, 0.5) == Approx(1.012975469512999).epsilon(1e-5));
  CHECK(sum(10, 0.5) == Approx(1.0107857735871495).epsilon(1e-5));
}

TEST_CASE("corruption: defocus kernels scale with the image", "[corruption]") {
  // A 224 px image (length scale 1) made by pixel replication of a 112 px one (scale .5),
  // blurred and box-downsampled, should match the 112 px blur: the residual is small compared
  // with the blur's own effect. Severities 1-3 only: at 4-5 the reference's rim quirk (kernel
  // sum ~1.01 at scale 1) depends on the blur-to-pixel ratio and so differs by ~1% in brightness.
  const Image small = ttmoe_test::scene(112, 112);
  const Image big = ttmoe::data::resize(small, 224, 224, ttmoe::data::ResizeFilter::box);  // pixel replication
  for (int s : {1, 2, 3}) {
    const Image blurred_small = ttmoe::data::corruptions::corrupt(small, Corruption::defocus_blur, s, 0);
    const Image blurred_big =
        ttmoe::data::resize(ttmoe::data::corruptions::corrupt(big, Corruption::defocus_blur, s, 0), 112, 112, ttmoe::data::ResizeFilter::box);
    const double residual = mean_abs_change(blurred_small, blurred_big);
    const double effect = mean_abs_change(small, blurred_small);
    INFO("severity " << s << " residual " << residual << " effect " << effect);
    CHECK(residual < 0.15 * effect);
  }
}

TEST_CASE("corruption: motion blur streak has ImageMagick's one-sided Gaussian weights", "[corruption]") {
  // Radius 5 -> 2*5+1 = 11 taps, weight_i ~ exp(-i^2 / (2 sigma^2)), tap i read at +i along
  // the angle: a single bright pixel smears i pixels *against* the direction of motion.
  const double sigma = 2.0;
  double total = 0;
  for (int i = 0; i < 11; ++i) total += std::exp(-i * i / (2 * sigma * sigma));
  for (double angle : {0.0, 90.0}) {
    Image im = ttmoe::io::make_image(40, 40, 1);
    im.at(30, 30, 0) = 1.0f;
    const Image out = ttmoe::data::motion_blur(im, 5, sigma, angle);
    double sum = 0;
    for (float v : out.pixels) sum += v;
    CHECK(sum == Approx(1.0).epsilon(1e-5));
    for (int i = 0; i < 11; ++i) {
      const float v = angle == 0.0 ? out.at(30, 30 - i, 0) : out.at(30 - i, 30, 0);
      CHECK(v == Approx(std::exp(-i * i / (2 * sigma * sigma)) / total).epsilon(1e-5));
    }
  }
}

TEST_CASE("corruption: the plasma fractal spans [0,1] and its smoothness follows the decay", "[corruption]") {
  auto rng = ttmoe::data::corruptions::CorruptionRng(5);
  const Image rough = ttmoe::data::corruptions::plasma_fractal(256, 1.4, rng);
  const Image smooth = ttmoe::data::corruptions::plasma_fractal(256, 3.0, rng);
  for (const Image* p : {&rough, &smooth}) {
    const auto [lo, hi] = std::minmax_element(p->pixels.begin(), p->pixels.end());
    CHECK(*lo == 0.0f);
    CHECK(*hi == 1.0f);
  }
  // Mean neighbour difference (roughness) is larger for the smaller decay.
  auto roughness = [](const Image& m) {
    double s = 0;
    for (int y = 0; y < m.height; ++y)
      for (int x = 1; x < m.width; ++x) s += std::fabs(m.at(y, x, 0) - m.at(y, x - 1, 0));
    return s;
  };
  CHECK(roughness(rough) > 2 * roughness(smooth));
  CHECK_THROWS_AS(ttmoe::data::corruptions::plasma_fractal(100, 2.0, rng), std::invalid_argument);
}

TEST_CASE("corruption: the random source is reproducible and has the right moments", "[corruption]") {
  ttmoe::data::corruptions::CorruptionRng a(123), b(123);
  for (int i = 0; i < 100; ++i) CHECK(a.normal() == b.normal());
  double m = 0, m2 = 0, u = 0;
  constexpr int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = a.normal();
    m += z, m2 += z * z;
    u += a.uniform();
  }
  CHECK(std::fabs(m / n) < 0.01);
  CHECK(m2 / n == Approx(1.0).epsilon(0.01));
  CHECK(u / n == Approx(0.5).epsilon(0.005));
  for (int i = 0; i < 1000; ++i) {
    const auto r = a.randint(-3, 3);
    CHECK(r >= -3);
    CHECK(r < 3);
  }
}
