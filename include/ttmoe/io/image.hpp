// Images as float HWC arrays in [0,1], decoded and encoded through stb (PNG, JPEG, ...).
// Resizing, cropping and the planar normalisation a ViT consumes are transforms and live in
// data/image_transforms.hpp.
//
// The type is deliberately independent of the tensor type: the corruption pipeline, the
// heat-map writer and the data loaders all work on plain pixels, and only the last step
// (data::to_chw_normalized) produces the layout a model wants.
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

namespace ttmoe::io {

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


// Converts the pixels stb decoded (8- or 16-bit, `full_scale` = the type's maximum) to an Image in
// [0,1] and frees stb's buffer; a null buffer is stb's decode failure, reported with its reason.
template <class StbPixel>
Image adopt_stb_pixels(StbPixel* p, int h, int w, int c, float full_scale, const std::string& name) {
  if (p == nullptr) throw ImageError(ImageErrorKind::Decode, name, stbi_failure_reason());
  Image im{h, w, c, std::vector<float>(static_cast<std::size_t>(h) * w * c)};
  for (std::size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<float>(p[i]) / full_scale;
  stbi_image_free(p);
  return im;
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
  if (stbi_is_16_bit_from_memory(data, len)) {
    stbi_us* p = stbi_load_16_from_memory(data, len, &w, &h, &file_channels, channels);
    return image_detail::adopt_stb_pixels(p, h, w, channels == 0 ? file_channels : channels, 65535.0f, name);
  }
  stbi_uc* p = stbi_load_from_memory(data, len, &w, &h, &file_channels, channels);
  return image_detail::adopt_stb_pixels(p, h, w, channels == 0 ? file_channels : channels, 255.0f, name);
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

}  // namespace ttmoe::io
