// Spatial filters on ttmoe::io::Image: separable Gaussian blur with SciPy's kernel rule, 2-D
// correlation, ImageMagick-style motion blur, bilinear sampling, affine warps, centre zoom,
// HSV conversion. They exist for the ImageNet-C corruptions, which were defined through
// scikit-image / SciPy / OpenCV / ImageMagick calls; each function here documents which of
// those it reproduces so the corruption code can cite the original semantics exactly.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

/// How a filter reads pixels outside the image. The three conventions of the libraries the
/// ImageNet-C reference code called, kept distinct because they change border pixels.
enum class Border {
  clamp,       ///< aaa|abcd|ddd   (SciPy 'nearest', ImageMagick's default edge virtual pixels)
  reflect,     ///< dcba|abcd|dcba (SciPy/scikit-image 'reflect': half-sample symmetric)
  reflect101,  ///< dcb|abcd|cba   (OpenCV BORDER_REFLECT_101, OpenCV's default)
};

/// Maps any integer index onto [0, n) under the given border rule (handles indices many
/// periods away, which happens when a kernel is wider than the image).
inline int border_index(int i, int n, Border b) noexcept {
  if (i >= 0 && i < n) return i;
  switch (b) {
    case Border::clamp: return i < 0 ? 0 : n - 1;
    case Border::reflect: {
      const int period = 2 * n;
      int m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - 1 - m;
    }
    case Border::reflect101: {
      if (n == 1) return 0;
      const int period = 2 * n - 2;
      int m = i % period;
      if (m < 0) m += period;
      return m < n ? m : period - m;
    }
  }
  return 0;
}

/// SciPy's gaussian_filter1d weights: radius int(truncate*sigma + 0.5), exp(-x^2 / 2 sigma^2),
/// normalised. sigma <= 0 gives the identity kernel {1}, as SciPy's radius-0 kernel does.
inline std::vector<double> gaussian_kernel(double sigma, double truncate = 4.0) {
  if (!(sigma > 0.0)) return {1.0};
  const int radius = static_cast<int>(truncate * sigma + 0.5);
  std::vector<double> k(static_cast<std::size_t>(2 * radius + 1));
  double total = 0.0;
  for (int i = -radius; i <= radius; ++i) {
    const double v = std::exp(-0.5 * (static_cast<double>(i) * i) / (sigma * sigma));
    k[static_cast<std::size_t>(i + radius)] = v;
    total += v;
  }
  for (auto& v : k) v /= total;
  return k;
}

namespace filter_detail {

// y += a * x over n floats. The restrict qualifiers tell the compiler the rows never overlap,
// which is what lets it vectorise the inner loop of every shifted-kernel filter below.
inline void axpy(float* __restrict y, const float* __restrict x, float a, std::size_t n) noexcept {
  for (std::size_t j = 0; j < n; ++j) y[j] += a * x[j];
}

// A 1-D filter along an axis of length n with the border folded in: each output index lists the
// distinct input indices it reads and their summed weights. Folding makes kernels longer than
// the axis (elastic_transform's sigma ~171 px on a 224 px image) cost O(n) per output instead of
// O(kernel length).
struct FoldedTaps {
  std::vector<int> begin;  // n+1 offsets into index/weight
  std::vector<int> index;
  std::vector<float> weight;
};

inline FoldedTaps fold_kernel(int n, const std::vector<double>& kernel, int anchor, Border b) {
  FoldedTaps t;
  t.begin.reserve(static_cast<std::size_t>(n) + 1);
  std::vector<double> acc(static_cast<std::size_t>(n), 0.0);
  std::vector<char> used(static_cast<std::size_t>(n), 0);
  std::vector<int> touched;
  for (int i = 0; i < n; ++i) {
    t.begin.push_back(static_cast<int>(t.index.size()));
    touched.clear();
    for (std::size_t k = 0; k < kernel.size(); ++k) {
      if (kernel[k] == 0.0) continue;
      const int j = border_index(i + static_cast<int>(k) - anchor, n, b);
      if (!used[static_cast<std::size_t>(j)]) {
        used[static_cast<std::size_t>(j)] = 1;
        touched.push_back(j);
      }
      acc[static_cast<std::size_t>(j)] += kernel[k];
    }
    std::sort(touched.begin(), touched.end());
    for (int j : touched) {
      t.index.push_back(j);
      t.weight.push_back(static_cast<float>(acc[static_cast<std::size_t>(j)]));
      acc[static_cast<std::size_t>(j)] = 0.0;
      used[static_cast<std::size_t>(j)] = 0;
    }
  }
  t.begin.push_back(static_cast<int>(t.index.size()));
  return t;
}

// Filters every row (along x).
inline io::Image filter_rows(const io::Image& im, const FoldedTaps& t) {
  io::Image out = io::make_image(im.height, im.width, im.channels);
  const int C = im.channels;
  const int* idx = t.index.data();
  const float* wts = t.weight.data();
  std::vector<float> acc(static_cast<std::size_t>(C));
  for (int y = 0; y < im.height; ++y) {
    const float* row = &im.pixels[static_cast<std::size_t>(y) * im.width * C];
    float* orow = &out.pixels[static_cast<std::size_t>(y) * im.width * C];
    for (int x = 0; x < im.width; ++x) {
      const int k0 = t.begin[static_cast<std::size_t>(x)], k1 = t.begin[static_cast<std::size_t>(x) + 1];
      if (C == 1) {  // the common single-plane case (displacement fields, masks) without the channel loop
        float s = 0.0f;
        for (int k = k0; k < k1; ++k) s += wts[k] * row[idx[k]];
        orow[x] = s;
        continue;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int k = k0; k < k1; ++k) {
        const float* p = row + static_cast<std::ptrdiff_t>(idx[k]) * C;
        for (int c = 0; c < C; ++c) acc[static_cast<std::size_t>(c)] += wts[k] * p[c];
      }
      for (int c = 0; c < C; ++c) orow[x * C + c] = acc[static_cast<std::size_t>(c)];
    }
  }
  return out;
}

// Filters every column (along y): whole rows are accumulated, which vectorises.
inline io::Image filter_cols(const io::Image& im, const FoldedTaps& t) {
  io::Image out = io::make_image(im.height, im.width, im.channels);
  const std::size_t stride = static_cast<std::size_t>(im.width) * im.channels;
  std::vector<float> acc(stride);
  for (int y = 0; y < im.height; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = t.begin[static_cast<std::size_t>(y)]; k < t.begin[static_cast<std::size_t>(y) + 1]; ++k) {
      const float* row = &im.pixels[static_cast<std::size_t>(t.index[static_cast<std::size_t>(k)]) * stride];
      const float w = t.weight[static_cast<std::size_t>(k)];
      axpy(acc.data(), row, w, stride);
    }
    std::copy(acc.begin(), acc.end(), out.pixels.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(y) * stride));
  }
  return out;
}

// Copies the image into a buffer padded by (py, px) on each side under the border rule, so
// shifted-kernel loops can read without per-pixel index mapping.
inline io::Image pad(const io::Image& im, int py, int px, Border b) {
  io::Image out = io::make_image(im.height + 2 * py, im.width + 2 * px, im.channels);
  const int C = im.channels;
  for (int y = 0; y < out.height; ++y) {
    const int sy = border_index(y - py, im.height, b);
    for (int x = 0; x < out.width; ++x) {
      const int sx = border_index(x - px, im.width, b);
      for (int c = 0; c < C; ++c) out.at(y, x, c) = im.at(sy, sx, c);
    }
  }
  return out;
}

// One tap of a shifted-kernel filter: weight w read at row offset dy and column offset dx of the
// padded image (offsets from the output pixel's own position, padding included).
struct Tap {
  int dy = 0, dx = 0;
  float w = 0.0f;
};

// out(y, x) = sum over taps of w * padded(y + dy, x + dx), every channel, taps added in order (so
// results do not depend on who builds the list). filter2d and motion_blur both filter this way.
inline io::Image accumulate_taps(const io::Image& padded, int height, int width, const std::vector<Tap>& taps) {
  io::Image out = io::make_image(height, width, padded.channels);
  const int C = padded.channels;
  const std::size_t orow_len = static_cast<std::size_t>(width) * C;
  const std::size_t prow_len = static_cast<std::size_t>(padded.width) * C;
  for (int y = 0; y < height; ++y) {
    float* orow = &out.pixels[static_cast<std::size_t>(y) * orow_len];
    for (const Tap& t : taps)
      axpy(orow, &padded.pixels[static_cast<std::size_t>(y + t.dy) * prow_len + static_cast<std::size_t>(t.dx) * C], t.w,
           orow_len);
  }
  return out;
}

}  // namespace filter_detail

/// Correlates rows with kernel_x and columns with kernel_y (both centred), independently per
/// channel. Kernels may be longer than the image: the border rule is folded into the taps.
inline io::Image separable_filter(const io::Image& im, const std::vector<double>& kernel_x, const std::vector<double>& kernel_y,
                                  Border b) {
  io::check_image(im, "separable_filter");
  io::Image tmp = im;
  if (kernel_x.size() != 1 || kernel_x[0] != 1.0)
    tmp = filter_detail::filter_rows(
        im, filter_detail::fold_kernel(im.width, kernel_x, static_cast<int>(kernel_x.size() / 2), b));
  if (kernel_y.size() == 1 && kernel_y[0] == 1.0) return tmp;
  return filter_detail::filter_cols(
      tmp, filter_detail::fold_kernel(im.height, kernel_y, static_cast<int>(kernel_y.size() / 2), b));
}

/// Per-channel Gaussian blur with scikit-image's `gaussian(..., multichannel=True)` semantics:
/// SciPy kernel (radius int(truncate*sigma+0.5)); default border 'nearest' as scikit-image.
inline io::Image gaussian_blur(const io::Image& im, double sigma, Border b = Border::clamp, double truncate = 4.0) {
  const auto k = gaussian_kernel(sigma, truncate);
  return separable_filter(im, k, k, b);
}

/// OpenCV filter2D: correlation (not convolution) of every channel with a kh x kw kernel
/// (row-major) anchored at its centre.
inline io::Image filter2d(const io::Image& im, const std::vector<float>& kernel, int kh, int kw, Border b = Border::reflect101) {
  io::check_image(im, "filter2d");
  if (kh <= 0 || kw <= 0 || kernel.size() != static_cast<std::size_t>(kh) * kw)
    throw std::invalid_argument("filter2d: kernel size does not match " + std::to_string(kh) + "x" + std::to_string(kw));
  const int ay = kh / 2, ax = kw / 2;
  std::vector<filter_detail::Tap> taps;
  for (int ky = 0; ky < kh; ++ky)
    for (int kx = 0; kx < kw; ++kx) {
      const float w = kernel[static_cast<std::size_t>(ky) * kw + kx];
      if (w != 0.0f) taps.push_back({ky, kx, w});
    }
  return filter_detail::accumulate_taps(filter_detail::pad(im, ay, ax, b), im.height, im.width, taps);
}

/// ImageMagick's MotionBlurImage(radius, sigma, angle): a one-sided Gaussian "comet tail" of
/// 2*ceil(radius)+1 taps with weights exp(-i^2 / 2 sigma^2) (normalised), tap i read at the
/// rounded offset (i cos(angle), i sin(angle)) (x right, y down), edge pixels replicated.
/// This is the filter ImageNet-C's motion_blur and snow call through Wand.
inline io::Image motion_blur(const io::Image& im, double radius, double sigma, double angle_degrees) {
  io::check_image(im, "motion_blur");
  if (!(radius > 0.0)) return im;
  const int width = 2 * static_cast<int>(std::ceil(radius)) + 1;
  const double s = sigma > 1e-12 ? sigma : 1e-12;
  std::vector<double> k(static_cast<std::size_t>(width));
  double total = 0.0;
  for (int i = 0; i < width; ++i) {
    k[static_cast<std::size_t>(i)] = std::exp(-(static_cast<double>(i) * i) / (2.0 * s * s));
    total += k[static_cast<std::size_t>(i)];
  }
  constexpr double pi = 3.14159265358979323846;
  const double a = angle_degrees * pi / 180.0;
  std::vector<filter_detail::Tap> taps(static_cast<std::size_t>(width));
  int max_off = 0;
  for (int i = 0; i < width; ++i) {
    auto& t = taps[static_cast<std::size_t>(i)];
    // ImageMagick: ceil(v - 0.5), i.e. round half up.
    t.dx = static_cast<int>(std::ceil(i * std::cos(a) - 0.5));
    t.dy = static_cast<int>(std::ceil(i * std::sin(a) - 0.5));
    t.w = static_cast<float>(k[static_cast<std::size_t>(i)] / total);
    max_off = std::max({max_off, std::abs(t.dx), std::abs(t.dy)});
  }
  for (auto& t : taps) {  // offsets into the copy padded by max_off on every side
    t.dy += max_off;
    t.dx += max_off;
  }
  return filter_detail::accumulate_taps(filter_detail::pad(im, max_off, max_off, Border::clamp), im.height, im.width, taps);
}

/// Bilinear sample of every channel at real coordinates (y, x) (pixel centres at integers),
/// neighbours outside the image resolved by the border rule; writes im.channels floats.
inline void sample_bilinear(const io::Image& im, double y, double x, Border b, float* out) noexcept {
  const double fy0 = std::floor(y), fx0 = std::floor(x);
  const double ty = y - fy0, tx = x - fx0;
  // Clamp the integer part far from int overflow; border_index folds it back.
  const int iy = static_cast<int>(std::clamp(fy0, -1e8, 1e8));
  const int ix = static_cast<int>(std::clamp(fx0, -1e8, 1e8));
  const int y0 = border_index(iy, im.height, b), y1 = border_index(iy + 1, im.height, b);
  const int x0 = border_index(ix, im.width, b), x1 = border_index(ix + 1, im.width, b);
  for (int c = 0; c < im.channels; ++c) {
    const double top = (1.0 - tx) * im.at(y0, x0, c) + tx * im.at(y0, x1, c);
    const double bot = (1.0 - tx) * im.at(y1, x0, c) + tx * im.at(y1, x1, c);
    out[c] = static_cast<float>((1.0 - ty) * top + ty * bot);
  }
}

/// OpenCV warpAffine(src, M, size) with INTER_LINEAR: `forward` (2x3, row-major) maps source
/// (x, y) to destination; each destination pixel samples the source at the inverse image.
inline io::Image warp_affine(const io::Image& im, const std::array<double, 6>& forward, Border b = Border::reflect101) {
  io::check_image(im, "warp_affine");
  const double a = forward[0], bb = forward[1], c = forward[2], d = forward[3], e = forward[4], f = forward[5];
  const double det = a * e - bb * d;
  if (std::fabs(det) < 1e-12) throw std::invalid_argument("warp_affine: singular transform");
  // Inverse of [[a b c][d e f]].
  const double ia = e / det, ib = -bb / det, id = -d / det, ie = a / det;
  const double ic = -(ia * c + ib * f), iff = -(id * c + ie * f);
  io::Image out = io::make_image(im.height, im.width, im.channels);
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      sample_bilinear(im, id * x + ie * y + iff, ia * x + ib * y + ic, b, &out.at(y, x, 0));
  return out;
}

/// ImageNet-C's clipped_zoom: take the central ceil(n/zoom) window, enlarge it with SciPy's
/// zoom(order=1) (output size round(n_crop*zoom), corner-aligned sampling) and keep the central
/// n pixels, per axis. Zoom factors below 1 are treated as 1 (the reference only enlarges).
inline io::Image clipped_zoom(const io::Image& im, double zoom) {
  io::check_image(im, "clipped_zoom");
  if (!(zoom > 1.0)) return im;
  auto axis = [zoom](int n) {
    const int ch = std::min(n, static_cast<int>(std::ceil(n / zoom)));
    const int top = (n - ch) / 2;
    const int zn = static_cast<int>(std::nearbyint(ch * zoom));  // Python round(): half to even
    const int trim = (zn - n) / 2;
    const double step = zn > 1 ? static_cast<double>(ch - 1) / (zn - 1) : 0.0;
    std::vector<double> coord(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) coord[static_cast<std::size_t>(i)] = top + (i + trim) * step;
    return coord;
  };
  const auto cy = axis(im.height), cx = axis(im.width);
  io::Image out = io::make_image(im.height, im.width, im.channels);
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      sample_bilinear(im, cy[static_cast<std::size_t>(y)], cx[static_cast<std::size_t>(x)], Border::clamp,
                      &out.at(y, x, 0));
  return out;
}

/// The image turned by 180 degrees (numpy rot90(k=2)).
inline io::Image rotate180(const io::Image& im) {
  io::check_image(im, "rotate180");
  io::Image out = io::make_image(im.height, im.width, im.channels);
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      for (int c = 0; c < im.channels; ++c) out.at(im.height - 1 - y, im.width - 1 - x, c) = im.at(y, x, c);
  return out;
}

/// OpenCV's (and PIL's) RGB->gray weights.
inline constexpr std::array<float, 3> opencv_gray_weights{0.299f, 0.587f, 0.114f};
/// torchvision's tensor rgb_to_grayscale weights (0.2989, not 0.299, for red).
inline constexpr std::array<float, 3> torchvision_gray_weights{0.2989f, 0.587f, 0.114f};

/// weights[0] R + weights[1] G + weights[2] B as a 1-channel image (OpenCV's weights by default); a
/// 1-channel input is returned unchanged.
inline io::Image to_gray(const io::Image& im, const std::array<float, 3>& weights = opencv_gray_weights) {
  io::check_image(im, "to_gray");
  if (im.channels == 1) return im;
  if (im.channels < 3) throw std::invalid_argument("to_gray: needs 1 or >= 3 channels");
  io::Image out = io::make_image(im.height, im.width, 1);
  for (std::size_t i = 0; i < out.pixels.size(); ++i) {
    const float* p = &im.pixels[i * static_cast<std::size_t>(im.channels)];
    out.pixels[i] = weights[0] * p[0] + weights[1] * p[1] + weights[2] * p[2];
  }
  return out;
}

/// scikit-image rgb2hsv for one pixel: h, s, v in [0,1]; grey pixels get h = s = 0 and ties
/// between maximal channels resolve as scikit-image does (blue over green over red).
inline std::array<double, 3> rgb_to_hsv(double r, double g, double b) noexcept {
  const double v = std::max({r, g, b});
  const double delta = v - std::min({r, g, b});
  if (delta == 0.0) return {0.0, 0.0, v};
  const double s = delta / v;
  double h = 0.0;
  if (r == v) h = (g - b) / delta;
  if (g == v) h = 2.0 + (b - r) / delta;
  if (b == v) h = 4.0 + (r - g) / delta;
  h /= 6.0;
  h -= std::floor(h);  // Python's % 1
  return {h, s, v};
}

/// scikit-image hsv2rgb for one pixel (sector i = floor(6h) mod 6).
inline std::array<double, 3> hsv_to_rgb(double h, double s, double v) noexcept {
  const double hi_f = std::floor(h * 6.0);
  const double f = h * 6.0 - hi_f;
  const double p = v * (1.0 - s), q = v * (1.0 - f * s), t = v * (1.0 - (1.0 - f) * s);
  int hi = static_cast<int>(hi_f) % 6;
  if (hi < 0) hi += 6;
  switch (hi) {
    case 0: return {v, t, p};
    case 1: return {q, v, p};
    case 2: return {p, v, t};
    case 3: return {p, q, v};
    case 4: return {t, p, v};
    default: return {v, p, q};
  }
}

/// Clips every value to [0,1] in place (every corruption's last step).
inline void clip01(io::Image& im) noexcept {
  for (auto& v : im.pixels) v = v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f;
}

}  // namespace ttmoe::data
