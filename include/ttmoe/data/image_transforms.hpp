// Image transforms on io::Image: PIL-compatible resizing, cropping and the planar normalisation
// a ViT consumes (to_chw_normalized), the last step before pixels become a model's input.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

// ---------------------------------------------------------------------------------------------
// Resizing (PIL-compatible)
// ---------------------------------------------------------------------------------------------

/// Reconstruction filter for resize(). The kernels and support rule are PIL's (Pillow
/// Resample.c), so a model trained on torchvision/PIL preprocessing sees the same pixels up
/// to float rounding (PIL rounds 8-bit images to integers between the two passes; we don't).
enum class ResizeFilter {
  box,       ///< Area average when downscaling, nearest-like when upscaling (pixelate uses it).
  bilinear,  ///< Triangle filter, widened by the scale factor when downscaling (antialiased).
  bicubic,   ///< Keys cubic with a = -0.5, widened likewise (timm's default for ViTs).
};

namespace resize_detail {

inline double filter_support(ResizeFilter f) noexcept {
  switch (f) {
    case ResizeFilter::box: return 0.5;
    case ResizeFilter::bilinear: return 1.0;
    case ResizeFilter::bicubic: return 2.0;
  }
  return 1.0;
}

inline double filter_value(ResizeFilter f, double x) noexcept {
  switch (f) {
    case ResizeFilter::box: return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;
    case ResizeFilter::bilinear: {
      x = std::fabs(x);
      return x < 1.0 ? 1.0 - x : 0.0;
    }
    case ResizeFilter::bicubic: {
      constexpr double a = -0.5;
      x = std::fabs(x);
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
      if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
      return 0.0;
    }
  }
  return 0.0;
}

// One output sample's contributing input range and normalised weights.
struct ResampleTaps {
  std::vector<int> first;      // first input index per output index
  std::vector<int> count;      // number of taps per output index
  std::vector<int> offset;     // start of this output's weights in `weights`
  std::vector<float> weights;  // normalised weights
};

// PIL's precompute_coeffs: the filter is stretched by the scale factor when shrinking so every
// input pixel contributes (antialiasing), and the window is clipped at the image borders with
// the remaining weights renormalised.
inline ResampleTaps resample_taps(int in_size, int out_size, ResizeFilter f) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter_support(f) * filterscale;
  const double ss = 1.0 / filterscale;
  ResampleTaps t;
  t.first.resize(static_cast<std::size_t>(out_size));
  t.count.resize(static_cast<std::size_t>(out_size));
  t.offset.resize(static_cast<std::size_t>(out_size));
  std::vector<double> k;
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as in PIL
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    const int n = std::max(xmax - xmin, 0);
    k.assign(static_cast<std::size_t>(n), 0.0);
    double total = 0.0;
    for (int i = 0; i < n; ++i) {
      k[static_cast<std::size_t>(i)] = filter_value(f, (i + xmin - center + 0.5) * ss);
      total += k[static_cast<std::size_t>(i)];
    }
    t.first[static_cast<std::size_t>(o)] = xmin;
    t.count[static_cast<std::size_t>(o)] = n;
    t.offset[static_cast<std::size_t>(o)] = static_cast<int>(t.weights.size());
    for (int i = 0; i < n; ++i)
      t.weights.push_back(static_cast<float>(total != 0.0 ? k[static_cast<std::size_t>(i)] / total : 0.0));
  }
  return t;
}

}  // namespace resize_detail

/// Resizes to out_height x out_width with a PIL-style separable filter (horizontal pass, then
/// vertical, like PIL). Downscaling is antialiased: the kernel widens with the scale factor.
inline io::Image resize(const io::Image& im, int out_height, int out_width, ResizeFilter filter = ResizeFilter::bilinear) {
  io::check_image(im, "resize");
  if (out_height <= 0 || out_width <= 0)
    throw std::invalid_argument("resize: target size must be positive, got " + std::to_string(out_height) + "x" +
                                std::to_string(out_width));
  const int C = im.channels;
  // Horizontal pass: H x out_w.
  io::Image tmp;
  if (out_width == im.width) {
    tmp = im;
  } else {
    const auto taps = resize_detail::resample_taps(im.width, out_width, filter);
    tmp = io::make_image(im.height, out_width, C);
    for (int y = 0; y < im.height; ++y) {
      const float* row = &im.pixels[static_cast<std::size_t>(y) * im.width * C];
      float* orow = &tmp.pixels[static_cast<std::size_t>(y) * out_width * C];
      for (int o = 0; o < out_width; ++o) {
        const int first = taps.first[static_cast<std::size_t>(o)];
        const int n = taps.count[static_cast<std::size_t>(o)];
        const float* w = &taps.weights[static_cast<std::size_t>(taps.offset[static_cast<std::size_t>(o)])];
        for (int c = 0; c < C; ++c) {
          double s = 0.0;
          for (int i = 0; i < n; ++i) s += static_cast<double>(w[i]) * row[(first + i) * C + c];
          orow[o * C + c] = static_cast<float>(s);
        }
      }
    }
  }
  if (out_height == im.height) return tmp;
  // Vertical pass: out_h x out_w.
  const auto taps = resize_detail::resample_taps(im.height, out_height, filter);
  io::Image out = io::make_image(out_height, out_width, C);
  const std::size_t stride = static_cast<std::size_t>(out_width) * C;
  std::vector<double> acc(stride);
  for (int o = 0; o < out_height; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const int first = taps.first[static_cast<std::size_t>(o)];
    const int n = taps.count[static_cast<std::size_t>(o)];
    const float* w = &taps.weights[static_cast<std::size_t>(taps.offset[static_cast<std::size_t>(o)])];
    for (int i = 0; i < n; ++i) {
      const float* row = &tmp.pixels[static_cast<std::size_t>(first + i) * stride];
      const double wi = w[i];
      for (std::size_t j = 0; j < stride; ++j) acc[j] += wi * row[j];
    }
    float* orow = &out.pixels[static_cast<std::size_t>(o) * stride];
    for (std::size_t j = 0; j < stride; ++j) orow[j] = static_cast<float>(acc[j]);
  }
  return out;
}

/// Resizes so the shorter side equals `size`, keeping the aspect ratio the way torchvision's
/// Resize(int) does (the longer side is truncated: int(size * long / short)).
inline io::Image resize_shorter_side(const io::Image& im, int size, ResizeFilter filter = ResizeFilter::bilinear) {
  io::check_image(im, "resize_shorter_side");
  if (size <= 0) throw std::invalid_argument("resize_shorter_side: size must be positive");
  int h = size, w = size;
  if (im.height <= im.width)
    w = static_cast<int>(static_cast<double>(size) * im.width / im.height);
  else
    h = static_cast<int>(static_cast<double>(size) * im.height / im.width);
  if (h == im.height && w == im.width) return im;
  return resize(im, h, w, filter);
}

/// Copies the window [top, top+height) x [left, left+width); throws if it leaves the image.
inline io::Image crop(const io::Image& im, int top, int left, int height, int width) {
  io::check_image(im, "crop");
  if (height <= 0 || width <= 0 || top < 0 || left < 0 || top + height > im.height || left + width > im.width)
    throw std::invalid_argument("crop: window " + std::to_string(height) + "x" + std::to_string(width) + " at (" +
                                std::to_string(top) + "," + std::to_string(left) + ") outside " +
                                std::to_string(im.height) + "x" + std::to_string(im.width) + " image");
  io::Image out = io::make_image(height, width, im.channels);
  const std::size_t row_len = static_cast<std::size_t>(width) * im.channels;
  for (int y = 0; y < height; ++y) {
    const auto src = im.pixels.begin() +
                     static_cast<std::ptrdiff_t>((static_cast<std::size_t>(top + y) * im.width + left) * im.channels);
    std::copy(src, src + static_cast<std::ptrdiff_t>(row_len),
              out.pixels.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(y) * row_len));
  }
  return out;
}

/// Central height x width window, offsets rounded like torchvision's CenterCrop
/// (Python round(), i.e. halves go to even), so crops match the reference pipeline exactly.
inline io::Image center_crop(const io::Image& im, int height, int width) {
  io::check_image(im, "center_crop");
  if (height > im.height || width > im.width)
    throw std::invalid_argument("center_crop: crop " + std::to_string(height) + "x" + std::to_string(width) +
                                " larger than image " + std::to_string(im.height) + "x" + std::to_string(im.width));
  const int top = static_cast<int>(std::nearbyint((im.height - height) / 2.0));
  const int left = static_cast<int>(std::nearbyint((im.width - width) / 2.0));
  return crop(im, top, left, height, width);
}

/// The standard evaluation preprocessing (Resize(resize_to) then CenterCrop(crop)), which is
/// also how ImageNet-C's clean 224x224 images were made before corruption.
inline io::Image resize_and_center_crop(const io::Image& im, int resize_to = 256, int crop_size = 224,
                                    ResizeFilter filter = ResizeFilter::bilinear) {
  return center_crop(resize_shorter_side(im, resize_to, filter), crop_size, crop_size);
}

// ---------------------------------------------------------------------------------------------
// Normalisation to a planar buffer
// ---------------------------------------------------------------------------------------------

/// torchvision's ImageNet statistics, the normalisation most ViT checkpoints were trained with.
inline constexpr std::array<float, 3> imagenet_mean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> imagenet_std{0.229f, 0.224f, 0.225f};

/// Writes (pixel - mean[c]) / stddev[c] in planar CHW order into `out` (size 3*H*W), the layout
/// models consume; writing into a caller buffer lets a batch be filled in place.
inline void to_chw_normalized(const io::Image& im, const std::array<float, 3>& mean, const std::array<float, 3>& stddev,
                              std::span<float> out) {
  io::check_image(im, "to_chw_normalized");
  if (im.channels != 3)
    throw std::invalid_argument("to_chw_normalized: needs 3 channels, got " + std::to_string(im.channels));
  const std::size_t plane = static_cast<std::size_t>(im.height) * im.width;
  if (out.size() != 3 * plane)
    throw std::invalid_argument("to_chw_normalized: output holds " + std::to_string(out.size()) + " floats, need " +
                                std::to_string(3 * plane));
  for (int c = 0; c < 3; ++c) {
    const float m = mean[static_cast<std::size_t>(c)];
    const float s = stddev[static_cast<std::size_t>(c)];
    if (!(s != 0.0f)) throw std::invalid_argument("to_chw_normalized: std must be non-zero");
    float* dst = out.data() + static_cast<std::size_t>(c) * plane;
    // Divide (not multiply by a reciprocal) so values match torchvision's Normalize bit for bit.
    for (std::size_t i = 0; i < plane; ++i) dst[i] = (im.pixels[i * 3 + static_cast<std::size_t>(c)] - m) / s;
  }
}

/// Allocating form of to_chw_normalized.
inline std::vector<float> to_chw_normalized(const io::Image& im, const std::array<float, 3>& mean = imagenet_mean,
                                            const std::array<float, 3>& stddev = imagenet_std) {
  io::check_image(im, "to_chw_normalized");
  std::vector<float> out(static_cast<std::size_t>(im.height) * im.width * 3);
  to_chw_normalized(im, mean, stddev, out);
  return out;
}

}  // namespace ttmoe::data
