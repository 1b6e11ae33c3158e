#pragma once
// Renders single characters of a font file (TrueType, OpenType/CFF, Type 1: whatever FreeType reads)
// into gray images, ink light on dark. Needs FreeType (Debian libfreetype-dev; link Freetype::Freetype).

#include <ft2build.h>
#include FT_FREETYPE_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

/// A font that cannot be opened or lacks a character; the message names the file.
class FontError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One opened font face (owns its FreeType library instance, so faces on different threads are safe).
class FontFace {
 public:
  /// Opens face 0 of `path`.
  explicit FontFace(const std::filesystem::path& path) : path_(path) {
    FT_Library lib = nullptr;
    if (FT_Init_FreeType(&lib) != 0) throw FontError("FreeType: cannot initialise the library");
    lib_.reset(lib);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) throw FontError("font file " + path.string() + " does not exist");
    FT_Face face = nullptr;
    if (const FT_Error err = FT_New_Face(lib_.get(), path.c_str(), 0, &face); err != 0)
      throw FontError("FreeType cannot open font " + path.string() + " (FreeType error " + std::to_string(err) + ")");
    face_.reset(face);
  }

  /// The font file.
  const std::filesystem::path& path() const { return path_; }

  /// Whether the font maps `codepoint` to a glyph (not to .notdef).
  bool has_char(char32_t codepoint) const { return FT_Get_Char_Index(face_.get(), FT_ULong(codepoint)) != 0; }

  /// The antialiased glyph of `codepoint` at `pixel_size` px em height, as a 1-channel image whose
  /// pixels are the coverage in [0, 1] (1 = ink), with a 2-pixel dark margin. Throws FontError naming the
  /// font when the character is missing or the glyph renders empty.
  io::Image render(char32_t codepoint, int pixel_size = 96) const {
    if (!has_char(codepoint))
      throw FontError("font " + path_.string() + " has no glyph for U+" + hex(std::uint32_t(codepoint)));
    if (FT_Set_Pixel_Sizes(face_.get(), 0, FT_UInt(pixel_size)) != 0)
      throw FontError("font " + path_.string() + ": cannot set pixel size " + std::to_string(pixel_size));
    if (FT_Load_Char(face_.get(), FT_ULong(codepoint), FT_LOAD_RENDER) != 0)
      throw FontError("font " + path_.string() + ": cannot render U+" + hex(std::uint32_t(codepoint)));
    const FT_Bitmap& bm = face_->glyph->bitmap;
    if (bm.rows == 0 || bm.width == 0 || bm.pixel_mode != FT_PIXEL_MODE_GRAY)
      throw FontError("font " + path_.string() + ": U+" + hex(std::uint32_t(codepoint)) +
                      " rendered empty or not as an 8-bit gray bitmap");
    constexpr int margin = 2;
    io::Image im = io::make_image(int(bm.rows) + 2 * margin, int(bm.width) + 2 * margin, 1, 0.0f);
    const float scale = bm.num_grays > 1 ? 1.0f / float(bm.num_grays - 1) : 1.0f;
    for (unsigned y = 0; y < bm.rows; ++y) {
      const unsigned char* row = bm.buffer + std::ptrdiff_t(y) * bm.pitch;
      for (unsigned x = 0; x < bm.width; ++x) im.at(int(y) + margin, int(x) + margin, 0) = float(row[x]) * scale;
    }
    return im;
  }

 private:
  static std::string hex(std::uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%04X", v);
    return b;
  }
  struct LibDone {
    void operator()(FT_Library l) const { FT_Done_FreeType(l); }
  };
  struct FaceDone {
    void operator()(FT_Face f) const { FT_Done_Face(f); }
  };
  std::filesystem::path path_;
  std::unique_ptr<FT_LibraryRec_, LibDone> lib_;  // declared first: destroyed after the face
  std::unique_ptr<FT_FaceRec_, FaceDone> face_;
};

}  // namespace ttmoe::data
