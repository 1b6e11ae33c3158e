#pragma once
// UTF-8 decoding and encoding for the tokenizers. Input text is bytes; invalid sequences are replaced
// by U+FFFD with the "maximal subpart" rule (Unicode 15 §3.9), which is what Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do. Hugging Face
// tokenizers only ever sees a valid str, so this is the behaviour a Python user gets after decoding.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ttmoe::text {

/// The replacement character used for invalid input.
inline constexpr char32_t kReplacementChar = 0xFFFD;

/// Appends the UTF-8 encoding of `cp` (a valid scalar value) to `out`.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// Decodes one code point at `s[i]` and advances `i`. An invalid sequence yields U+FFFD and advances
/// past its maximal subpart (at least one byte), so the caller always makes progress.
inline char32_t next_code_point(std::string_view s, std::size_t& i) noexcept {
  const auto b0 = static_cast<std::uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  std::size_t len = 0;
  char32_t cp = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    ++i;
    return kReplacementChar;
  }
  std::size_t k = 1;
  for (; k < len; ++k) {
    if (i + k >= s.size()) break;
    const auto b = static_cast<std::uint8_t>(s[i + k]);
    const std::uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
    cp = (cp << 6) | (b & 0x3F);
  }
  i += k;
  return k == len ? cp : kReplacementChar;
}

/// Code points of `s` (invalid sequences become U+FFFD).
inline std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

/// UTF-8 of a sequence of code points.
inline std::string encode_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

/// Whether `s` is well-formed UTF-8 (a U+FFFD written in the text is valid; an invalid sequence is not).
inline bool is_valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    if (next_code_point(s, i) == kReplacementChar && !(i - start == 3 && s.substr(start, 3) == "\xEF\xBF\xBD")) return false;
  }
  return true;
}

/// `s` with every invalid UTF-8 sequence replaced by U+FFFD; valid input is returned unchanged.
inline std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    const char32_t c = next_code_point(s, i);
    if (c == kReplacementChar && !(i - start == 3 && s.substr(start, 3) == "\xEF\xBF\xBD")) {
      append_utf8(out, c);
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  return out;
}

/// Splits UTF-8 text into its characters, each a (valid) UTF-8 string.
inline std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    const char32_t c = next_code_point(s, i);
    if (c == kReplacementChar) {
      out.emplace_back("\xEF\xBF\xBD");
    } else {
      out.emplace_back(s.substr(start, i - start));
    }
  }
  return out;
}

}  // namespace ttmoe::text
