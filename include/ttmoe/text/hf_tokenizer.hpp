#pragma once
// A Hugging Face tokenizer.json pipeline: added tokens → normalizer → pre-tokenizer → model (BPE or
// WordPiece) → truncation → post-processor → padding, and decoding through the decoder. It gives the
// ids that the Rust `tokenizers` library gives for the same file and text.
//
// Invalid UTF-8: `tokenizers` only accepts valid strings (Python str / Rust &str). ttmoe takes bytes
// and replaces each invalid sequence by U+FFFD with the maximal-subpart rule, i.e. it encodes what
// Python's bytes.decode("utf-8", errors="replace") hands to `tokenizers`.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ttmoe/text/added_tokens.hpp"
#include "ttmoe/text/bpe.hpp"
#include "ttmoe/text/decoder.hpp"
#include "ttmoe/text/normalizer.hpp"
#include "ttmoe/text/post_processor.hpp"
#include "ttmoe/text/pre_tokenizer.hpp"
#include "ttmoe/text/tokenizer.hpp"
#include "ttmoe/text/wordpiece.hpp"

namespace ttmoe::text {

/// Reads a whole file; failure throws Io naming it.
inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(TokenizerErrorKind::Io, path, "", "cannot open the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw TokenizerError(TokenizerErrorKind::Io, path, "", "read failed");
  return ss.str();
}

/// A tokenizer.json tokenizer (model type "BPE" or "WordPiece").
class HfTokenizer final : public Tokenizer {
 public:
  /// Loads `path` (a tokenizer.json file).
  static HfTokenizer from_file(const std::string& path) { return from_string(read_text_file(path), path); }

  /// Parses tokenizer.json text; `name` is used in error messages.
  static HfTokenizer from_string(std::string_view json_text, const std::string& name) {
    detail::json j;
    try {
      j = detail::json::parse(json_text);
    } catch (const detail::json::parse_error& e) {
      throw TokenizerError(TokenizerErrorKind::InvalidJson, name, "", std::string("not valid JSON: ") + e.what());
    }
    return from_json(j, name);
  }

  /// Builds the pipeline from parsed JSON.
  static HfTokenizer from_json(const detail::json& j, const std::string& name) {
    HfTokenizer t;
    const detail::JsonAt root{name, ""};
    detail::object(j, root);
    const auto& model = detail::require(j, "model", root);
    const auto model_at = root.at("model");
    detail::object(model, model_at);
    // Files written by older versions may leave "type" out of a BPE model.
    const std::string type = model.contains("type") ? detail::component_type(model, model_at) : "BPE";
    if (type == "BPE") t.model_ = BpeModel::from_json(model, model_at);
    else if (type == "WordPiece") t.model_ = WordPieceModel::from_json(model, model_at);
    else detail::unsupported(model_at, "model", type);

    if (const auto* n = detail::optional_member(j, "normalizer", root)) t.normalizer_ = Normalizer::from_json(*n, root.at("normalizer"));
    if (const auto* p = detail::optional_member(j, "pre_tokenizer", root)) t.pre_tokenizer_ = PreTokenizer::from_json(*p, root.at("pre_tokenizer"));
    if (const auto* p = detail::optional_member(j, "post_processor", root)) t.post_ = PostProcessor::from_json(*p, root.at("post_processor"));
    if (const auto* d = detail::optional_member(j, "decoder", root)) t.decoder_ = Decoder::from_json(*d, root.at("decoder"));

    if (const auto* added = detail::optional_member(j, "added_tokens", root)) {
      const auto at = root.at("added_tokens");
      if (!added->is_array()) at.bad("expected an array");
      for (std::size_t i = 0; i < added->size(); ++i) {
        const auto& e = (*added)[i];
        const auto e_at = at.at(i);
        AddedToken a;
        a.id = detail::get_id(detail::require(e, "id", e_at), e_at.at("id"));
        a.content = detail::get_string(e, "content", e_at);
        if (a.content.empty()) e_at.at("content").bad("an added token cannot be empty");
        a.special = detail::get_bool(e, "special", false, e_at);
        a.lstrip = detail::get_bool(e, "lstrip", false, e_at);
        a.rstrip = detail::get_bool(e, "rstrip", false, e_at);
        a.single_word = detail::get_bool(e, "single_word", false, e_at);
        a.normalized = detail::get_bool(e, "normalized", !a.special, e_at);
        t.add_token(a);
      }
    }
    if (const auto* tr = detail::optional_member(j, "truncation", root)) {
      const auto at = root.at("truncation");
      t.max_length_ = static_cast<std::size_t>(detail::get_uint(*tr, "max_length", 512, at));
      t.truncate_left_ = detail::opt_string(*tr, "direction", at).value_or("Right") == "Left";
    }
    if (const auto* pd = detail::optional_member(j, "padding", root)) {
      const auto at = root.at("padding");
      t.pad_ = true;
      const auto& strategy = detail::require(*pd, "strategy", at);
      if (strategy.is_object() && strategy.contains("Fixed")) {
        t.pad_fixed_ = static_cast<std::size_t>(detail::get_uint(strategy, "Fixed", 0, at.at("strategy")));
      } else if (!(strategy.is_string() && strategy.get<std::string>() == "BatchLongest")) {
        at.at("strategy").bad("expected \"BatchLongest\" or {\"Fixed\": n}");
      }
      t.pad_left_ = detail::opt_string(*pd, "direction", at).value_or("Right") == "Left";
      t.pad_multiple_ = static_cast<std::size_t>(detail::get_uint(*pd, "pad_to_multiple_of", 0, at));
      t.pad_id_ = detail::get_id(detail::require(*pd, "pad_id", at), at.at("pad_id"));
    }
    if (t.post_ && !t.post_->prefix().empty()) t.bos_ = t.post_->prefix().front();
    if (t.post_ && !t.post_->suffix().empty()) t.eos_ = t.post_->suffix().back();
    return t;
  }

  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const override {
    std::vector<std::int32_t> ids;
    for (auto& raw : raw_tokens_.split(sanitize_utf8(text))) {
      if (raw.id) {
        ids.push_back(*raw.id);
        continue;
      }
      const std::string norm = normalizer_ ? (*normalizer_)(std::move(raw.text)) : std::move(raw.text);
      for (auto& piece : normalized_tokens_.split(norm)) {
        if (piece.id) {
          ids.push_back(*piece.id);
          continue;
        }
        std::visit(
            [&](const auto& m) {
              auto to_ids = [&](std::string_view w) { m.tokenize(w, ids); };
              if (pre_tokenizer_) pre_tokenizer_->for_each_word(piece.text, to_ids);
              else to_ids(piece.text);
            },
            model_);
      }
    }
    if (max_length_) {
      const std::size_t room = *max_length_ - std::min(*max_length_, add_special_tokens && post_ ? post_->added() : std::size_t{0});
      if (ids.size() > room) {
        if (truncate_left_) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(room));
        else ids.resize(room);
      }
    }
    if (add_special_tokens && post_) ids = post_->apply(ids);
    if (pad_) {
      std::size_t target = pad_fixed_ ? std::max(*pad_fixed_, ids.size()) : ids.size();
      if (pad_multiple_ > 0 && target % pad_multiple_ != 0) target += pad_multiple_ - target % pad_multiple_;
      const std::size_t extra = target - ids.size();
      ids.insert(pad_left_ ? ids.begin() : ids.end(), extra, pad_id_);
    }
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const std::int32_t id : ids) {
      if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) {
        if (skip_special_tokens && added_[it->second].special) continue;
        tokens.push_back(added_[it->second].content);
      } else {
        tokens.push_back(id_to_token(id));
      }
    }
    if (decoder_) tokens = decoder_->chain(std::move(tokens));
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && !decoder_) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }

  std::size_t vocab_size() const override {
    std::size_t n = std::visit([](const auto& m) { return m.vocab().id_bound(); }, model_);
    for (const auto& a : added_) n = std::max(n, static_cast<std::size_t>(a.id) + 1);
    return n;
  }

  std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    for (const auto& a : added_) {
      if (a.content == token) return a.id;
    }
    return std::visit([&](const auto& m) { return m.vocab().find(token); }, model_);
  }

  std::string id_to_token(std::int32_t id) const override {
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].content;
    const auto tok = std::visit([&](const auto& m) { return m.vocab().token(id); }, model_);
    if (!tok) {
      throw TokenizerError(TokenizerErrorKind::BadArgument, "", "", "token id " + std::to_string(id) + " is not in the vocabulary");
    }
    return std::string(*tok);
  }

  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }

  std::vector<std::int32_t> special_ids() const override {
    std::vector<std::int32_t> out;
    for (const auto& a : added_) {
      if (a.special) out.push_back(a.id);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  /// Overrides the BOS id (tokenizer_config.json names it; tokenizer.json only implies it).
  void set_bos_id(std::optional<std::int32_t> id) { bos_ = id; }
  /// Overrides the EOS id.
  void set_eos_id(std::optional<std::int32_t> id) { eos_ = id; }
  /// Sets (or with nullopt clears) truncation to `max_length` ids, special tokens included.
  void set_truncation(std::optional<std::size_t> max_length, bool left = false) {
    max_length_ = max_length;
    truncate_left_ = left;
  }
  /// Turns the padding tokenizer.json asks for on or off (a batching caller pads itself and wants
  /// each text's own ids; sentence-transformers' tokenizer.json files often pad to a fixed 128).
  void set_padding(bool on) { pad_ = on; }
  /// The added tokens, in file order.
  const std::vector<AddedToken>& added_tokens() const noexcept { return added_; }

 private:
  void add_token(const AddedToken& a) {
    added_by_id_[a.id] = added_.size();
    added_.push_back(a);
    if (a.normalized) {
      AddedToken n = a;
      if (normalizer_) n.content = (*normalizer_)(n.content);
      if (!n.content.empty()) normalized_tokens_.add(n);
    } else {
      raw_tokens_.add(a);
    }
  }

  std::variant<BpeModel, WordPieceModel> model_;
  std::optional<Normalizer> normalizer_;
  std::optional<PreTokenizer> pre_tokenizer_;
  std::optional<PostProcessor> post_;
  std::optional<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::int32_t, std::size_t> added_by_id_;
  AddedTokenMatcher raw_tokens_, normalized_tokens_;
  std::optional<std::int32_t> bos_, eos_;
  std::optional<std::size_t> max_length_;
  bool truncate_left_ = false;
  bool pad_ = false, pad_left_ = false;
  std::optional<std::size_t> pad_fixed_;
  std::size_t pad_multiple_ = 0;
  std::int32_t pad_id_ = 0;
};

}  // namespace ttmoe::text
