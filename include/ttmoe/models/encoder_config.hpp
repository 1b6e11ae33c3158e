#pragma once
// Hyper-parameters of the BERT-family and MPNet sentence encoders from their Hugging Face
// `config.json` (BertConfig / MPNetConfig). Settings the encoders cannot run exactly (another
// activation, relative-key position embeddings in BERT, a decoder configuration) are an
// EncoderConfigError naming the file, the field and the value, never a silent approximation.

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "ttmoe/core/shape.hpp"
#include "ttmoe/models/config_file.hpp"

namespace ttmoe::models {

/// A BERT / MPNet config.json the encoders cannot use; what() reads "<file>: field '<field>': <problem>".
class EncoderConfigError : public ConfigFieldError {
 public:
  using ConfigFieldError::ConfigFieldError;
};

/// Architecture of a BERT or MPNet encoder (the HF config fields they use).
struct EncoderConfig {
  std::string model_type = "bert";  ///< "bert" or "mpnet"
  index_t vocab_size = 30522;
  index_t hidden_size = 768;
  index_t num_hidden_layers = 12;
  index_t num_attention_heads = 12;
  index_t intermediate_size = 3072;
  index_t max_position_embeddings = 512;
  index_t type_vocab_size = 2;  ///< BERT's token-type rows (MPNet has none: 0)
  double layer_norm_eps = 1e-12;
  index_t pad_token_id = 0;  ///< MPNet numbers positions from pad_token_id + 1
  index_t relative_attention_num_buckets = 32;  ///< MPNet's relative-position buckets

  /// Whether this is an MPNet (relative-position bias, positions from pad_token_id + 1).
  bool is_mpnet() const { return model_type == "mpnet"; }

  /// Parses a config.json object; `label` (the file) prefixes every error.
  static EncoderConfig from_json(const nlohmann::json& j, const std::string& label = "config.json") {
    if (!j.is_object()) throw EncoderConfigError(label, "", "the config is not a JSON object");
    const detail::ConfigFieldReader<EncoderConfigError> r{j, label, ""};
    EncoderConfig c;
    c.model_type = r.string("model_type", "");
    if (c.model_type != "bert" && c.model_type != "mpnet")
      r.fail("model_type", "'" + c.model_type + "' is not supported (bert, mpnet)");
    const bool mpnet = c.is_mpnet();
    c.vocab_size = r.integer("vocab_size");
    c.hidden_size = r.integer("hidden_size");
    c.num_hidden_layers = r.integer("num_hidden_layers");
    c.num_attention_heads = r.integer("num_attention_heads");
    c.intermediate_size = r.integer("intermediate_size");
    c.max_position_embeddings = r.integer("max_position_embeddings", mpnet ? 514 : 512);
    c.type_vocab_size = mpnet ? 0 : r.integer("type_vocab_size", 2);
    c.layer_norm_eps = r.number("layer_norm_eps", mpnet ? 1e-5 : 1e-12);
    c.pad_token_id = r.integer("pad_token_id", mpnet ? 1 : 0);
    if (mpnet) c.relative_attention_num_buckets = r.integer("relative_attention_num_buckets", 32);
    const std::string act = r.string("hidden_act", "gelu");
    if (act != "gelu") r.fail("hidden_act", "'" + act + "' is not supported (gelu, the exact-erf GELU)");
    const std::string pos = r.string("position_embedding_type", "absolute");
    if (!mpnet && pos != "absolute") r.fail("position_embedding_type", "'" + pos + "' is not supported (absolute)");
    if (r.boolean("is_decoder", false)) r.fail("is_decoder", "true is not supported (encoders only)");
    // index_t is unsigned: sizes are checked as read, before the conversion could hide a sign.
    auto positive = [&](const char* field) {
      const std::int64_t v = r.integer(field, 1);
      if (v <= 0) r.fail(field, std::to_string(v) + " must be positive");
    };
    for (const char* f : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                          "max_position_embeddings"})
      positive(f);
    positive(mpnet ? "relative_attention_num_buckets" : "type_vocab_size");
    const std::int64_t pad = r.integer("pad_token_id", mpnet ? 1 : 0);
    if (pad < 0) r.fail("pad_token_id", std::to_string(pad) + " must not be negative");
    if (mpnet && c.pad_token_id + 1 >= c.max_position_embeddings)
      r.fail("pad_token_id", std::to_string(pad) + " leaves no positions below max_position_embeddings");
    if (c.hidden_size % c.num_attention_heads)
      r.fail("num_attention_heads", std::to_string(c.num_attention_heads) + " does not divide hidden_size " +
                                        std::to_string(c.hidden_size));
    if (c.layer_norm_eps <= 0) r.fail("layer_norm_eps", "must be positive");
    return c;
  }

  /// Reads and parses `path` (a config.json file).
  static EncoderConfig load(const std::filesystem::path& path) {
    return from_json(read_config_json<EncoderConfigError>(path, "config"), path.string());
  }

  /// The longest sequence the position table allows (MPNet's positions start at pad_token_id + 1).
  index_t max_tokens() const { return is_mpnet() ? max_position_embeddings - pad_token_id - 1 : max_position_embeddings; }
};

}  // namespace ttmoe::models
