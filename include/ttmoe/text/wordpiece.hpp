#pragma once
// Hugging Face's WordPiece model (BERT): each word is cut greedily into the longest vocabulary
// entries from the left, pieces after the first carrying the continuing-subword prefix ("##"); a
// word that cannot be cut, or is longer than max_input_chars_per_word characters, becomes unk.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ttmoe/text/json_fields.hpp"
#include "ttmoe/text/utf8.hpp"
#include "ttmoe/text/vocab.hpp"

namespace ttmoe::text {

/// A WordPiece model.
class WordPieceModel {
 public:
  /// Parses the "model" object of a tokenizer.json (type "WordPiece").
  static WordPieceModel from_json(const detail::json& j, const detail::JsonAt& at) {
    WordPieceModel m;
    m.vocab_ = Vocab::from_json(detail::require(j, "vocab", at), at.at("vocab"));
    m.unk_token_ = detail::get_string(j, "unk_token", at);
    m.prefix_ = detail::opt_string(j, "continuing_subword_prefix", at).value_or("##");
    m.max_chars_ = static_cast<std::size_t>(detail::get_uint(j, "max_input_chars_per_word", 100, at));
    const auto unk = m.vocab_.find(m.unk_token_);
    if (!unk) {
      throw TokenizerError(TokenizerErrorKind::BadVocab, at.file, at.member("unk_token"),
                           "unk_token \"" + m.unk_token_ + "\" is not in the vocabulary");
    }
    m.unk_ = *unk;
    return m;
  }

  /// The vocabulary.
  const Vocab& vocab() const noexcept { return vocab_; }
  /// The continuing-subword prefix ("##").
  const std::string& prefix() const noexcept { return prefix_; }

  /// Appends the ids of `word` to `out`.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    std::vector<std::size_t> bounds;  // byte offset of every character start, plus the end
    for (std::size_t i = 0; i < word.size();) {
      bounds.push_back(i);
      next_code_point(word, i);
    }
    if (bounds.size() > max_chars_) {
      out.push_back(unk_);
      return;
    }
    bounds.push_back(word.size());
    std::vector<std::int32_t> pieces;
    std::string probe;
    std::size_t start = 0;  // index into bounds
    while (start + 1 < bounds.size()) {
      bool found = false;
      for (std::size_t end = bounds.size() - 1; end > start; --end) {
        probe.assign(start > 0 ? prefix_ : std::string());
        probe.append(word.substr(bounds[start], bounds[end] - bounds[start]));
        if (const auto id = vocab_.find(probe)) {
          pieces.push_back(*id);
          start = end;
          found = true;
          break;
        }
      }
      if (!found) {
        out.push_back(unk_);
        return;
      }
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
  }

 private:
  Vocab vocab_;
  std::string unk_token_, prefix_;
  std::int32_t unk_ = 0;
  std::size_t max_chars_ = 100;
};

}  // namespace ttmoe::text
