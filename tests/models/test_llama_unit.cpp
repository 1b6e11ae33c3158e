// Unit tests of the Llama-family causal LM that need no reference library: config.json parsing and
// its errors, the KV-cache path against the full-sequence forward, HF folder round trips, sampling,
// stopping, context errors, HF parameter names on the training tape, and PEFT LoRA adapters (config
// parsing and refusals, unmerged / merged / several at once against an explicit weight sum, exact
// removal, file round trip and its errors).

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "parity.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/nn/linear_group.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/training/llama_lora.hpp"

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
    // The cached attention splits its (sequence, head) items over the pool's threads: one thread and
    // two give the same prefill and decode outputs bit for bit.
    auto cached_run = [&](std::size_t threads) {
      cpu_backend::set_num_threads(threads);
      auto c2 = m.make_cache(2, T);
      auto out = host(m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 6), pre), c2));
      for (index_t i = 6; i < T; ++i) {
        std::vector<std::int64_t> next{a[std::size_t(i)], b[std::size_t(i)]};
        const auto l = host(m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 1), next), c2));
        out.insert(out.end(), l.begin(), l.end());
      }
      return out;
    };
    const std::size_t threads_before = cpu_backend::num_threads();
    const auto one_thread = cached_run(1), two_threads = cached_run(2);
    cpu_backend::set_num_threads(threads_before);
    CHECK(one_thread == two_threads);
  }
}

TEST_CASE("kv cache attention: the blocked many-row path and the decode loop against a double reference", "[llm][cache]") {
  // Two sequences already holding 5 and 0 positions take t new queries each: 16 (the threshold, one
  // partial block), 64 (one full block) and 150 (two full blocks and a partial one) through the
  // blocked path with head_dim 8, 1 and 3 through the query-by-query decode loop with head_dims 8,
  // 64 (Llama-3.2-1B's), 80 and 128; 2 kv heads shared by 3 query heads each. The reference is the
  // definition in double.
  const index_t B = 2, KV = 2, G = 3, H = KV * G, Tm = 160;
  const float scale = 0.35f;
  const std::pair<index_t, index_t> cases[] = {{16, 8}, {64, 8}, {150, 8}, {1, 8}, {3, 64}, {1, 80}, {3, 128}};
  for (const auto& [t, hd] : cases) {
    nn::KVCache<float> cache(1, B, KV, Tm, hd);
    cache.lengths = {5, 0};
    std::mt19937 rng{static_cast<unsigned>(t)};
    std::normal_distribution<float> nd(0.f, 1.f);
    auto fill = [&](index_t n) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = nd(rng);
      return v;
    };
    // Positions already in the cache (only sequence 0 has any), then the new q, k [B, *, t, hd] and v [B, t, KV, hd].
    for (index_t h = 0; h < KV; ++h)
      for (index_t i = 0; i < 5 * hd; ++i) {
        cache.k.data()[h * Tm * hd + i] = nd(rng);
        cache.v.data()[h * Tm * hd + i] = nd(rng);
      }
    const auto q = fill(B * H * t * hd), k = fill(B * KV * t * hd), v = fill(B * t * KV * hd);
    std::vector<float> out(static_cast<std::size_t>(B * t * H * hd), std::nanf(""));
    nn::kv_cache_attention(cache, 0, q.data(), k.data(), v.data(), out.data(), H, t, scale);
    double worst = 0;
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h) {
        const float* kh = cache.k.data() + (b * KV + h / G) * Tm * hd;
        const float* vh = cache.v.data() + (b * KV + h / G) * Tm * hd;
        for (index_t i = 0; i < t; ++i) {
          const index_t n = cache.lengths[std::size_t(b)] + i + 1;
          std::vector<double> s(static_cast<std::size_t>(n));
          double mx = -INFINITY, sum = 0;
          for (index_t j = 0; j < n; ++j) {
            double d = 0;
            for (index_t e = 0; e < hd; ++e) d += double(q[std::size_t(((b * H + h) * t + i) * hd + e)]) * kh[j * hd + e];
            s[std::size_t(j)] = d * scale;
            mx = std::max(mx, s[std::size_t(j)]);
          }
          for (auto& x : s) sum += (x = std::exp(x - mx));
          for (index_t e = 0; e < hd; ++e) {
            double o = 0;
            for (index_t j = 0; j < n; ++j) o += s[std::size_t(j)] * vh[j * hd + e];
            const float got = out[std::size_t((b * t + i) * H * hd + h * hd + e)];
            worst = std::max(worst, std::isnan(got) ? INFINITY : std::abs(double(got) - o / sum));
          }
        }
      }
    INFO(t << " new rows, head_dim " << hd << ": worst |kv_cache_attention - reference| " << worst);
    CHECK(worst <= 2e-6);  // outputs are convex combinations of N(0, 1) values: float rounding only
    // The new keys and values landed after each sequence's old positions ([B, KV, t, hd] and [B, t, KV, hd]).
    if (t < 4) continue;  // the checks below read new rows 2 and 3
    CHECK(cache.k.data()[(1 * KV + 1) * Tm * hd + 3 * hd + 2] == k[std::size_t(((1 * KV + 1) * t + 3) * hd + 2)]);
    CHECK(cache.v.data()[(0 * KV + 1) * Tm * hd + 7 * hd + 4] == v[std::size_t(((0 * t + 2) * KV + 1) * hd + 4)]);
  }
}

TEST_CASE("kv cache attention: the decode loop's 8-key scores and P.V in registers keep the scalar order bit for bit", "[llm][cache]") {
#if defined(TTMOE_DECODE_ATTENTION_AVX)
  // cpu_backend::scores8 claims the sums of nn::detail::dot as the compiler builds it (8 partial
  // sums, lane u adding q[8s + u] k[8s + u] by a fused multiply-add in order of s, then
  // ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))). The reference spells that order out with
  // std::fma; values spread over many magnitudes, so any other order, or a product rounded before
  // its add, rounds differently.
  std::mt19937 rng{7};
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ex(-12, 12);
  for (index_t hd : {index_t(8), index_t(16), index_t(64), index_t(80), index_t(128)}) {
    std::vector<float> q(static_cast<std::size_t>(hd)), k(static_cast<std::size_t>(8 * hd));
    for (auto& x : q) x = std::ldexp(nd(rng), ex(rng));
    for (auto& x : k) x = std::ldexp(nd(rng), ex(rng));
    float got[8];
    cpu_backend::scores8(q.data(), k.data(), hd, got);
    int equal = 0;
    for (index_t j = 0; j < 8; ++j) {
      float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (index_t e = 0; e < hd; e += 8)
        for (index_t u = 0; u < 8; ++u) a[u] = std::fma(q[std::size_t(e + u)], k[std::size_t(j * hd + e + u)], a[u]);
      const float want = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
      equal += got[j] == want ? 1 : 0;
    }
    INFO("head_dim " << hd);
    CHECK(equal == 8);
  }
  // cpu_backend::weighted_rows (P.V in registers) against the scalar loop it replaces, spelled out
  // with std::fma: every column's sum over the keys in key order, widths with and without a 64-column
  // block and a remainder of 1-7 ymm.
  for (index_t hd : {index_t(8), index_t(56), index_t(64), index_t(80), index_t(128), index_t(136)}) {
    const index_t keys = 37;
    std::vector<float> w(static_cast<std::size_t>(keys)), v(static_cast<std::size_t>(keys * hd));
    for (auto& x : w) x = std::ldexp(std::abs(nd(rng)), ex(rng));
    for (auto& x : v) x = std::ldexp(nd(rng), ex(rng));
    std::vector<float> got(static_cast<std::size_t>(hd), 0.f), want(static_cast<std::size_t>(hd), 0.f);
    cpu_backend::weighted_rows(w.data(), v.data(), keys, hd, got.data());
    for (index_t j = 0; j < keys; ++j)
      for (index_t e = 0; e < hd; ++e)
        want[std::size_t(e)] = std::fma(w[std::size_t(j)], v[std::size_t(j * hd + e)], want[std::size_t(e)]);
    INFO("P.V, head_dim " << hd);
    CHECK(got == want);
  }
#else
  std::printf("TTMOE_SKIPPED: this build has no AVX and FMA (the 8-key scores are not compiled)\n");
#endif
}

TEST_CASE("llama kv cache: a long prompt, then a long continuation, equal the full forward", "[llm][cache]") {
  // 130 tokens: a prefill of 40 (the blocked attention, one partial block), then 90 more continuing
  // at position 40 (blocked, two blocks), then nothing else; both against the full forward.
  auto j = tiny_json();
  j["max_position_embeddings"] = 160;
  const LlamaConfig c = LlamaConfig::from_json(j);
  models::LlamaForCausalLM<float> m(c, 11);
  const index_t T = 130, first = 40, V = c.vocab_size;
  std::vector<std::int64_t> ids;
  for (index_t i = 0; i < T; ++i) ids.push_back((13 * i + 1) % V);
  const auto full = host(m.forward(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, T), ids)));
  auto cache = m.make_cache(1, T);
  const std::vector<std::int64_t> a(ids.begin(), ids.begin() + first), b(ids.begin() + first, ids.end());
  const auto la = host(m.logits(m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, first), a), cache)));
  const auto lb = host(m.logits(m.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, T - first), b), cache)));
  CHECK(cache.lengths[0] == T);
  double worst = 0, scale = 0;
  for (index_t i = 0; i < T; ++i)
    for (index_t v = 0; v < V; ++v) {
      const float got = i < first ? la[std::size_t(i * V + v)] : lb[std::size_t((i - first) * V + v)];
      const float want = full[std::size_t(i * V + v)];
      worst = std::max(worst, double(std::abs(got - want)));
      scale = std::max(scale, double(std::abs(want)));
    }
  INFO("worst |cached - full| " << worst << " of max |logit| " << scale);
  CHECK(worst <= 1e-5 * scale);
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

// ---- PEFT LoRA adapters (models/peft_adapter.hpp, models/llama_lora.hpp) ----

namespace {

/// Field named by the PeftConfigError from parsing `j`.
std::string peft_error_field(const nlohmann::ordered_json& j) {
  try {
    models::LoraAdapterConfig::from_json(j, "adapter_config.json");
  } catch (const models::PeftConfigError& e) {
    CHECK(std::string(e.what()).rfind("adapter_config.json: field '", 0) == 0);
    return e.field();
  }
  return "<no error>";
}

/// Fills every factor of `a` with seeded values of size ~1/sqrt(fan-in), so the adapter matters.
void randomize(models::PeftAdapter<float>& a, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (auto& [name, m] : a.modules)
    for (auto* f : {&m.lora_A, &m.lora_B}) {
      std::vector<float> v(std::size_t(f->weight.numel()));
      for (auto& x : v) x = n(rng) / std::sqrt(float(f->weight.extent(1)));
      f->weight = Tensor<float, DynShape<2>>::from_host(DynShape<2>(f->weight.extent(0), f->weight.extent(1)), v);
    }
}

models::LoraAdapterConfig rs_config() {
  models::LoraAdapterConfig c;
  c.r = 4;
  c.lora_alpha = 6;
  c.use_rslora = true;
  c.target_regex = R"(.*\.(q_proj|v_proj|down_proj))";
  c.rank_pattern = {{"v_proj", 2}, {"layers.1.mlp.down_proj", 3}};
  c.alpha_pattern = {{"down_proj", 5}};
  return c;
}

}  // namespace

TEST_CASE("peft config: targets, patterns, scales, and refused settings", "[llm][peft]") {
  nlohmann::ordered_json j = {{"peft_type", "LORA"}, {"r", 8}, {"lora_alpha", 16}, {"target_modules", {"q_proj", "mlp.up_proj"}},
                              {"rank_pattern", {{"layers.1.self_attn.q_proj", 2}, {"q_proj", 4}}},
                              {"alpha_pattern", {{"up_proj", 3}}}, {"bias", "none"}, {"fan_in_fan_out", false},
                              {"use_dora", false}, {"modules_to_save", nullptr}};
  auto c = models::LoraAdapterConfig::from_json(j, "a.json");
  // A list entry matches the whole name or its last dotted parts, never a part of a word.
  CHECK(c.targets("model.layers.0.self_attn.q_proj"));
  CHECK(c.targets("model.layers.3.mlp.up_proj"));
  CHECK_FALSE(c.targets("model.layers.0.self_attn.k_proj"));
  CHECK_FALSE(c.targets("model.layers.0.mlp.xup_proj"));
  // The first pattern key that matches a dotted suffix wins (PEFT's get_pattern_key).
  CHECK(c.rank_for("model.layers.1.self_attn.q_proj") == 2);
  CHECK(c.rank_for("model.layers.11.self_attn.q_proj") == 4);  // "layers.1." is not a suffix of "layers.11."
  CHECK(c.rank_for("model.layers.0.mlp.up_proj") == 8);
  CHECK(c.scaling_for("model.layers.0.mlp.up_proj") == 3.0 / 8);
  CHECK(c.scaling_for("model.layers.0.self_attn.q_proj") == 16.0 / 4);
  j["use_rslora"] = true;
  CHECK(models::LoraAdapterConfig::from_json(j, "a.json").scaling_for("model.layers.0.self_attn.q_proj") == 16.0 / 2);
  // A regex string must match the whole module name.
  auto r = rs_config();
  CHECK(r.targets("model.layers.0.self_attn.v_proj"));
  CHECK_FALSE(r.targets("model.layers.0.self_attn.o_proj"));
  CHECK_FALSE(r.targets("model.layers.0.self_attn.v_proj.extra"));
  // The written config reads back the same.
  const auto back = models::LoraAdapterConfig::from_json(r.to_json(), "w.json");
  CHECK(back.to_json() == r.to_json());

  auto with = [&](const char* field, nlohmann::ordered_json v) {
    auto k = j;
    k[field] = std::move(v);
    return peft_error_field(k);
  };
  CHECK(with("fan_in_fan_out", true) == "fan_in_fan_out");
  CHECK(with("bias", "all") == "bias");
  CHECK(with("use_dora", true) == "use_dora");
  CHECK(with("modules_to_save", {"lm_head"}) == "modules_to_save");
  CHECK(with("peft_type", "IA3") == "peft_type");
  CHECK(with("r", 0) == "r");
  CHECK(with("target_modules", nullptr) == "target_modules");
  CHECK(with("target_modules", "(unclosed") == "target_modules");
}

TEST_CASE("lora adapters: unmerged = merged = the explicit weight sum, removal restores exactly", "[llm][peft]") {
  for (bool qwen : {false, true}) {
    const LlamaConfig c = tiny(qwen);
    models::LlamaForCausalLM<float> m(c, 21);
    auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 6), {1, 4, 9, 16, 25, 36, 3, 1, 4, 1, 5, 9});
    const auto base = host(m.forward(ids));
    models::LoraAdapterConfig plain;
    plain.r = 3;
    plain.lora_alpha = 5;
    plain.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    auto a = models::make_lora_adapter(m, plain, 1), b = models::make_lora_adapter(m, rs_config(), 2);
    CHECK(a.modules.size() == 14);
    CHECK(b.modules.size() == 6);
    CHECK(b.modules.at("model.layers.1.mlp.down_proj").rank() == 3);
    CHECK(b.modules.at("model.layers.0.mlp.down_proj").scaling == 5.0 / std::sqrt(4.0));
    {  // PEFT's initialisation (B = 0) leaves the model exactly as it was.
      models::AttachedAdapters<float> on(m, {{&a, 1.0}}, models::LoraMode::unmerged);
      CHECK(host(m.forward(ids)) == base);
    }
    randomize(a, 3);
    randomize(b, 4);
    // The explicit reference: a copy of the model whose weights are W + sum_k w_k s_k B_k A_k,
    // summed on the host in double.
    const std::vector<std::pair<models::PeftAdapter<float>*, double>> mix{{&a, 0.7}, {&b, -0.4}};
    models::LlamaForCausalLM<float> ref(c, 21);
    for (auto& [name, lin] : models::adaptable_linears(ref)) {
      auto w = lin->weight.to_vector();
      const index_t out = lin->out_features(), in = lin->in_features();
      for (const auto& [ad, wk] : mix) {
        const auto it = ad->modules.find(name);
        if (it == ad->modules.end()) continue;
        const auto A = it->second.lora_A.weight.to_vector(), B = it->second.lora_B.weight.to_vector();
        const index_t rk = it->second.rank();
        for (index_t o = 0; o < out; ++o)
          for (index_t i = 0; i < in; ++i) {
            double s = 0;
            for (index_t k = 0; k < rk; ++k) s += double(B[std::size_t(o * rk + k)]) * A[std::size_t(k * in + i)];
            w[std::size_t(o * in + i)] += float(wk * it->second.scaling * s);
          }
      }
      lin->weight = Tensor<float, DynShape<2>>::from_host(DynShape<2>(out, in), w);
    }
    const auto want = ref.forward(ids);
    CHECK(test::normwise_rel_error(want, m.forward(ids)) > 0.05);  // the adapters matter
    for (auto mode : {models::LoraMode::unmerged, models::LoraMode::merged}) {
      models::AttachedAdapters<float> on(m, {{&a, 0.7}, {&b, -0.4}}, mode);
      CHECK(on.module_count() == 14);
      const double err = test::normwise_rel_error(m.forward(ids), want);
      INFO((qwen ? "qwen2 " : "llama ") << (mode == models::LoraMode::merged ? "merged" : "unmerged")
                                        << ": logits vs the explicit sum, normwise relative error " << err);
      CHECK(err <= 1e-5);
      // The KV-cache path sees the adapters too.
      auto cache = m.make_cache(2, 6);
      const double cerr = test::normwise_rel_error(m.logits(m.forward_cached(ids, cache)), want);
      CHECK(cerr <= 1e-5);
      on.remove();
      CHECK(host(m.forward(ids)) == base);  // bit for bit
    }
    {  // Nested attachments come off in reverse order, each restoring what it found.
      models::AttachedAdapters<float> first(m, {{&a, 1.0}}, models::LoraMode::merged);
      const auto only_a = host(m.forward(ids));
      {
        models::AttachedAdapters<float> second(m, {{&b, 1.0}}, models::LoraMode::unmerged);
        CHECK(host(m.forward(ids)) != only_a);
      }
      CHECK(host(m.forward(ids)) == only_a);
    }
    CHECK(host(m.forward(ids)) == base);
  }
}

TEST_CASE("linear_group: one shared low-rank product equals each layer's own forward, and its fallbacks", "[llm][lora]") {
  // Three layers on one x [2, 5, 24] with updates of ranks 3, 1 and 4 (a wrong offset into the
  // stacked product would mix them), one without a bias; then the cases that run each layer alone.
  auto rand = [](index_t r, index_t c, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<float> v(std::size_t(r * c));
    for (auto& x : v) x = n(rng);
    return Tensor<float, DynShape<2>>::from_host(DynShape<2>(r, c), v);
  };
  const index_t in = 24;
  std::array<nn::Linear<float>, 3> l{nn::Linear<float>(in, 16, true, 1), nn::Linear<float>(in, 8, false, 2),
                                     nn::Linear<float>(in, 12, true, 3)};
  const index_t ranks[3] = {3, 1, 4};
  for (std::size_t i = 0; i < 3; ++i) {
    l[i].delta_A = rand(ranks[i], in, 10 + i);
    l[i].delta_B = rand(l[i].out_features(), ranks[i], 20 + i);
  }
  const auto x3 = rand(10, in, 30).reshape(DynShape<3>(2, 5, in));
  const std::array<const nn::Linear<float>*, 3> ptrs{&l[0], &l[1], &l[2]};
  auto check_each = [&](const std::array<Tensor<float, DynShape<3>>, 3>& got, double tol) {
    for (std::size_t i = 0; i < 3; ++i) {
      const auto want = l[i](x3);
      REQUIRE(got[i].extents() == want.extents());
      const double err = test::normwise_rel_error(got[i], want);
      INFO("layer " << i << ": normwise relative error " << err);
      CHECK(err <= tol);
    }
  };
  check_each(nn::linear_group(x3, ptrs), 1e-6);
  {  // Recorded, the shared path is one concat of the A factors, one product and a narrow per layer.
    l[0].delta_A.set_requires_grad();
    autograd::Tape tape;
    const auto ys = nn::linear_group(x3, ptrs);
    const auto names = tape.node_names();
    CHECK(std::count(names.begin(), names.end(), "concat") == 1);
    CHECK(std::count(names.begin(), names.end(), "narrow") == 3);
    l[0].delta_A.set_requires_grad(false);
  }
  // The update matters (the comparison above is not of base outputs alone).
  CHECK(test::normwise_rel_error(nn::linear_group(x3, ptrs)[2], linear(x3, l[2].weight, l[2].bias)) > 0.05);
  // A layer without an update: every layer runs its own forward (the same bits).
  const auto saved_A = l[1].delta_A, saved_B = l[1].delta_B;
  l[1].delta_A = Tensor<float, DynShape<2>>();
  l[1].delta_B = Tensor<float, DynShape<2>>();
  check_each(nn::linear_group(x3, ptrs), 0.0);
  // A factor that does not fit x: the layer's own forward reports it (linear's ShapeError).
  l[1].delta_A = rand(1, in + 1, 40);
  l[1].delta_B = saved_B;
  CHECK_THROWS_AS(nn::linear_group(x3, ptrs), ShapeError);
  // B of the wrong rank is caught by the shared path's own linear as well.
  l[1].delta_A = saved_A;
  l[1].delta_B = rand(l[1].out_features(), 2, 41);
  CHECK_THROWS_AS(nn::linear_group(x3, ptrs), ShapeError);
}

TEST_CASE("peft adapter files: save and load round trip, errors name the file, key and shapes", "[llm][peft][io]") {
  const LlamaConfig c = tiny();
  models::LlamaForCausalLM<float> m(c, 5);
  auto a = models::make_lora_adapter(m, rs_config(), 9);
  randomize(a, 10);
  const auto dir = std::filesystem::temp_directory_path() / ("ttmoe_peft_rt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  models::save_peft_adapter(a, dir);
  {
    io::SafetensorsFile f(dir / "adapter_model.safetensors");
    CHECK(f.contains("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"));
    CHECK(f.info("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight").shape == std::vector<std::int64_t>{3, 48});
    CHECK(f.info("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight").shape == std::vector<std::int64_t>{16, 2});
  }
  auto back = models::load_peft_adapter(dir, m);
  REQUIRE(back.modules.size() == a.modules.size());
  for (const auto& [name, mod] : a.modules) {
    CHECK(back.modules.at(name).lora_A.weight.to_vector() == mod.lora_A.weight.to_vector());
    CHECK(back.modules.at(name).lora_B.weight.to_vector() == mod.lora_B.weight.to_vector());
    CHECK(back.modules.at(name).scaling == mod.scaling);
  }
  auto message = [&](const LlamaConfig& other) -> std::string {
    models::LlamaForCausalLM<float> o(other, 1);
    try {
      models::load_peft_adapter(dir, o);
    } catch (const nn::CheckpointError& e) {
      CHECK(e.path() == (dir / "adapter_model.safetensors").string());
      return e.what();
    }
    return "<no error>";
  };
  SECTION("an adapter for another width: every mis-shaped key with both shapes") {
    auto j = tiny_json();
    j["hidden_size"] = 48;
    j["num_attention_heads"] = 6;
    j["num_key_value_heads"] = 3;
    const auto msg = message(LlamaConfig::from_json(j));
    INFO(msg);
    CHECK(msg.find("key 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight': shape [4, 32] does not fit "
                   "the base model's model.layers.0.self_attn.q_proj [out, in] = [48, 48] with r = 4 (expected [4, 48])") !=
          std::string::npos);
    CHECK(msg.find("(10 problems)") != std::string::npos);
  }
  SECTION("an adapter for a deeper model: unknown modules") {
    auto j = tiny_json();
    j["num_hidden_layers"] = 1;
    const auto msg = message(LlamaConfig::from_json(j));
    INFO(msg);
    CHECK(msg.find("unknown module 'model.layers.1.mlp.down_proj'") != std::string::npos);
    CHECK(msg.find("[3, 48]") != std::string::npos);
  }
  SECTION("a refused setting in the config") {
    auto j = nlohmann::ordered_json::parse(std::ifstream(dir / "adapter_config.json"));
    j["fan_in_fan_out"] = true;
    std::ofstream(dir / "adapter_config.json") << j.dump();
    try {
      models::load_peft_adapter(dir, m);
      FAIL("no error");
    } catch (const models::PeftConfigError& e) {
      CHECK(e.field() == "fan_in_fan_out");
      CHECK(e.file() == (dir / "adapter_config.json").string());
    }
  }
  SECTION("a module the config does not target, a missing partner, a missing folder") {
    auto j = nlohmann::ordered_json::parse(std::ifstream(dir / "adapter_config.json"));
    j["target_modules"] = R"(.*\.(q_proj|down_proj))";  // v_proj keys now untargeted
    std::ofstream(dir / "adapter_config.json") << j.dump();
    std::string msg;
    try {
      models::load_peft_adapter(dir, m);
    } catch (const nn::CheckpointError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.find("module 'model.layers.0.self_attn.v_proj' is not selected by target_modules") != std::string::npos);
    CHECK_THROWS_AS(models::load_peft_adapter(dir / "nope", m), io::SafetensorsError);
  }
  std::filesystem::remove_all(dir);
}

// ---- LoRA training memory (training/llama_lora.hpp) ----
// What the tape keeps is read off the CPU caching pool: buffers of 256 KiB and more come from it, so
// its in-use bytes after a forward, with the test holding nothing but the output, are what the
// recorded ops keep for the backward. Sizes below are powers of two (the pool's exact size classes).
TEST_CASE("lora training memory: a frozen weight keeps no input, the low-rank branch keeps it once", "[llm][lora][memory]") {
  auto& pool = cpu::memory_pool();
  const std::size_t x_bytes = 512 * 1024 * 4, y_bytes = 512 * 128 * 4;  // x [512, 1024], y [512, 128]
  nn::Linear<float> lin(1024, 128, false, 1);
  auto A = Tensor<float, DynShape<2>>::full(DynShape<2>(8, 1024), 0.01f);
  auto B = Tensor<float, DynShape<2>>::full(DynShape<2>(128, 8), 0.02f);
  A.set_requires_grad();
  B.set_requires_grad();
  // Bytes the tape holds after y = lin(x) once the caller has dropped x.
  auto kept = [&](bool weight_trainable, bool low_rank) {
    lin.weight.set_requires_grad(weight_trainable);
    lin.delta_A = low_rank ? A : Tensor<float, DynShape<2>>();
    lin.delta_B = low_rank ? B : Tensor<float, DynShape<2>>();
    autograd::Tape tape;
    const std::size_t before = pool.stats().in_use_bytes;
    Tensor<float, DynShape<2>> y;
    {
      auto x = Tensor<float, DynShape<2>>::full(DynShape<2>(512, 1024), 1.f);
      x.set_requires_grad();  // an inner layer's input: its gradient is needed
      y = lin(x);
    }
    return pool.stats().in_use_bytes - before;
  };
  CHECK(kept(false, false) == y_bytes);           // frozen W: x is not kept (dx needs W only)
  CHECK(kept(true, false) == y_bytes + x_bytes);  // trainable W: x kept for dW
  CHECK(kept(false, true) == y_bytes + x_bytes);  // frozen W + LoRA: x kept once, for dA
  CHECK(kept(true, true) == y_bytes + x_bytes);   // both need x: still one buffer, shared
}

TEST_CASE("lora training memory: causal attention keeps q, k and v, not the probabilities", "[llm][lora][memory]") {
  // q [1, 8, 512, 64], k [1, 2, 512, 64], v [1, 512, 128] held by the caller; the op's output
  // [1, 512, 512] is the only new buffer the tape may hold. The probabilities (8 x 512 x 512 floats,
  // 8 MiB) and repeated k / v heads are not kept: the backward recomputes them.
  auto& pool = cpu::memory_pool();
  auto q = Tensor<float, DynShape<4>>::full(DynShape<4>(1, 8, 512, 64), 0.01f);
  auto k = Tensor<float, DynShape<4>>::full(DynShape<4>(1, 2, 512, 64), 0.02f);
  auto v = Tensor<float, DynShape<3>>::full(DynShape<3>(1, 512, 128), 0.03f);
  q.set_requires_grad();
  k.set_requires_grad();
  v.set_requires_grad();
  autograd::Tape tape;
  const std::size_t before = pool.stats().in_use_bytes;
  auto out = causal_gqa_attention(q, k, v, 0.125f);
  CHECK(pool.stats().in_use_bytes - before == std::size_t(512 * 512 * 4));
  autograd::backward(tape, sum_all(out));
  // Equal keys: each query's output is the mean of the values it sees, here the constant 0.03.
  const auto o = out.to_vector();
  CHECK(o.front() == Approx(0.03f));
  CHECK(o.back() == Approx(0.03f));
  CHECK(v.grad().to_vector()[0] > 0.f);
}

TEST_CASE("lora training memory: a frozen base keeps no more than a trainable one, per layer", "[llm][lora][memory]") {
  // A model wide enough that every activation is pooled: the tape's bytes with the base frozen
  // (LoRA training) against the same forward with every base weight trainable as well.
  LlamaConfig c = tiny();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 300;
  c.max_position_embeddings = 512;
  models::LlamaForCausalLM<float> m(c, 3);
  models::LoraAdapterConfig ac;
  ac.r = 8;
  ac.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  auto a = models::make_lora_adapter(m, ac, 4);
  std::vector<std::int64_t> row(512);
  for (std::size_t i = 0; i < row.size(); ++i) row[i] = std::int64_t((i * 7) % 300);
  const auto batch = models::CausalLMBatch<>::from_rows({row});
  auto& pool = cpu::memory_pool();
  auto kept = [&](bool base_trainable) {
    training::LoraTrainingAttachment<float, cpu> attach(m, a);
    if (base_trainable) nn::set_trainable(m, "*", true);
    autograd::Tape tape;
    const std::size_t before = pool.stats().in_use_bytes;
    attach.bind();
    auto loss = models::causal_lm_loss(m, batch);
    const std::size_t n = pool.stats().in_use_bytes - before;
    autograd::backward(tape, loss);
    if (base_trainable) nn::freeze(m);
    return n;
  };
  const std::size_t frozen = kept(false), trainable = kept(true);
  INFO("tape bytes, base frozen: " << frozen << ", base trainable: " << trainable);
  CHECK(frozen > 0);
  CHECK(frozen <= trainable);
  CHECK(nn::trainable_parameters<float>(m).empty() == false);  // the attachment restored the flags
}

TEST_CASE("lora training and windowed perplexity: bad input is a clear error", "[llm][lora][errors]") {
  using Catch::Matchers::Contains;
  const LlamaConfig c = tiny();
  models::LlamaForCausalLM<float> m(c, 3);
  using Batch = models::CausalLMBatch<>;
  CHECK_THROWS_WITH(Batch::from_rows({}), Contains("no rows"));
  CHECK_THROWS_WITH(Batch::from_rows({{1, 2}, {}}), Contains("row 1 is empty"));
  CHECK_THROWS_WITH(Batch::from_rows({{1, 2, 3}}, {3}), Contains("a prefix of 3 leaves none to score"));
  CHECK_THROWS_WITH(Batch::from_rows({{1, 2}}, {0, 1}), Contains("2 prefix lengths for 1 rows"));
  // Labels: right-padded row, prompt masked; the count excludes position 0 and the padding.
  const auto b = Batch::from_rows({{5, 6, 7, 8}, {9, 10}}, {1, 0}, 0);
  CHECK(b.labels == std::vector<std::int64_t>{-100, 6, 7, 8, 9, 10, -100, -100});
  CHECK(b.scored_tokens() == 3 + 1);
  Batch bad = b;
  bad.labels[2] = c.vocab_size;
  CHECK_THROWS_WITH(models::causal_lm_loss(m, bad), Contains("label 50 at [0, 2] is outside the vocabulary of 50"));
  bad.labels.pop_back();
  CHECK_THROWS_WITH(models::causal_lm_loss(m, bad), Contains("7 labels for ids [2, 4]"));
  Batch none = Batch::from_rows({{5}});
  CHECK_THROWS_WITH(models::causal_lm_loss(m, none), Contains("score no token"));
  // The loss equals score_continuation's NLL on a single row with the same prefix.
  const std::vector<std::int64_t> row{3, 14, 15, 9, 26, 5};
  const double loss = double(models::causal_lm_loss(m, Batch::from_rows({row}, {2})).item());
  CHECK(loss == Approx(models::score_continuation(m, row, 2).nll()).epsilon(1e-5));

  // windowed_perplexity's limits, and one window over the whole text = score_continuation from 1.
  CHECK_THROWS_WITH(models::windowed_perplexity(m, row, 1, 1), Contains("window 1 must be in [2, 64]"));
  CHECK_THROWS_WITH(models::windowed_perplexity(m, row, 65, 1), Contains("window 65 must be in [2, 64]"));
  CHECK_THROWS_WITH(models::windowed_perplexity(m, row, 4, 5), Contains("stride 5 must be in [1, 4]"));
  CHECK_THROWS_WITH(models::windowed_perplexity(m, {7}, 4, 2), Contains("1 tokens leave nothing to score"));
  const auto whole = models::windowed_perplexity(m, row, 8, 8);
  CHECK(whole.tokens == 5);
  CHECK(whole.logprob == Approx(models::score_continuation(m, row, 1).logprob).epsilon(1e-6));
  // Stride 1 with window 3: every token after the first scored once.
  CHECK(models::windowed_perplexity(m, row, 3, 1).tokens == 5);

  // An adapter for another architecture: one error naming each module, nothing changed.
  models::LoraAdapterConfig ac;
  ac.r = 2;
  ac.target_modules = {"q_proj"};
  auto a = models::make_lora_adapter(m, ac, 1);
  a.modules.begin()->second.lora_A.weight = Tensor<float, DynShape<2>>::zeros(DynShape<2>(2, 7));
  a.modules["model.layers.9.mlp.up_proj"] = a.modules.begin()->second;
  const auto trainable = nn::trainable_parameters<float>(m).size();
  try {
    training::LoraTrainingAttachment<float, cpu> attach(m, a);
    FAIL("a mismatched adapter was attached");
  } catch (const nn::CheckpointError& e) {
    CHECK_THAT(e.what(), Contains("do not fit the weight [out, in] = [32, 32]"));
    CHECK_THAT(e.what(), Contains("unknown module 'model.layers.9.mlp.up_proj'"));
  }
  CHECK(nn::trainable_parameters<float>(m).size() == trainable);
}
