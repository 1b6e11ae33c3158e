// ImageNet-C blur corruptions: defocus_blur, glass_blur, motion_blur, zoom_blur.
// Pixel-length parameters scale with the image (see common.hpp); zoom factors are
// relative and need no scaling.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "ttmoe/data/corruptions/common.hpp"
#include "ttmoe/data/image_filters.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data::corruptions {

/// The reference's disk() at length scale `scale`: an aliased disk of radius radius*scale on a
/// (2R+1)^2 grid, normalised, then smoothed by an OpenCV GaussianBlur (reflect-101 borders) of
/// sigma alias_blur*scale. The reference uses R = 8 and a 3x3 blur for radius <= 8, else
/// R = radius and a 5x5 blur; both sizes are scaled here too (R = ceil(8 or radius, times scale),
/// blur half-width round(1 or 2, times scale)), so that at scale 1 the kernel is the
/// reference's, including a quirk: for radius >= 8 the disk touches the grid edge, where the
/// reflecting blur keeps the rim bright and the kernel sums to about 1.01 (severities 4-5
/// brighten by about 1%), and at other scales the kernel is that kernel resampled.
/// Returns the kernel with all-zero border rings trimmed (they do not change the result) and
/// its side length.
inline std::pair<std::vector<float>, int> defocus_disk(double radius, double alias_blur, double scale = 1.0) {
  const bool small = radius <= 8.0;
  const int R = std::max(1, static_cast<int>(std::ceil((small ? 8.0 : radius) * scale - 1e-9)));
  const int ksize = 2 * std::max(1, static_cast<int>(std::lround((small ? 1.0 : 2.0) * scale))) + 1;
  alias_blur *= scale;
  radius *= scale;
  const int n = 2 * R + 1;
  io::Image disk = io::make_image(n, n, 1);
  double total = 0.0;
  for (int y = -R; y <= R; ++y)
    for (int x = -R; x <= R; ++x)
      if (static_cast<double>(x) * x + static_cast<double>(y) * y <= radius * radius) {
        disk.at(y + R, x + R, 0) = 1.0f;
        total += 1.0;
      }
  for (auto& v : disk.pixels) v = static_cast<float>(v / total);
  // cv2.getGaussianKernel(ksize, sigma): exp(-(i - (k-1)/2)^2 / 2 sigma^2), normalised.
  std::vector<double> g(static_cast<std::size_t>(ksize));
  double gs = 0.0;
  for (int i = 0; i < ksize; ++i) {
    const double d = i - (ksize - 1) / 2.0;
    g[static_cast<std::size_t>(i)] = std::exp(-d * d / (2.0 * alias_blur * alias_blur));
    gs += g[static_cast<std::size_t>(i)];
  }
  for (auto& v : g) v /= gs;
  disk = data::separable_filter(disk, g, g, data::Border::reflect101);
  // Weights below 1e-9 of the peak (e.g. exp(-50)^2 tails of sigma 0.1) cannot change a float
  // result but are denormal in float and would slow the correlation a hundredfold: drop them.
  const float peak = *std::max_element(disk.pixels.begin(), disk.pixels.end());
  for (auto& v : disk.pixels)
    if (v < 1e-9f * peak) v = 0.0f;
  // Trim the zero margin symmetrically so the kernel stays centred.
  int margin = 0;
  auto ring_is_zero = [&](int m) {
    for (int i = m; i < n - m; ++i)
      if (disk.at(m, i, 0) != 0.0f || disk.at(n - 1 - m, i, 0) != 0.0f || disk.at(i, m, 0) != 0.0f ||
          disk.at(i, n - 1 - m, 0) != 0.0f)
        return false;
    return true;
  };
  while (margin < R && ring_is_zero(margin)) ++margin;
  const int m = n - 2 * margin;
  std::vector<float> k(static_cast<std::size_t>(m) * m);
  for (int y = 0; y < m; ++y)
    for (int x = 0; x < m; ++x) k[static_cast<std::size_t>(y) * m + x] = disk.at(y + margin, x + margin, 0);
  return {k, m};
}

/// Defocus: correlation with defocus_disk(radius, alias_blur) (OpenCV filter2D, reflect-101
/// borders). (radius, alias_blur) = {(3,.1),(4,.5),(6,.5),(8,.5),(10,.5)} (ImageNet-C) or
/// {(.3,.4),(.4,.5),(.5,.6),(1,.2),(1.5,.1)} (CIFAR-10-C), both multiplied by the length scale.
inline io::Image defocus_blur(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                              const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::defocus_blur);
  if (severity == 0) return im;
  using P = std::array<double, 2>;
  static constexpr std::array<P, 5> imagenet{P{3, .1}, P{4, .5}, P{6, .5}, P{8, .5}, P{10, .5}};
  static constexpr std::array<P, 5> cifar{P{.3, .4}, P{.4, .5}, P{.5, .6}, P{1, .2}, P{1.5, .1}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  const auto [kernel, side] = defocus_disk(c[0], c[1], sc.scale);
  io::Image out = data::filter2d(im, kernel, side, side, data::Border::reflect101);
  data::clip01(out);
  return out;
}

/// Glass blur: Gaussian blur (sigma), quantise to 8 bits by truncation (the reference's
/// np.uint8), then `iterations` sweeps that swap each interior pixel with a random neighbour
/// at offset in [-delta, delta) per axis (bottom-right to top-left, as the reference loops),
/// then blur again. (sigma, delta, iterations) = {(.7,1,2),(.9,2,1),(1,2,3),(1.1,3,2),(1.5,4,2)}
/// (ImageNet-C) or {(.05,1,1),(.25,1,1),(.4,1,1),(.25,1,2),(.4,1,2)} (CIFAR-10-C); sigma is
/// scaled by the length scale, delta too (rounded, at least 1).
inline io::Image glass_blur(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::glass_blur);
  if (severity == 0) return im;
  struct P {
    double sigma;
    int delta;
    int iterations;
  };
  static constexpr std::array<P, 5> imagenet{P{.7, 1, 2}, P{.9, 2, 1}, P{1, 2, 3}, P{1.1, 3, 2}, P{1.5, 4, 2}};
  static constexpr std::array<P, 5> cifar{P{.05, 1, 1}, P{.25, 1, 1}, P{.4, 1, 1}, P{.25, 1, 2}, P{.4, 1, 2}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  const double sigma = c.sigma * sc.scale;
  const int d = std::max(1, static_cast<int>(std::lround(c.delta * sc.scale)));
  auto rng = corruption_detail::make_rng(seed, Corruption::glass_blur);

  io::Image x = data::gaussian_blur(im, sigma);
  for (auto& v : x.pixels) v = std::floor(std::clamp(v, 0.0f, 1.0f) * 255.0f) / 255.0f;
  const int H = x.height, W = x.width, C = x.channels;
  for (int it = 0; it < c.iterations; ++it)
    for (int h = H - d; h > d; --h)
      for (int w = W - d; w > d; --w) {
        const int dx = static_cast<int>(rng.randint(-d, d));
        const int dy = static_cast<int>(rng.randint(-d, d));
        const int hp = h + dy, wp = w + dx;
        for (int ch = 0; ch < C; ++ch) std::swap(x.at(h, w, ch), x.at(hp, wp, ch));
      }
  io::Image out = data::gaussian_blur(x, sigma);
  data::clip01(out);
  return out;
}

/// Motion blur: ImageMagick's motion blur (data::motion_blur: one-sided Gaussian streak of
/// 2*ceil(radius)+1 taps) at a uniformly random angle in [-45, 45) degrees.
/// (radius, sigma) = {(10,3),(15,5),(15,8),(15,12),(20,15)} (ImageNet-C) or
/// {(6,1),(6,1.5),(6,2),(8,2),(9,2.5)} (CIFAR-10-C), both scaled by the length scale.
inline io::Image motion_blur(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::motion_blur);
  if (severity == 0) return im;
  using P = std::array<double, 2>;
  static constexpr std::array<P, 5> imagenet{P{10, 3}, P{15, 5}, P{15, 8}, P{15, 12}, P{20, 15}};
  static constexpr std::array<P, 5> cifar{P{6, 1}, P{6, 1.5}, P{6, 2}, P{8, 2}, P{9, 2.5}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::motion_blur);
  const double angle = rng.uniform(-45.0, 45.0);
  io::Image out = data::motion_blur(im, c[0] * sc.scale, c[1] * sc.scale, angle);
  data::clip01(out);
  return out;
}

/// Zoom blur: the mean of the image and its centre zooms (clipped_zoom) by factors
/// 1, 1+step, ..., i.e. numpy.arange(1, stop, step) -- the factor list, including its floating
/// point length, is listed explicitly: ImageNet-C (step, count) = {(.01,12),(.01,16),(.02,11),
/// (.02,13),(.03,11)}, CIFAR-10-C {(.01,7),(.01,12),(.01,16),(.01,21),(.01,26)}. As in the
/// reference the unzoomed image is counted twice (once as x, once as factor 1).
inline io::Image zoom_blur(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                           const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::zoom_blur);
  if (severity == 0) return im;
  struct P {
    double step;
    int count;
  };
  // np.arange(1, 1.11, .01) has 12 elements (1.00..1.11), np.arange(1, 1.16, .01) 16 (..1.15), etc.
  static constexpr std::array<P, 5> imagenet{P{.01, 12}, P{.01, 16}, P{.02, 11}, P{.02, 13}, P{.03, 11}};
  static constexpr std::array<P, 5> cifar{P{.01, 7}, P{.01, 12}, P{.01, 16}, P{.01, 21}, P{.01, 26}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  std::vector<double> acc(im.pixels.begin(), im.pixels.end());  // the "x +" term
  for (int i = 0; i < c.count; ++i) {
    const double z = 1.0 + i * c.step;
    const io::Image zi = data::clipped_zoom(im, z);
    for (std::size_t j = 0; j < acc.size(); ++j) acc[j] += zi.pixels[j];
  }
  io::Image out = io::make_image(im.height, im.width, im.channels);
  for (std::size_t j = 0; j < acc.size(); ++j) out.pixels[j] = static_cast<float>(acc[j] / (c.count + 1));
  data::clip01(out);
  return out;
}

}  // namespace ttmoe::data::corruptions
