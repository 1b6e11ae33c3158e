#pragma once
// Added and special tokens ("added_tokens" of a tokenizer.json). They are cut out of the text before
// normalisation and pre-tokenisation, leftmost-longest, with Hugging Face's options: `special`
// (skipped by decode(skip_special_tokens)), `lstrip`/`rstrip` (swallow white space on that side),
// `single_word` (only match between non-word characters) and `normalized` (match in the normalised
// text instead of the raw text).

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ttmoe/text/json_fields.hpp"
#include "ttmoe/text/unicode.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// One added token.
struct AddedToken {
  std::int32_t id = 0;        ///< Its id.
  std::string content;        ///< The text it matches.
  bool special = false;       ///< Skipped by decode(..., skip_special_tokens = true).
  bool lstrip = false;        ///< Also consumes white space before the match.
  bool rstrip = false;        ///< Also consumes white space after the match.
  bool single_word = false;   ///< Matches only when not inside a word.
  bool normalized = false;    ///< Matched against the normalised text.
};

/// A piece of input text after added-token extraction: either plain text or one added token.
struct TextPiece {
  std::string text;                 ///< The text (for a token: what it consumed).
  std::optional<std::int32_t> id;   ///< The added token's id, or nullopt for plain text.
};

/// A set of added tokens with leftmost-longest matching.
class AddedTokenMatcher {
 public:
  /// Adds a token (its content must be non-empty).
  void add(const AddedToken& t) {
    tokens_.push_back(t);
    auto& bucket = by_first_byte_[static_cast<unsigned char>(t.content[0])];
    bucket.push_back(tokens_.size() - 1);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](std::size_t a, std::size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }

  /// Whether no token was added.
  bool empty() const noexcept { return tokens_.empty(); }

  /// Splits `s` into plain text and matched tokens (Hugging Face's find_matches).
  std::vector<TextPiece> split(std::string_view s) const {
    std::vector<TextPiece> out;
    if (tokens_.empty()) {
      out.push_back({std::string(s), std::nullopt});
      return out;
    }
    std::size_t done = 0;  // bytes already emitted
    std::size_t pos = 0;
    while (pos < s.size()) {
      const AddedToken* hit = nullptr;
      for (std::size_t k : by_first_byte_[static_cast<unsigned char>(s[pos])]) {
        const AddedToken& t = tokens_[k];
        if (s.substr(pos).starts_with(t.content)) {
          hit = &t;
          break;  // the bucket is sorted longest first
        }
      }
      if (hit == nullptr) {
        ++pos;
        continue;
      }
      std::size_t start = pos, stop = pos + hit->content.size();
      if (hit->single_word && (ends_with_word(s.substr(0, start)) || starts_with_word(s.substr(stop)))) {
        pos = stop;  // a rejected match still consumes its span (Aho-Corasick's non-overlapping iteration)
        continue;
      }
      if (hit->lstrip) start = std::max(done, trailing_space_start(s.substr(0, start)));
      if (hit->rstrip) stop += leading_space_length(s.substr(stop));
      if (done < start) out.push_back({std::string(s.substr(done, start - done)), std::nullopt});
      out.push_back({std::string(s.substr(start, stop - start)), hit->id});
      done = pos = stop;
    }
    if (done < s.size()) out.push_back({std::string(s.substr(done)), std::nullopt});
    return out;
  }

 private:
  static bool is_word_char(char32_t c) {
    if (c == '_') return true;
    const auto cat = category(c);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) || (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
  }
  static bool ends_with_word(std::string_view s) {
    const std::u32string c = decode_utf8(s);
    return !c.empty() && is_word_char(c.back());
  }
  static bool starts_with_word(std::string_view s) {
    if (s.empty()) return false;
    std::size_t i = 0;
    return is_word_char(next_code_point(s, i));
  }
  static std::size_t trailing_space_start(std::string_view s) {
    std::size_t start = 0;  // start of the white-space run that reaches the end
    for (std::size_t i = 0; i < s.size();) {
      if (!is_white_space(next_code_point(s, i))) start = i;
    }
    return start;
  }
  static std::size_t leading_space_length(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t j = i;
      if (!is_white_space(next_code_point(s, j))) break;
      i = j;
    }
    return i;
  }

  std::vector<AddedToken> tokens_;
  std::array<std::vector<std::size_t>, 256> by_first_byte_;
};

}  // namespace ttmoe::text
