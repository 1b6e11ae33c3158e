#pragma once
// Hyper-parameters of a Llama-family causal LM (Llama 2/3/3.1/3.2, Qwen2/2.5) and their Hugging Face
// `config.json` spelling, both directions. Both rope spellings are read: the older top-level
// `rope_theta` + `rope_scaling`, and transformers 5's `rope_parameters` (theta inside). Anything the
// model cannot run exactly (another rope type, a sliding window, another activation, MLP biases)
// is a LlamaConfigError naming the file, the field and the value, never a silent approximation.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/core/error.hpp"
#include "ttmoe/models/config_file.hpp"
#include "ttmoe/core/shape.hpp"
#include "ttmoe/nn/rope.hpp"

namespace ttmoe::models {

/// A config.json the model cannot use; what() reads "<file>: field '<field>': <problem>".
class LlamaConfigError : public ConfigFieldError {
 public:
  using ConfigFieldError::ConfigFieldError;
};

/// Architecture of a Llama-family decoder (the fields of HF LlamaConfig / Qwen2Config it uses).
struct LlamaConfig {
  std::string model_type = "llama";  ///< "llama" or "qwen2"
  index_t vocab_size = 32000;
  index_t hidden_size = 4096;
  index_t intermediate_size = 11008;
  index_t num_hidden_layers = 32;
  index_t num_attention_heads = 32;
  index_t num_key_value_heads = 32;
  index_t head_dim = 128;  ///< HF default hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  nn::RopeScaling rope_scaling;  ///< none or llama3
  index_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< biases on q, k, v and o (Llama's attention_bias)
  bool qkv_bias = false;        ///< biases on q, k, v only (always on for Qwen2)
  std::string dtype = "float32";  ///< torch_dtype / dtype as saved (the disk precision)
  std::vector<std::int64_t> bos_token_ids, eos_token_ids;

  /// Throws LlamaConfigError (file `label`) naming the first inconsistent field.
  void validate(const std::string& label = "LlamaConfig") const {
    auto need = [&](bool ok, const char* field, const std::string& what) {
      if (!ok) throw LlamaConfigError(label, field, what);
    };
    need(vocab_size > 0, "vocab_size", "must be positive");
    need(hidden_size > 0, "hidden_size", "must be positive");
    need(intermediate_size > 0, "intermediate_size", "must be positive");
    need(num_hidden_layers > 0, "num_hidden_layers", "must be positive");
    need(num_attention_heads > 0, "num_attention_heads", "must be positive");
    need(num_key_value_heads > 0 && num_attention_heads % num_key_value_heads == 0, "num_key_value_heads",
         std::to_string(num_key_value_heads) + " does not divide num_attention_heads " +
             std::to_string(num_attention_heads));
    need(head_dim > 0 && head_dim % 2 == 0, "head_dim", std::to_string(head_dim) + " is not a positive even number");
    need(max_position_embeddings > 0, "max_position_embeddings", "must be positive");
    need(rms_norm_eps > 0, "rms_norm_eps", "must be positive");
    need(rope_theta > 0, "rope_theta", "must be positive");
    if (rope_scaling.type == nn::RopeScaling::Type::llama3)
      need(rope_scaling.factor > 0 && rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
               rope_scaling.original_max_position_embeddings > 0,
           "rope_scaling", "llama3 needs factor > 0, high_freq_factor > low_freq_factor, original_max_position_embeddings > 0");
  }

  /// RoPE inverse frequencies (head_dim / 2) with theta and scaling applied.
  std::vector<double> rope_frequencies() const { return nn::rope_inv_freq(head_dim, rope_theta, rope_scaling); }

  /// Parses a config.json object; `label` (the file) prefixes every error.
  static LlamaConfig from_json(const nlohmann::json& j, const std::string& label = "config.json");
  /// Reads and parses `path` (a config.json file).
  static LlamaConfig load(const std::filesystem::path& path);
  /// The config.json object transformers reads back into LlamaConfig / Qwen2Config.
  nlohmann::json to_json() const;
};

namespace detail {
/// config.json fields read with each failure a LlamaConfigError naming the field.
using ConfigReader = ConfigFieldReader<LlamaConfigError>;
}  // namespace detail

inline LlamaConfig LlamaConfig::from_json(const nlohmann::json& j, const std::string& label) {
  if (!j.is_object()) throw LlamaConfigError(label, "", "the config is not a JSON object");
  detail::ConfigReader r{j, label, ""};
  LlamaConfig c;
  c.model_type = r.string("model_type", "");
  if (c.model_type != "llama" && c.model_type != "qwen2")
    r.fail("model_type", "'" + c.model_type + "' is not supported (llama, qwen2)");
  const bool qwen = c.model_type == "qwen2";
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.num_key_value_heads = r.integer("num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads <= 0) r.fail("num_attention_heads", "must be positive");
  c.head_dim = r.integer("head_dim", c.hidden_size / c.num_attention_heads);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = r.integer("max_position_embeddings", qwen ? 32768 : 2048);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);  // LlamaConfig and Qwen2Config default
  c.attention_bias = !qwen && r.boolean("attention_bias", false);
  c.qkv_bias = qwen;  // transformers' Qwen2Attention: q/k/v Linear(bias=True) unconditionally
  if (r.boolean("mlp_bias", false)) r.fail("mlp_bias", "true is not supported (SwiGLU MLP without biases)");
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", "'" + act + "' is not supported (silu)");
  if (r.has("dtype")) c.dtype = r.string("dtype", "float32");
  else c.dtype = r.string("torch_dtype", "float32");
  if (c.dtype != "float32" && c.dtype != "bfloat16" && c.dtype != "float16")
    r.fail(r.has("dtype") ? "dtype" : "torch_dtype", "'" + c.dtype + "' is not supported (float32, bfloat16, float16)");
  if (r.boolean("use_sliding_window", false)) r.fail("use_sliding_window", "true is not supported (full attention only)");
  if (r.integer("pretraining_tp", 1) != 1) r.fail("pretraining_tp", "only 1 is supported");
  c.bos_token_ids = r.ids("bos_token_id");
  c.eos_token_ids = r.ids("eos_token_id");

  // RoPE: rope_parameters (transformers >= 5, theta inside) or rope_theta + rope_scaling.
  const char* rope_field = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  c.rope_theta = r.number("rope_theta", 10000.0);
  if (r.has(rope_field)) {
    const auto& rp = j.at(rope_field);
    if (!rp.is_object()) r.fail(rope_field, "expected an object, got " + rp.dump());
    detail::ConfigReader s{rp, label, std::string(rope_field) + "."};
    c.rope_theta = s.number("rope_theta", c.rope_theta);
    const char* type_key = s.has("rope_type") ? "rope_type" : "type";
    const std::string type = s.string(type_key, "default");
    if (type == "llama3") {
      c.rope_scaling.type = nn::RopeScaling::Type::llama3;
      c.rope_scaling.factor = s.number("factor");
      c.rope_scaling.low_freq_factor = s.number("low_freq_factor");
      c.rope_scaling.high_freq_factor = s.number("high_freq_factor");
      c.rope_scaling.original_max_position_embeddings = s.number("original_max_position_embeddings");
    } else if (type != "default") {
      s.fail(type_key, "'" + type + "' is not supported (default, llama3)");
    }
  }
  c.validate(label);
  return c;
}

inline LlamaConfig LlamaConfig::load(const std::filesystem::path& path) {
  return from_json(read_config_json<LlamaConfigError>(path, "file"), path.string());
}

inline nlohmann::json LlamaConfig::to_json() const {
  const bool qwen = model_type == "qwen2";
  nlohmann::json j;
  j["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  if (!qwen) j["attention_bias"] = attention_bias;
  if (qwen) j["use_sliding_window"] = false;
  j["dtype"] = dtype;
  auto ids = [](const std::vector<std::int64_t>& v) -> nlohmann::json {
    if (v.empty()) return nullptr;
    if (v.size() == 1) return v[0];
    return v;
  };
  j["bos_token_id"] = ids(bos_token_ids);
  j["eos_token_id"] = ids(eos_token_ids);
  // Both spellings: older transformers read rope_theta + rope_scaling, newer rope_parameters.
  j["rope_theta"] = rope_theta;
  nlohmann::json rp = {{"rope_theta", rope_theta}, {"rope_type", "default"}};
  if (rope_scaling.type == nn::RopeScaling::Type::llama3) {
    rp["rope_type"] = "llama3";
    rp["factor"] = rope_scaling.factor;
    rp["low_freq_factor"] = rope_scaling.low_freq_factor;
    rp["high_freq_factor"] = rope_scaling.high_freq_factor;
    rp["original_max_position_embeddings"] = std::int64_t(rope_scaling.original_max_position_embeddings);
    j["rope_scaling"] = rp;
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["rope_parameters"] = rp;
  return j;
}

}  // namespace ttmoe::models
