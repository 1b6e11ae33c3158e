#pragma once
// Evaluation preprocessing: decode (stb, via io/image.hpp), resize the shorter side, centre crop,
// normalise per channel into the planar CHW layout a model consumes. One struct describes the
// pipeline so the full-scale example can switch between ImageNet (resize 256 + crop 224) and
// ImageNet-C (already 224: crop only) per domain. The per-channel statistics belong to the checkpoint
// (Normalization: mean = std = 0.5 for timm's augreg ViTs, the ImageNet statistics for torchvision's
// vit_b_16); the caller picks them. Needs stb linked (see image.hpp).

#include <array>
#include <cstdio>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>

#include "ttmoe/data/image_transforms.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

/// The preprocessing of one domain.
struct Preprocess {
  int resize_shorter = 256;  ///< 0: no resize
  int crop = 224;            ///< centre crop side (0: none)
  int channels = 3;          ///< decoded channel count
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};  ///< augreg timm ViT statistics by default
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
  /// Floats one preprocessed image occupies (channels * crop * crop).
  std::size_t image_floats() const { return std::size_t(channels) * std::size_t(crop) * std::size_t(crop); }
};

/// Per-channel input statistics a checkpoint was trained with: x = (pixel - mean) / std, pixels in [0, 1].
struct Normalization {
  std::string name;  ///< "half" or "imagenet" (what --normalize accepts)
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
  /// A one-line human description ("mean = std = 0.5", "ImageNet mean (...) / std (...)").
  std::string describe() const {
    if (name == "half") return "mean = std = (0.5, 0.5, 0.5)";
    return "ImageNet mean (" + fmt3(mean) + ") / std (" + fmt3(std) + ")";
  }

 private:
  static std::string fmt3(const std::array<float, 3>& v) {
    std::string s;
    for (std::size_t i = 0; i < 3; ++i) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.3f", i ? ", " : "", double(v[i]));
      s += b;
    }
    return s;
  }
};

/// mean = std = 0.5 per channel: timm's augreg ViT checkpoints (vit_base_patch16_224.augreg*), the
/// MoETTA paper's model.
inline Normalization half_normalization() { return {"half", {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}; }
/// The ImageNet statistics mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225): torchvision's
/// vit_b_16 weights (and DeiT-style timm checkpoints).
inline Normalization imagenet_normalization() {
  return {"imagenet", {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
}
/// "half" or "imagenet" -> the statistics; anything else is std::invalid_argument listing the choices.
inline Normalization normalization_by_name(const std::string& name) {
  if (name == "half") return half_normalization();
  if (name == "imagenet") return imagenet_normalization();
  throw std::invalid_argument("unknown normalisation '" + name + "' (half or imagenet)");
}

/// ImageNet val / R / Sketch / A: resize shorter side to 256, centre crop 224.
inline Preprocess imagenet_preprocess(std::array<float, 3> mean = {0.5f, 0.5f, 0.5f},
                                      std::array<float, 3> std = {0.5f, 0.5f, 0.5f}) {
  return Preprocess{256, 224, 3, mean, std};
}
/// ImageNet-C (images already 224 px after the benchmark's own resize): centre crop 224 only.
inline Preprocess imagenet_c_preprocess(std::array<float, 3> mean = {0.5f, 0.5f, 0.5f},
                                        std::array<float, 3> std = {0.5f, 0.5f, 0.5f}) {
  return Preprocess{0, 224, 3, mean, std};
}
/// imagenet_preprocess with the statistics of `n`.
inline Preprocess imagenet_preprocess(const Normalization& n) { return imagenet_preprocess(n.mean, n.std); }
/// imagenet_c_preprocess with the statistics of `n`.
inline Preprocess imagenet_c_preprocess(const Normalization& n) { return imagenet_c_preprocess(n.mean, n.std); }

/// (pixel - mean[c]) / std[c] in planar CHW order into `out` (channels * H * W floats); any channel
/// count 1..3, unlike to_chw_normalized, because the embedded Fashion-MNIST model is gray.
inline void normalize_chw(const io::Image& im, const std::array<float, 3>& mean, const std::array<float, 3>& std,
                          std::span<float> out) {
  io::check_image(im, "normalize_chw");
  if (im.channels < 1 || im.channels > 3)
    throw std::invalid_argument("normalize_chw: 1 to 3 channels, got " + std::to_string(im.channels));
  const std::size_t plane = std::size_t(im.height) * std::size_t(im.width);
  if (out.size() != plane * std::size_t(im.channels))
    throw std::invalid_argument("normalize_chw: output holds " + std::to_string(out.size()) + " floats, need " +
                                std::to_string(plane * std::size_t(im.channels)));
  for (int c = 0; c < im.channels; ++c) {
    float* dst = out.data() + std::size_t(c) * plane;
    const float m = mean[std::size_t(c)], s = std[std::size_t(c)];
    for (std::size_t i = 0; i < plane; ++i) dst[i] = (im.pixels[i * std::size_t(im.channels) + std::size_t(c)] - m) / s;
  }
}

/// Resize + crop + normalise an already decoded image into `out`.
inline void preprocess_into(const io::Image& im, const Preprocess& p, std::span<float> out) {
  io::Image x = p.resize_shorter > 0 ? resize_shorter_side(im, p.resize_shorter) : im;
  if (p.crop > 0) {
    if (x.height < p.crop || x.width < p.crop)
      throw std::invalid_argument("preprocess: image " + std::to_string(x.height) + "x" + std::to_string(x.width) +
                                  " is smaller than the " + std::to_string(p.crop) + " crop");
    x = center_crop(x, p.crop, p.crop);
  }
  normalize_chw(x, p.mean, p.std, out);
}

/// Decodes `path` and preprocesses it into `out`. Errors name the file.
inline void load_preprocessed(const std::filesystem::path& path, const Preprocess& p, std::span<float> out) {
  preprocess_into(io::load_image(path, p.channels), p, out);
}

}  // namespace ttmoe::data
