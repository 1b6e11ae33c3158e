#pragma once
// GPT-2's byte-to-unicode map: every byte becomes a printable character, so that a byte-level BPE
// works on strings without whitespace or control characters. Printable Latin-1 bytes map to
// themselves; the other 68 bytes map to U+0100.. in byte order.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// The code point GPT-2's map gives byte `b`.
constexpr char32_t byte_to_char(std::uint8_t b) noexcept {
  const auto kept = [](unsigned v) { return (v >= 0x21 && v <= 0x7E) || (v >= 0xA1 && v <= 0xAC) || (v >= 0xAE && v <= 0xFF); };
  if (kept(b)) return b;
  unsigned n = 0;  // rank of b among the bytes that are not kept
  for (unsigned v = 0; v < b; ++v) n += kept(v) ? 0 : 1;
  return 256 + n;
}

/// UTF-8 of each byte's character, computed once.
inline const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (unsigned b = 0; b < 256; ++b) append_utf8(t[b], byte_to_char(static_cast<std::uint8_t>(b)));
    return t;
  }();
  return table;
}

/// Inverse of byte_to_char over all code points below U+0144 (-1: not in the map), computed once.
inline const std::array<int, 0x144>& byte_level_inverse() {
  static const std::array<int, 0x144> table = [] {
    std::array<int, 0x144> t{};
    t.fill(-1);
    for (unsigned b = 0; b < 256; ++b) t[byte_to_char(static_cast<std::uint8_t>(b))] = static_cast<int>(b);
    return t;
  }();
  return table;
}

/// The bytes of `s` written with GPT-2's alphabet.
inline std::string bytes_to_byte_level(std::string_view s) {
  const auto& a = byte_level_alphabet();
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += a[static_cast<unsigned char>(c)];
  return out;
}

/// Maps a token written in GPT-2's alphabet back to bytes. A token with a character outside the
/// alphabet (an added token such as "<|im_start|>" with non-ASCII text) is kept as its own UTF-8
/// bytes, as Hugging Face's ByteLevel decoder does.
inline std::string byte_level_to_bytes(std::string_view token) {
  const auto& inv = byte_level_inverse();
  std::string out;
  out.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    const char32_t c = next_code_point(token, i);
    if (c >= inv.size() || inv[c] < 0) return std::string(token);
    out.push_back(static_cast<char>(inv[c]));
  }
  return out;
}

}  // namespace ttmoe::text
