#pragma once
// Hugging Face pre-tokenizers: split normalised text into the words the model sees. Supported:
// Split (PCRE2 regex or literal; behaviours Isolated, Removed, MergedWithPrevious, MergedWithNext,
// Contiguous; invert), ByteLevel (GPT-2 regex optional, add_prefix_space, GPT-2 byte alphabet),
// BertPreTokenizer, Whitespace, WhitespaceSplit and Sequence.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ttmoe/text/byte_level.hpp"
#include "ttmoe/text/json_fields.hpp"
#include "ttmoe/text/regex.hpp"
#include "ttmoe/text/unicode.hpp"

namespace ttmoe::text {

/// GPT-2's pre-tokenizer pattern, which ByteLevel(use_regex=true) runs.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// The Llama-3 pre-tokenizer pattern (three-digit numbers, case-insensitive contractions).
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// What Split does with the matched delimiters.
enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

/// Splits `s` at the byte ranges `matches` (sorted, non-overlapping) with `behavior`; `invert`
/// swaps the roles of matches and the text between them. Empty pieces are dropped.
inline std::vector<std::string> split_by_matches(std::string_view s, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                                                 SplitBehavior behavior, bool invert) {
  std::vector<std::pair<std::string_view, bool>> parts;  // (text, is delimiter)
  std::size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) parts.emplace_back(s.substr(pos, b - pos), invert);
    parts.emplace_back(s.substr(b, e - b), !invert);
    pos = e;
  }
  if (pos < s.size()) parts.emplace_back(s.substr(pos), invert);
  std::vector<std::string> out;
  bool glue_next = false;  // MergedWithNext: the last piece is a delimiter waiting for its follower
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& [text, delim] = parts[i];
    switch (behavior) {
      case SplitBehavior::Isolated: out.emplace_back(text); break;
      case SplitBehavior::Removed:
        if (!delim) out.emplace_back(text);
        break;
      case SplitBehavior::MergedWithPrevious:
        if (delim && !out.empty() && !(i > 0 && parts[i - 1].second)) {
          out.back() += text;
        } else {
          out.emplace_back(text);
        }
        break;
      case SplitBehavior::MergedWithNext:
        if (glue_next && !delim) {
          out.back() += text;
        } else {
          out.emplace_back(text);
        }
        glue_next = delim;
        break;
      case SplitBehavior::Contiguous:  // neighbours of the same kind join (both kinds, after invert)
        if (i > 0 && delim == parts[i - 1].second) {
          out.back() += text;
        } else {
          out.emplace_back(text);
        }
        break;
    }
  }
  std::erase_if(out, [](const std::string& p) { return p.empty(); });
  return out;
}

/// One pre-tokenizer of a tokenizer.json, or a Sequence of them.
class PreTokenizer {
 public:
  /// Parses the "pre_tokenizer" object at `at`.
  static PreTokenizer from_json(const detail::json& j, const detail::JsonAt& at) {
    PreTokenizer p;
    p.type_ = detail::component_type(j, at);
    if (p.type_ == "Sequence") {
      const auto& list = detail::get_array(j, "pretokenizers", at);
      for (std::size_t i = 0; i < list.size(); ++i) p.steps_.push_back(from_json(list[i], at.at("pretokenizers").at(i)));
    } else if (p.type_ == "Split") {
      const auto& pat = detail::require(j, "pattern", at);
      const auto pat_at = at.at("pattern");
      detail::object(pat, pat_at);
      if (const auto* r = detail::optional_member(pat, "Regex", pat_at)) {
        if (!r->is_string()) pat_at.at("Regex").bad("expected a string");
        p.regex_.emplace(r->get<std::string>(), at.file, pat_at.member("Regex"));
      } else {
        p.literal_ = detail::get_string(pat, "String", pat_at);
        if (p.literal_.empty()) pat_at.at("String").bad("empty split pattern");
      }
      p.behavior_ = parse_behavior(detail::get_string(j, "behavior", at), at.at("behavior"));
      p.invert_ = detail::get_bool(j, "invert", false, at);
    } else if (p.type_ == "ByteLevel") {
      p.add_prefix_space_ = detail::get_bool(j, "add_prefix_space", true, at);
      if (detail::get_bool(j, "use_regex", true, at)) p.regex_.emplace(std::string(kGpt2Pattern));
    } else if (p.type_ == "Whitespace") {
      p.regex_.emplace(R"(\w+|[^\w\s]+)");
    } else if (p.type_ == "BertPreTokenizer" || p.type_ == "WhitespaceSplit") {
    } else {
      detail::unsupported(at, "pre_tokenizer", p.type_);
    }
    return p;
  }

  /// A ByteLevel pre-tokenizer (for the trainer and tests).
  static PreTokenizer byte_level(bool add_prefix_space, bool use_regex) {
    PreTokenizer p;
    p.type_ = "ByteLevel";
    p.add_prefix_space_ = add_prefix_space;
    if (use_regex) p.regex_.emplace(std::string(kGpt2Pattern));
    return p;
  }

  /// A Split(Regex, Isolated) pre-tokenizer (for the trainer and tests).
  static PreTokenizer split_isolated(std::string_view pattern) {
    PreTokenizer p;
    p.type_ = "Split";
    p.regex_.emplace(std::string(pattern));
    return p;
  }

  /// Appends the words of `piece` to `out`.
  void apply(std::string_view piece, std::vector<std::string>& out) const {
    if (type_ == "Sequence") {
      std::vector<std::string> cur{std::string(piece)}, next;
      for (const auto& step : steps_) {
        next.clear();
        for (const auto& w : cur) step.apply(w, next);
        cur.swap(next);
      }
      for (auto& w : cur) out.push_back(std::move(w));
      return;
    }
    if (type_ == "Split") {
      for (auto& w : split_by_matches(piece, matches(piece), behavior_, invert_)) out.push_back(std::move(w));
      return;
    }
    if (type_ == "ByteLevel") {
      std::string text(piece);
      if (add_prefix_space_ && !text.starts_with(' ')) text.insert(text.begin(), ' ');
      if (regex_) {
        for (const auto& w : split_by_matches(text, regex_->find_all(text), SplitBehavior::Isolated, false)) {
          out.push_back(bytes_to_byte_level(w));
        }
      } else if (!text.empty()) {
        out.push_back(bytes_to_byte_level(text));
      }
      return;
    }
    if (type_ == "Whitespace") {
      for (auto& w : split_by_matches(piece, regex_->find_all(piece), SplitBehavior::Removed, true)) out.push_back(std::move(w));
      return;
    }
    // BertPreTokenizer and WhitespaceSplit: split at white space (removed); BERT also isolates
    // every punctuation character.
    const bool bert = type_ == "BertPreTokenizer";
    std::string word;
    const auto flush = [&] {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
    };
    for (std::size_t i = 0; i < piece.size();) {
      const std::size_t start = i;
      const char32_t c = next_code_point(piece, i);
      if (is_white_space(c)) {
        flush();
      } else if (bert && is_bert_punctuation(c)) {
        flush();
        out.emplace_back(piece.substr(start, i - start));
      } else {
        word.append(piece.substr(start, i - start));
      }
    }
    flush();
  }

 private:
  static SplitBehavior parse_behavior(const std::string& b, const detail::JsonAt& at) {
    if (b == "Isolated") return SplitBehavior::Isolated;
    if (b == "Removed") return SplitBehavior::Removed;
    if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
    if (b == "Contiguous") return SplitBehavior::Contiguous;
    at.bad("unknown split behavior \"" + b + "\"");
  }

  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view s) const {
    if (regex_) return regex_->find_all(s);
    std::vector<std::pair<std::size_t, std::size_t>> m;
    for (std::size_t pos = s.find(literal_); pos != std::string_view::npos; pos = s.find(literal_, pos + literal_.size())) {
      m.emplace_back(pos, pos + literal_.size());
    }
    return m;
  }

  std::string type_;
  std::vector<PreTokenizer> steps_;
  std::optional<Regex> regex_;
  std::string literal_;
  SplitBehavior behavior_ = SplitBehavior::Isolated;
  bool invert_ = false;
  bool add_prefix_space_ = false;
};

}  // namespace ttmoe::text
