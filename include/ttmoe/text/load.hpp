#pragma once
// load_tokenizer: the one entry point for a model folder or a tokenizer file.
//   folder with tokenizer.json  -> HfTokenizer (model.type BPE or WordPiece), BOS/EOS from
//                                  tokenizer_config.json when that file names them
//   folder with tokenizer.model -> SentencePieceTokenizer
//   *.json / *.model file       -> the same by extension
// Anything else (a missing file, an unsupported model type such as Unigram, malformed JSON) is a
// TokenizerError naming the file and the problem.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "ttmoe/text/hf_tokenizer.hpp"
#include "ttmoe/text/sentencepiece.hpp"

namespace ttmoe::text {

namespace detail {

/// The token a tokenizer_config.json entry names: a string or {"content": "..."}.
inline std::optional<std::string> config_token(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

/// Applies bos_token/eos_token of a tokenizer_config.json next to a tokenizer.json.
inline void apply_tokenizer_config(HfTokenizer& t, const std::string& path) {
  json cfg;
  try {
    cfg = json::parse(read_text_file(path));
  } catch (const json::parse_error& e) {
    throw TokenizerError(TokenizerErrorKind::InvalidJson, path, "", std::string("not valid JSON: ") + e.what());
  }
  if (!cfg.is_object()) throw TokenizerError(TokenizerErrorKind::BadField, path, "", "expected a JSON object");
  for (const char* key : {"bos_token", "eos_token"}) {
    const auto name = config_token(cfg, key);
    if (!name) continue;
    const auto id = t.token_to_id(*name);
    if (!id) throw TokenizerError(TokenizerErrorKind::BadVocab, path, key, "token \"" + *name + "\" is not in tokenizer.json");
    if (std::string(key) == "bos_token") t.set_bos_id(id);
    else t.set_eos_id(id);
  }
}

/// A SentencePiece tokenizer, or an error when the build has no libsentencepiece.
inline std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
#ifdef TTMOE_HAS_SENTENCEPIECE
  return std::make_unique<SentencePieceTokenizer>(path);
#else
  throw TokenizerError(TokenizerErrorKind::SentencePiece, path, "",
                       "ttmoe was built without libsentencepiece (install libsentencepiece-dev and link ttmoe::text)");
#endif
}

}  // namespace detail

/// Loads the tokenizer of a model folder or a tokenizer file (see the file comment).
inline std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir_or_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(dir_or_file, ec)) {
    const fs::path json_path = dir_or_file / "tokenizer.json";
    if (fs::exists(json_path, ec)) {
      auto t = std::make_unique<HfTokenizer>(HfTokenizer::from_file(json_path.string()));
      const fs::path cfg = dir_or_file / "tokenizer_config.json";
      if (fs::exists(cfg, ec)) detail::apply_tokenizer_config(*t, cfg.string());
      return t;
    }
    const fs::path model_path = dir_or_file / "tokenizer.model";
    if (fs::exists(model_path, ec)) return detail::load_sentencepiece(model_path.string());
    throw TokenizerError(TokenizerErrorKind::Io, dir_or_file.string(), "", "the folder has neither tokenizer.json nor tokenizer.model");
  }
  if (!fs::exists(dir_or_file, ec)) throw TokenizerError(TokenizerErrorKind::Io, dir_or_file.string(), "", "no such file or folder");
  if (dir_or_file.extension() == ".json") return std::make_unique<HfTokenizer>(HfTokenizer::from_file(dir_or_file.string()));
  if (dir_or_file.extension() == ".model") return detail::load_sentencepiece(dir_or_file.string());
  throw TokenizerError(TokenizerErrorKind::Unsupported, dir_or_file.string(), "",
                       "not a tokenizer file (expected tokenizer.json or tokenizer.model)");
}

}  // namespace ttmoe::text
