#pragma once
// Unicode properties and normalisation forms for the tokenizers, through Debian's utf8proc (the
// tables stay in the library; nothing here is a hand-made copy of Unicode data beyond the stable
// White_Space list and the CJK blocks that BERT's reference code names explicitly).

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <utf8proc.h>

#include "ttmoe/text/error.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// The four Unicode normalisation forms.
enum class NormalForm { NFC, NFD, NFKC, NFKD };

/// `s` (valid UTF-8) in normalisation form `form`. Embedded NULs are kept (the length is explicit).
inline std::string normalize(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* dst = nullptr;
  const std::string clean = sanitize_utf8(s);  // utf8proc rejects invalid input as a whole
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(clean.data()),
                                          static_cast<utf8proc_ssize_t>(clean.size()), &dst,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    throw TokenizerError(TokenizerErrorKind::BadArgument, "", "",
                         std::string("utf8proc normalisation failed: ") + utf8proc_errmsg(n));
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(dst, &std::free);
  return std::string(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
}

/// The general category of `c`.
inline utf8proc_category_t category(char32_t c) noexcept {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

/// Unicode White_Space (Rust's char::is_whitespace, which Hugging Face tokenizers uses).
constexpr bool is_white_space(char32_t c) noexcept {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

/// Categories C* (Cc, Cf, Cs, Co, Cn): BERT's "control" test, with tab/newline/CR excluded.
inline bool is_bert_control(char32_t c) noexcept {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: return true;
    default: return false;
  }
}

/// BERT's punctuation: ASCII punctuation (which includes $+<=>^`|~) or a Unicode P* category.
inline bool is_bert_punctuation(char32_t c) noexcept {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
  }
}

/// The CJK Unified Ideograph blocks that BERT pads with spaces.
constexpr bool is_cjk_ideograph(char32_t c) noexcept {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/// Appends the full lower-case mapping of `c` (Rust's char::to_lowercase, no context): utf8proc's
/// simple mapping plus the one unconditional multi-character entry of SpecialCasing (U+0130).
inline void append_lowercase(std::string& out, char32_t c) {
  if (c == 0x130) {
    append_utf8(out, U'i');
    append_utf8(out, 0x307);
    return;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

/// `s` lower-cased character by character.
inline std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) append_lowercase(out, next_code_point(s, i));
  return out;
}

}  // namespace ttmoe::text
