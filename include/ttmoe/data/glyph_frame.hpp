#pragma once
// Puts one glyph (a digit drawn light on dark, any size) into an MNIST-style frame: the ink's bounding box
// is scaled so its longer side fills a `box` x `box` square (20 of 28 in MNIST), keeping the aspect ratio,
// and centred in the `frame` x `frame` image; then an optional small random affine jitter (rotation,
// scale, shear, shift about the frame centre) makes every sample of the same glyph different.
// Shrinking uses the antialiased PIL-style resize of image.hpp, so a 100 px glyph does not alias.

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>

#include "ttmoe/data/image_filters.hpp"
#include "ttmoe/data/image_transforms.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

/// A pixel rectangle [top, bottom) x [left, right).
struct PixelBox {
  int top = 0, left = 0, bottom = 0, right = 0;
  /// Rows covered.
  int height() const { return bottom - top; }
  /// Columns covered.
  int width() const { return right - left; }
  /// False for a box with no pixels.
  bool empty() const { return bottom <= top || right <= left; }
};

/// The bounding box of the pixels of channel 0 above `threshold` (empty if there are none).
inline PixelBox ink_bounding_box(const io::Image& im, float threshold = 0.05f) {
  io::check_image(im, "ink_bounding_box");
  PixelBox b{im.height, im.width, 0, 0};
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      if (im.at(y, x, 0) > threshold) {
        b.top = std::min(b.top, y);
        b.bottom = std::max(b.bottom, y + 1);
        b.left = std::min(b.left, x);
        b.right = std::max(b.right, x + 1);
      }
  if (b.empty()) return {};
  return b;
}

/// Ranges of the random affine jitter (all zero: no jitter).
struct GlyphJitter {
  double rotate_degrees = 10.0;  ///< uniform in [-r, r]
  double scale = 0.1;            ///< factor uniform in [1 - s, 1 + s]
  double shear = 0.15;           ///< horizontal shear uniform in [-s, s]
  double shift = 1.5;            ///< pixels, per axis, uniform in [-s, s]
};

/// The glyph of channel 0 of `glyph` normalised into a 1-channel frame x frame image (see the file
/// comment); `rng` draws the jitter. A glyph with no ink above `threshold` is std::invalid_argument
/// (`what` names its source in the message).
inline io::Image frame_glyph(const io::Image& glyph, std::mt19937_64& rng, const GlyphJitter& jitter = {}, int frame = 28,
                             int box = 20, const std::string& what = "glyph", float threshold = 0.05f) {
  if (box <= 0 || box > frame) throw std::invalid_argument("frame_glyph: need 0 < box <= frame");
  const PixelBox b = ink_bounding_box(glyph, threshold);
  if (b.empty()) throw std::invalid_argument("frame_glyph: " + what + " has no ink");
  io::Image ink = crop(to_gray(glyph), b.top, b.left, b.height(), b.width());
  const double s = double(box) / double(std::max(b.height(), b.width()));
  const int h = std::clamp(int(std::lround(b.height() * s)), 1, box), w = std::clamp(int(std::lround(b.width() * s)), 1, box);
  ink = resize(ink, h, w, ResizeFilter::bilinear);
  io::Image out = io::make_image(frame, frame, 1, 0.0f);
  const int top = (frame - h) / 2, left = (frame - w) / 2;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) out.at(top + y, left + x, 0) = std::clamp(ink.at(y, x, 0), 0.0f, 1.0f);
  if (jitter.rotate_degrees == 0.0 && jitter.scale == 0.0 && jitter.shear == 0.0 && jitter.shift == 0.0) return out;

  auto u = [&](double r) { return r > 0 ? std::uniform_real_distribution<double>(-r, r)(rng) : 0.0; };
  const double angle = u(jitter.rotate_degrees) * std::numbers::pi / 180.0;
  const double k = 1.0 + u(jitter.scale), sh = u(jitter.shear), tx = u(jitter.shift), ty = u(jitter.shift);
  // forward = T(centre + shift) * R(angle) * S(k) * Shear(sh) * T(-centre), on (x, y) with y down.
  const double c = std::cos(angle) * k, sn = std::sin(angle) * k;
  const double a = c, bb = c * sh - sn, d = sn, e = sn * sh + c;
  const double centre = (frame - 1) / 2.0;
  const std::array<double, 6> fwd{a, bb, centre + tx - (a * centre + bb * centre), d, e, centre + ty - (d * centre + e * centre)};
  // The frame's border is black, so clamping samples outside it reads black.
  io::Image j = warp_affine(out, fwd, Border::clamp);
  clip01(j);
  return j;
}

}  // namespace ttmoe::data
