// Images as float HWC arrays in [0,1]: decoding and encoding through stb, PIL-compatible
// resizing, cropping and the planar normalisation a ViT consumes.
//
// The type is deliberately independent of the tensor type: the corruption pipeline, the
// heat-map writer and the data loaders all work on plain pixels, and only the last step
// (to_chw_normalized) produces the layout a model wants.
//
// Linking stb. The functions here call stb_image / stb_image_write, whose implementation
// must exist exactly once in a program. Two ways:
//   * Debian/Ubuntu ship it compiled (package libstb-dev: libstb.so, pkg-config `stb`):
//     link `stb`, e.g. `target_link_libraries(app PRIVATE ttmoe::ttmoe stb)`. The tests do this.
//   * Elsewhere, `#define TTMOE_STB_IMPLEMENTATION` before including this header in exactly
//     one .cpp file; that file then compiles stb's implementation (headers still found as
//     <stb/stb_image.h>, so add the folder that holds `stb/` to the include path).
// Code that includes this header but calls none of the stb-backed functions needs neither.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(TTMOE_STB_IMPLEMENTATION)
// stb's implementation is C written for many compilers; its warnings are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wtype-limits"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop
#else
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#endif

namespace ttmoe {

// ---------------------------------------------------------------------------------------------
// The image type
// ---------------------------------------------------------------------------------------------

/// An image as interleaved (HWC, row-major) floats, nominally in [0,1].
/// Plain data so it can be built with aggregate initialisation, copied and compared; channel
/// count is free (1 = gray, 3 = RGB, ...) because masks and heat maps use the same type.
struct Image {
  int height = 0;
  int width = 0;
  int channels = 0;
  std::vector<float> pixels;  ///< height * width * channels values, index (y*width + x)*channels + c.

  /// Element access without bounds checks (the hot loops rely on it being a plain index).
  float& at(int y, int x, int c) noexcept {
    return pixels[(static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) *
                      static_cast<std::size_t>(channels) +
                  static_cast<std::size_t>(c)];
  }
  /// Read-only element access.
  float at(int y, int x, int c) const noexcept {
    return pixels[(static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) *
                      static_cast<std::size_t>(channels) +
                  static_cast<std::size_t>(c)];
  }
  /// Number of float values the dimensions call for.
  std::size_t size() const noexcept {
    return static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  }
  /// Exact equality of shape and every value (tests and caches compare images this way).
  bool operator==(const Image&) const = default;
};

/// An image of the given shape filled with one value (the usual way to start a synthetic image).
inline Image make_image(int height, int width, int channels, float fill = 0.0f) {
  if (height <= 0 || width <= 0 || channels <= 0)
    throw std::invalid_argument("make_image: dimensions must be positive, got " + std::to_string(height) + "x" +
                                std::to_string(width) + "x" + std::to_string(channels));
  Image im{height, width, channels, {}};
  im.pixels.assign(im.size(), fill);
  return im;
}

/// Throws std::invalid_argument unless the dimensions are positive and match the pixel count;
/// every function taking an Image calls it first so a malformed image fails loudly, not with UB.
inline void check_image(const Image& im, std::string_view where) {
  if (im.height <= 0 || im.width <= 0 || im.channels <= 0 || im.pixels.size() != im.size())
    throw std::invalid_argument(std::string(where) + ": malformed image " + std::to_string(im.height) + "x" +
                                std::to_string(im.width) + "x" + std::to_string(im.channels) + " with " +
                                std::to_string(im.pixels.size()) + " values");
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why an image could not be read or written; lets callers (and tests) branch on the cause.
enum class ImageErrorKind {
  Io,      ///< The file could not be opened, read or written.
  Decode,  ///< The bytes are not an image stb can decode (corrupt, truncated, unsupported).
  Encode,  ///< stb refused to encode (e.g. unsupported channel count).
};

/// Failure to read, decode, encode or write an image. The message names the file (or
/// "<memory>") so a failure inside a loop over a data set says which image is broken.
class ImageError : public std::runtime_error {
 public:
  ImageError(ImageErrorKind kind, std::string source, const std::string& detail)
      : std::runtime_error(std::string(kind_name(kind)) + " error for '" + source + "': " + detail),
        kind_(kind),
        source_(std::move(source)) {}
  /// The cause.
  ImageErrorKind kind() const noexcept { return kind_; }
  /// The file path, or "<memory>" for in-memory buffers.
  const std::string& source() const noexcept { return source_; }

 private:
  static constexpr const char* kind_name(ImageErrorKind k) noexcept {
    switch (k) {
      case ImageErrorKind::Io: return "image I/O";
      case ImageErrorKind::Decode: return "image decode";
      case ImageErrorKind::Encode: return "image encode";
    }
    return "image";
  }
  ImageErrorKind kind_;
  std::string source_;
};

// ---------------------------------------------------------------------------------------------
// Decoding and encoding (stb)
// ---------------------------------------------------------------------------------------------

namespace image_detail {

// Round-to-nearest quantisation used by every 8-bit writer; NaN maps to 0 so a broken
// heat map still encodes instead of invoking undefined float->int conversion.
inline std::uint8_t to_u8(float v) noexcept {
  const float c = v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f;
  return static_cast<std::uint8_t>(std::lround(c * 255.0f));
}

inline std::vector<std::uint8_t> to_u8_buffer(const Image& im) {
  std::vector<std::uint8_t> out(im.pixels.size());
  std::transform(im.pixels.begin(), im.pixels.end(), out.begin(), to_u8);
  return out;
}

// stb's write-to-callback interface: append every chunk to a byte vector.
inline void append_bytes(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<std::uint8_t>*>(context);
  const auto* p = static_cast<const std::uint8_t*>(data);
  out->insert(out->end(), p, p + size);
}

inline std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw ImageError(ImageErrorKind::Io, path.string(), "file does not exist");
  if (std::filesystem::is_directory(path, ec))
    throw ImageError(ImageErrorKind::Io, path.string(), "is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ImageError(ImageErrorKind::Io, path.string(), "cannot open for reading");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ImageError(ImageErrorKind::Io, path.string(), "read failed");
  return bytes;
}

inline void write_file_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw ImageError(ImageErrorKind::Io, path.string(), "cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw ImageError(ImageErrorKind::Io, path.string(), "write failed");
}

}  // namespace image_detail

/// Decodes a JPEG/PNG/BMP/TGA/... held in memory. `channels` = 0 keeps the file's channel
/// count; 1..4 converts (3 is the default because models expect RGB, like PIL's convert('RGB')).
/// 16-bit PNGs keep their full precision. `source` only names the buffer in error messages.
inline Image decode_image(std::span<const std::uint8_t> bytes, int channels = 3,
                          std::string_view source = "<memory>") {
  const std::string name(source);
  if (channels < 0 || channels > 4)
    throw std::invalid_argument("decode_image: channels must be 0..4, got " + std::to_string(channels));
  if (bytes.empty()) throw ImageError(ImageErrorKind::Decode, name, "empty input");
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX))
    throw ImageError(ImageErrorKind::Decode, name, "input larger than 2 GiB");
  const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, file_channels = 0;
  Image im;
  if (stbi_is_16_bit_from_memory(data, len)) {
    stbi_us* p = stbi_load_16_from_memory(data, len, &w, &h, &file_channels, channels);
    if (p == nullptr) throw ImageError(ImageErrorKind::Decode, name, stbi_failure_reason());
    const int c = channels == 0 ? file_channels : channels;
    im = Image{h, w, c, std::vector<float>(static_cast<std::size_t>(h) * w * c)};
    for (std::size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<float>(p[i]) / 65535.0f;
    stbi_image_free(p);
  } else {
    stbi_uc* p = stbi_load_from_memory(data, len, &w, &h, &file_channels, channels);
    if (p == nullptr) throw ImageError(ImageErrorKind::Decode, name, stbi_failure_reason());
    const int c = channels == 0 ? file_channels : channels;
    im = Image{h, w, c, std::vector<float>(static_cast<std::size_t>(h) * w * c)};
    for (std::size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<float>(p[i]) / 255.0f;
    stbi_image_free(p);
  }
  return im;
}

/// Reads and decodes an image file; errors name the file (missing, unreadable, corrupt).
inline Image load_image(const std::filesystem::path& path, int channels = 3) {
  const auto bytes = image_detail::read_file_bytes(path);
  return decode_image(bytes, channels, path.string());
}

/// Encodes as 8-bit PNG (lossless at 8 bits: values are rounded to the nearest k/255).
/// Supports 1-4 channels.
inline std::vector<std::uint8_t> encode_png(const Image& im) {
  check_image(im, "encode_png");
  if (im.channels > 4) throw ImageError(ImageErrorKind::Encode, "<memory>", "PNG needs 1..4 channels");
  const auto u8 = image_detail::to_u8_buffer(im);
  std::vector<std::uint8_t> out;
  if (stbi_write_png_to_func(image_detail::append_bytes, &out, im.width, im.height, im.channels, u8.data(),
                             im.width * im.channels) == 0)
    throw ImageError(ImageErrorKind::Encode, "<memory>", "stbi_write_png_to_func failed");
  return out;
}

/// Encodes as baseline JPEG at `quality` 1..100 (stb's encoder: IJG quantisation tables,
/// 4:2:0 chroma subsampling at quality <= 90). Alpha, if present, is dropped by the format.
inline std::vector<std::uint8_t> encode_jpeg(const Image& im, int quality = 95) {
  check_image(im, "encode_jpeg");
  if (quality < 1 || quality > 100)
    throw std::invalid_argument("encode_jpeg: quality must be 1..100, got " + std::to_string(quality));
  if (im.channels > 4) throw ImageError(ImageErrorKind::Encode, "<memory>", "JPEG needs 1..4 channels");
  const auto u8 = image_detail::to_u8_buffer(im);
  std::vector<std::uint8_t> out;
  if (stbi_write_jpg_to_func(image_detail::append_bytes, &out, im.width, im.height, im.channels, u8.data(),
                             quality) == 0)
    throw ImageError(ImageErrorKind::Encode, "<memory>", "stbi_write_jpg_to_func failed");
  return out;
}

/// Writes a PNG file (heat maps, plots, corrupted samples).
inline void save_png(const Image& im, const std::filesystem::path& path) {
  image_detail::write_file_bytes(path, encode_png(im));
}

/// Writes a JPEG file at the given quality.
inline void save_jpeg(const Image& im, const std::filesystem::path& path, int quality = 95) {
  image_detail::write_file_bytes(path, encode_jpeg(im, quality));
}

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

namespace image_detail {

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

}  // namespace image_detail

/// Resizes to out_height x out_width with a PIL-style separable filter (horizontal pass, then
/// vertical, like PIL). Downscaling is antialiased: the kernel widens with the scale factor.
inline Image resize(const Image& im, int out_height, int out_width, ResizeFilter filter = ResizeFilter::bilinear) {
  check_image(im, "resize");
  if (out_height <= 0 || out_width <= 0)
    throw std::invalid_argument("resize: target size must be positive, got " + std::to_string(out_height) + "x" +
                                std::to_string(out_width));
  const int C = im.channels;
  // Horizontal pass: H x out_w.
  Image tmp;
  if (out_width == im.width) {
    tmp = im;
  } else {
    const auto taps = image_detail::resample_taps(im.width, out_width, filter);
    tmp = make_image(im.height, out_width, C);
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
  const auto taps = image_detail::resample_taps(im.height, out_height, filter);
  Image out = make_image(out_height, out_width, C);
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
inline Image resize_shorter_side(const Image& im, int size, ResizeFilter filter = ResizeFilter::bilinear) {
  check_image(im, "resize_shorter_side");
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
inline Image crop(const Image& im, int top, int left, int height, int width) {
  check_image(im, "crop");
  if (height <= 0 || width <= 0 || top < 0 || left < 0 || top + height > im.height || left + width > im.width)
    throw std::invalid_argument("crop: window " + std::to_string(height) + "x" + std::to_string(width) + " at (" +
                                std::to_string(top) + "," + std::to_string(left) + ") outside " +
                                std::to_string(im.height) + "x" + std::to_string(im.width) + " image");
  Image out = make_image(height, width, im.channels);
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
inline Image center_crop(const Image& im, int height, int width) {
  check_image(im, "center_crop");
  if (height > im.height || width > im.width)
    throw std::invalid_argument("center_crop: crop " + std::to_string(height) + "x" + std::to_string(width) +
                                " larger than image " + std::to_string(im.height) + "x" + std::to_string(im.width));
  const int top = static_cast<int>(std::nearbyint((im.height - height) / 2.0));
  const int left = static_cast<int>(std::nearbyint((im.width - width) / 2.0));
  return crop(im, top, left, height, width);
}

/// The standard evaluation preprocessing (Resize(resize_to) then CenterCrop(crop)), which is
/// also how ImageNet-C's clean 224x224 images were made before corruption.
inline Image resize_and_center_crop(const Image& im, int resize_to = 256, int crop_size = 224,
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
inline void to_chw_normalized(const Image& im, const std::array<float, 3>& mean, const std::array<float, 3>& stddev,
                              std::span<float> out) {
  check_image(im, "to_chw_normalized");
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
inline std::vector<float> to_chw_normalized(const Image& im, const std::array<float, 3>& mean = imagenet_mean,
                                            const std::array<float, 3>& stddev = imagenet_std) {
  check_image(im, "to_chw_normalized");
  std::vector<float> out(static_cast<std::size_t>(im.height) * im.width * 3);
  to_chw_normalized(im, mean, stddev, out);
  return out;
}

}  // namespace ttmoe
