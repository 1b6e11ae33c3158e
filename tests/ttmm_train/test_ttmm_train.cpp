// Unit tests of the TTMM training side that need no reference library: corpora from folders and JSONL
// (order, ids, skipped documents and the errors that name file / line / field), truncation to N
// tokens, clustering into exactly K (and its refusals), the rank plan, and expert training (seeded
// per expert: the same adapter whichever order experts are trained in; the base model untouched).

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ttmoe/models/llm.hpp"
#include "ttmoe/ttmm/clustering.hpp"
#include "ttmoe/ttmm/corpus.hpp"
#include "ttmoe/ttmm/expert_training.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("ttmoe_ttmm_train_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

/// The message of the CorpusError `f` throws ("<none>" when it throws nothing).
template <class F>
std::string corpus_error(F&& f) {
  try {
    f();
  } catch (const ttmm::CorpusError& e) {
    return e.what();
  }
  return "<none>";
}

template <class F>
std::string clustering_error(F&& f) {
  try {
    f();
  } catch (const ttmm::ClusteringError& e) {
    return e.what();
  }
  return "<none>";
}

/// A tokenizer for tests: BOS (id 1) then one id per byte (byte + 2).
class ByteTokenizer final : public text::Tokenizer {
 public:
  std::vector<std::int32_t> encode(std::string_view t, bool special) const override {
    std::vector<std::int32_t> out;
    if (special) out.push_back(1);
    for (unsigned char c : t) out.push_back(std::int32_t(c) + 2);
    return out;
  }
  std::string decode(std::span<const std::int32_t>, bool) const override { return {}; }
  std::size_t vocab_size() const override { return 258; }
  std::optional<std::int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::string id_to_token(std::int32_t) const override { return {}; }
  std::optional<std::int32_t> bos_id() const override { return 1; }
  std::optional<std::int32_t> eos_id() const override { return std::nullopt; }
  std::vector<std::int32_t> special_ids() const override { return {1}; }
};

using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("ttmm corpus: a folder is read recursively in sorted order, bad documents skipped and named",
          "[ttmm][corpus]") {
  const auto root = scratch("folder");
  write(root / "b.txt", "second document");
  write(root / "a" / "z.txt", "first document");
  write(root / "c" / "empty.txt", "  \n\t ");
  write(root / "c" / "latin1.txt", "caf\xE9 au lait");
  write(root / "d.txt", "third \xEF\xBF\xBD is a real U+FFFD");
  const auto c = ttmm::load_corpus(root);
  REQUIRE(c.documents.size() == 3);
  CHECK(c.documents[0].id == "a/z.txt");
  CHECK(c.documents[0].text == "first document");
  CHECK(c.documents[1].id == "b.txt");
  CHECK(c.documents[2].id == "d.txt");
  REQUIRE(c.skipped.size() == 2);
  CHECK(c.skipped[0].id == "c/empty.txt");
  CHECK(c.skipped[0].reason == "empty");
  CHECK(c.skipped[1].id == "c/latin1.txt");
  CHECK_THAT(c.skipped[1].reason, Contains("not valid UTF-8") && Contains("offset 3"));
  CHECK_THAT(c.skipped_report(), Contains("skipped c/empty.txt: empty") && Contains("skipped c/latin1.txt"));
}

TEST_CASE("ttmm corpus: JSONL with a configurable text field and id field", "[ttmm][corpus]") {
  const auto root = scratch("jsonl");
  write(root / "c.jsonl", "{\"body\": \"one\", \"name\": \"x\"}\n\n{\"body\": \"\", \"name\": \"y\"}\r\n"
                          "{\"body\": \"bad \xFF\", \"name\": \"z\"}\n{\"body\": \"two\", \"name\": 7}\n");
  ttmm::CorpusOptions o;
  o.text_field = "body";
  o.id_field = "name";
  const auto c = ttmm::load_corpus(root / "c.jsonl", o);
  REQUIRE(c.documents.size() == 2);
  CHECK(c.documents[0].id == "x");
  CHECK(c.documents[0].text == "one");
  CHECK(c.documents[1].id == "7");
  REQUIRE(c.skipped.size() == 2);
  CHECK(c.skipped[0].id == "y");
  CHECK(c.skipped[0].reason == "empty");
  CHECK(c.skipped[1].id == "c.jsonl:4");  // the id field cannot be read from an invalid line

  // Without an id field the ids are <file>:<line>.
  o.id_field.clear();
  CHECK(ttmm::load_corpus(root / "c.jsonl", o).documents[1].id == "c.jsonl:5");
}

TEST_CASE("ttmm corpus: malformed, empty and all-bad corpora give CorpusError naming what is wrong",
          "[ttmm][corpus][errors]") {
  const auto root = scratch("errors");
  fs::create_directories(root / "empty");
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "empty"); }), Contains("holds no document"));
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "missing"); }), Contains("no such folder or file"));
  write(root / "bad" / "1.txt", "");
  write(root / "bad" / "2.txt", "\xC0\xAF");
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "bad"); }),
             Contains("no usable document") && Contains("1.txt (empty)") && Contains("2.txt (not valid UTF-8"));
  write(root / "a.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n");
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "a.jsonl"); }), Contains("a.jsonl:2: not a JSON object"));
  write(root / "b.jsonl", "{\"text\": \"ok\"}\n{\"txt\": \"x\"}\n");
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "b.jsonl"); }), Contains("b.jsonl:2: no field 'text'"));
  write(root / "c.jsonl", "{\"text\": 3}\n");
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "c.jsonl"); }), Contains("c.jsonl:1: field 'text' is a number"));
  write(root / "d.jsonl", "{\"text\": \"ok\"\n");
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "d.jsonl"); }), Contains("d.jsonl:1: not a JSON object ("));
  write(root / "e.csv", "text\n");
  CHECK_THAT(corpus_error([&] { ttmm::load_corpus(root / "e.csv"); }), Contains("extension '.csv'"));
}

TEST_CASE("ttmm corpus: documents are truncated to their first N tokens, BOS included", "[ttmm][corpus]") {
  ttmm::Corpus c;
  c.source = "mem";
  c.documents = {{"long", std::string(50, 'a')}, {"short", "hi"}};
  ByteTokenizer tok;
  const auto ids = ttmm::tokenize_corpus(c, tok, 8);
  REQUIRE(ids.size() == 2);
  CHECK(ids[0].size() == 8);
  CHECK(ids[0][0] == 1);
  CHECK(ids[0][1] == 'a' + 2);
  CHECK(ids[1] == std::vector<std::int64_t>{1, 'h' + 2, 'i' + 2});
  CHECK(ttmm::tokenize_corpus(c, tok).at(0).size() == 51);  // the default 1024 keeps all 51
  CHECK_THAT(corpus_error([&] { ttmm::tokenize_corpus(c, tok, 1); }), Contains("max_tokens 1"));
}

TEST_CASE("ttmm clustering: exactly K non-empty clusters with unit centroids of their members",
          "[ttmm][clustering]") {
  // Three well separated directions, 4 noisy documents each.
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.f, 0.05f);
  const index_t N = 12, d = 3;
  std::vector<float> x(N * d);
  for (index_t i = 0; i < N; ++i)
    for (index_t k = 0; k < d; ++k) x[std::size_t(i * d + k)] = (k == i % 3 ? 2.f : 0.f) + noise(rng);
  const auto E = Tensor<float, DynShape<2>>::from_host(DynShape<2>(N, d), x);
  const auto c = ttmm::cluster_embeddings(E, 3);
  REQUIRE(c.count() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    const auto m = c.members(k);
    REQUIRE(m.size() == 4);
    for (auto i : m) CHECK(i % 3 == m[0] % 3);  // one direction per cluster
    // centroid = normalise(mean of normalised members)
    std::vector<double> mean(d, 0.0);
    for (auto i : m) {
      double n = 0;
      for (index_t j = 0; j < d; ++j) n += double(x[i * d + j]) * x[i * d + j];
      for (index_t j = 0; j < d; ++j) mean[j] += x[i * d + j] / std::sqrt(n);
    }
    double n = 0;
    for (auto v : mean) n += v * v;
    const auto cent = c.centroids.to_vector();
    for (index_t j = 0; j < d; ++j) CHECK(cent[k * d + j] == Approx(mean[j] / std::sqrt(n)).margin(1e-6));
  }
}

TEST_CASE("ttmm clustering: K out of range, coinciding or non-finite embeddings give ClusteringError",
          "[ttmm][clustering][errors]") {
  const auto E = Tensor<float, DynShape<2>>::from_host(DynShape<2>(3, 2), std::vector<float>{1, 0, 2, 0, 0, 1});
  CHECK_THAT(clustering_error([&] { ttmm::cluster_embeddings(E, 4); }),
             Contains("K = 4 clusters for 3 documents"));
  CHECK_THAT(clustering_error([&] { ttmm::cluster_embeddings(E, 0); }), Contains("K = 0"));
  // Documents 0 and 1 point the same way: only 2 clusters exist.
  CHECK_THAT(clustering_error([&] { ttmm::cluster_embeddings(E, 3); }), Contains("only 2 of K = 3"));
  CHECK(ttmm::cluster_embeddings(E, 2).sizes.size() == 2);
  const auto Z = Tensor<float, DynShape<2>>::from_host(DynShape<2>(2, 2), std::vector<float>{1, 0, 0, 0});
  CHECK_THAT(clustering_error([&] { ttmm::cluster_embeddings(Z, 1); }), Contains("document 1 is all zeros"));
  const auto F = Tensor<float, DynShape<2>>::from_host(DynShape<2>(2, 2), std::vector<float>{1, NAN, 0, 1});
  CHECK_THAT(clustering_error([&] { ttmm::cluster_embeddings(F, 1); }), Contains("document 0 has a non-finite"));
}

TEST_CASE("ttmm expert plan: largest first, each to the least-loaded rank", "[ttmm][training]") {
  // By the rule: 5 -> r0; 3 -> r1; 3 -> r1 (3 < 5); 2 -> r0 (5 < 6); 2 -> r1 (6 < 7); 1 -> r0 (7 < 8).
  const auto plan = ttmm::assign_experts_to_ranks({5, 3, 3, 2, 2, 1}, 2);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0] == std::vector<std::size_t>{0, 3, 5});
  CHECK(plan[1] == std::vector<std::size_t>{1, 2, 4});
  // More ranks than experts: the extra ranks idle; one rank: everything.
  const auto wide = ttmm::assign_experts_to_ranks({1, 1}, 4);
  CHECK(wide[0].size() + wide[1].size() == 2);
  CHECK(wide[2].empty());
  CHECK(ttmm::assign_experts_to_ranks({4, 9, 1}, 1)[0] == std::vector<std::size_t>{0, 1, 2});
  CHECK_THROWS_AS(ttmm::assign_experts_to_ranks({1}, 0), ValueError);
  CHECK(ttmm::expert_seed(0, 1) != ttmm::expert_seed(0, 2));
  CHECK(ttmm::expert_seed(5, 1) == ttmm::expert_seed(5, 1));
}

TEST_CASE("ttmm expert training: an expert depends on its seed and documents only", "[ttmm][training]") {
  models::LlamaConfig cfg;
  cfg.vocab_size = 40;
  cfg.hidden_size = 16;
  cfg.intermediate_size = 24;
  cfg.num_hidden_layers = 1;
  cfg.num_attention_heads = 2;
  cfg.num_key_value_heads = 1;
  cfg.head_dim = 8;
  cfg.max_position_embeddings = 32;
  models::LlamaForCausalLM<float> m(cfg, 7);
  const auto before = m.model.layers[0].mlp.up_proj.weight.to_vector();
  std::vector<std::vector<std::int64_t>> docs;
  std::mt19937 rng(1);
  for (int i = 0; i < 6; ++i) {
    std::vector<std::int64_t> d(std::size_t(5 + i));
    for (auto& t : d) t = std::int64_t(rng() % 40);
    docs.push_back(d);
  }
  ttmm::ExpertTrainingOptions o;
  o.rank = 4;
  o.adam.lr = 1e-2;
  std::size_t steps = 0;
  const auto a = ttmm::train_expert(m, docs, 3, o, "", [&](const training::StepReport&) { ++steps; });
  CHECK(steps == 2);  // 6 documents, batch 4: one full step and one of 2
  CHECK(a.modules.size() == 7);
  CHECK(a.config.r == 4);
  CHECK(a.config.lora_alpha == 16);
  // Trained: B left its zero start.
  const auto B = a.modules.at("model.layers.0.mlp.up_proj").lora_B.weight.to_vector();
  CHECK(std::any_of(B.begin(), B.end(), [](float v) { return v != 0.f; }));
  CHECK(m.model.layers[0].mlp.up_proj.weight.to_vector() == before);
  // Another expert in between changes nothing about expert 3.
  const auto other = ttmm::train_expert(m, docs, 4, o);
  const auto again = ttmm::train_expert(m, docs, 3, o);
  for (const auto& [name, mod] : a.modules) {
    CHECK(again.modules.at(name).lora_A.weight.to_vector() == mod.lora_A.weight.to_vector());
    CHECK(again.modules.at(name).lora_B.weight.to_vector() == mod.lora_B.weight.to_vector());
  }
  CHECK(other.modules.at("model.layers.0.mlp.up_proj").lora_A.weight.to_vector() !=
        a.modules.at("model.layers.0.mlp.up_proj").lora_A.weight.to_vector());
  CHECK_THROWS_AS(ttmm::train_expert(m, {}, 0, o), ValueError);
}
