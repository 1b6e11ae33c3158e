// Unit tests of the Llama-family causal LM that need no reference library: config.json parsing and
// its errors, the KV-cache path against the full-sequence forward, HF folder round trips, sampling,
// stopping, context errors, and HF parameter names on the training tape.

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../models/model_fixture.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/nn/loss.hpp"

using namespace ttmoe;
using models::LlamaConfig;
using models::LlamaConfigError;
using nlohmann::json;

namespace {

json tiny_json() {
  return json{{"model_type", "llama"},       {"vocab_size", 50},          {"hidden_size", 32},
              {"intermediate_size", 48},     {"num_hidden_layers", 2},    {"num_attention_heads", 4},
              {"num_key_value_heads", 2},    {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
              {"rope_theta", 10000.0},       {"hidden_act", "silu"},      {"eos_token_id", 2}};
}

LlamaConfig tiny(bool qwen = false) {
  auto j = tiny_json();
  if (qwen) j["model_type"] = "qwen2";
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 5000.0}, {"factor", 4.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  return LlamaConfig::from_json(j);
}

/// Field named by the error from parsing `j`.
std::string error_field(const json& j) {
  try {
    LlamaConfig::from_json(j, "cfg.json");
  } catch (const LlamaConfigError& e) {
    CHECK(std::string(e.what()).rfind("cfg.json: field '", 0) == 0);
    return e.field();
  }
  return "<no error>";
}

/// Rows [B*T, V] of logits as a host vector.
std::vector<float> host(const Tensor<float, DynShape<3>>& t) { return t.to_vector(); }

}  // namespace

TEST_CASE("llama config: fields, both rope spellings, eos lists, qwen2 biases", "[llm][config]") {
  auto j = tiny_json();
  auto c = LlamaConfig::from_json(j);
  CHECK(c.head_dim == 8);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.rope_scaling.type == nn::RopeScaling::Type::none);
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{2});
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK_FALSE(c.qkv_bias);

  j["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["eos_token_id"] = {128001, 128008, 128009};
  j["head_dim"] = 16;
  c = LlamaConfig::from_json(j);
  CHECK(c.rope_scaling.type == nn::RopeScaling::Type::llama3);
  CHECK(c.rope_scaling.factor == 8.0);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.head_dim == 16);
  CHECK(c.eos_token_ids.size() == 3);

  const auto t = tiny();
  CHECK(t.rope_theta == 5000.0);  // rope_parameters carries theta
  CHECK(t.rope_scaling.original_max_position_embeddings == 16);
  CHECK(tiny(true).qkv_bias);  // Qwen2 always has q/k/v biases

  // to_json -> from_json is the identity on what the model uses.
  const auto back = LlamaConfig::from_json(t.to_json());
  CHECK(back.to_json() == t.to_json());
}

TEST_CASE("llama config: unsupported values name the field and the value", "[llm][config]") {
  auto with = [](const char* k, json v) {
    auto j = tiny_json();
    j[k] = std::move(v);
    return j;
  };
  CHECK(error_field(with("model_type", "mistral")) == "model_type");
  CHECK(error_field(with("hidden_act", "gelu")) == "hidden_act");
  CHECK(error_field(with("use_sliding_window", true)) == "use_sliding_window");
  CHECK(error_field(with("mlp_bias", true)) == "mlp_bias");
  CHECK(error_field(with("num_key_value_heads", 3)) == "num_key_value_heads");
  CHECK(error_field(with("hidden_size", "big")) == "hidden_size");
  CHECK(error_field(with("eos_token_id", json::array({1, "x"}))) == "eos_token_id");
  CHECK(error_field(with("torch_dtype", "int8")) == "torch_dtype");
  CHECK(error_field(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}})) == "rope_scaling.rope_type");
  CHECK(error_field(with("rope_parameters", {{"rope_type", "dynamic"}})) == "rope_parameters.rope_type");
  CHECK(error_field(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 4.0}})) == "rope_scaling.low_freq_factor");
  auto missing = tiny_json();
  missing.erase("vocab_size");
  CHECK(error_field(missing) == "vocab_size");
  try {
    LlamaConfig::from_json(with("rope_scaling", {{"type", "yarn"}}), "cfg.json");
  } catch (const LlamaConfigError& e) {
    CHECK(std::string(e.what()).find("'yarn'") != std::string::npos);
  }
}

TEST_CASE("llama3 rope frequencies: the three bands of the scaling", "[llm][rope]") {
  nn::RopeScaling sc{nn::RopeScaling::Type::llama3, 8.0, 1.0, 4.0, 64};
  const auto plain = nn::rope_inv_freq(32, 10000.0), scaled = nn::rope_inv_freq(32, 10000.0, sc);
  int kept = 0, divided = 0, mixed = 0;
  for (std::size_t j = 0; j < plain.size(); ++j) {
    const double wavelen = 2 * 3.14159265358979323846 / plain[j];
    if (wavelen < 64.0 / 4.0) kept += scaled[j] == plain[j];
    else if (wavelen > 64.0) divided += std::abs(scaled[j] - plain[j] / 8) < 1e-15;
    else mixed += scaled[j] < plain[j] && scaled[j] > plain[j] / 8;
  }
  CHECK(kept + divided + mixed == 16);
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(mixed > 0);
}

TEST_CASE("llama kv cache: prefill + incremental decode equals the full forward, uneven lengths", "[llm][cache]") {
  for (bool qwen : {false, true}) {
    const LlamaConfig c = tiny(qwen);
    models::LlamaForCausalLM<float> m(c, 7);
    const index_t T = 11, V = c.vocab_size;
    std::vector<std::int64_t> a, b;
    for (index_t i = 0; i < T; ++i) {
      a.push_back((7 * i + 3) % V);
      b.push_back((11 * i + 5) % V);
    }
    auto full = [&](const std::vector<std::int64_t>& s) {
      return host(m.forward(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, T), s)));
    };
    const auto fa = full(a), fb = full(b);
    // Sequence 0 prefilled with 3 tokens, sequence 1 with 6 (right-padded to 6), then one by one.
    auto cache = m.make_cache(2, T);
    std::vector<std::int64_t> pre(12, 0);
    std::copy_n(a.begin(), 3, pre.begin());
    std::copy_n(b.begin(), 6, pre.begin() + 6);
    auto h = m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 6), pre), cache);
    cache.lengths = {3, 6};
    const auto pl = host(m.logits(h));
    double worst = 0, scale = 0;
    auto cmp = [&](const float* got, const float* want) {
      for (index_t v = 0; v < V; ++v) {
        worst = std::max(worst, double(std::abs(got[v] - want[v])));
        scale = std::max(scale, double(std::abs(want[v])));
      }
    };
    for (index_t i = 0; i < 3; ++i) cmp(&pl[std::size_t(i * V)], &fa[std::size_t(i * V)]);
    for (index_t i = 0; i < 6; ++i) cmp(&pl[std::size_t((6 + i) * V)], &fb[std::size_t(i * V)]);
    for (index_t step = 0; cache.lengths[0] < T - 0 && cache.lengths[1] < T; ++step) {
      const index_t la = cache.lengths[0], lb = cache.lengths[1];
      std::vector<std::int64_t> next{a[std::size_t(la)], b[std::size_t(lb)]};
      const auto l = host(m.logits(m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 1), next), cache)));
      cmp(&l[0], &fa[std::size_t(la * V)]);
      cmp(&l[std::size_t(V)], &fb[std::size_t(lb * V)]);
    }
    INFO((qwen ? "qwen2" : "llama") << ": worst |cached - full| " << worst << " of max |logit| " << scale);
    CHECK(worst <= 1e-5 * scale);
    // Full cache: the next step is a clear error, not an overrun.
    std::vector<std::int64_t> one{1, 1};
    CHECK_THROWS_AS(m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 1), one), cache), ValueError);
  }
}

TEST_CASE("llama hf folder: save_llama then load_llama, f32 exact and bf16 rounded", "[llm][io]") {
  const LlamaConfig c = tiny(true);
  models::LlamaForCausalLM<float> m(c, 3);
  const auto dir = std::filesystem::temp_directory_path() / ("ttmoe_llm_rt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 5), {1, 4, 9, 16, 25});
  const auto want = m.forward(ids);
  models::save_llama(m, dir);
  auto back = models::load_llama<float>(dir);
  CHECK(back.config.to_json() == m.config.to_json());
  CHECK(test::normwise_rel_error(back.forward(ids), want) == 0.0);
  models::save_llama(m, dir / "bf16", io::DType::BF16);
  auto b16 = models::load_llama<float>(dir / "bf16");
  CHECK(b16.config.dtype == "bfloat16");
  const double err = test::normwise_rel_error(b16.forward(ids), want);
  INFO("bf16 weights: logits normwise relative error " << err);
  CHECK(err > 0.0);
  CHECK(err < 0.05);  // 2^-9 relative per weight, through two layers
  // A folder without weights.
  std::filesystem::remove(dir / "model.safetensors");
  CHECK_THROWS_AS(models::load_llama<float>(dir), io::SafetensorsError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("llama generate: sampling, seeds, EOS, streaming, context errors", "[llm][generate]") {
  const LlamaConfig c = tiny();
  models::LlamaForCausalLM<float> m(c, 11);
  const std::vector<std::vector<std::int64_t>> prompts{{1, 2, 3}, {4, 5, 6, 7, 8}};
  models::GenerationOptions greedy;
  greedy.max_new_tokens = 8;
  const auto g = models::generate(m, prompts, greedy);
  REQUIRE(g.tokens[0].size() == 8);

  // Batched equals one at a time.
  for (std::size_t p = 0; p < prompts.size(); ++p)
    CHECK(models::generate(m, {prompts[p]}, greedy).tokens[0] == g.tokens[p]);

  // top_k = 1 and a tiny top_p are greedy whatever the temperature.
  auto o = greedy;
  o.sampling = {1.5, 1, 1.0, 5};
  CHECK(models::generate(m, prompts, o).tokens == g.tokens);
  o.sampling = {1.5, 0, 1e-6, 5};
  CHECK(models::generate(m, prompts, o).tokens == g.tokens);
  // Same seed, same tokens; temperature sampling over the full vocabulary differs from greedy.
  o.sampling = {5.0, 0, 1.0, 42};
  const auto s1 = models::generate(m, prompts, o), s2 = models::generate(m, prompts, o);
  CHECK(s1.tokens == s2.tokens);
  CHECK(s1.tokens != g.tokens);

  // EOS stops a sequence after emitting it; the callback streams every token and can stop one.
  auto e = greedy;
  e.eos_token_ids = {g.tokens[0][2]};
  std::vector<std::pair<index_t, std::int64_t>> streamed;
  e.on_token = [&](index_t seq, std::int64_t tok) {
    streamed.emplace_back(seq, tok);
    return !(seq == 1 && streamed.size() >= 4);
  };
  const auto r = models::generate(m, prompts, e);
  CHECK(r.reasons[0] == models::StopReason::eos);
  CHECK(r.tokens[0].size() <= 3);
  CHECK(r.tokens[0].back() == g.tokens[0][2]);
  CHECK(r.reasons[1] == models::StopReason::callback);
  CHECK(streamed.size() == r.tokens[0].size() + r.tokens[1].size());

  // The context: a prompt longer than max_position_embeddings is an error; generation stops at it.
  std::vector<std::int64_t> longp(std::size_t(c.max_position_embeddings + 1), 1);
  try {
    models::generate(m, {longp}, greedy);
    FAIL("no error");
  } catch (const ValueError& err) {
    CHECK(std::string(err.what()).find("context") != std::string::npos);
  }
  longp.resize(std::size_t(c.max_position_embeddings - 2));
  const auto edge = models::generate(m, {longp}, greedy);
  CHECK(edge.tokens[0].size() == 3);
  CHECK(edge.reasons[0] == models::StopReason::context);
  CHECK_THROWS_AS(models::generate(m, {{}}, greedy), ValueError);
  CHECK_THROWS_AS(models::generate(m, {{std::int64_t(c.vocab_size)}}, greedy), ValueError);
}

TEST_CASE("sampler: temperature sampling follows softmax, top_p keeps the nucleus", "[llm][sampling]") {
  const std::vector<float> logits{0.0f, float(std::log(3.0)), -30.0f};
  models::Sampler s({1.0, 0, 1.0, 123});
  int ones = 0, twos = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const auto t = s(std::span<const float>(logits));
    ones += t == 1;
    twos += t == 2;
  }
  CHECK(std::abs(double(ones) / n - 0.75) < 0.015);
  CHECK(twos < 5);
  models::Sampler nucleus({1.0, 0, 0.7, 9});  // 0.75 >= 0.7: only token 1 survives
  for (int i = 0; i < 200; ++i) CHECK(nucleus(std::span<const float>(logits)) == 1);
  CHECK_THROWS_AS(models::Sampler({-1.0, 0, 1.0, 0}), ValueError);
  CHECK_THROWS_AS(models::Sampler({1.0, 0, 0.0, 0}), ValueError);
}

TEST_CASE("llama training tape: HF names and gradients for every parameter", "[llm][autograd]") {
  LlamaConfig c = tiny(true);
  c.tie_word_embeddings = true;
  models::LlamaForCausalLM<float> m(c, 5);
  const auto params = nn::named_parameters<float>(m);
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(p.name);
  CHECK(names.front() == "model.embed_tokens.weight");
  CHECK(std::find(names.begin(), names.end(), "model.layers.1.self_attn.q_proj.bias") != names.end());
  CHECK(std::find(names.begin(), names.end(), "model.layers.0.mlp.down_proj.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "model.norm.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "lm_head.weight") == names.end());  // tied
  CHECK(params.size() == 1 + 2 * 12 + 1);
  autograd::Tape tape;
  auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 4), {1, 2, 3, 4, 5, 6, 7, 8});
  auto logits = m.forward(ids);
  auto loss = nn::cross_entropy(logits.reshape(DynShape<2>(8, c.vocab_size)),
                                IndexTensor<DynShape<1>>::from_host(DynShape<1>(8), {2, 3, 4, 5, 6, 7, 8, 9}));
  autograd::backward(tape, loss);
  for (const auto& p : params) {
    INFO(p.name);
    REQUIRE(p.flat.grad().defined());
    double norm = 0;
    for (float g : p.flat.grad().to_vector()) norm += double(g) * g;
    CHECK(norm > 0);
  }
}
