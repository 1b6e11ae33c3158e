// ImageNet-C digital corruptions: contrast, elastic_transform, pixelate, jpeg_compression.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ttmoe/data/corruptions/common.hpp"
#include "ttmoe/data/image_filters.hpp"
#include "ttmoe/data/image_transforms.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data::corruptions {

/// Contrast: (x - m) * c + m with m the per-channel mean over the image, c = {.4,.3,.2,.1,.05}
/// (ImageNet-C) or {.75,.5,.4,.3,.15} (CIFAR-10-C).
inline io::Image contrast(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                          const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::contrast);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{.4, .3, .2, .1, .05};
  static constexpr std::array<double, 5> cifar{.75, .5, .4, .3, .15};
  const double c = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  const std::size_t C = static_cast<std::size_t>(im.channels);
  std::vector<double> mean(C, 0.0);
  for (std::size_t i = 0; i < im.pixels.size(); ++i) mean[i % C] += im.pixels[i];
  const double n = static_cast<double>(im.height) * im.width;
  for (auto& m : mean) m /= n;
  io::Image out = im;
  for (std::size_t i = 0; i < out.pixels.size(); ++i)
    out.pixels[i] = static_cast<float>((out.pixels[i] - mean[i % C]) * c + mean[i % C]);
  data::clip01(out);
  return out;
}

namespace digital_detail {

// OpenCV getAffineTransform: the 2x3 map sending three source points onto three destination
// points, solved by Cramer's rule.
inline std::array<double, 6> affine_from_points(const std::array<double, 6>& src, const std::array<double, 6>& dst) {
  const double x0 = src[0], y0 = src[1], x1 = src[2], y1 = src[3], x2 = src[4], y2 = src[5];
  const double det = x0 * (y1 - y2) - y0 * (x1 - x2) + (x1 * y2 - x2 * y1);
  if (std::fabs(det) < 1e-12) throw std::invalid_argument("affine_from_points: collinear points");
  std::array<double, 6> m{};
  for (int r = 0; r < 2; ++r) {
    const double u0 = dst[static_cast<std::size_t>(r)], u1 = dst[2 + static_cast<std::size_t>(r)],
                 u2 = dst[4 + static_cast<std::size_t>(r)];
    const double a = (u0 * (y1 - y2) - y0 * (u1 - u2) + (u1 * y2 - u2 * y1)) / det;
    const double b = (x0 * (u1 - u2) - u0 * (x1 - x2) + (x1 * u2 - x2 * u1)) / det;
    const double c = (x0 * (y1 * u2 - y2 * u1) - y0 * (x1 * u2 - x2 * u1) + u0 * (x1 * y2 - x2 * y1)) / det;
    m[static_cast<std::size_t>(3 * r)] = a;
    m[static_cast<std::size_t>(3 * r + 1)] = b;
    m[static_cast<std::size_t>(3 * r + 2)] = c;
  }
  return m;
}

}  // namespace digital_detail

/// Elastic transform (the reference's modification of Simard et al.): a random affine warp
/// moving three points around the centre by up to `affine` px (OpenCV warpAffine, bilinear,
/// reflect-101 borders), then a displacement field alpha * G_sigma * U(-1,1) per axis (Gaussian
/// truncated at 3 sigma, reflect borders) sampled bilinearly (SciPy map_coordinates order 1,
/// reflect). (alpha, sigma, affine) = 244 * {(2,.7,.1),(2,.08,.2),(.05,.01,.02),(.07,.01,.02),
/// (.12,.01,.02)} (ImageNet-C; 244 is the reference's constant) or 32 * {(0,0,.08),(.05,.2,.07),
/// (.08,.06,.06),(.1,.04,.05),(.1,.03,.03)} (CIFAR-10-C), all times the length scale. Note the
/// published table is not monotone in visual strength: severities 1-2 are mostly a large affine
/// warp, 3-5 a small affine warp plus local jitter.
inline io::Image elastic_transform(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::elastic_transform);
  if (severity == 0) return im;
  using P = std::array<double, 3>;
  static constexpr std::array<P, 5> imagenet{P{2, .7, .1}, P{2, .08, .2}, P{.05, .01, .02}, P{.07, .01, .02},
                                             P{.12, .01, .02}};
  static constexpr std::array<P, 5> cifar{P{0, 0, .08}, P{.05, .2, .07}, P{.08, .06, .06}, P{.1, .04, .05},
                                          P{.1, .03, .03}};
  const auto sc = corruption_scale(im, opt.table);
  const P& k = corruption_detail::pick(imagenet, cifar, sc, severity);
  const double unit = (sc.cifar ? 32.0 : 244.0) * sc.scale;
  const double alpha = k[0] * unit, sigma = k[1] * unit, affine = k[2] * unit;
  auto rng = corruption_detail::make_rng(seed, Corruption::elastic_transform);
  const int H = im.height, W = im.width;

  // Random affine: the reference's three points around the centre (x, y order).
  const double cx = std::floor(W / 2.0), cy = std::floor(H / 2.0);
  const double sq = std::max(1.0, std::floor(std::min(H, W) / 3.0));  // >= 1: tiny images stay non-degenerate
  const std::array<double, 6> pts1{cx + sq, cy + sq, cx + sq, cy - sq, cx - sq, cy - sq};
  std::array<double, 6> pts2 = pts1;
  for (auto& v : pts2) v += rng.uniform(-affine, affine);
  const io::Image warped =
      data::warp_affine(im, digital_detail::affine_from_points(pts1, pts2), data::Border::reflect101);

  // Smooth random displacement fields (dx for columns first, then dy, as the reference draws them).
  auto field = [&] {
    io::Image f = io::make_image(H, W, 1);
    for (auto& v : f.pixels) v = static_cast<float>(rng.uniform(-1.0, 1.0));
    f = data::gaussian_blur(f, sigma, data::Border::reflect, 3.0);
    for (auto& v : f.pixels) v = static_cast<float>(v * alpha);
    return f;
  };
  const io::Image dx = field();
  const io::Image dy = field();

  io::Image out = io::make_image(H, W, im.channels);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      data::sample_bilinear(warped, y + static_cast<double>(dy.at(y, x, 0)), x + static_cast<double>(dx.at(y, x, 0)),
                            data::Border::reflect, &out.at(y, x, 0));
  data::clip01(out);
  return out;
}

/// Pixelate: PIL BOX resize down to int(W*c) x int(H*c) and BOX back up (area average, then
/// blocky nearest-like enlargement), c = {.6,.5,.4,.3,.25} (ImageNet-C) or
/// {.95,.9,.85,.75,.65} (CIFAR-10-C); relative, so no length scaling.
inline io::Image pixelate(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                          const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::pixelate);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{.6, .5, .4, .3, .25};
  static constexpr std::array<double, 5> cifar{.95, .9, .85, .75, .65};
  const double c = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  const int h = std::max(1, static_cast<int>(im.height * c));
  const int w = std::max(1, static_cast<int>(im.width * c));
  io::Image out = resize(resize(im, h, w, ResizeFilter::box), im.height, im.width, ResizeFilter::box);
  data::clip01(out);
  return out;
}

/// JPEG compression: encode with stb's baseline JPEG writer at quality {25,18,15,10,7}
/// (ImageNet-C) or {80,65,58,50,40} (CIFAR-10-C) and decode again. The reference used PIL
/// (libjpeg); both use the IJG quantisation tables scaled by quality and 4:2:0 chroma, so the
/// artefacts match closely though not bit for bit.
inline io::Image jpeg_compression(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                                  const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::jpeg_compression);
  if (severity == 0) return im;
  static constexpr std::array<int, 5> imagenet{25, 18, 15, 10, 7};
  static constexpr std::array<int, 5> cifar{80, 65, 58, 50, 40};
  const int q = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  const auto bytes = io::encode_jpeg(im, q);
  io::Image out = io::decode_image(bytes, im.channels, "<jpeg_compression>");
  data::clip01(out);
  return out;
}

}  // namespace ttmoe::data::corruptions
