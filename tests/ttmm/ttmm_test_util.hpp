#pragma once
// Shared fixtures of the TTMM tests: a tiny random Llama, random PEFT experts for it, and a scratch
// folder removed at the end of the test.

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/models/llm.hpp"
#include "ttmoe/ttmm/expert_store.hpp"

namespace ttmm_test {

using namespace ttmoe;

/// A 2-layer Llama small enough for unit tests (hidden 32, intermediate 48, GQA 4/2 heads).
inline nlohmann::json tiny_llama_json() {
  return nlohmann::json{{"model_type", "llama"},       {"vocab_size", 50},          {"hidden_size", 32},
                        {"intermediate_size", 48},     {"num_hidden_layers", 2},    {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},    {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},       {"hidden_act", "silu"},      {"eos_token_id", 2}};
}

/// The LoRA config of the experts: every linear of the blocks, rank r, alpha 16.
inline models::LoraAdapterConfig expert_config(index_t r = 4) {
  models::LoraAdapterConfig c;
  c.r = r;
  c.lora_alpha = 16;
  c.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return c;
}

/// An expert for `m` with N(0, 1/fan_in) factors (PEFT's init leaves B = 0, which would hide bugs).
inline models::PeftAdapter<float> random_expert(models::LlamaForCausalLM<float>& m, std::uint64_t seed, index_t r = 4) {
  auto a = models::make_lora_adapter(m, expert_config(r), seed);
  std::mt19937_64 rng(seed * 7919 + 1);
  std::normal_distribution<float> n(0.f, 1.f);
  for (auto& [name, mod] : a.modules)
    for (auto* f : {&mod.lora_A, &mod.lora_B}) {
      std::vector<float> v(std::size_t(f->weight.numel()));
      for (auto& x : v) x = n(rng) / std::sqrt(float(f->weight.extent(1)));
      f->weight = Tensor<float, DynShape<2>>::from_host(DynShape<2>(f->weight.extent(0), f->weight.extent(1)), v);
    }
  return a;
}

/// The index of a store of experts from expert_config() for the model of config `c`: K =
/// cluster_sizes.size() experts, embedder width d.
inline ttmm::StoreIndex store_index(const models::LlamaConfig& c, index_t d, std::vector<std::int64_t> cluster_sizes) {
  ttmm::StoreIndex x;
  x.num_experts = index_t(cluster_sizes.size());
  x.rank = expert_config().r;
  x.lora_alpha = expert_config().lora_alpha;
  x.target_modules = expert_config().target_modules;
  x.embedder_id = "sentence-transformers/all-mpnet-base-v2";
  x.embedding_dim = d;
  x.base_model = {"tiny-llama", ttmm::config_fingerprint(c.to_json())};
  x.cluster_sizes = std::move(cluster_sizes);
  return x;
}

/// Writes a complete store into `dir`: random_expert(m, first_seed + i) for each cluster, the
/// centroids [K, d] and the index.
inline void write_store(const std::filesystem::path& dir, models::LlamaForCausalLM<float>& m,
                        const Tensor<float, DynShape<2>>& centroids, const std::vector<std::int64_t>& cluster_sizes,
                        std::uint64_t first_seed) {
  ttmm::ExpertStoreWriter w(dir);
  for (index_t i = 0; i < index_t(cluster_sizes.size()); ++i) {
    auto e = random_expert(m, first_seed + std::uint64_t(i));
    if (!w.add_expert(i, e)) throw std::runtime_error("write_store: expert " + std::to_string(i) + " already there");
  }
  w.write_centroids(centroids);
  w.write_index(store_index(m.config, centroids.extent(1), cluster_sizes));
}

/// A fresh scratch folder, removed on destruction.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("ttmoe_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace ttmm_test
