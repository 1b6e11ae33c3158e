#pragma once
// Typed errors of the tokenizer code. A tokenizer file is user input: every problem names the file,
// the JSON field (when there is one) and what is wrong, so a user sees what to fix.

#include <string>
#include <string_view>

#include "ttmoe/core/error.hpp"

namespace ttmoe::text {

/// What went wrong, one value per cause so tests can assert the exact failure.
enum class TokenizerErrorKind {
  Io,               ///< The file or folder cannot be opened or read.
  InvalidJson,      ///< tokenizer.json is not parseable JSON.
  MissingField,     ///< A required field is absent.
  BadField,         ///< A field has the wrong JSON type or an invalid value.
  Unsupported,      ///< A component type (model, normalizer, ...) this library does not implement.
  BadRegex,         ///< PCRE2 rejected a pre-tokenizer pattern.
  BadVocab,         ///< Vocabulary inconsistency (merge of unknown tokens, duplicate id, missing token).
  SentencePiece,    ///< libsentencepiece reported a failure (or was not compiled in).
  BadArgument,      ///< An API argument out of range (id past the vocabulary, vocab size too small).
};

/// Stable spelling of a kind, for messages and test output.
constexpr std::string_view tokenizer_error_kind_name(TokenizerErrorKind k) noexcept {
  switch (k) {
    case TokenizerErrorKind::Io: return "Io";
    case TokenizerErrorKind::InvalidJson: return "InvalidJson";
    case TokenizerErrorKind::MissingField: return "MissingField";
    case TokenizerErrorKind::BadField: return "BadField";
    case TokenizerErrorKind::Unsupported: return "Unsupported";
    case TokenizerErrorKind::BadRegex: return "BadRegex";
    case TokenizerErrorKind::BadVocab: return "BadVocab";
    case TokenizerErrorKind::SentencePiece: return "SentencePiece";
    case TokenizerErrorKind::BadArgument: return "BadArgument";
  }
  return "Unknown";
}

/// The one exception type of ttmoe::text. what() reads "<file>: <field>: <detail>" (parts that are
/// empty are left out).
class TokenizerError : public Error {
 public:
  /// `file` and `field` may be empty when the problem concerns neither (an API argument).
  TokenizerError(TokenizerErrorKind kind, std::string file, std::string field, const std::string& detail)
      : Error(compose(file, field, detail)), kind_(kind), file_(std::move(file)), field_(std::move(field)) {}

  /// The cause.
  TokenizerErrorKind kind() const noexcept { return kind_; }
  /// The file concerned ("" when none).
  const std::string& file() const noexcept { return file_; }
  /// The JSON path of the field concerned, e.g. "model.merges[3]" ("" when none).
  const std::string& field() const noexcept { return field_; }

 private:
  static std::string compose(const std::string& file, const std::string& field, const std::string& detail) {
    std::string s;
    if (!file.empty()) s += file + ": ";
    if (!field.empty()) s += field + ": ";
    return s + detail;
  }
  TokenizerErrorKind kind_;
  std::string file_;
  std::string field_;
};

}  // namespace ttmoe::text
