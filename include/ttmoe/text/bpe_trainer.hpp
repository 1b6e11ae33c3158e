#pragma once
// ttmoe's byte-level BPE trainer. Texts are split with a pre-tokenizer regex (Llama-3's by default),
// each word is written in GPT-2's byte alphabet, and the most frequent adjacent pair is merged until
// the vocabulary reaches its target size. The result is a tokenizer.json document in the layout
// Llama 3 ships (Split + ByteLevel pre-tokenizer, ByteLevel decoder, optional BOS template) that
// Hugging Face `tokenizers` and HfTokenizer both load.
//
// Pair counts are updated incrementally: a merge touches only the words that contain the pair (an
// index from pair to words), and the best pair comes from a lazily refreshed max-heap, so training
// costs about (number of merges × words touched) rather than a full recount per merge.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/text/byte_level.hpp"
#include "ttmoe/text/error.hpp"
#include "ttmoe/text/pre_tokenizer.hpp"
#include "ttmoe/text/regex.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// Options of the byte-level BPE trainer.
struct BpeTrainerOptions {
  std::size_t vocab_size = 4096;            ///< Target size: 256 bytes + merges + special tokens.
  std::int64_t min_frequency = 2;           ///< A pair seen fewer times is never merged.
  std::vector<std::string> special_tokens;  ///< Added after the merged tokens, in this order.
  std::optional<std::string> bos_token;     ///< If set (and among special_tokens), encode prepends it.
  std::string pattern{kLlama3Pattern};      ///< The pre-tokenizer split regex.
};

/// Counts words of a corpus, then trains (call add_text any number of times, then train()).
class BpeTrainer {
 public:
  /// Validates the options (a vocabulary below 256 + specials, or a BOS that is not a special token,
  /// throws BadArgument).
  explicit BpeTrainer(BpeTrainerOptions options) : opt_(std::move(options)), regex_(opt_.pattern) {
    if (opt_.vocab_size < 256 + opt_.special_tokens.size()) {
      throw TokenizerError(TokenizerErrorKind::BadArgument, "", "vocab_size",
                           "must be at least 256 + the number of special tokens, got " + std::to_string(opt_.vocab_size));
    }
    if (opt_.bos_token && std::find(opt_.special_tokens.begin(), opt_.special_tokens.end(), *opt_.bos_token) == opt_.special_tokens.end()) {
      throw TokenizerError(TokenizerErrorKind::BadArgument, "", "bos_token", "\"" + *opt_.bos_token + "\" is not one of the special tokens");
    }
  }

  /// Counts the words of one text (bytes; invalid UTF-8 becomes U+FFFD).
  void add_text(std::string_view text) {
    const std::string s = sanitize_utf8(text);
    for (const auto& [b, e] : regex_.find_all(s)) ++counts_[s.substr(b, e - b)];
  }

  /// Trains and returns the tokenizer.json document.
  nlohmann::json train() const {
    std::vector<std::string> tokens(256);
    std::unordered_map<std::string, std::int32_t> token_ids;
    for (unsigned b = 0; b < 256; ++b) {
      tokens[b] = byte_level_alphabet()[b];
      token_ids.emplace(tokens[b], static_cast<std::int32_t>(b));
    }
    std::vector<Word> words;
    words.reserve(counts_.size());
    // Sorted words make the result independent of hash-map order.
    std::vector<std::pair<std::string, std::int64_t>> sorted(counts_.begin(), counts_.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [w, c] : sorted) {
      Word word{{}, c};
      for (unsigned char ch : w) word.sym.push_back(ch);
      words.push_back(std::move(word));
    }
    std::unordered_map<std::uint64_t, std::int64_t> pair_count;
    std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> where;
    for (std::uint32_t wi = 0; wi < words.size(); ++wi) add_pairs(words[wi], wi, +1, pair_count, &where);
    std::priority_queue<std::pair<std::int64_t, std::uint64_t>, std::vector<std::pair<std::int64_t, std::uint64_t>>, HeapOrder> heap;
    for (const auto& [k, c] : pair_count) heap.emplace(c, k);

    std::vector<std::pair<std::int32_t, std::int32_t>> merges;
    std::vector<std::uint32_t> stamp(words.size(), UINT32_MAX);
    const std::size_t target = opt_.vocab_size - opt_.special_tokens.size();
    while (tokens.size() < target && !heap.empty()) {
      const auto [count, k] = heap.top();
      heap.pop();
      const auto it = pair_count.find(k);
      const std::int64_t now = it == pair_count.end() ? 0 : it->second;
      if (now != count) {  // stale entry: re-queue with the current count
        if (now > 0) heap.emplace(now, k);
        continue;
      }
      if (count < opt_.min_frequency) break;
      const auto a = static_cast<std::int32_t>(k >> 32), b = static_cast<std::int32_t>(k & 0xFFFFFFFFu);
      // Two merge paths can spell the same token ("ab"+"c", "a"+"bc"): it keeps its first id.
      std::string spelled = tokens[static_cast<std::size_t>(a)] + tokens[static_cast<std::size_t>(b)];
      const auto [slot, is_new] = token_ids.try_emplace(spelled, static_cast<std::int32_t>(tokens.size()));
      const std::int32_t id = slot->second;
      if (is_new) tokens.push_back(std::move(spelled));
      merges.emplace_back(a, b);
      const std::vector<std::uint32_t> affected = std::move(where[k]);
      where.erase(k);
      std::vector<std::uint64_t> fresh;
      for (const std::uint32_t wi : affected) {
        if (stamp[wi] == static_cast<std::uint32_t>(merges.size())) continue;
        stamp[wi] = static_cast<std::uint32_t>(merges.size());
        Word& w = words[wi];
        add_pairs(w, wi, -1, pair_count, nullptr);
        std::vector<std::int32_t> merged;
        merged.reserve(w.sym.size());
        for (std::size_t i = 0; i < w.sym.size(); ++i) {
          if (i + 1 < w.sym.size() && w.sym[i] == a && w.sym[i + 1] == b) {
            merged.push_back(id);
            ++i;
          } else {
            merged.push_back(w.sym[i]);
          }
        }
        w.sym = std::move(merged);
        add_pairs(w, wi, +1, pair_count, &where, id, &fresh);
      }
      pair_count.erase(k);
      std::sort(fresh.begin(), fresh.end());
      fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
      for (const std::uint64_t f : fresh) heap.emplace(pair_count[f], f);
    }
    return to_json(tokens, merges);
  }

  /// Number of distinct words counted so far.
  std::size_t distinct_words() const noexcept { return counts_.size(); }

 private:
  struct Word {
    std::vector<std::int32_t> sym;
    std::int64_t count;
  };
  // Max-heap on count; among equal counts the smaller pair key first (deterministic).
  struct HeapOrder {
    bool operator()(const std::pair<std::int64_t, std::uint64_t>& x, const std::pair<std::int64_t, std::uint64_t>& y) const {
      return x.first != y.first ? x.first < y.first : x.second > y.second;
    }
  };
  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  /// Adds (sign +1) or removes (-1) the pairs of `w`; records new pair→word links in `where` and the
  /// pairs that contain `fresh_id` in `fresh`.
  static void add_pairs(const Word& w, std::uint32_t wi, int sign, std::unordered_map<std::uint64_t, std::int64_t>& count,
                        std::unordered_map<std::uint64_t, std::vector<std::uint32_t>>* where, std::int32_t fresh_id = -1,
                        std::vector<std::uint64_t>* fresh = nullptr) {
    for (std::size_t i = 0; i + 1 < w.sym.size(); ++i) {
      const std::uint64_t k = key(w.sym[i], w.sym[i + 1]);
      auto& c = count[k];
      c += sign * w.count;
      if (sign > 0 && where != nullptr) {
        if (fresh_id < 0 || w.sym[i] == fresh_id || w.sym[i + 1] == fresh_id) (*where)[k].push_back(wi);
        if (fresh != nullptr && (w.sym[i] == fresh_id || w.sym[i + 1] == fresh_id)) fresh->push_back(k);
      }
      if (c == 0) count.erase(k);
    }
  }

  nlohmann::json to_json(const std::vector<std::string>& tokens, const std::vector<std::pair<std::int32_t, std::int32_t>>& merges) const {
    using nlohmann::json;
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    json vocab = json::object();
    for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
    json merge_list = json::array();
    for (const auto& [a, b] : merges) merge_list.push_back({tokens[static_cast<std::size_t>(a)], tokens[static_cast<std::size_t>(b)]});
    json added = json::array();
    std::optional<std::size_t> bos_id;
    for (std::size_t i = 0; i < opt_.special_tokens.size(); ++i) {
      const std::size_t id = tokens.size() + i;
      added.push_back({{"id", id}, {"content", opt_.special_tokens[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
      if (opt_.bos_token && *opt_.bos_token == opt_.special_tokens[i]) bos_id = id;
    }
    json post = byte_level;
    if (bos_id) {
      const json bos = {{"SpecialToken", {{"id", *opt_.bos_token}, {"type_id", 0}}}};
      post = {{"type", "TemplateProcessing"},
              {"single", {bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
              {"pair", {bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", *opt_.bos_token}, {"type_id", 1}}}},
                        {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
              {"special_tokens", {{*opt_.bos_token, {{"id", *opt_.bos_token}, {"ids", {*bos_id}}, {"tokens", {*opt_.bos_token}}}}}}};
    }
    return {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"Regex", opt_.pattern}}}, {"behavior", "Isolated"}, {"invert", false}}, byte_level}}}},
            {"post_processor", post},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
              {"vocab", vocab}, {"merges", merge_list}}}};
  }

  BpeTrainerOptions opt_;
  Regex regex_;
  std::unordered_map<std::string, std::int64_t> counts_;
};

/// Writes a tokenizer.json document (pretty-printed, UTF-8); failure throws Io naming the file.
inline void save_tokenizer_json(const nlohmann::json& doc, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw TokenizerError(TokenizerErrorKind::Io, path, "", "cannot create the file");
  out << doc.dump(2) << '\n';
  if (!out) throw TokenizerError(TokenizerErrorKind::Io, path, "", "write failed");
}

}  // namespace ttmoe::text
