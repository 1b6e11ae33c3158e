// ImageNet-C noise corruptions: gaussian_noise, shot_noise, impulse_noise.
// Per-pixel and resolution independent, so the published tables apply unchanged at any size.
#pragma once

#include <array>
#include <cstdint>

#include "ttmoe/data/corruptions/common.hpp"
#include "ttmoe/data/image_filters.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data::corruptions {

/// Additive N(0, c^2) noise on every value, c = {.08,.12,.18,.26,.38} (ImageNet-C) or
/// {.04,.06,.08,.09,.10} (CIFAR-10-C), then clipped to [0,1].
inline io::Image gaussian_noise(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::gaussian_noise);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{.08, .12, .18, .26, .38};
  static constexpr std::array<double, 5> cifar{.04, .06, .08, .09, .10};
  const double c = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::gaussian_noise);
  io::Image out = im;
  for (auto& v : out.pixels) v = static_cast<float>(v + c * rng.normal());
  data::clip01(out);
  return out;
}

/// Photon (shot) noise: Poisson(x * c) / c, c = {60,25,12,5,3} (ImageNet-C) or
/// {500,250,100,75,50} (CIFAR-10-C) photons at full intensity; variance x / c.
inline io::Image shot_noise(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::shot_noise);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{60, 25, 12, 5, 3};
  static constexpr std::array<double, 5> cifar{500, 250, 100, 75, 50};
  const double c = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::shot_noise);
  io::Image out = im;
  for (auto& v : out.pixels) {
    const double x = v > 0.0f ? static_cast<double>(v) : 0.0;  // Poisson needs a non-negative rate
    v = static_cast<float>(static_cast<double>(rng.poisson(x * c)) / c);
  }
  data::clip01(out);
  return out;
}

/// Salt-and-pepper noise as scikit-image's random_noise(mode='s&p'): each value independently
/// (per channel, as in the reference) is replaced with probability `amount`, by 1 or 0 with
/// equal odds; amount = {.03,.06,.09,.17,.27} (ImageNet-C) or {.01,.02,.03,.05,.07} (CIFAR-10-C).
inline io::Image impulse_noise(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::impulse_noise);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{.03, .06, .09, .17, .27};
  static constexpr std::array<double, 5> cifar{.01, .02, .03, .05, .07};
  const double amount = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::impulse_noise);
  io::Image out = im;
  for (auto& v : out.pixels)
    if (rng.uniform() < amount) v = rng.uniform() < 0.5 ? 1.0f : 0.0f;
  data::clip01(out);
  return out;
}

}  // namespace ttmoe::data::corruptions
