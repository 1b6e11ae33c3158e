// ttmm::embed_corpus: batching, the progress callback and the safetensors cache (hit, stale key,
// corrupt file), with the random BERT sentence-transformers fixture as φ.

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ttmoe/ttmoe.hpp"
#include "ttmoe/ttmm/embed_corpus.hpp"

namespace fs = std::filesystem;
using namespace ttmoe;

namespace {
const models::SentenceEncoder& encoder() {
  static const auto e = models::SentenceEncoder::load(fs::path(TTMOE_TEST_DATA_DIR) / "sentence_encoders" / "bert_random");
  return e;
}
std::vector<std::string> corpus() {
  std::vector<std::string> docs;
  for (int i = 0; i < 11; ++i) docs.push_back("document " + std::to_string(i) + std::string(std::size_t(i * 3), 'x') + " about topic " + std::to_string(i % 3));
  return docs;
}
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}
fs::path scratch(const std::string& name) {
  const auto p = fs::temp_directory_path() / ("ttmoe_embed_" + name + "_" + std::to_string(::getpid())) / "emb.safetensors";
  fs::remove_all(p.parent_path());
  return p;
}
}  // namespace

TEST_CASE("embed_corpus batches like one encode call and reports progress") {
  const auto docs = corpus();
  std::vector<std::size_t> seen;
  ttmm::EmbedCorpusOptions opt;
  opt.batch = 4;
  opt.progress = [&](const ttmm::EmbedProgress& p) {
    CHECK(p.total == docs.size());
    seen.push_back(p.done);
  };
  const auto r = ttmm::embed_corpus(encoder(), docs, opt);
  CHECK_FALSE(r.from_cache);
  CHECK(seen == std::vector<std::size_t>{4, 8, 11});
  CHECK(max_diff(r.embeddings.to_vector(), encoder().encode(docs).to_vector()) < 1e-5);
}

TEST_CASE("embed_corpus cache: hit, stale key, corrupt file") {
  const auto file = scratch("cache");
  auto docs = corpus();
  ttmm::EmbedCorpusOptions opt;
  opt.cache = file;
  const auto first = ttmm::embed_corpus(encoder(), docs, opt);
  CHECK_FALSE(first.from_cache);
  REQUIRE(fs::exists(file));
  CHECK_FALSE(fs::exists(file.string() + ".tmp"));

  const auto again = ttmm::embed_corpus(encoder(), docs, opt);
  CHECK(again.from_cache);
  CHECK(max_diff(again.embeddings.to_vector(), first.embeddings.to_vector()) == 0);

  docs.back() += " changed";  // another corpus: the cached key is stale, so it is recomputed
  const auto changed = ttmm::embed_corpus(encoder(), docs, opt);
  CHECK_FALSE(changed.from_cache);
  CHECK(max_diff(changed.embeddings.to_vector(), encoder().encode(docs).to_vector()) < 1e-5);
  CHECK(ttmm::embed_corpus(encoder(), docs, opt).from_cache);  // and the file now holds the new key

  SECTION("a corrupt file is an error naming it") {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << "this is not a safetensors file";
    try {
      (void)ttmm::embed_corpus(encoder(), docs, opt);
      FAIL("no error");
    } catch (const ttmm::EmbeddingCacheError& e) {
      CHECK(e.file() == file.string());
    }
  }
  SECTION("a safetensors file that is not a cache is an error, and is left alone") {
    io::SafetensorsWriter w;
    const std::vector<float> v{1, 2, 3};
    w.add("weights", std::span<const float>(v), {3}, io::DType::F32);
    w.write(file);
    const auto size = fs::file_size(file);
    CHECK_THROWS_AS(ttmm::embed_corpus(encoder(), docs, opt), ttmm::EmbeddingCacheError);
    CHECK(fs::file_size(file) == size);
  }
  fs::remove_all(file.parent_path());
}
