#pragma once
// The pre-tokenizer's split regex, run by PCRE2 (Debian's libpcre2-8) in UTF mode with Unicode
// properties for \d, \s, \w and POSIX classes (PCRE2_UCP), so that patterns written for Hugging
// Face's Oniguruma (\p{L}, \p{N}, look-ahead, (?i:...)) mean the same. JIT-compiled where PCRE2 has it.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "ttmoe/text/error.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// A compiled pattern. Copies share the compiled code (PCRE2 code is read-only after compilation
/// and safe to use from several threads; each match allocates its own match data).
class Regex {
 public:
  /// Compiles `pattern`; a bad pattern throws BadRegex naming `file`, `field` and PCRE2's message.
  explicit Regex(std::string pattern, const std::string& file = "", const std::string& field = "")
      : pattern_(std::move(pattern)) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw TokenizerError(TokenizerErrorKind::BadRegex, file, field,
                           "PCRE2 rejects the pattern at offset " + std::to_string(off) + ": " +
                               reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is absent
    code_ = std::shared_ptr<pcre2_code>(code, &pcre2_code_free);
  }

  /// The pattern text.
  const std::string& pattern() const noexcept { return pattern_; }

  /// Byte ranges [begin, end) of the successive non-overlapping matches in `s` (valid UTF-8). An
  /// empty match is skipped and the search resumes one character later, as Rust's find_iter does.
  /// Invalid UTF-8 throws BadArgument: PCRE2 runs without its own check (which would rescan the
  /// subject at every match), so the subject is validated once here. The tokenizers sanitise first.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view s) const {
    if (!is_valid_utf8(s)) {
      throw TokenizerError(TokenizerErrorKind::BadArgument, "", "", "regex subject is not valid UTF-8 (sanitize_utf8 it first)");
    }
    std::vector<std::pair<std::size_t, std::size_t>> out;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
    std::size_t pos = 0;
    while (pos <= s.size()) {
      const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                                 PCRE2_NO_UTF_CHECK, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw TokenizerError(TokenizerErrorKind::BadRegex, "", "",
                             "PCRE2 match failed for /" + pattern_ + "/: " + reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      const std::size_t b = ov[0], e = ov[1];
      if (e > b) {
        out.emplace_back(b, e);
        pos = e;
      } else {  // empty match: step over one UTF-8 character
        pos = b + 1;
        while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
    return out;
  }

 private:
  std::string pattern_;
  std::shared_ptr<pcre2_code> code_;
};

}  // namespace ttmoe::text
