// What every ImageNet-C corruption shares: the Corruption enum and its names, the options,
// the seeded random source, and the rule that picks a parameter table and a length scale
// from the image size.
//
// Parameter tables. Hendrycks & Dietterich (ICLR 2019) published two sets of severity tables:
// the ImageNet-C one for 224x224 images and the CIFAR-10-C one for 32x32 images. The rule here:
//   * images whose shorter side is <= 64 px use the CIFAR table with reference size 32,
//     all others the ImageNet table with reference size 224 (ParameterTable overrides this);
//   * s = shorter side / reference size. Parameters that are lengths in pixels in the
//     reference code (blur radii and sigmas, glass-blur shuffle distance, motion-blur length,
//     snow flake zoom, elastic displacement/affine ranges, fog and frost texture scale) are
//     multiplied by s, so a corruption looks the same at any resolution and exactly like the
//     reference at s = 1. Dimensionless parameters (noise levels, zoom factors, pixelate
//     fraction, JPEG quality, brightness/contrast) are used as published.
//
// Randomness. Each corruption draws from std::mt19937_64 (whose output sequence the C++
// standard fixes) through our own uniform/normal/Poisson transforms, because the standard
// distributions are implementation-defined. The stream is seeded from (seed, corruption) but
// not from the severity, so the five severities of one image share one noise realisation and
// differ only in their parameters. Results are reproducible for a given seed on a given
// platform; libm differences (exp, log, sin) can change low bits across platforms.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ttmoe/io/image.hpp"

namespace ttmoe::data::corruptions {

/// The 15 ImageNet-C corruptions, in the paper's order (noise, blur, weather, digital), then the
/// four "extra" ones ImageNet-C provides as a validation set (speckle_noise, gaussian_blur, spatter,
/// saturate; extra.hpp).
enum class Corruption {
  gaussian_noise,
  shot_noise,
  impulse_noise,
  defocus_blur,
  glass_blur,
  motion_blur,
  zoom_blur,
  snow,
  frost,
  fog,
  brightness,
  contrast,
  elastic_transform,
  pixelate,
  jpeg_compression,
  speckle_noise,
  gaussian_blur,
  spatter,
  saturate,
};

/// All corruptions in enum order, for benchmark loops over the whole suite.
inline constexpr std::array<Corruption, 15> all_corruptions{
    Corruption::gaussian_noise, Corruption::shot_noise,   Corruption::impulse_noise, Corruption::defocus_blur,
    Corruption::glass_blur,     Corruption::motion_blur,  Corruption::zoom_blur,     Corruption::snow,
    Corruption::frost,          Corruption::fog,          Corruption::brightness,    Corruption::contrast,
    Corruption::elastic_transform, Corruption::pixelate,  Corruption::jpeg_compression};

/// The four extra corruptions of ImageNet-C, disjoint from all_corruptions: the benchmark's
/// held-out validation corruptions (hyper-parameters are chosen on them, never on the fifteen).
inline constexpr std::array<Corruption, 4> extra_corruptions{Corruption::speckle_noise, Corruption::gaussian_blur,
                                                             Corruption::spatter, Corruption::saturate};

/// The canonical name (the ImageNet-C folder name, e.g. "gaussian_noise").
constexpr std::string_view corruption_name(Corruption c) noexcept {
  switch (c) {
    case Corruption::gaussian_noise: return "gaussian_noise";
    case Corruption::shot_noise: return "shot_noise";
    case Corruption::impulse_noise: return "impulse_noise";
    case Corruption::defocus_blur: return "defocus_blur";
    case Corruption::glass_blur: return "glass_blur";
    case Corruption::motion_blur: return "motion_blur";
    case Corruption::zoom_blur: return "zoom_blur";
    case Corruption::snow: return "snow";
    case Corruption::frost: return "frost";
    case Corruption::fog: return "fog";
    case Corruption::brightness: return "brightness";
    case Corruption::contrast: return "contrast";
    case Corruption::elastic_transform: return "elastic_transform";
    case Corruption::pixelate: return "pixelate";
    case Corruption::jpeg_compression: return "jpeg_compression";
    case Corruption::speckle_noise: return "speckle_noise";
    case Corruption::gaussian_blur: return "gaussian_blur";
    case Corruption::spatter: return "spatter";
    case Corruption::saturate: return "saturate";
  }
  return "unknown";
}

/// Inverse of corruption_name (exact match); throws std::invalid_argument listing the valid
/// names so a typo on a command line is self-explanatory.
inline Corruption parse_corruption(std::string_view name) {
  for (Corruption c : all_corruptions)
    if (corruption_name(c) == name) return c;
  for (Corruption c : extra_corruptions)
    if (corruption_name(c) == name) return c;
  std::string valid;
  for (Corruption c : all_corruptions) {
    if (!valid.empty()) valid += ", ";
    valid += corruption_name(c);
  }
  for (Corruption c : extra_corruptions) valid += ", " + std::string(corruption_name(c));
  throw std::invalid_argument("unknown corruption '" + std::string(name) + "'; valid names: " + valid);
}

/// Which published severity table to use.
enum class ParameterTable {
  automatic,  ///< CIFAR-10-C if the shorter side is <= 64 px, ImageNet-C otherwise.
  imagenet,   ///< ImageNet-C (reference size 224).
  cifar,      ///< CIFAR-10-C (reference size 32).
};

/// Knobs beyond (corruption, severity, seed); the defaults reproduce the documented behaviour.
struct CorruptionOptions {
  ParameterTable table = ParameterTable::automatic;
  /// Frost overlays. Empty: a procedural ice texture (see weather.hpp). Otherwise
  /// one of these images is picked at random and randomly cropped, as the reference does with
  /// its six frost photographs (load them with load_frost_textures()).
  std::vector<io::Image> frost_textures;
};

/// The table and length scale chosen for an image (see the rule at the top of this file).
struct CorruptionScale {
  bool cifar = false;  ///< true: CIFAR-10-C table, false: ImageNet-C table.
  int reference = 224; ///< Reference image size of that table (32 or 224).
  double scale = 1.0;  ///< Shorter side / reference: multiplier for pixel-length parameters.
};

/// Applies the 64-px rule (or the override) to an image's size.
inline CorruptionScale corruption_scale(const io::Image& im, ParameterTable table = ParameterTable::automatic) {
  const int shorter = std::min(im.height, im.width);
  const bool cifar = table == ParameterTable::cifar || (table == ParameterTable::automatic && shorter <= 64);
  CorruptionScale s;
  s.cifar = cifar;
  s.reference = cifar ? 32 : 224;
  s.scale = static_cast<double>(shorter) / s.reference;
  return s;
}

/// Seeded random source for the corruptions: mt19937_64 bits with portable transforms
/// (53-bit uniforms, Box-Muller normals, inversion / PTRS Poisson), so a seed means the same
/// numbers with every standard library.
class CorruptionRng {
 public:
  explicit CorruptionRng(std::uint64_t seed) : engine_(seed) {}

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [lo, hi) (numpy's randint convention), unbiased by rejection.
  std::int64_t randint(std::int64_t lo, std::int64_t hi) {
    if (hi <= lo) throw std::invalid_argument("CorruptionRng::randint: empty range");
    const std::uint64_t range = static_cast<std::uint64_t>(hi - lo);
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % range;
    std::uint64_t v = engine_();
    while (v >= limit) v = engine_();
    return lo + static_cast<std::int64_t>(v % range);
  }
  /// Standard normal by the Box-Muller transform (pairs; the second value is cached).
  double normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    constexpr double two_pi = 6.283185307179586476925;
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(two_pi * u2);
    has_spare_ = true;
    return r * std::cos(two_pi * u2);
  }
  /// Normal with the given mean and standard deviation.
  double normal(double mean, double sd) noexcept { return mean + sd * normal(); }
  /// Poisson(lambda): multiplication-free inversion below 10, Hormann's PTRS transformed
  /// rejection (the algorithm numpy uses) above, so large lambdas stay O(1).
  std::int64_t poisson(double lambda) {
    if (!(lambda > 0.0)) return 0;
    if (lambda < 10.0) {
      const double u = uniform();
      double p = std::exp(-lambda), cdf = p;
      std::int64_t k = 0;
      while (u > cdf && k < 1000) {
        ++k;
        p *= lambda / static_cast<double>(k);
        cdf += p;
      }
      return k;
    }
    const double slam = std::sqrt(lambda), loglam = std::log(lambda);
    const double b = 0.931 + 2.53 * slam;
    const double a = -0.059 + 0.02483 * b;
    const double invalpha = 1.1239 + 1.1328 / (b - 3.4);
    const double vr = 0.9277 - 3.6224 / (b - 2.0);
    for (;;) {
      const double u = uniform() - 0.5;
      const double v = uniform();
      const double us = 0.5 - std::fabs(u);
      const double k = std::floor((2.0 * a / us + b) * u + lambda + 0.43);
      if (us >= 0.07 && v <= vr) return static_cast<std::int64_t>(k);
      if (k < 0.0 || (us < 0.013 && v > us)) continue;
      if (std::log(v) + std::log(invalpha) - std::log(a / (us * us) + b) <= -lambda + k * loglam - std::lgamma(k + 1.0))
        return static_cast<std::int64_t>(k);
    }
  }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

namespace corruption_detail {

// SplitMix64 finaliser: spreads (seed, corruption) into well-mixed engine seeds so nearby seeds
// and different corruptions give unrelated streams.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline CorruptionRng make_rng(std::uint64_t seed, Corruption c) {
  return CorruptionRng(splitmix64(splitmix64(seed) ^ (0xC0FFEEull + static_cast<std::uint64_t>(c))));
}

// Common argument checks: a well-formed 1- or 3-channel image and a severity in 0..5.
inline void check_args(const io::Image& im, int severity, Corruption c) {
  const std::string where(corruption_name(c));
  io::check_image(im, where);
  if (im.channels != 1 && im.channels != 3)
    throw std::invalid_argument(where + ": needs a 1- or 3-channel image, got " + std::to_string(im.channels));
  if (severity < 0 || severity > 5)
    throw std::invalid_argument(where + ": severity must be 1..5 (0 = clean), got " + std::to_string(severity));
}

// Picks the row of the severity table that applies.
template <class T>
const T& pick(const std::array<T, 5>& imagenet, const std::array<T, 5>& cifar, const CorruptionScale& s,
              int severity) {
  return (s.cifar ? cifar : imagenet)[static_cast<std::size_t>(severity - 1)];
}

}  // namespace corruption_detail

}  // namespace ttmoe::data::corruptions
