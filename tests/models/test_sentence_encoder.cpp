// Sentence encoders (models/bert.hpp, models/mpnet.hpp, models/sentence_encoder.hpp) and the LM
// embedding option (models/llm_embedder.hpp) against sentence-transformers / transformers, on the
// fixtures tests/reference/sentence_encoders.py writes (the real all-MiniLM-L6-v2, random BERT and
// MPNet saved as sentence-transformers folders, a random Llama), and their bad-input errors.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/ttmoe.hpp"
#include "ttmoe/models/llm_embedder.hpp"
#include "ttmoe/models/sentence_embedder.hpp"
#include "ttmoe/models/sentence_encoder.hpp"

namespace fs = std::filesystem;
using namespace ttmoe;

namespace {

fs::path fixtures() { return fs::path(TTMOE_TEST_DATA_DIR) / "sentence_encoders"; }

std::vector<std::string> sentences() {
  std::ifstream in(fixtures() / "sentences.json");
  REQUIRE(in);
  return nlohmann::json::parse(in).get<std::vector<std::string>>();
}

/// The reference embeddings [N, d] written beside a model.
std::vector<float> reference(const fs::path& file, std::vector<std::int64_t>& shape) {
  io::SafetensorsFile f(file);
  shape = f.info("embeddings").shape;
  std::vector<float> v(std::size_t(shape[0] * shape[1]));
  f.read_as<float>("embeddings", std::span<float>(v));
  return v;
}

/// Largest |ours - reference| over all embeddings, after checking the shapes agree.
template <class E>
double max_abs_diff(const E& encoder, const fs::path& ref_file) {
  const auto texts = sentences();
  std::vector<std::int64_t> shape;
  const auto want = reference(ref_file, shape);
  const auto got = encoder.encode(texts);
  REQUIRE(got.extent(0) == index_t(texts.size()));
  REQUIRE(index_t(shape[0]) == got.extent(0));
  REQUIRE(index_t(shape[1]) == got.extent(1));
  const auto g = got.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, double(std::abs(g[i] - want[i])));
  return worst;
}

/// Copies a fixture folder to a scratch place where a test may break it.
fs::path scratch_copy(const fs::path& from, const std::string& name) {
  const fs::path to = fs::temp_directory_path() / ("ttmoe_st_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

}  // namespace

static_assert(models::SentenceEmbedder<models::SentenceEncoder>);
static_assert(models::SentenceEmbedder<models::LlmEmbedder>);

TEST_CASE("all-MiniLM-L6-v2 matches sentence-transformers") {
  std::ifstream in(fixtures() / "minilm" / "model_dir.txt");
  std::string dir;
  std::getline(in, dir);
  REQUIRE(fs::exists(fs::path(dir) / "modules.json"));
  const auto enc = models::SentenceEncoder::load(dir, {.batch_size = 7, .max_seq_length = {}});
  CHECK(enc.dim() == 384);
  CHECK(enc.max_seq_length() == 256);
  CHECK(enc.normalizes());
  CHECK(max_abs_diff(enc, fixtures() / "minilm" / "embeddings.safetensors") <= 1e-4);
  // Unit length, and batching does not change a row.
  const auto one = enc.encode({"A man is eating food."}).to_vector();
  const auto many = enc.encode(sentences()).to_vector();
  double norm = 0, diff = 0;
  for (std::size_t k = 0; k < one.size(); ++k) {
    norm += double(one[k]) * one[k];
    diff = std::max(diff, double(std::abs(one[k] - many[k])));
  }
  CHECK(std::abs(norm - 1.0) < 1e-5);
  CHECK(diff < 1e-5);
}

TEST_CASE("random BERT sentence-transformers folder matches") {
  const auto enc = models::SentenceEncoder::load(fixtures() / "bert_random");
  CHECK(enc.model_type() == "bert");
  CHECK(enc.max_seq_length() == 40);
  CHECK(max_abs_diff(enc, fixtures() / "bert_random" / "embeddings.safetensors") <= 1e-4);
}

TEST_CASE("random MPNet sentence-transformers folder matches") {
  const auto enc = models::SentenceEncoder::load(fixtures() / "mpnet_random", {.batch_size = 5, .max_seq_length = {}});
  CHECK(enc.model_type() == "mpnet");
  CHECK(enc.max_seq_length() == 300);
  CHECK(max_abs_diff(enc, fixtures() / "mpnet_random" / "embeddings.safetensors") <= 1e-4);
}

TEST_CASE("MPNet relative-position buckets") {
  // transformers' MPNetEncoder.relative_position_bucket(32 buckets, max distance 128) at key - query
  // distances -20 .. 20 and far ones.
  CHECK(models::mpnet_relative_bucket(0) == 0);
  CHECK(models::mpnet_relative_bucket(-7) == 7);
  CHECK(models::mpnet_relative_bucket(-8) == 8);
  CHECK(models::mpnet_relative_bucket(-16) == 10);
  CHECK(models::mpnet_relative_bucket(-128) == 15);
  CHECK(models::mpnet_relative_bucket(-1000) == 15);
  CHECK(models::mpnet_relative_bucket(1) == 17);
  CHECK(models::mpnet_relative_bucket(8) == 24);
  CHECK(models::mpnet_relative_bucket(19) == 26);
}

TEST_CASE("LM hidden-state phi matches transformers") {
  const auto emb = models::LlmEmbedder::load(fixtures() / "llama_random", {.max_tokens = 64, .batch_size = 3});
  CHECK(emb.dim() == 32);
  CHECK(max_abs_diff(emb, fixtures() / "llama_random" / "embeddings.safetensors") <= 1e-4);
}

TEST_CASE("LM mean pooling of token ids: batched and padded equals one sequence at a time") {
  // A random tiny Llama (no fixture): sequences of different lengths, one empty, pooled 3 at a time
  // (right-padded) against each one's own hidden states averaged here.
  nlohmann::json j{{"model_type", "llama"}, {"vocab_size", 40}, {"hidden_size", 16}, {"intermediate_size", 24},
                   {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                   {"max_position_embeddings", 32}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
                   {"hidden_act", "silu"}, {"tie_word_embeddings", true}};
  const models::LlamaForCausalLM<float> m(models::LlamaConfig::from_json(j), 5);
  const std::vector<std::vector<std::int64_t>> tokens{{3, 9, 1}, {7}, {}, {2, 5, 8, 13, 21, 34, 1}, {4, 4}};
  std::vector<std::size_t> done;
  const auto got = models::mean_pooled_hidden_states(m, tokens, 3, [&](std::size_t n) { done.push_back(n); });
  const index_t H = 16;
  REQUIRE(got.size() == tokens.size() * std::size_t(H));
  CHECK(done == std::vector<std::size_t>{3, 5});
  autograd::NoGrad ng;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    INFO("sequence " << i);
    const index_t L = index_t(tokens[i].size());
    std::vector<double> want(std::size_t(H), 0.0);
    if (L > 0) {
      const auto h = m.hidden_states(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, L), tokens[i])).to_vector();
      for (index_t t = 0; t < L; ++t)
        for (index_t c = 0; c < H; ++c) want[std::size_t(c)] += h[std::size_t(t * H + c)] / double(L);
    }
    for (index_t c = 0; c < H; ++c) CHECK(std::abs(got[i * std::size_t(H) + std::size_t(c)] - want[std::size_t(c)]) <= 1e-5);
  }
  CHECK(std::any_of(got.begin(), got.end(), [](float v) { return v != 0.f; }));  // not trivially zero
}

TEST_CASE("sentence encoder bad input gives typed errors") {
  const fs::path good = fixtures() / "bert_random";
  SECTION("missing modules.json") {
    const auto dir = scratch_copy(good, "nomodules");
    fs::remove(dir / "modules.json");
    CHECK_THROWS_AS(models::SentenceEncoder::load(dir), models::SentenceEncoderError);
    fs::remove_all(dir);
  }
  SECTION("unknown pooling mode") {
    const auto dir = scratch_copy(good, "pooling");
    auto j = nlohmann::json::parse(std::ifstream(dir / "1_Pooling" / "config.json"));
    if (j.contains("pooling_mode")) {  // sentence-transformers 6 spelling
      j["pooling_mode"] = "max";
    } else {
      j["pooling_mode_mean_tokens"] = false;
      j["pooling_mode_max_tokens"] = true;
    }
    std::ofstream(dir / "1_Pooling" / "config.json") << j.dump();
    try {
      (void)models::SentenceEncoder::load(dir);
      FAIL("no error");
    } catch (const models::SentenceEncoderError& e) {
      CHECK(e.field().rfind("pooling_mode", 0) == 0);
    }
    fs::remove_all(dir);
  }
  SECTION("missing and mis-shaped weights are listed together") {
    const auto dir = scratch_copy(good, "weights");
    io::SafetensorsFile src(good / "model.safetensors");
    io::SafetensorsWriter w;
    for (const auto& name : src.names()) {
      if (name == "encoder.layer.1.output.dense.bias") continue;  // missing
      auto info = src.info(name);
      std::vector<float> v(std::size_t(info.numel()));
      src.read_as<float>(name, std::span<float>(v));
      if (name == "encoder.layer.0.attention.self.key.weight") {  // wrong shape: drop a row
        info.shape[0] -= 1;
        v.resize(std::size_t(info.shape[0] * info.shape[1]));
      }
      w.add(name, std::span<const float>(v), info.shape, io::DType::F32);
    }
    w.write(dir / "model.safetensors");
    try {
      (void)models::SentenceEncoder::load(dir);
      FAIL("no error");
    } catch (const nn::CheckpointError& e) {
      CHECK(e.problems().size() == 2);
      const std::string what = e.what();
      CHECK(what.find("encoder.layer.1.output.dense.bias") != std::string::npos);
      CHECK(what.find("encoder.layer.0.attention.self.key.weight") != std::string::npos);
    }
    fs::remove_all(dir);
  }
  SECTION("unsupported activation in config.json") {
    const auto dir = scratch_copy(good, "act");
    auto j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    j["hidden_act"] = "relu";
    std::ofstream(dir / "config.json") << j.dump();
    try {
      (void)models::SentenceEncoder::load(dir);
      FAIL("no error");
    } catch (const models::EncoderConfigError& e) {
      CHECK(e.field() == "hidden_act");
    }
    fs::remove_all(dir);
  }
  SECTION("an unsupported module type") {
    const auto dir = scratch_copy(good, "dense");
    auto j = nlohmann::json::parse(std::ifstream(dir / "modules.json"));
    j.push_back({{"idx", 3}, {"name", "3"}, {"path", "3_Dense"}, {"type", "sentence_transformers.models.Dense"}});
    std::ofstream(dir / "modules.json") << j.dump();
    CHECK_THROWS_AS(models::SentenceEncoder::load(dir), models::SentenceEncoderError);
    fs::remove_all(dir);
  }
}
