// Synthetic test images for the image and corruption tests: natural-looking enough (smooth
// colour gradients, a disc, a rectangle, a stripe band) that blurs, noise and weather effects
// behave as on photographs, yet generated so the tests need no data files.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "ttmoe/io/image.hpp"

namespace ttmoe_test {

// Gradient background with a red disc, a green rectangle and a band of vertical stripes whose
// period is a fixed fraction of the width (so the content scales with the image).
inline ttmoe::io::Image scene(int height, int width) {
  ttmoe::io::Image im = ttmoe::io::make_image(height, width, 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const double u = (x + 0.5) / width, v = (y + 0.5) / height;
      double r = 0.2 + 0.6 * u, g = 0.3 + 0.4 * v, b = 0.6 - 0.3 * u * v;
      const double dx = u - 0.35, dy = v - 0.4;
      if (dx * dx + dy * dy < 0.04) r = 0.9, g = 0.2, b = 0.15;
      if (u > 0.6 && u < 0.9 && v > 0.55 && v < 0.85) r = 0.1, g = 0.5, b = 0.2;
      if (v > 0.88 && static_cast<int>(u * 24) % 2 == 0) r = g = b = 0.95;
      im.at(y, x, 0) = static_cast<float>(r);
      im.at(y, x, 1) = static_cast<float>(g);
      im.at(y, x, 2) = static_cast<float>(b);
    }
  return im;
}

// Values that are exactly k/255, the set an 8-bit PNG can represent losslessly.
inline ttmoe::io::Image quantized_pattern(int height, int width, int channels) {
  ttmoe::io::Image im = ttmoe::io::make_image(height, width, channels);
  std::uint32_t state = 12345u;
  for (auto& v : im.pixels) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>((state >> 24) & 0xFFu) / 255.0f;
  }
  return im;
}

// Mean absolute per-value difference of two images of the same size: how much a corruption moved.
inline double mean_abs_change(const ttmoe::io::Image& a, const ttmoe::io::Image& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) s += std::fabs(double(a.pixels[i]) - b.pixels[i]);
  return s / static_cast<double>(a.pixels.size());
}

}  // namespace ttmoe_test
