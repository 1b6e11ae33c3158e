// ImageNet-C's four extra corruptions: speckle_noise, gaussian_blur, spatter, saturate.
// Hendrycks & Dietterich released them beside the fifteen as held-out corruptions for validation
// (their make_imagenet_c.py / make_cifar_c.py "extra" functions); an experiment chooses its
// hyper-parameters on these and reports on the fifteen. Same rules as the fifteen
// (common.hpp): ImageNet-C or CIFAR-10-C table by the 64-px rule, pixel lengths
// (Gaussian sigmas) multiplied by the length scale, deterministic per seed, result clipped to [0,1].
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ttmoe/data/corruptions/common.hpp"
#include "ttmoe/data/image_filters.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data::corruptions {

/// Multiplicative noise x + x * N(0, c^2), c = {.15,.2,.35,.45,.6} (ImageNet-C) or
/// {.06,.1,.12,.16,.2} (CIFAR-10-C): dark pixels stay dark, bright ones get noisy.
inline io::Image speckle_noise(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::speckle_noise);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{.15, .2, .35, .45, .6};
  static constexpr std::array<double, 5> cifar{.06, .1, .12, .16, .2};
  const double c = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::speckle_noise);
  io::Image out = im;
  for (auto& v : out.pixels) v = static_cast<float>(v + v * c * rng.normal());
  data::clip01(out);
  return out;
}

/// scikit-image gaussian(sigma, multichannel) per channel ('nearest' borders, truncate 4), sigma =
/// {1,2,3,4,6} (ImageNet-C) or {.4,.6,.7,.8,1} (CIFAR-10-C), times the length scale.
inline io::Image gaussian_blur(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                               const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::gaussian_blur);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{1, 2, 3, 4, 6};
  static constexpr std::array<double, 5> cifar{.4, .6, .7, .8, 1};
  const auto sc = corruption_scale(im, opt.table);
  io::Image out = data::gaussian_blur(im, corruption_detail::pick(imagenet, cifar, sc, severity) * sc.scale);
  data::clip01(out);
  return out;
}

/// Saturation change in HSV (scikit-image rgb2hsv/hsv2rgb): s' = clip(s * c0 + c1, 0, 1),
/// (c0, c1) = {(.3,0),(.1,0),(2,0),(5,.1),(20,.2)} (ImageNet-C) or
/// {(.3,0),(.1,0),(1.5,0),(2,.1),(2.5,.2)} (CIFAR-10-C).
/// A 1-channel image is a gray RGB image (s = 0, h = 0): severities 1-3 leave it unchanged and the
/// offset c1 of 4-5 tints it red, (v, v(1-c1), v(1-c1)), which is returned as its OpenCV gray value
/// v (1 - 0.701 c1) so the output keeps the input's single channel.
inline io::Image saturate(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                          const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::saturate);
  if (severity == 0) return im;
  static constexpr std::array<std::array<double, 2>, 5> imagenet{{{.3, 0}, {.1, 0}, {2, 0}, {5, .1}, {20, .2}}};
  static constexpr std::array<std::array<double, 2>, 5> cifar{{{.3, 0}, {.1, 0}, {1.5, 0}, {2, .1}, {2.5, .2}}};
  const auto& c = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  io::Image out = im;
  if (im.channels == 1) {
    const double s = std::clamp(c[1], 0.0, 1.0);
    const double gray = 0.299 + (0.587 + 0.114) * (1.0 - s);
    for (auto& v : out.pixels) v = static_cast<float>(v * gray);
  } else {
    for (std::size_t p = 0; p < out.pixels.size(); p += 3) {
      auto hsv = data::rgb_to_hsv(out.pixels[p], out.pixels[p + 1], out.pixels[p + 2]);
      hsv[1] = std::clamp(hsv[1] * c[0] + c[1], 0.0, 1.0);
      const auto rgb = data::hsv_to_rgb(hsv[0], hsv[1], hsv[2]);
      for (std::size_t k = 0; k < 3; ++k) out.pixels[p + k] = static_cast<float>(rgb[k]);
    }
  }
  data::clip01(out);
  return out;
}

namespace spatter_detail {

/// 8-bit gray plane, row-major.
struct Plane {
  int h = 0, w = 0;
  std::vector<float> v;
  float& at(int y, int x) { return v[static_cast<std::size_t>(y) * w + x]; }
  float at(int y, int x) const { return v[static_cast<std::size_t>(y) * w + x]; }
};

/// OpenCV saturate_cast<uchar>: round half to even, clamp to [0,255].
inline float saturate_u8(double x) { return static_cast<float>(std::clamp(std::nearbyint(x), 0.0, 255.0)); }

/// Plane <-> 1-channel Image, to reuse the image filters.
inline io::Image to_image(const Plane& p) {
  io::Image im = io::make_image(p.h, p.w, 1);
  im.pixels = p.v;
  return im;
}
inline Plane from_image(const io::Image& im) { return {im.height, im.width, im.pixels}; }

/// cv2.blur(3x3): box mean with reflect-101 borders.
inline Plane box3(const Plane& p) {
  const std::vector<double> k{1.0 / 3, 1.0 / 3, 1.0 / 3};
  return from_image(data::separable_filter(to_image(p), k, k, data::Border::reflect101));
}

/// cv2.Canny(img, lo, hi) with the default 3x3 Sobel (replicated borders) and L1 magnitude:
/// non-maximum suppression along the quantised gradient direction, then hysteresis (strong
/// pixels > hi seed 8-connected tracks through weak pixels > lo). Returns 255 on edges, else 0.
inline Plane canny(const Plane& in, double lo, double hi) {
  const int H = in.h, W = in.w;
  auto px = [&](int y, int x) { return double(in.at(std::clamp(y, 0, H - 1), std::clamp(x, 0, W - 1))); };
  std::vector<double> gx(std::size_t(H) * W), gy(gx.size()), mag(gx.size());
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const std::size_t i = std::size_t(y) * W + x;
      gx[i] = px(y - 1, x + 1) + 2 * px(y, x + 1) + px(y + 1, x + 1) - px(y - 1, x - 1) - 2 * px(y, x - 1) - px(y + 1, x - 1);
      gy[i] = px(y + 1, x - 1) + 2 * px(y + 1, x) + px(y + 1, x + 1) - px(y - 1, x - 1) - 2 * px(y - 1, x) - px(y - 1, x + 1);
      mag[i] = std::fabs(gx[i]) + std::fabs(gy[i]);
    }
  auto m = [&](int y, int x) { return (y < 0 || y >= H || x < 0 || x >= W) ? 0.0 : mag[std::size_t(y) * W + x]; };
  // 0: below lo or suppressed, 1: weak, 2: strong.
  std::vector<int> cls(gx.size(), 0);
  constexpr double tan22 = 0.41421356237309503;  // tan(22.5 deg)
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const std::size_t i = std::size_t(y) * W + x;
      const double g = mag[i];
      if (g <= lo) continue;
      const double ax = std::fabs(gx[i]), ay = std::fabs(gy[i]);
      bool is_max;
      if (ay <= ax * tan22) is_max = g > m(y, x - 1) && g >= m(y, x + 1);          // horizontal gradient
      else if (ay >= ax / tan22) is_max = g > m(y - 1, x) && g >= m(y + 1, x);     // vertical gradient
      else if ((gx[i] > 0) == (gy[i] > 0)) is_max = g > m(y - 1, x - 1) && g > m(y + 1, x + 1);
      else is_max = g > m(y - 1, x + 1) && g > m(y + 1, x - 1);
      if (is_max) cls[i] = g > hi ? 2 : 1;
    }
  Plane out{H, W, std::vector<float>(gx.size(), 0.0f)};
  std::vector<std::size_t> stack;
  for (std::size_t i = 0; i < cls.size(); ++i)
    if (cls[i] == 2) stack.push_back(i), out.v[i] = 255.0f;
  while (!stack.empty()) {
    const std::size_t i = stack.back();
    stack.pop_back();
    const int y = int(i / std::size_t(W)), x = int(i % std::size_t(W));
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) {
        const int yy = y + dy, xx = x + dx;
        if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
        const std::size_t j = std::size_t(yy) * W + xx;
        if (cls[j] == 1 && out.v[j] == 0.0f) out.v[j] = 255.0f, stack.push_back(j);
      }
  }
  return out;
}

/// min(Euclidean distance to the nearest edge pixel, cap) for every pixel (0 on edges); `cap`
/// where no edge lies within it. OpenCV's DIST_L2 with a 5x5 mask is a chamfer approximation of
/// the same distance (within about 2%); the exact one is used here.
inline Plane capped_edge_distance(const Plane& edges, int cap) {
  const int H = edges.h, W = edges.w;
  Plane d{H, W, std::vector<float>(edges.v.size(), float(cap))};
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      if (edges.at(y, x) == 0.0f) continue;
      for (int yy = std::max(0, y - cap); yy <= std::min(H - 1, y + cap); ++yy)
        for (int xx = std::max(0, x - cap); xx <= std::min(W - 1, x + cap); ++xx) {
          const float r = float(std::sqrt(double(yy - y) * (yy - y) + double(xx - x) * (xx - x)));
          if (r < d.at(yy, xx)) d.at(yy, xx) = r;
        }
    }
  return d;
}

/// cv2.equalizeHist on an 8-bit plane: lut[j] = round(255 * (cdf(j) - cdf(first)) / (N - hist(first)))
/// where `first` is the lowest occupied level; a one-level plane maps to that level.
inline Plane equalize_hist(const Plane& p) {
  std::array<std::size_t, 256> hist{};
  for (float v : p.v) ++hist[std::size_t(v)];
  std::size_t first = 0;
  while (first < 255 && hist[first] == 0) ++first;
  Plane out = p;
  const std::size_t total = p.v.size();
  if (hist[first] == total) {
    std::fill(out.v.begin(), out.v.end(), float(first));
    return out;
  }
  const double scale = 255.0 / double(total - hist[first]);
  std::array<float, 256> lut{};
  std::size_t sum = 0;
  for (std::size_t j = first + 1; j < 256; ++j) {
    sum += hist[j];
    lut[j] = saturate_u8(double(sum) * scale);
  }
  for (auto& v : out.v) v = lut[std::size_t(v)];
  return out;
}

}  // namespace spatter_detail

/// Spatter: a thresholded, blurred Gaussian "liquid" layer (mean c0, sd c1, blur sigma c2 times
/// the length scale, values below c3 zeroed). Severities with c5 = 0 add water: the layer is made
/// 8-bit, its Canny(50,150) edges' distance map (capped at 20, box-blurred, histogram-equalised,
/// embossed with [[-2,-1,0],[-1,1,1],[0,1,2]], box-blurred) times the layer, normalised to peak c4,
/// scales the pale turquoise (175,238,238)/255 added to the image. Severities with c5 = 1 paint
/// mud: the mask (layer > c3) is blurred with sigma c4 times the length scale, zeroed below 0.8,
/// and blends the image towards brown (63,42,20)/255. Tables (c0..c5):
///   ImageNet-C {(.65,.3,4,.69,.6,0),(.65,.3,3,.68,.6,0),(.65,.3,2,.68,.5,0),(.65,.3,1,.65,1.5,1),(.67,.4,1,.65,1.5,1)};
///   CIFAR-10-C {(.62,.1,.7,.7,.5,0),(.65,.1,.8,.7,.5,0),(.65,.3,1,.69,.5,0),(.65,.1,.7,.69,.6,1),(.65,.1,.5,.68,.6,1)}.
/// Differences from the reference, documented: the 8-bit cast of the layer clamps at 255 (numpy's
/// cast of values above 1 wraps, platform-dependently); the distance is exact Euclidean (OpenCV's
/// 5x5 chamfer is within about 2%); a layer with no liquid at all leaves the image unchanged (the
/// reference divides 0 by 0). The colours go to channels 0,1,2 in that order, as the reference's
/// BGR-named arrays do on an RGB image; on a 1-channel image the colour is its OpenCV gray value.
inline io::Image spatter(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::spatter);
  if (severity == 0) return im;
  using P = std::array<double, 6>;
  static constexpr std::array<P, 5> imagenet{{{.65, .3, 4, .69, .6, 0},
                                              {.65, .3, 3, .68, .6, 0},
                                              {.65, .3, 2, .68, .5, 0},
                                              {.65, .3, 1, .65, 1.5, 1},
                                              {.67, .4, 1, .65, 1.5, 1}}};
  static constexpr std::array<P, 5> cifar{{{.62, .1, .7, .7, .5, 0},
                                           {.65, .1, .8, .7, .5, 0},
                                           {.65, .3, 1, .69, .5, 0},
                                           {.65, .1, .7, .69, .6, 1},
                                           {.65, .1, .5, .68, .6, 1}}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::spatter);
  using spatter_detail::Plane;
  io::Image layer_im = io::make_image(im.height, im.width, 1);
  for (auto& v : layer_im.pixels) v = static_cast<float>(rng.normal(c[0], c[1]));
  Plane liquid = spatter_detail::from_image(data::gaussian_blur(layer_im, c[2] * sc.scale));
  for (auto& v : liquid.v)
    if (v < c[3]) v = 0.0f;
  const bool water = c[5] == 0;
  std::array<double, 3> colour = water ? std::array<double, 3>{175 / 255.0, 238 / 255.0, 238 / 255.0}
                                       : std::array<double, 3>{63 / 255.0, 42 / 255.0, 20 / 255.0};
  if (im.channels == 1) colour[0] = 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2];
  io::Image out = im;
  const std::size_t C = static_cast<std::size_t>(im.channels), N = liquid.v.size();
  if (water) {
    Plane u8 = liquid;
    for (auto& v : u8.v) v = std::min(std::floor(v * 255.0f), 255.0f);
    Plane dist = spatter_detail::capped_edge_distance(spatter_detail::canny(u8, 50, 150), 20);
    dist = spatter_detail::box3(dist);
    for (auto& v : dist.v) v = std::floor(v);  // .astype(np.uint8) truncates
    dist = spatter_detail::equalize_hist(dist);
    const std::vector<float> emboss{-2, -1, 0, -1, 1, 1, 0, 1, 2};
    dist = spatter_detail::from_image(data::filter2d(spatter_detail::to_image(dist), emboss, 3, 3));
    for (auto& v : dist.v) v = spatter_detail::saturate_u8(v);  // filter2D into CV_8U
    dist = spatter_detail::box3(dist);
    std::vector<double> m(N);
    double peak = 0;
    for (std::size_t i = 0; i < N; ++i) peak = std::max(peak, m[i] = double(u8.v[i]) * dist.v[i]);
    if (peak <= 0) return out;
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t k = 0; k < C; ++k) out.pixels[i * C + k] += static_cast<float>(m[i] / peak * c[4] * colour[k]);
  } else {
    io::Image mask = io::make_image(im.height, im.width, 1);
    for (std::size_t i = 0; i < N; ++i) mask.pixels[i] = liquid.v[i] > c[3] ? 1.0f : 0.0f;
    mask = data::gaussian_blur(mask, c[4] * sc.scale);
    for (std::size_t i = 0; i < N; ++i) {
      const double mi = mask.pixels[i] < 0.8f ? 0.0 : double(mask.pixels[i]);
      for (std::size_t k = 0; k < C; ++k)
        out.pixels[i * C + k] = static_cast<float>(out.pixels[i * C + k] * (1 - mi) + colour[k] * mi);
    }
  }
  data::clip01(out);
  return out;
}

}  // namespace ttmoe::data::corruptions
