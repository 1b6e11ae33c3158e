#pragma once
// A model vocabulary: token strings and ids in both directions, read from a tokenizer.json
// "vocab" object. Shared by the BPE and WordPiece models.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ttmoe/text/json_fields.hpp"

namespace ttmoe::text {

/// Transparent hash so that lookups by string_view do not allocate.
struct StringHash {
  using is_transparent = void;  ///< Enables heterogeneous lookup.
  /// Hash of the characters.
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

/// Token ↔ id maps. Ids may have gaps (added tokens live outside the model vocabulary).
class Vocab {
 public:
  /// Reads {"token": id, ...}; a non-integer id or two tokens with one id is an error.
  static Vocab from_json(const detail::json& j, const detail::JsonAt& at) {
    detail::object(j, at);
    Vocab v;
    for (const auto& [tok, idj] : j.items()) v.add(tok, detail::get_id(idj, at.at(tok)), at);
    return v;
  }

  /// Adds `token` with `id`; a clash throws BadVocab at `at`.
  void add(const std::string& token, std::int32_t id, const detail::JsonAt& at) {
    if (static_cast<std::size_t>(id) >= by_id_.size()) {
      by_id_.resize(static_cast<std::size_t>(id) + 1);
      present_.resize(static_cast<std::size_t>(id) + 1, false);
    }
    if (present_[static_cast<std::size_t>(id)] || by_token_.contains(token)) {
      throw TokenizerError(TokenizerErrorKind::BadVocab, at.file, at.path,
                           "token \"" + token + "\" or id " + std::to_string(id) + " appears twice");
    }
    present_[static_cast<std::size_t>(id)] = true;
    by_id_[static_cast<std::size_t>(id)] = token;
    by_token_.emplace(token, id);
  }

  /// The id of `token`, if present.
  std::optional<std::int32_t> find(std::string_view token) const {
    const auto it = by_token_.find(token);
    return it == by_token_.end() ? std::nullopt : std::optional<std::int32_t>(it->second);
  }

  /// The token of `id`, if present.
  std::optional<std::string_view> token(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= by_id_.size() || !present_[static_cast<std::size_t>(id)]) return std::nullopt;
    return std::string_view(by_id_[static_cast<std::size_t>(id)]);
  }

  /// Number of tokens.
  std::size_t size() const noexcept { return by_token_.size(); }
  /// One past the largest id.
  std::size_t id_bound() const noexcept { return by_id_.size(); }

 private:
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> by_token_;
  std::vector<std::string> by_id_;
  std::vector<bool> present_;
};

}  // namespace ttmoe::text
