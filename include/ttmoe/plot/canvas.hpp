#pragma once
// A tiny raster canvas for figures written as PNG through io/image.hpp: filled rectangles, thick
// lines, text from stb_easy_font (a public-domain vector font made of axis-aligned quads, so it
// rasterises as rectangles at any integer scale) and a perceptual colour map. Enough for line
// charts and heat maps (lines.hpp, heatmap.hpp) without a plotting dependency.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ttmoe/io/image.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wconversion"
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

namespace ttmoe::plot {

/// An RGB colour with components in [0,1].
struct Rgb {
  float r = 0, g = 0, b = 0;
};

/// Distinct line colours (matplotlib's "tab10"), cycled by series index.
inline Rgb palette(std::size_t i) {
  static const std::array<Rgb, 10> c{{{0.12f, 0.47f, 0.71f}, {1.00f, 0.50f, 0.05f}, {0.17f, 0.63f, 0.17f},
                                      {0.84f, 0.15f, 0.16f}, {0.58f, 0.40f, 0.74f}, {0.55f, 0.34f, 0.29f},
                                      {0.89f, 0.47f, 0.76f}, {0.50f, 0.50f, 0.50f}, {0.74f, 0.74f, 0.13f},
                                      {0.09f, 0.75f, 0.81f}}};
  return c[i % c.size()];
}

/// Viridis colour map (piecewise-linear through 9 samples of matplotlib's table), t clamped to [0,1].
inline Rgb viridis(double t) {
  static const std::array<Rgb, 9> k{{{0.267f, 0.005f, 0.329f}, {0.282f, 0.140f, 0.458f}, {0.253f, 0.265f, 0.530f},
                                     {0.207f, 0.372f, 0.553f}, {0.164f, 0.471f, 0.558f}, {0.128f, 0.567f, 0.551f},
                                     {0.135f, 0.659f, 0.518f}, {0.477f, 0.821f, 0.318f}, {0.993f, 0.906f, 0.144f}}};
  if (!std::isfinite(t)) return {0.8f, 0.8f, 0.8f};  // NaN cells show as light gray, not as a colour
  t = std::clamp(t, 0.0, 1.0) * double(k.size() - 1);
  const std::size_t i = std::min<std::size_t>(std::size_t(t), k.size() - 2);
  const float f = float(t - double(i));
  return {k[i].r + f * (k[i + 1].r - k[i].r), k[i].g + f * (k[i + 1].g - k[i].g), k[i].b + f * (k[i + 1].b - k[i].b)};
}

/// An RGB image being drawn on; coordinates in pixels, origin top-left, out-of-range writes clipped.
class Canvas {
 public:
  /// A width x height canvas filled with `background`.
  Canvas(int width, int height, Rgb background = {1, 1, 1}) : img_(io::make_image(height, width, 3)) {
    fill_rect(0, 0, width, height, background);
  }

  int width() const { return img_.width; }
  int height() const { return img_.height; }
  /// The pixels drawn so far.
  const io::Image& image() const { return img_; }

  /// Sets one pixel (ignored outside the canvas).
  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= img_.width || y >= img_.height) return;
    img_.at(y, x, 0) = c.r, img_.at(y, x, 1) = c.g, img_.at(y, x, 2) = c.b;
  }
  /// Fills [x0, x1) x [y0, y1).
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = std::max(0, y0); y < std::min(img_.height, y1); ++y)
      for (int x = std::max(0, x0); x < std::min(img_.width, x1); ++x) set(x, y, c);
  }
  /// One-pixel rectangle outline around [x0, x1) x [y0, y1).
  void outline(int x0, int y0, int x1, int y1, Rgb c) {
    fill_rect(x0, y0, x1, y0 + 1, c);
    fill_rect(x0, y1 - 1, x1, y1, c);
    fill_rect(x0, y0, x0 + 1, y1, c);
    fill_rect(x1 - 1, y0, x1, y1, c);
  }
  /// A line of the given thickness: square stamps along the segment (dense enough for no gaps).
  void line(double x0, double y0, double x1, double y1, Rgb c, int thickness = 1) {
    const double len = std::hypot(x1 - x0, y1 - y0);
    const int steps = std::max(1, int(std::ceil(len * 2)));
    const int lo = -(thickness - 1) / 2, hi = thickness / 2;
    for (int s = 0; s <= steps; ++s) {
      const double t = double(s) / steps;
      const int x = int(std::lround(x0 + t * (x1 - x0))), y = int(std::lround(y0 + t * (y1 - y0)));
      for (int dy = lo; dy <= hi; ++dy)
        for (int dx = lo; dx <= hi; ++dx) set(x + dx, y + dy, c);
    }
  }

  /// Width in pixels of `text` at `scale` (stb_easy_font units times scale).
  static int text_width(const std::string& text, int scale = 1) {
    std::string t = printable(text);
    return t.empty() ? 0 : stb_easy_font_width(t.data()) * scale;
  }
  /// Height in pixels of one line of text at `scale`.
  static int text_height(int scale = 1) { return 12 * scale; }

  /// Draws `text` with its top-left corner at (x, y). Non-ASCII characters print as '?' because the
  /// font covers ASCII 32..126 only (and would index out of its tables otherwise).
  void text(int x, int y, const std::string& text, Rgb c = {0, 0, 0}, int scale = 1) {
    std::string t = printable(text);
    if (t.empty()) return;
    std::vector<float> buf(t.size() * 400);  // up to ~25 quads per glyph, 4 vertices of 4 floats
    const int quads = stb_easy_font_print(0, 0, t.data(), nullptr, buf.data(), int(buf.size() * sizeof(float)));
    for (int q = 0; q < quads; ++q) {
      const float* v = buf.data() + std::size_t(q) * 16;  // 4 vertices x (x, y, z, rgba)
      const float qx0 = std::min(v[0], v[8]), qx1 = std::max(v[0], v[8]);
      const float qy0 = std::min(v[1], v[9]), qy1 = std::max(v[1], v[9]);
      fill_rect(x + int(std::lround(qx0 * scale)), y + int(std::lround(qy0 * scale)), x + int(std::lround(qx1 * scale)),
                y + int(std::lround(qy1 * scale)), c);
    }
  }
  /// Draws `text` centred horizontally on x.
  void text_centered(int x, int y, const std::string& t, Rgb c = {0, 0, 0}, int scale = 1) {
    text(x - text_width(t, scale) / 2, y, t, c, scale);
  }

 private:
  static std::string printable(const std::string& s) {
    std::string t;
    for (unsigned char ch : s) t += (ch >= 32 && ch < 127) || ch == '\n' ? char(ch) : '?';
    return t;
  }
  io::Image img_;
};

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks over `range`.
inline double nice_step(double range, int target = 5) {
  if (!(range > 0)) return 1;
  const double raw = range / target, p = std::pow(10.0, std::floor(std::log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/// Formats a tick value with just enough decimals for `step`.
inline std::string tick_label(double v, double step) {
  const int dec = step >= 1 ? 0 : std::min(6, int(std::ceil(-std::log10(step) - 1e-9)));
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", dec, std::abs(v) < step * 1e-6 ? 0.0 : v);
  return b;
}

}  // namespace ttmoe::plot
