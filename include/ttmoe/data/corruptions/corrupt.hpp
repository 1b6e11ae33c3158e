// The 15 ImageNet-C corruptions and its 4 extra (validation) ones (Hendrycks & Dietterich,
// "Benchmarking Neural Network Robustness to Common Corruptions and Perturbations", ICLR 2019)
// behind one entry point:
//
//   namespace corruptions = ttmoe::data::corruptions;
//   io::Image noisy = data::corruptions::corrupt(clean, data::corruptions::Corruption::fog, /*severity=*/3, /*seed=*/42);
//
// Severity 1..5 follows the published ImageNet-C tables (or the CIFAR-10-C ones for images of
// 64 px and less); pixel-length parameters scale with the image size; each result is
// deterministic per seed and clipped to [0,1]. See common.hpp (this folder) for the rules and
// the per-corruption headers for the exact definitions and where they differ from the
// reference Python code:
//   noise.hpp    gaussian_noise, shot_noise, impulse_noise
//   blur.hpp     defocus_blur, glass_blur, motion_blur, zoom_blur
//   weather.hpp  snow, frost, fog, brightness
//   digital.hpp  contrast, elastic_transform, pixelate, jpeg_compression
//   extra.hpp    speckle_noise, gaussian_blur, spatter, saturate: ImageNet-C's four
//                held-out validation corruptions (extra_corruptions)
//
// Note: the released ImageNet-C files were additionally saved as JPEG (quality 85); corrupt()
// returns the float image without that step (encode_jpeg/decode_image reproduce it if wanted).
#pragma once

#include <cstdint>

#include "ttmoe/data/corruptions/blur.hpp"
#include "ttmoe/data/corruptions/common.hpp"
#include "ttmoe/data/corruptions/digital.hpp"
#include "ttmoe/data/corruptions/extra.hpp"
#include "ttmoe/data/corruptions/noise.hpp"
#include "ttmoe/data/corruptions/weather.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data::corruptions {

/// Applies `corruption` at `severity` (1..5; 0 returns the image unchanged) with the given seed.
/// Accepts 1- or 3-channel images of any size; the output has the input's shape, values in [0,1].
/// Throws std::invalid_argument for a bad severity or image.
inline io::Image corrupt(const io::Image& image, Corruption corruption, int severity, std::uint64_t seed,
                     const CorruptionOptions& options = {}) {
  switch (corruption) {
    case Corruption::gaussian_noise: return gaussian_noise(image, severity, seed, options);
    case Corruption::shot_noise: return shot_noise(image, severity, seed, options);
    case Corruption::impulse_noise: return impulse_noise(image, severity, seed, options);
    case Corruption::defocus_blur: return defocus_blur(image, severity, seed, options);
    case Corruption::glass_blur: return glass_blur(image, severity, seed, options);
    case Corruption::motion_blur: return motion_blur(image, severity, seed, options);
    case Corruption::zoom_blur: return zoom_blur(image, severity, seed, options);
    case Corruption::snow: return snow(image, severity, seed, options);
    case Corruption::frost: return frost(image, severity, seed, options);
    case Corruption::fog: return fog(image, severity, seed, options);
    case Corruption::brightness: return brightness(image, severity, seed, options);
    case Corruption::contrast: return contrast(image, severity, seed, options);
    case Corruption::elastic_transform: return elastic_transform(image, severity, seed, options);
    case Corruption::pixelate: return pixelate(image, severity, seed, options);
    case Corruption::jpeg_compression: return jpeg_compression(image, severity, seed, options);
    case Corruption::speckle_noise: return speckle_noise(image, severity, seed, options);
    case Corruption::gaussian_blur: return gaussian_blur(image, severity, seed, options);
    case Corruption::spatter: return spatter(image, severity, seed, options);
    case Corruption::saturate: return saturate(image, severity, seed, options);
  }
  throw std::invalid_argument("corrupt: unknown Corruption value");
}

}  // namespace ttmoe::data::corruptions
