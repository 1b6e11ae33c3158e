// ImageNet-C weather corruptions: snow, frost, fog, brightness (the paper groups brightness
// with weather: "sunlight"). Also the two textures they need: the diamond-square plasma fractal
// (fog) and a procedural ice texture (frost, standing in for the reference's photographs).
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ttmoe/data/corruptions/common.hpp"
#include "ttmoe/data/image_filters.hpp"
#include "ttmoe/data/image_transforms.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data::corruptions {

/// Diamond-square plasma fractal as in the reference (a modification of FLHerne's mapgen):
/// mapsize x mapsize (a power of two), toroidal neighbours, the random displacement at each
/// level uniform in [-w^2, w^2] with w = 100 at the top level divided by `wibble_decay` per
/// level (larger decay: smoother). Returned as a 1-channel image normalised to [0,1].
inline io::Image plasma_fractal(int mapsize, double wibble_decay, CorruptionRng& rng) {
  if (mapsize < 2 || (mapsize & (mapsize - 1)) != 0)
    throw std::invalid_argument("plasma_fractal: mapsize must be a power of two >= 2, got " + std::to_string(mapsize));
  const int M = mapsize;
  std::vector<double> m(static_cast<std::size_t>(M) * M, 0.0);
  auto at = [&](int y, int x) -> double& {
    return m[static_cast<std::size_t>(((y % M) + M) % M) * M + static_cast<std::size_t>(((x % M) + M) % M)];
  };
  double wibble = 100.0;
  for (int step = M; step >= 2; step /= 2) {
    const int half = step / 2;
    const int n = M / step;
    auto wibbled = [&](double sum) { return sum / 4.0 + wibble * rng.uniform(-wibble, wibble); };
    // Squares: centre of each cell = mean of its four corners + displacement.
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const double s = at(i * step, j * step) + at((i + 1) * step, j * step) + at(i * step, (j + 1) * step) +
                         at((i + 1) * step, (j + 1) * step);
        at(i * step + half, j * step + half) = wibbled(s);
      }
    // Diamonds on the horizontal edges: two cell centres (above, below) + two corners (left, right).
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const double s = at(i * step + half, j * step + half) + at(i * step - half, j * step + half) +
                         at(i * step, j * step) + at(i * step, (j + 1) * step);
        at(i * step, j * step + half) = wibbled(s);
      }
    // Diamonds on the vertical edges: two cell centres (left, right) + two corners (above, below).
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const double s = at(i * step + half, j * step + half) + at(i * step + half, j * step - half) +
                         at(i * step, j * step) + at((i + 1) * step, j * step);
        at(i * step + half, j * step) = wibbled(s);
      }
    wibble /= wibble_decay;
  }
  const auto [lo, hi] = std::minmax_element(m.begin(), m.end());
  const double mn = *lo, range = *hi - *lo;
  io::Image out = io::make_image(M, M, 1);
  for (std::size_t i = 0; i < m.size(); ++i) out.pixels[i] = static_cast<float>(range > 0 ? (m[i] - mn) / range : 0.0);
  return out;
}

namespace weather_detail {

inline int next_pow2(int v) {
  int p = 2;
  while (p < v) p *= 2;
  return p;
}

// A plasma map the shape of the image: the reference draws a ref_map^2 map and takes its top-left
// ref x ref corner (256 -> 224 for ImageNet, 32 -> 32 for CIFAR). We take the top-left window with
// the image's aspect ratio whose longer side is `ref`, and resample it to H x W, so the fog has the
// same structure relative to the image at every size (and is the reference's map at 224x224).
inline io::Image fog_layer(int H, int W, int ref, int ref_map, double decay, CorruptionRng& rng) {
  const io::Image map = plasma_fractal(ref_map, decay, rng);
  const int L = std::max(H, W);
  const int ch = std::max(1, static_cast<int>(std::lround(static_cast<double>(ref) * H / L)));
  const int cw = std::max(1, static_cast<int>(std::lround(static_cast<double>(ref) * W / L)));
  io::Image layer = crop(map, 0, 0, ch, cw);
  if (ch != H || cw != W) layer = resize(layer, H, W, ResizeFilter::bilinear);
  return layer;
}

// Splats `w` at real position (x, y) into a 1-channel image with bilinear weights.
inline void splat(io::Image& acc, double x, double y, double w) {
  const int x0 = static_cast<int>(std::floor(x)), y0 = static_cast<int>(std::floor(y));
  const double tx = x - x0, ty = y - y0;
  const double ws[4] = {(1 - tx) * (1 - ty), tx * (1 - ty), (1 - tx) * ty, tx * ty};
  const int xs[4] = {x0, x0 + 1, x0, x0 + 1}, ys[4] = {y0, y0, y0 + 1, y0 + 1};
  for (int k = 0; k < 4; ++k)
    if (xs[k] >= 0 && xs[k] < acc.width && ys[k] >= 0 && ys[k] < acc.height)
      acc.at(ys[k], xs[k], 0) += static_cast<float>(w * ws[k]);
}

}  // namespace weather_detail

/// Procedural frost-on-glass texture (3 channels, [0,1]) used when no frost photographs are
/// given. The reference blends crops of six photographs of frost; those are data, not code, so
/// by default we synthesise a stand-in with the same look: fern-like ice dendrites (straight-ish
/// random-walk stems shedding short side branches at +-60 degrees, the hexagonal habit of ice,
/// which branch again), seeded preferentially where a smooth plasma "cover" map is high so the
/// frost is patchy, over a haze from the same map, with a fine grain and a cold blue-white tint.
/// Features are sized for a 224 px image times `feature_scale`: the texture is drawn on a canvas
/// of (H, W) / feature_scale and resampled to H x W. Mean brightness is about 0.37 (0.33-0.44
/// over seeds), in the range of the photographs, but the exact difficulty of ImageNet-C frost
/// is only reproduced by passing the original images through CorruptionOptions::frost_textures.
inline io::Image frost_texture(int H, int W, double feature_scale, CorruptionRng& rng) {
  if (H <= 0 || W <= 0 || !(feature_scale > 0.0)) throw std::invalid_argument("frost_texture: bad size or scale");
  // Work where one texture unit is one pixel, then resample.
  const int h0 = std::max(16, static_cast<int>(std::lround(H / feature_scale)));
  const int w0 = std::max(16, static_cast<int>(std::lround(W / feature_scale)));
  constexpr double pi = 3.14159265358979323846;

  // Low-frequency cover map: frost is patchy, dense where the glass was coldest.
  // (Drawn on the fog's bounded 256 map and resampled: it is smooth, and a map the size of a long
  // thin working canvas would cost O(longer side^2).)
  const io::Image cover = weather_detail::fog_layer(h0, w0, 224, 256, 1.8, rng);
  io::Image acc = io::make_image(h0, w0, 1);
  struct Branch {
    double x, y, angle, length, intensity;
    int depth;
  };
  // Fern-like dendrites: straight-ish stems shedding many short side branches at +-60 degrees,
  // which shed shorter ones again. Stems start preferentially where the cover map is high.
  const int seeds = std::max(4, static_cast<int>(std::lround(h0 * static_cast<double>(w0) / 300.0)));
  std::vector<Branch> stack;
  for (int s = 0; s < seeds; ++s) {
    double sx = 0.0, sy = 0.0;
    for (int tries = 0; tries < 8; ++tries) {
      sx = rng.uniform(0.0, w0);
      sy = rng.uniform(0.0, h0);
      if (rng.uniform() < 0.2 + 0.8 * cover.at(static_cast<int>(sy), static_cast<int>(sx), 0)) break;
    }
    stack.push_back(Branch{sx, sy, rng.uniform(0.0, 2.0 * pi), rng.uniform(15.0, 60.0), rng.uniform(0.4, 0.9), 0});
    while (!stack.empty()) {
      Branch b = stack.back();
      stack.pop_back();
      const int steps = static_cast<int>(b.length);
      const double jitter = b.depth == 0 ? 0.03 : 0.08;
      const double spawn = b.depth == 0 ? 0.35 : (b.depth == 1 ? 0.15 : 0.0);
      for (int t = 0; t < steps; ++t) {
        b.angle += jitter * rng.normal();
        b.x += std::cos(b.angle);
        b.y += std::sin(b.angle);
        if (b.x < -2 || b.y < -2 || b.x > w0 + 1 || b.y > h0 + 1) break;
        const double fade = std::sqrt(1.0 - static_cast<double>(t) / steps);
        weather_detail::splat(acc, b.x, b.y, b.intensity * fade);
        if (rng.uniform() < spawn) {
          const double side = rng.uniform() < 0.5 ? -1.0 : 1.0;
          const double len = b.depth == 0 ? rng.uniform(3.0, 12.0) : rng.uniform(1.5, 4.0);
          stack.push_back(Branch{b.x, b.y, b.angle + side * pi / 3.0, len, b.intensity * 0.7, b.depth + 1});
        }
      }
    }
  }
  const io::Image needles = data::gaussian_blur(acc, 0.6);
  io::Image grain = io::make_image(h0, w0, 1);
  for (auto& v : grain.pixels) v = static_cast<float>(rng.normal());
  grain = data::gaussian_blur(grain, 0.7);

  static constexpr std::array<double, 3> tint{0.84, 0.93, 1.0};
  io::Image tex = io::make_image(h0, w0, 3);
  for (std::size_t i = 0; i < acc.pixels.size(); ++i) {
    const double crystal = 1.0 - std::exp(-1.4 * needles.pixels[i]);
    const double haze = cover.pixels[i];
    const double t =
        std::clamp(0.15 + 0.45 * haze * haze + 0.7 * crystal + 0.06 * (0.5 + haze) * grain.pixels[i], 0.0, 1.0);
    for (int c = 0; c < 3; ++c)
      tex.pixels[i * 3 + static_cast<std::size_t>(c)] = static_cast<float>(t * tint[static_cast<std::size_t>(c)]);
  }
  if (h0 != H || w0 != W) tex = resize(tex, H, W, ResizeFilter::bilinear);
  data::clip01(tex);
  return tex;
}

/// Loads every .png/.jpg/.jpeg in a folder (sorted by name, so the random pick is reproducible)
/// as RGB, e.g. the reference's frost1.png ... frost6.jpg, for CorruptionOptions::frost_textures.
inline std::vector<io::Image> load_frost_textures(const std::filesystem::path& folder) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    throw io::ImageError(io::ImageErrorKind::Io, folder.string(), "not a directory");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (ext == ".png" || ext == ".jpg" || ext == ".jpeg") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw io::ImageError(io::ImageErrorKind::Io, folder.string(), "no .png/.jpg frost images");
  std::vector<io::Image> out;
  for (const auto& f : files) out.push_back(io::load_image(f, 3));
  return out;
}

/// Snow: a flake layer of N(loc, scale) noise, centre-zoomed (flake size), thresholded, clipped
/// and quantised to 8 bits (the reference's PIL 'L' image), streaked by ImageMagick-style motion
/// blur at a random angle in [-135, -45) degrees; the image is whitened towards
/// max(x, 1.5*gray + 0.5) with weight 1 - blend, and the layer plus its 180-degree rotation is
/// added. (loc, scale, zoom, threshold, radius, sigma, blend) from the published tables; zoom,
/// radius and sigma are scaled by the length scale.
inline io::Image snow(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::snow);
  if (severity == 0) return im;
  using P = std::array<double, 7>;
  static constexpr std::array<P, 5> imagenet{P{0.1, 0.3, 3, 0.5, 10, 4, 0.8}, P{0.2, 0.3, 2, 0.5, 12, 4, 0.7},
                                             P{0.55, 0.3, 4, 0.9, 12, 8, 0.7}, P{0.55, 0.3, 4.5, 0.85, 12, 8, 0.65},
                                             P{0.55, 0.3, 2.5, 0.85, 12, 12, 0.55}};
  static constexpr std::array<P, 5> cifar{P{0.1, 0.2, 1, 0.6, 8, 3, 0.95}, P{0.1, 0.2, 1, 0.5, 10, 4, 0.9},
                                          P{0.15, 0.3, 1.75, 0.55, 10, 4, 0.9}, P{0.25, 0.3, 2.25, 0.6, 12, 6, 0.85},
                                          P{0.3, 0.3, 1.25, 0.65, 14, 12, 0.8}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::snow);
  const int H = im.height, W = im.width, C = im.channels;

  io::Image layer = io::make_image(H, W, 1);
  for (auto& v : layer.pixels) v = static_cast<float>(rng.normal(c[0], c[1]));
  layer = data::clipped_zoom(layer, c[2] * sc.scale);
  for (auto& v : layer.pixels) {
    if (v < c[3]) v = 0.0f;
    v = std::floor(std::clamp(v, 0.0f, 1.0f) * 255.0f) / 255.0f;
  }
  const double angle = rng.uniform(-135.0, -45.0);
  layer = data::motion_blur(layer, c[4] * sc.scale, c[5] * sc.scale, angle);
  const io::Image rotated = data::rotate180(layer);
  const io::Image gray = data::to_gray(im);
  const float blend = static_cast<float>(c[6]);

  io::Image out = io::make_image(H, W, C);
  for (std::size_t p = 0; p < static_cast<std::size_t>(H) * W; ++p) {
    const float whiten = gray.pixels[p] * 1.5f + 0.5f;
    const float flakes = layer.pixels[p] + rotated.pixels[p];
    for (int ch = 0; ch < C; ++ch) {
      const std::size_t i = p * static_cast<std::size_t>(C) + static_cast<std::size_t>(ch);
      const float x = im.pixels[i];
      out.pixels[i] = blend * x + (1.0f - blend) * std::max(x, whiten) + flakes;
    }
  }
  data::clip01(out);
  return out;
}

/// Frost: clip(a * x + b * frost) with (a, b) = {(1,.4),(.8,.6),(.7,.7),(.65,.7),(.6,.75)}
/// (ImageNet-C) or {(1,.2),(1,.3),(.9,.4),(.85,.4),(.75,.45)} (CIFAR-10-C). The frost layer is a
/// random crop of a random CorruptionOptions::frost_textures image (scaled by the length scale,
/// and by a further 0.2 under the CIFAR table as the reference does), or frost_texture().
inline io::Image frost(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::frost);
  if (severity == 0) return im;
  using P = std::array<double, 2>;
  static constexpr std::array<P, 5> imagenet{P{1, .4}, P{.8, .6}, P{.7, .7}, P{.65, .7}, P{.6, .75}};
  static constexpr std::array<P, 5> cifar{P{1, .2}, P{1, .3}, P{.9, .4}, P{.85, .4}, P{.75, .45}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::frost);
  const int H = im.height, W = im.width, C = im.channels;
  const double feature_scale = sc.scale * (sc.cifar ? 0.2 : 1.0);

  io::Image layer;
  if (opt.frost_textures.empty()) {
    layer = frost_texture(H, W, feature_scale, rng);
  } else {
    const auto idx = static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(opt.frost_textures.size())));
    io::Image tex = opt.frost_textures[idx];
    io::check_image(tex, "frost texture");
    if (tex.channels != 1 && tex.channels != 3) throw std::invalid_argument("frost: textures need 1 or 3 channels");
    int th = std::max(1, static_cast<int>(std::lround(tex.height * feature_scale)));
    int tw = std::max(1, static_cast<int>(std::lround(tex.width * feature_scale)));
    // Too small to cover the image after scaling: enlarge just enough.
    const double cover = std::max({1.0, static_cast<double>(H) / th, static_cast<double>(W) / tw});
    th = std::max(H, static_cast<int>(std::ceil(th * cover)));
    tw = std::max(W, static_cast<int>(std::ceil(tw * cover)));
    if (th != tex.height || tw != tex.width) tex = resize(tex, th, tw, ResizeFilter::bilinear);
    const int y0 = static_cast<int>(rng.randint(0, th - H + 1));
    const int x0 = static_cast<int>(rng.randint(0, tw - W + 1));
    layer = crop(tex, y0, x0, H, W);
  }
  if (C == 1 && layer.channels == 3) layer = data::to_gray(layer);
  const auto a = static_cast<float>(c[0]), b = static_cast<float>(c[1]);
  io::Image out = io::make_image(H, W, C);
  for (std::size_t p = 0; p < static_cast<std::size_t>(H) * W; ++p)
    for (int ch = 0; ch < C; ++ch) {
      const std::size_t i = p * static_cast<std::size_t>(C) + static_cast<std::size_t>(ch);
      const float f = layer.pixels[p * static_cast<std::size_t>(layer.channels) +
                                   static_cast<std::size_t>(layer.channels == 1 ? 0 : ch)];
      out.pixels[i] = a * im.pixels[i] + b * f;
    }
  data::clip01(out);
  return out;
}

/// Fog: x + strength * plasma, rescaled by max/(max + strength) (max over the whole image) and
/// clipped. (strength, wibble_decay) = {(1.5,2),(2,2),(2.5,1.7),(2.5,1.5),(3,1.4)} (ImageNet-C)
/// or {(.2,3),(.5,3),(.75,2.5),(1,2),(1.5,1.75)} (CIFAR-10-C). The plasma is the reference's map
/// (256 -> 224 crop, or 32) resampled to the image (see weather_detail::fog_layer).
inline io::Image fog(const io::Image& im, int severity, std::uint64_t seed, const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::fog);
  if (severity == 0) return im;
  using P = std::array<double, 2>;
  static constexpr std::array<P, 5> imagenet{P{1.5, 2}, P{2, 2}, P{2.5, 1.7}, P{2.5, 1.5}, P{3, 1.4}};
  static constexpr std::array<P, 5> cifar{P{.2, 3}, P{.5, 3}, P{.75, 2.5}, P{1, 2}, P{1.5, 1.75}};
  const auto sc = corruption_scale(im, opt.table);
  const P& c = corruption_detail::pick(imagenet, cifar, sc, severity);
  auto rng = corruption_detail::make_rng(seed, Corruption::fog);
  const io::Image layer = weather_detail::fog_layer(im.height, im.width, sc.reference, sc.cifar ? 32 : 256, c[1], rng);
  const float max_val = *std::max_element(im.pixels.begin(), im.pixels.end());
  const auto strength = static_cast<float>(c[0]);
  const float gain = max_val / (max_val + strength);
  io::Image out = im;
  const std::size_t C = static_cast<std::size_t>(im.channels);
  for (std::size_t i = 0; i < out.pixels.size(); ++i) out.pixels[i] = (out.pixels[i] + strength * layer.pixels[i / C]) * gain;
  data::clip01(out);
  return out;
}

/// Brightness: add c to the HSV value channel (clipped to 1) and convert back (scikit-image
/// rgb2hsv/hsv2rgb), c = {.1,.2,.3,.4,.5} (ImageNet-C) or {.05,.1,.15,.2,.3} (CIFAR-10-C).
/// Equivalently each colour is scaled by min(V + c, 1) / V, so hue and saturation are kept.
/// On 1-channel images V is the value itself.
inline io::Image brightness(const io::Image& im, int severity, std::uint64_t /*seed: deterministic*/,
                            const CorruptionOptions& opt = {}) {
  corruption_detail::check_args(im, severity, Corruption::brightness);
  if (severity == 0) return im;
  static constexpr std::array<double, 5> imagenet{.1, .2, .3, .4, .5};
  static constexpr std::array<double, 5> cifar{.05, .1, .15, .2, .3};
  const double c = corruption_detail::pick(imagenet, cifar, corruption_scale(im, opt.table), severity);
  io::Image out = im;
  if (im.channels == 1) {
    for (auto& v : out.pixels) v = static_cast<float>(std::min(static_cast<double>(v) + c, 1.0));
  } else {
    for (std::size_t p = 0; p < out.pixels.size(); p += 3) {
      auto hsv = data::rgb_to_hsv(out.pixels[p], out.pixels[p + 1], out.pixels[p + 2]);
      hsv[2] = std::clamp(hsv[2] + c, 0.0, 1.0);
      const auto rgb = data::hsv_to_rgb(hsv[0], hsv[1], hsv[2]);
      for (std::size_t k = 0; k < 3; ++k) out.pixels[p + k] = static_cast<float>(rgb[k]);
    }
  }
  data::clip01(out);
  return out;
}

}  // namespace ttmoe::data::corruptions
