#pragma once
// DomainBed's image transforms, seeded: the training augmentation
//   RandomResizedCrop(224, scale=(0.7, 1.0)), RandomHorizontalFlip(), ColorJitter(0.3, 0.3, 0.3, 0.3),
//   RandomGrayscale(0.1), ToTensor(), Normalize(ImageNet mean, std)
// and the evaluation transform Resize((224, 224)), ToTensor(), Normalize(...).
//
// The geometry follows torchvision's parameter sampling exactly (RandomResizedCrop.get_params: ten tries
// at a uniform area fraction and log-uniform aspect ratio, then the centre-crop fallback); the resize is
// the PIL-compatible one of image.hpp. The colour operations are torchvision's float-tensor formulas
// (adjust_brightness / contrast / saturation / hue, grayscale weights 0.2989/0.587/0.114), applied in a
// random order as ColorJitter does. DomainBed runs them on 8-bit PIL images, which are cut back to 8 bits
// after every step (PIL's blend truncates, darkening by about 0.5/255 per step); on floats nothing is
// rounded. The parity test therefore compares with torchvision's float-tensor path. The random numbers come from
// std::mt19937_64, not torch's generator: same distributions, not the same draws.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>

#include "ttmoe/data/datasets_transform.hpp"
#include "ttmoe/data/image_filters.hpp"
#include "ttmoe/data/image_transforms.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

/// A crop window (top row, left column, height, width) in pixels.
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};

/// torchvision RandomResizedCrop.get_params for an image_h x image_w image: up to ten tries of
/// area * U(scale) with aspect ratio exp(U(log ratio)), sides rounded half-to-even like Python's round(),
/// placed uniformly; if none fits, the largest centred window whose ratio lies in [ratio_min, ratio_max].
inline CropBox random_resized_crop_box(int image_h, int image_w, std::mt19937_64& rng, double scale_min = 0.08,
                                       double scale_max = 1.0, double ratio_min = 3.0 / 4.0, double ratio_max = 4.0 / 3.0) {
  if (image_h <= 0 || image_w <= 0) throw std::invalid_argument("random_resized_crop_box: empty image");
  if (!(0.0 < scale_min && scale_min <= scale_max) || !(0.0 < ratio_min && ratio_min <= ratio_max))
    throw std::invalid_argument("random_resized_crop_box: need 0 < scale_min <= scale_max and 0 < ratio_min <= ratio_max");
  const double area = double(image_h) * double(image_w);
  std::uniform_real_distribution<double> u_scale(scale_min, scale_max), u_logr(std::log(ratio_min), std::log(ratio_max));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * u_scale(rng);
    const double ratio = std::exp(u_logr(rng));
    const int w = int(std::nearbyint(std::sqrt(target * ratio)));
    const int h = int(std::nearbyint(std::sqrt(target / ratio)));
    if (0 < w && w <= image_w && 0 < h && h <= image_h) {
      const int top = std::uniform_int_distribution<int>(0, image_h - h)(rng);
      const int left = std::uniform_int_distribution<int>(0, image_w - w)(rng);
      return {top, left, h, w};
    }
  }
  const double in_ratio = double(image_w) / double(image_h);
  int w = image_w, h = image_h;
  if (in_ratio < ratio_min) h = int(std::nearbyint(w / ratio_min));
  else if (in_ratio > ratio_max) w = int(std::nearbyint(h * ratio_max));
  return {(image_h - h) / 2, (image_w - w) / 2, h, w};
}

/// The image mirrored left-right.
inline io::Image flip_horizontal(const io::Image& im) {
  io::check_image(im, "flip_horizontal");
  io::Image out = im;
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      for (int c = 0; c < im.channels; ++c) out.at(y, im.width - 1 - x, c) = im.at(y, x, c);
  return out;
}

namespace augment_detail {
// torchvision's _blend: clamp(f * a + (1 - f) * b, 0, 1), with b given per pixel (gray image) or as one value.
inline void blend_with_gray(io::Image& im, const io::Image& gray, float f) {
  const auto c = std::size_t(im.channels);
  for (std::size_t i = 0; i < gray.pixels.size(); ++i)
    for (std::size_t k = 0; k < c; ++k) {
      float& v = im.pixels[i * c + k];
      v = std::clamp(f * v + (1.0f - f) * gray.pixels[i], 0.0f, 1.0f);
    }
}
}  // namespace augment_detail

/// torchvision adjust_brightness on floats: clamp(f * x, 0, 1).
inline io::Image adjust_brightness(const io::Image& im, float f) {
  io::check_image(im, "adjust_brightness");
  io::Image out = im;
  for (auto& v : out.pixels) v = std::clamp(f * v, 0.0f, 1.0f);
  return out;
}

/// torchvision adjust_contrast on floats: blend with the mean of the grayscale image (of the image itself
/// when it has one channel).
inline io::Image adjust_contrast(const io::Image& im, float f) {
  io::check_image(im, "adjust_contrast");
  const io::Image gray = to_gray(im, torchvision_gray_weights);
  double sum = 0.0;
  for (float v : gray.pixels) sum += v;
  const float mean = float(sum / double(gray.pixels.size()));
  io::Image out = im;
  for (auto& v : out.pixels) v = std::clamp(f * v + (1.0f - f) * mean, 0.0f, 1.0f);
  return out;
}

/// torchvision adjust_saturation on floats: blend with the grayscale image; a 1-channel image is unchanged.
inline io::Image adjust_saturation(const io::Image& im, float f) {
  io::check_image(im, "adjust_saturation");
  if (im.channels == 1) return im;
  io::Image out = im;
  augment_detail::blend_with_gray(out, to_gray(im, torchvision_gray_weights), f);
  return out;
}

/// torchvision adjust_hue: hue shifted by `shift` turns (in [-0.5, 0.5]) in HSV; 1-channel unchanged.
inline io::Image adjust_hue(const io::Image& im, float shift) {
  io::check_image(im, "adjust_hue");
  if (!(shift >= -0.5f && shift <= 0.5f))
    throw std::invalid_argument("adjust_hue: shift must be in [-0.5, 0.5], got " + std::to_string(shift));
  if (im.channels == 1) return im;
  if (im.channels != 3) throw std::invalid_argument("adjust_hue: needs 1 or 3 channels");
  io::Image out = im;
  for (std::size_t i = 0; i < out.pixels.size(); i += 3) {
    auto hsv = rgb_to_hsv(out.pixels[i], out.pixels[i + 1], out.pixels[i + 2]);
    double h = hsv[0] + double(shift);
    h -= std::floor(h);  // torch's (h + shift) % 1.0
    const auto rgb = hsv_to_rgb(h, hsv[1], hsv[2]);
    for (std::size_t k = 0; k < 3; ++k) out.pixels[i + k] = float(rgb[k]);
  }
  return out;
}

/// torchvision Grayscale(num_output_channels = channels): the gray value copied into every channel.
inline io::Image grayscale_like(const io::Image& im) {
  io::check_image(im, "grayscale_like");
  if (im.channels == 1) return im;
  const io::Image gray = to_gray(im, torchvision_gray_weights);
  io::Image out = im;
  const auto c = std::size_t(im.channels);
  for (std::size_t i = 0; i < gray.pixels.size(); ++i)
    for (std::size_t k = 0; k < c; ++k) out.pixels[i * c + k] = gray.pixels[i];
  return out;
}

/// The training augmentation's settings; the defaults are DomainBed's for 224 px ImageNet-normalised input.
struct TrainAugment {
  int size = 224;                       ///< output side (RandomResizedCrop(size))
  double scale_min = 0.7, scale_max = 1.0;             ///< crop area as a fraction of the image's
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  ///< crop width / height (log-uniform)
  double flip_p = 0.5;                  ///< RandomHorizontalFlip
  float brightness = 0.3f, contrast = 0.3f, saturation = 0.3f, hue = 0.3f;  ///< ColorJitter ranges
  double grayscale_p = 0.1;             ///< RandomGrayscale
  Normalization norm = imagenet_normalization();  ///< applied by augment_into
};

/// One augmented image (HWC floats in [0,1], same channel count as `im`, size x size), not yet normalised.
inline io::Image augment_image(const io::Image& im, const TrainAugment& a, std::mt19937_64& rng) {
  io::check_image(im, "augment_image");
  const CropBox b = random_resized_crop_box(im.height, im.width, rng, a.scale_min, a.scale_max, a.ratio_min, a.ratio_max);
  io::Image x = resize(crop(im, b.top, b.left, b.height, b.width), a.size, a.size, ResizeFilter::bilinear);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  if (u01(rng) < a.flip_p) x = flip_horizontal(x);
  // ColorJitter: draw the four factors, then apply them in a random order (torch.randperm(4)).
  auto factor = [&](float r) { return r > 0 ? float(std::uniform_real_distribution<double>(std::max(0.0, 1.0 - r), 1.0 + r)(rng)) : 1.0f; };
  const float fb = factor(a.brightness), fc = factor(a.contrast), fs = factor(a.saturation);
  const float fh = a.hue > 0 ? float(std::uniform_real_distribution<double>(-a.hue, a.hue)(rng)) : 0.0f;
  std::array<int, 4> order{0, 1, 2, 3};
  for (int i = 3; i > 0; --i) std::swap(order[std::size_t(i)], order[std::size_t(std::uniform_int_distribution<int>(0, i)(rng))]);
  for (int op : order) {
    if (op == 0 && a.brightness > 0) x = adjust_brightness(x, fb);
    if (op == 1 && a.contrast > 0) x = adjust_contrast(x, fc);
    if (op == 2 && a.saturation > 0) x = adjust_saturation(x, fs);
    if (op == 3 && a.hue > 0) x = adjust_hue(x, fh);
  }
  if (u01(rng) < a.grayscale_p) x = grayscale_like(x);
  return x;
}

/// Augments and normalises into `out` (channels * size * size floats, planar CHW).
inline void augment_into(const io::Image& im, const TrainAugment& a, std::mt19937_64& rng, std::span<float> out) {
  normalize_chw(augment_image(im, a, rng), a.norm.mean, a.norm.std, out);
}

/// DomainBed's evaluation transform: Resize((size, size)) (bilinear, aspect ratio not kept) + Normalize.
struct EvalTransform {
  int size = 224;                                 ///< output side
  Normalization norm = imagenet_normalization();  ///< per-channel statistics
};

/// Applies the evaluation transform into `out` (channels * size * size floats, planar CHW).
inline void eval_transform_into(const io::Image& im, const EvalTransform& t, std::span<float> out) {
  io::check_image(im, "eval_transform_into");
  const io::Image x = (im.height == t.size && im.width == t.size) ? im : resize(im, t.size, t.size, ResizeFilter::bilinear);
  normalize_chw(x, t.norm.mean, t.norm.std, out);
}

}  // namespace ttmoe::data
