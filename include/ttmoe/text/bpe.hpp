#pragma once
// Hugging Face's BPE model: a word's characters are merged pair by pair, always the pair of lowest
// merge rank first (the leftmost one among equals), until no listed merge applies. Supports
// ignore_merges, byte_fallback, unk_token with fuse_unk, continuing_subword_prefix and
// end_of_word_suffix. Results are cached per word, so a corpus with repeated words costs one
// hash lookup per word after warm-up.

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <functional>
#include <queue>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ttmoe/text/json_fields.hpp"
#include "ttmoe/text/utf8.hpp"
#include "ttmoe/text/vocab.hpp"

namespace ttmoe::text {

/// A byte-pair-encoding model.
class BpeModel {
 public:
  /// Words cached at most (the cache stops growing when full, as Hugging Face's does).
  static constexpr std::size_t kCacheCapacity = 1 << 17;
  /// Words longer than this many bytes are not cached (long runs are rare and unlikely to repeat).
  static constexpr std::size_t kMaxCachedWord = 256;

  /// Parses the "model" object of a tokenizer.json (type "BPE").
  static BpeModel from_json(const detail::json& j, const detail::JsonAt& at) {
    BpeModel m;
    m.vocab_ = Vocab::from_json(detail::require(j, "vocab", at), at.at("vocab"));
    if (const auto* d = detail::optional_member(j, "dropout", at)) {
      if (!d->is_number() || d->get<double>() != 0.0) {
        throw TokenizerError(TokenizerErrorKind::Unsupported, at.file, at.member("dropout"),
                             "BPE dropout is a training-time option; ttmoe encodes deterministically only");
      }
    }
    m.unk_ = detail::opt_string(j, "unk_token", at);
    m.prefix_ = detail::opt_string(j, "continuing_subword_prefix", at).value_or("");
    m.suffix_ = detail::opt_string(j, "end_of_word_suffix", at).value_or("");
    m.fuse_unk_ = detail::get_bool(j, "fuse_unk", false, at);
    m.byte_fallback_ = detail::get_bool(j, "byte_fallback", false, at);
    m.ignore_merges_ = detail::get_bool(j, "ignore_merges", false, at);
    if (m.unk_ && !m.vocab_.find(*m.unk_)) {
      throw TokenizerError(TokenizerErrorKind::BadVocab, at.file, at.member("unk_token"),
                           "unk_token \"" + *m.unk_ + "\" is not in the vocabulary");
    }
    const auto& merges = detail::get_array(j, "merges", at);
    const auto merges_at = at.at("merges");
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const auto& e = merges[r];
      std::string a, b;
      if (e.is_string()) {  // legacy "a b"
        const std::string s = e.get<std::string>();
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          merges_at.at(r).bad("a merge string must be two tokens separated by one space, found \"" + s + "\"");
        }
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>(), b = e[1].get<std::string>();
      } else {
        merges_at.at(r).bad("a merge must be \"a b\" or [\"a\", \"b\"], found " + e.dump());
      }
      m.add_merge(a, b, static_cast<std::int32_t>(r), merges_at.at(r));
    }
    return m;
  }

  /// A model from a vocabulary and merges in rank order (the trainer's output).
  static BpeModel from_parts(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                             bool ignore_merges) {
    BpeModel m;
    m.vocab_ = std::move(vocab);
    m.ignore_merges_ = ignore_merges;
    const std::string none;
    for (std::size_t r = 0; r < merges.size(); ++r) {
      m.add_merge(merges[r].first, merges[r].second, static_cast<std::int32_t>(r), detail::JsonAt{none, "merges"});
    }
    return m;
  }

  BpeModel() = default;
  /// Copies share nothing; the cache starts empty.
  BpeModel(const BpeModel& o)
      : vocab_(o.vocab_), merges_(o.merges_), unk_(o.unk_), prefix_(o.prefix_), suffix_(o.suffix_),
        fuse_unk_(o.fuse_unk_), byte_fallback_(o.byte_fallback_), ignore_merges_(o.ignore_merges_) {}
  /// Moves the tables (the cache is dropped).
  BpeModel(BpeModel&& o) noexcept : BpeModel() { swap_tables(o); }
  /// Assigns the tables (the cache is dropped).
  BpeModel& operator=(BpeModel o) noexcept {
    swap_tables(o);
    return *this;
  }

  /// The vocabulary.
  const Vocab& vocab() const noexcept { return vocab_; }

  /// Appends the ids of `word` (one pre-tokenized word, valid UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
      if (const auto id = vocab_.find(word)) {
        out.push_back(*id);
        return;
      }
    }
    const bool cacheable = word.size() <= kMaxCachedWord;
    if (cacheable) {
      std::shared_lock lock(cache_mutex_);
      const auto it = cache_.find(word);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<std::int32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      std::unique_lock lock(cache_mutex_);
      if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(ids));
    }
  }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t id;
  };
  static std::uint64_t key(std::int32_t a, std::int32_t b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  void swap_tables(BpeModel& o) noexcept {
    std::swap(vocab_, o.vocab_);
    std::swap(merges_, o.merges_);
    std::swap(unk_, o.unk_);
    std::swap(prefix_, o.prefix_);
    std::swap(suffix_, o.suffix_);
    std::swap(fuse_unk_, o.fuse_unk_);
    std::swap(byte_fallback_, o.byte_fallback_);
    std::swap(ignore_merges_, o.ignore_merges_);
  }

  void add_merge(const std::string& a, const std::string& b, std::int32_t rank, const detail::JsonAt& at) {
    // A merge's parts carry the subword prefix where the merged token does (Hugging Face's rule).
    const auto ia = vocab_.find(a), ib = vocab_.find(b);
    std::string merged = a + (prefix_.empty() || !b.starts_with(prefix_) ? b : b.substr(prefix_.size()));
    const auto im = vocab_.find(merged);
    if (!ia || !ib || !im) {
      throw TokenizerError(TokenizerErrorKind::BadVocab, at.file, at.path,
                           "merge \"" + a + "\" + \"" + b + "\": " + (!ia ? "\"" + a + "\"" : !ib ? "\"" + b + "\"" : "\"" + merged + "\"") +
                               " is not in the vocabulary");
    }
    merges_.try_emplace(key(*ia, *ib), Merge{rank, *im});  // the first (lowest) rank wins
  }

  std::vector<std::int32_t> merge_word(std::string_view word) const {
    // Initial symbols: one per character (with prefix/suffix), unknown ones by byte fallback or unk.
    std::vector<std::int32_t> sym;
    const auto chars = utf8_chars(word);
    bool last_unk = false;
    for (std::size_t i = 0; i < chars.size(); ++i) {
      std::string s = chars[i];
      if (i > 0 && !prefix_.empty()) s = prefix_ + s;
      if (i + 1 == chars.size() && !suffix_.empty()) s += suffix_;
      if (const auto id = vocab_.find(s)) {
        sym.push_back(*id);
        last_unk = false;
        continue;
      }
      if (byte_fallback_) {
        std::vector<std::int32_t> bytes;
        for (unsigned char c : s) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(c));
          if (const auto id = vocab_.find(name)) bytes.push_back(*id);
          else break;
        }
        if (bytes.size() == s.size()) {
          sym.insert(sym.end(), bytes.begin(), bytes.end());
          last_unk = false;
          continue;
        }
      }
      if (unk_) {
        if (!(fuse_unk_ && last_unk)) sym.push_back(*vocab_.find(*unk_));
        last_unk = true;
      }
    }
    if (sym.size() < 2) return sym;
    // Lowest rank first, leftmost among equals; stale queue entries are skipped on pop.
    const std::size_t n = sym.size();
    std::vector<std::int32_t> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (std::size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<std::int32_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
    }
    using Entry = std::tuple<std::int32_t, std::int32_t, std::int32_t>;  // rank, position, merged id
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
    const auto push = [&](std::int32_t i) {
      if (i < 0 || next[static_cast<std::size_t>(i)] < 0) return;
      const auto it = merges_.find(key(sym[static_cast<std::size_t>(i)], sym[static_cast<std::size_t>(next[static_cast<std::size_t>(i)])]));
      if (it != merges_.end()) queue.emplace(it->second.rank, i, it->second.id);
    };
    for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int32_t>(i));
    while (!queue.empty()) {
      const auto [rank, pos, id] = queue.top();
      queue.pop();
      const auto p = static_cast<std::size_t>(pos);
      if (!alive[p] || next[p] < 0) continue;
      const auto it = merges_.find(key(sym[p], sym[static_cast<std::size_t>(next[p])]));
      if (it == merges_.end() || it->second.rank != rank) continue;  // the pair changed since
      const auto q = static_cast<std::size_t>(next[p]);
      sym[p] = id;
      alive[q] = false;
      next[p] = next[q];
      if (next[q] >= 0) prev[static_cast<std::size_t>(next[q])] = pos;
      push(prev[p]);
      push(pos);
    }
    std::vector<std::int32_t> out;
    for (std::int32_t i = 0; i >= 0; i = next[static_cast<std::size_t>(i)]) out.push_back(sym[static_cast<std::size_t>(i)]);
    return out;
  }

  Vocab vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::optional<std::string> unk_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace ttmoe::text
