// Strict UTF-8 validation (RFC 3629): the safetensors header must be UTF-8, and checking it
// ourselves gives a typed InvalidUtf8 error with the byte position instead of a generic JSON error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ttmoe::io::detail {

/// Returns the offset of the first byte that does not start a well-formed UTF-8 sequence, or
/// nullopt when all of `s` is valid. Rejects overlong forms, surrogates (U+D800..U+DFFF) and
/// code points above U+10FFFF, as RFC 3629 requires.
constexpr std::optional<std::size_t> first_invalid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<std::uint8_t>(s[i]);
    if (c < 0x80u) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    std::uint32_t min_cp = 0;
    if ((c & 0xE0u) == 0xC0u) {
      len = 2, cp = c & 0x1Fu, min_cp = 0x80u;
    } else if ((c & 0xF0u) == 0xE0u) {
      len = 3, cp = c & 0x0Fu, min_cp = 0x800u;
    } else if ((c & 0xF8u) == 0xF0u) {
      len = 4, cp = c & 0x07u, min_cp = 0x10000u;
    } else {
      return i;  // continuation byte without a lead, or 0xF8..0xFF
    }
    if (n - i < len) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto b = static_cast<std::uint8_t>(s[i + k]);
      if ((b & 0xC0u) != 0x80u) return i;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    if (cp < min_cp || cp > 0x10FFFFu || (cp >= 0xD800u && cp <= 0xDFFFu)) return i;
    i += len;
  }
  return std::nullopt;
}

}  // namespace ttmoe::io::detail
