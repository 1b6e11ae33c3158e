// The TTMM expert store (ttmm/expert_store.hpp): a round trip through the writer and the reader,
// restart behaviour (complete experts are skipped, leftovers of a killed writer are ignored), and
// each corruption the reader must name: truncated weights, index K vs centroids, rank and targets
// vs the base model, a missing expert folder, a foreign base model, malformed JSON.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ttmm_test_util.hpp"
#include "ttmoe/ttmm/expert_store.hpp"

using namespace ttmoe;
using ttmm_test::ScratchDir;

namespace {

constexpr index_t K = 3, d = 5;

Tensor<float, DynShape<2>> some_centroids() {
  std::vector<float> v(K * d);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7) * 0.25f - 0.5f;
  return Tensor<float, DynShape<2>>::from_host(DynShape<2>(K, d), v);
}

ttmm::StoreIndex some_index(const models::LlamaConfig& c) { return ttmm_test::store_index(c, d, {10, 4, 7}); }

/// Writes a complete store of K experts for `m` into `dir`.
void write_store(const std::filesystem::path& dir, models::LlamaForCausalLM<float>& m) {
  ttmm_test::write_store(dir, m, some_centroids(), {10, 4, 7}, 100);
}

/// The StoreError message of opening `dir` for `m`; fails the test when it opens.
std::string open_error(const std::filesystem::path& dir, const models::LlamaForCausalLM<float>& m,
                       std::string* file = nullptr) {
  try {
    ttmm::ExpertStore::open(dir, models::linear_shapes(m));
  } catch (const ttmm::StoreError& e) {
    if (file) *file = e.file();
    return e.what();
  }
  FAIL("the store opened");
  return {};
}

void rewrite_index(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j;
  {
    std::ifstream in(dir / "index.json");
    j = nlohmann::json::parse(in);
  }
  edit(j);
  std::ofstream(dir / "index.json") << j.dump(2);
}

}  // namespace

TEST_CASE("ttmm store: round trip of index, centroids and experts", "[ttmm][store]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  models::LlamaForCausalLM<float> m(c, 1);
  ScratchDir tmp("ttmm_store_rt");
  write_store(tmp.path, m);

  const auto s = ttmm::ExpertStore::open(tmp.path, models::linear_shapes(m),
                                         ttmm::BaseModelId{"tiny-llama", ttmm::config_fingerprint(c.to_json())});
  CHECK(s.num_experts() == K);
  CHECK(s.index().cluster_sizes == std::vector<std::int64_t>{10, 4, 7});
  CHECK(s.index().embedder_id == "sentence-transformers/all-mpnet-base-v2");
  CHECK(s.index().expert_folders == std::vector<std::string>{"experts/0", "experts/1", "experts/2"});
  CHECK(s.centroids().to_vector() == some_centroids().to_vector());
  for (index_t i = 0; i < K; ++i) {
    const auto want = ttmm_test::random_expert(m, 100 + std::uint64_t(i));
    const auto got = s.load_expert(i);
    REQUIRE(got.modules.size() == want.modules.size());
    for (const auto& [name, mod] : want.modules) {
      CHECK(got.modules.at(name).lora_A.weight.to_vector() == mod.lora_A.weight.to_vector());
      CHECK(got.modules.at(name).lora_B.weight.to_vector() == mod.lora_B.weight.to_vector());
      CHECK(got.modules.at(name).scaling == Approx(16.0 / 4));
    }
  }
  CHECK_THROWS_AS(s.expert_dir(K), ValueError);
}

TEST_CASE("ttmm store: restart skips complete experts and ignores a killed writer's leftovers", "[ttmm][store]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  models::LlamaForCausalLM<float> m(c, 1);
  ScratchDir tmp("ttmm_store_restart");
  ttmm::ExpertStoreWriter w(tmp.path);
  auto e0 = ttmm_test::random_expert(m, 100);
  CHECK_FALSE(w.has_expert(0));
  CHECK(w.add_expert(0, e0));
  CHECK(w.has_expert(0));
  // A second writer (a restarted run) skips it and leaves the file untouched.
  const auto before = std::filesystem::last_write_time(tmp.path / "experts/0/adapter_model.safetensors");
  ttmm::ExpertStoreWriter again(tmp.path);
  auto other = ttmm_test::random_expert(m, 999);
  CHECK_FALSE(again.add_expert(0, other));
  CHECK(std::filesystem::last_write_time(tmp.path / "experts/0/adapter_model.safetensors") == before);
  // What a process killed mid-write leaves: a partial folder, which is neither expert 1 nor read.
  std::filesystem::create_directories(tmp.path / "experts/.partial-1-4242-0");
  std::ofstream(tmp.path / "experts/.partial-1-4242-0/adapter_config.json") << "{";
  CHECK_FALSE(again.has_expert(1));
  // A hand-damaged folder is not taken as complete either.
  std::filesystem::create_directories(tmp.path / "experts/2");
  std::ofstream(tmp.path / "experts/2/adapter_config.json") << "{}";
  std::ofstream(tmp.path / "experts/2/adapter_model.safetensors") << "garbage";
  CHECK_FALSE(again.has_expert(2));
  CHECK(again.remove_partial_experts() == 1);
  CHECK_FALSE(std::filesystem::exists(tmp.path / "experts/.partial-1-4242-0"));
}

TEST_CASE("ttmm store: corrupt or mismatched stores give StoreError naming the file", "[ttmm][store][errors]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  models::LlamaForCausalLM<float> m(c, 1);
  ScratchDir tmp("ttmm_store_bad");
  const auto dir = tmp.path / "store";
  auto fresh = [&] {
    std::filesystem::remove_all(dir);
    write_store(dir, m);
    REQUIRE_NOTHROW(ttmm::ExpertStore::open(dir, models::linear_shapes(m)));
  };
  std::string file;

  SECTION("truncated adapter weights") {
    fresh();
    const auto w = dir / "experts/1/adapter_model.safetensors";
    std::filesystem::resize_file(w, std::filesystem::file_size(w) - 100);
    const auto msg = open_error(dir, m, &file);
    CHECK(file == (dir / "experts/1").string());
    CHECK_THAT(msg, Catch::Contains("expert 1") && Catch::Contains("adapter_model.safetensors"));
  }
  SECTION("truncated centroids") {
    fresh();
    const auto f = dir / "centroids.safetensors";
    std::filesystem::resize_file(f, std::filesystem::file_size(f) - 8);
    CHECK_THAT(open_error(dir, m, &file), Catch::Contains("centroids.safetensors"));
  }
  SECTION("index K does not match the centroids") {
    fresh();
    rewrite_index(dir, [](nlohmann::json& j) {
      j["num_experts"] = 2;
      j["cluster_sizes"] = {1, 2};
      j["experts"] = {"experts/0", "experts/1"};
    });
    const auto msg = open_error(dir, m, &file);
    CHECK(file == (dir / "centroids.safetensors").string());
    CHECK_THAT(msg, Catch::Contains("[3, 5]") && Catch::Contains("K = 2"));
  }
  SECTION("index K does not match its own lists") {
    fresh();
    rewrite_index(dir, [](nlohmann::json& j) { j["cluster_sizes"] = {1, 2}; });
    CHECK_THAT(open_error(dir, m, &file), Catch::Contains("cluster_sizes") && Catch::Contains("num_experts = 3"));
    CHECK(file == (dir / "index.json").string());
  }
  SECTION("rank in the index differs from the experts'") {
    fresh();
    rewrite_index(dir, [](nlohmann::json& j) { j["rank"] = 8; });
    const auto msg = open_error(dir, m, &file);
    CHECK(file == (dir / "experts/0/adapter_config.json").string());
    CHECK_THAT(msg, Catch::Contains("rank 4") && Catch::Contains("rank 8"));
  }
  SECTION("targets in the index differ from the experts'") {
    fresh();
    rewrite_index(dir, [](nlohmann::json& j) { j["target_modules"] = {"q_proj", "v_proj"}; });
    CHECK_THAT(open_error(dir, m), Catch::Contains("targets") && Catch::Contains("q_proj"));
  }
  SECTION("experts trained for another base model (shapes do not fit)") {
    fresh();
    auto j = ttmm_test::tiny_llama_json();
    j["intermediate_size"] = 40;
    models::LlamaForCausalLM<float> other(models::LlamaConfig::from_json(j), 2);
    const auto msg = open_error(dir, other, &file);
    CHECK(file == (dir / "experts/0").string());
    CHECK_THAT(msg, Catch::Contains("mlp.down_proj") && Catch::Contains("[32, 40]"));
  }
  SECTION("a foreign base model config (fingerprint)") {
    fresh();
    auto j = ttmm_test::tiny_llama_json();
    j["rope_theta"] = 500000.0;  // same shapes, different model
    const auto other = models::LlamaConfig::from_json(j);
    try {
      ttmm::ExpertStore::open(dir, models::linear_shapes(m), ttmm::BaseModelId{"other", ttmm::config_fingerprint(other.to_json())});
      FAIL("opened");
    } catch (const ttmm::StoreError& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains("tiny-llama") && Catch::Contains("'other'"));
    }
  }
  SECTION("a missing expert folder") {
    fresh();
    std::filesystem::remove_all(dir / "experts/2");
    const auto msg = open_error(dir, m, &file);
    CHECK(file == (dir / "experts/2").string());
    CHECK_THAT(msg, Catch::Contains("expert 2 is missing"));
  }
  SECTION("index.json missing, malformed or from the future") {
    fresh();
    std::ofstream(dir / "index.json") << "{\"format\": ";
    CHECK_THAT(open_error(dir, m), Catch::Contains("index.json") && Catch::Contains("invalid JSON"));
    fresh();
    rewrite_index(dir, [](nlohmann::json& j) { j["format_version"] = 99; });
    CHECK_THAT(open_error(dir, m), Catch::Contains("format_version") && Catch::Contains("99"));
    fresh();
    rewrite_index(dir, [](nlohmann::json& j) { j["experts"][0] = "../../etc"; });
    CHECK_THAT(open_error(dir, m), Catch::Contains("not a folder inside the store"));
    fresh();
    std::filesystem::remove(dir / "index.json");
    CHECK_THAT(open_error(dir, m), Catch::Contains("index.json") && Catch::Contains("missing"));
  }
  SECTION("the writer refuses an index that contradicts itself") {
    ttmm::ExpertStoreWriter w(dir);
    auto x = some_index(c);
    x.cluster_sizes.pop_back();
    CHECK_THROWS_AS(w.write_index(x), ValueError);
    CHECK_FALSE(std::filesystem::exists(dir / "index.json"));
  }
}
