#pragma once
// SentencePiece models (tokenizer.model, e.g. Llama 2) through Debian's libsentencepiece. Only
// available when the build defines TTMOE_HAS_SENTENCEPIECE (the ttmoe::text CMake target does when
// pkg-config finds `sentencepiece`); load_tokenizer reports a clear error otherwise.
//
// encode(text, add_special_tokens) adds BOS (if the model has one) like Llama 2's tokenizer; decode
// leaves control pieces (BOS/EOS) out whatever skip_special_tokens says, as libsentencepiece does.

#ifdef TTMOE_HAS_SENTENCEPIECE

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

#include "ttmoe/text/error.hpp"
#include "ttmoe/text/tokenizer.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// A SentencePiece model behind the Tokenizer interface.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// Loads `path` (a tokenizer.model); failure throws SentencePiece naming the file.
  explicit SentencePieceTokenizer(const std::string& path)
      : path_(path), sp_(std::make_shared<sentencepiece::SentencePieceProcessor>()) {
    const auto status = sp_->Load(path);
    if (!status.ok()) throw TokenizerError(TokenizerErrorKind::SentencePiece, path, "", "libsentencepiece cannot load it: " + status.ToString());
  }

  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const override {
    std::vector<int> ids;
    const auto status = sp_->Encode(sanitize_utf8(text), &ids);
    if (!status.ok()) throw TokenizerError(TokenizerErrorKind::SentencePiece, path_, "", "encode failed: " + status.ToString());
    std::vector<std::int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_special_tokens && sp_->bos_id() >= 0) out.push_back(sp_->bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (const std::int32_t id : ids) {
      check(id);
      if (skip_special_tokens && sp_->IsControl(id)) continue;
      v.push_back(id);
    }
    std::string text;
    const auto status = sp_->Decode(v, &text);
    if (!status.ok()) throw TokenizerError(TokenizerErrorKind::SentencePiece, path_, "", "decode failed: " + status.ToString());
    return text;
  }

  std::size_t vocab_size() const override { return static_cast<std::size_t>(sp_->GetPieceSize()); }

  std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    const int id = sp_->PieceToId(std::string(token));
    // PieceToId answers unk for unknown pieces; only the unk piece itself maps to unk legitimately.
    if (id == sp_->unk_id() && sp_->IdToPiece(id) != token) return std::nullopt;
    return id;
  }

  std::string id_to_token(std::int32_t id) const override {
    check(id);
    return sp_->IdToPiece(id);
  }

  std::optional<std::int32_t> bos_id() const override { return optional_id(sp_->bos_id()); }
  std::optional<std::int32_t> eos_id() const override { return optional_id(sp_->eos_id()); }

  std::vector<std::int32_t> special_ids() const override {
    std::vector<std::int32_t> out;
    for (int i = 0; i < sp_->GetPieceSize(); ++i) {
      if (sp_->IsControl(i) || sp_->IsUnknown(i)) out.push_back(i);
    }
    return out;
  }

 private:
  void check(std::int32_t id) const {
    if (id < 0 || id >= sp_->GetPieceSize()) {
      throw TokenizerError(TokenizerErrorKind::BadArgument, path_, "", "token id " + std::to_string(id) + " is not in the vocabulary");
    }
  }
  static std::optional<std::int32_t> optional_id(int id) { return id >= 0 ? std::optional<std::int32_t>(id) : std::nullopt; }

  std::string path_;
  std::shared_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace ttmoe::text

#endif  // TTMOE_HAS_SENTENCEPIECE
