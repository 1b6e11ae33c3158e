#pragma once
// The one small interface every ttmoe tokenizer implements (Hugging Face tokenizer.json pipelines
// and SentencePiece models), so that models and examples do not care which kind they were given.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ttmoe::text {

/// Text ↔ token ids.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Ids of `text` (bytes; invalid UTF-8 is replaced by U+FFFD first). With `add_special_tokens`
  /// the model's template (BOS, [CLS] ... [SEP]) is applied.
  virtual std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;

  /// Text of `ids`; with `skip_special_tokens` the special tokens are left out. An id outside the
  /// vocabulary throws BadArgument.
  virtual std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const = 0;

  /// One past the largest id (the embedding rows a model needs).
  virtual std::size_t vocab_size() const = 0;

  /// The id of `token`, if it is in the vocabulary (added tokens included).
  virtual std::optional<std::int32_t> token_to_id(std::string_view token) const = 0;

  /// The token string of `id` (throws BadArgument when out of range).
  virtual std::string id_to_token(std::int32_t id) const = 0;

  /// Beginning-of-sequence id, if the tokenizer has one.
  virtual std::optional<std::int32_t> bos_id() const = 0;

  /// End-of-sequence id, if known.
  virtual std::optional<std::int32_t> eos_id() const = 0;

  /// Ids of all special tokens (sorted).
  virtual std::vector<std::int32_t> special_ids() const = 0;
};

}  // namespace ttmoe::text
