#pragma once
// Llama-family models from and to Hugging Face folders (what save_pretrained writes): config.json
// plus model.safetensors or a sharded model.safetensors.index.json. Weights are memory-mapped and
// converted to T (BF16 / F16 / F32 on disk). Every problem with the weights (missing, unexpected,
// mis-shaped tensors) comes in ONE nn::CheckpointError listing them all; a truncated shard or an
// index naming a missing shard is an io::SafetensorsError naming the file.

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>

#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/models/llama.hpp"
#include "ttmoe/models/llama_bf16.hpp"
#include "ttmoe/models/llama_bf16_mapped.hpp"

namespace ttmoe::models {

/// Loads config.json and the weights of the HF folder `dir` into a new model; with
/// WeightPrecision::bf16 the Linear weights and the embedding are kept as BF16 (inference only,
/// llama_bf16.hpp), viewed straight from the mapped file where it stores them as BF16
/// (llama_bf16_mapped.hpp: no F32 model is ever built), or copied into huge pages (`storage`,
/// Bf16Storage; it changes no result).
template <class T = float, class D = cpu>
LlamaForCausalLM<T, D> load_llama(const std::filesystem::path& dir, WeightPrecision weights = WeightPrecision::f32,
                                  Bf16Storage storage = Bf16Storage::mapped) {
  const auto config = LlamaConfig::load(dir / "config.json");
  const auto single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>) {
    if (weights == WeightPrecision::bf16) {
      if (std::filesystem::exists(single))
        return load_llama_bf16_mapped(config, std::make_shared<const io::SafetensorsFile>(single), storage);
      if (std::filesystem::exists(index))
        return load_llama_bf16_mapped(config, std::make_shared<const io::ShardedSafetensors>(index), storage);
    }
  }
  // Every parameter is read below (a strict load), so nothing is drawn for it first (nn::SkipInit).
  LlamaForCausalLM<T, D> m = [&] {
    nn::SkipInit no_draws;
    return LlamaForCausalLM<T, D>(config);
  }();
  nn::LoadOptions opt;
  // A tied model's head is the embedding (transformers ignores a stored copy); older transformers
  // saved RoPE's inv_freq buffer, which the config determines.
  if (config.tie_word_embeddings) opt.ignore_keys.push_back("lm_head.weight");
  opt.ignore_keys.push_back("*.rotary_emb.inv_freq");
  if (std::filesystem::exists(single)) {
    nn::load_state(m, io::SafetensorsFile(single), io::timm_names(), opt);
  } else if (std::filesystem::exists(index)) {
    nn::load_state(m, io::ShardedSafetensors(index), io::timm_names(), opt);
  } else {
    throw io::SafetensorsError(io::ErrorKind::Io, dir.string(),
                               "no model.safetensors or model.safetensors.index.json in the folder");
  }
  if (weights == WeightPrecision::bf16) keep_linear_weights_bf16(m);
  return m;
}

/// Writes `m` as an HF folder `dir` (created if needed): config.json (dtype set to the stored
/// precision) and model.safetensors in `dtype` (F32, BF16 or F16). transformers' from_pretrained
/// reads it back.
template <class T, class D>
void save_llama(LlamaForCausalLM<T, D>& m, const std::filesystem::path& dir, io::DType dtype = io::DType::F32) {
  std::filesystem::create_directories(dir);
  LlamaConfig c = m.config;
  c.dtype = dtype == io::DType::BF16 ? "bfloat16" : dtype == io::DType::F16 ? "float16" : "float32";
  if (dtype != io::DType::F32 && dtype != io::DType::BF16 && dtype != io::DType::F16)
    throw ValueError("save_llama: weights are stored as F32, BF16 or F16, not " + std::string(io::dtype_name(dtype)));
  nn::save_state(m, dir / "model.safetensors", io::timm_names(), dtype);
  std::ofstream out(dir / "config.json");
  out << c.to_json().dump(2) << "\n";
  if (!out) throw io::SafetensorsError(io::ErrorKind::Io, (dir / "config.json").string(), "cannot write the config");
}

}  // namespace ttmoe::models
