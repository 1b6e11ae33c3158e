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

/// A non-owning reference to a callable taking one word (a function_ref: no allocation, one indirect
/// call), so that nested pre-tokenizers compose without template recursion.
class WordSink {
 public:
  /// Refers to `f`, which must outlive the sink.
  template <class F>
  WordSink(F& f) noexcept  // NOLINT(google-explicit-constructor): passed like a callable
      : obj_(static_cast<void*>(&f)), call_([](void* o, std::string_view w) { (*static_cast<F*>(o))(w); }) {}
  /// Passes one word on.
  void operator()(std::string_view w) const { call_(obj_, w); }

 private:
  void* obj_;
  void (*call_)(void*, std::string_view);
};

/// A byte range [first, second) of a string.
using ByteRange = std::pair<std::size_t, std::size_t>;

/// Splits a string of `size` bytes at the ranges `matches` (sorted, non-overlapping) with
/// `behavior`; `invert` swaps the roles of matches and the text between them. Every resulting piece
/// is a contiguous range of the input (merging only joins neighbours), so pieces are returned as
/// ranges and nothing is copied. Empty pieces are dropped.
inline std::vector<ByteRange> split_ranges(std::size_t size, const std::vector<ByteRange>& matches, SplitBehavior behavior,
                                           bool invert) {
  std::vector<std::pair<ByteRange, bool>> parts;  // (range, is delimiter)
  parts.reserve(2 * matches.size() + 1);
  std::size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) parts.push_back({{pos, b}, invert});
    parts.push_back({{b, e}, !invert});
    pos = e;
  }
  if (pos < size) parts.push_back({{pos, size}, invert});
  std::vector<ByteRange> out;
  out.reserve(parts.size());
  bool glue_next = false;  // MergedWithNext: the last piece is a delimiter waiting for its follower
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& [range, delim] = parts[i];
    const bool prev_delim = i > 0 && parts[i - 1].second;
    bool join = false;
    switch (behavior) {
      case SplitBehavior::Isolated: break;
      case SplitBehavior::Removed:
        if (delim) continue;
        break;
      case SplitBehavior::MergedWithPrevious: join = delim && !prev_delim; break;
      case SplitBehavior::MergedWithNext:
        join = glue_next && !delim;
        glue_next = delim;
        break;
      case SplitBehavior::Contiguous: join = i > 0 && delim == prev_delim; break;  // neighbours of one kind join
    }
    if (join && !out.empty() && out.back().second == range.first) out.back().second = range.second;
    else out.push_back(range);
  }
  std::erase_if(out, [](const ByteRange& r) { return r.first == r.second; });
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

  /// Calls `emit` with each word of `piece`. A word is only valid during the call (ByteLevel words
  /// live in a reused buffer); nothing is copied for Split and Whitespace words.
  void for_each_word(std::string_view piece, WordSink emit) const {
    if (type_ == "Sequence") {
      sequence_from(0, piece, emit);
      return;
    }
    if (type_ == "Split" || type_ == "Whitespace") {
      const bool whitespace = type_ == "Whitespace";
      for (const auto& [b, e] : split_ranges(piece.size(), matches(piece), whitespace ? SplitBehavior::Removed : behavior_,
                                             whitespace ? true : invert_)) {
        emit(piece.substr(b, e - b));
      }
      return;
    }
    if (type_ == "ByteLevel") {
      std::string prefixed;
      if (add_prefix_space_ && !piece.starts_with(' ')) {
        prefixed.reserve(piece.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(piece);
        piece = prefixed;
      }
      const auto& alphabet = byte_level_alphabet();
      std::string mapped;
      const auto map_emit = [&](std::string_view w) {
        mapped.clear();
        for (char c : w) mapped += alphabet[static_cast<unsigned char>(c)];
        emit(std::string_view(mapped));
      };
      if (regex_) {
        for (const auto& [b, e] : split_ranges(piece.size(), regex_->find_all(piece), SplitBehavior::Isolated, false)) {
          map_emit(piece.substr(b, e - b));
        }
      } else if (!piece.empty()) {
        map_emit(piece);
      }
      return;
    }
    // BertPreTokenizer and WhitespaceSplit: split at white space (removed); BERT also isolates
    // every punctuation character.
    const bool bert = type_ == "BertPreTokenizer";
    std::size_t word_start = 0, word_end = 0;
    const auto flush = [&] {
      if (word_end > word_start) emit(piece.substr(word_start, word_end - word_start));
    };
    for (std::size_t i = 0; i < piece.size();) {
      const std::size_t start = i;
      const char32_t c = next_code_point(piece, i);
      if (is_white_space(c)) {
        flush();
        word_start = word_end = i;
      } else if (bert && is_bert_punctuation(c)) {
        flush();
        emit(piece.substr(start, i - start));
        word_start = word_end = i;
      } else {
        word_end = i;
      }
    }
    flush();
  }

  /// Appends the words of `piece` to `out` (copies; for tests and tools).
  void apply(std::string_view piece, std::vector<std::string>& out) const {
    auto push = [&](std::string_view w) { out.emplace_back(w); };
    for_each_word(piece, push);
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

  void sequence_from(std::size_t step, std::string_view piece, WordSink emit) const {
    if (step == steps_.size()) {
      emit(piece);
      return;
    }
    // Words of a later step may live in this step's buffer: they are consumed before it changes.
    auto next = [&](std::string_view w) { sequence_from(step + 1, w, emit); };
    steps_[step].for_each_word(piece, next);
  }

  std::vector<ByteRange> matches(std::string_view s) const {
    if (regex_) return regex_->find_all(s);
    std::vector<ByteRange> m;
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
