// Parity of ttmoe's tokenizers with the reference libraries: Hugging Face `tokenizers` (tokenizer.json
// files it trained itself: Llama-3, Qwen2, GPT-2 styles and BERT WordPiece; the pre-tokenizers piece by
// piece) and SentencePiece (a model trained by spm_train, ids from spm_encode). Also ttmoe's BPE
// trainer: the tokenizer.json it writes is loaded by `tokenizers`, which must give ttmoe's ids.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer_fixture.hpp"
#include "ttmoe/text.hpp"

using namespace ttmoe::text;
using ttmoe_test::from_hex;
using ttmoe_test::read_fixture;

namespace {

std::vector<std::int32_t> as_ids(const nlohmann::json& j) { return j.get<std::vector<std::int32_t>>(); }

/// Every text of fixture `name`: ids with and without special tokens, both decodes. With
/// `round_trip`, decoding the plain ids of valid UTF-8 must also give the text back byte for byte
/// (except around the lstrip/rstrip token "<tool>", which consumes white space by design).
void check_hf_case(const std::string& name, bool round_trip) {
  const auto fx = read_fixture(name + ".json");
  const auto tok = load_tokenizer(ttmoe_test::tokenizer_fixture_dir() / name);
  CHECK(tok->vocab_size() == fx["vocab_size"].get<std::size_t>());
  const auto& texts = fx["texts"];
  const auto& results = fx["results"];
  REQUIRE(texts.size() == results.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string text = from_hex(texts[i].get<std::string>());
    INFO(name << " text #" << i << ": \"" << text << "\"");
    const auto& r = results[i];
    const auto ids = tok->encode(text, true);
    CHECK(ids == as_ids(r["ids"]));
    const auto plain = tok->encode(text, false);
    CHECK(plain == as_ids(r["ids_plain"]));
    CHECK(tok->decode(ids, false) == r["decoded"].get<std::string>());
    CHECK(tok->decode(ids, true) == r["decoded_skip"].get<std::string>());
    if (round_trip && sanitize_utf8(text) == text && text.find("<tool>") == std::string::npos) CHECK(tok->decode(plain) == text);
  }
}

}  // namespace

TEST_CASE("tokenizer parity: Llama-3-style byte-level BPE (split regex, ignore_merges, BOS template)", "[tokenizer][parity]") {
  check_hf_case("llama3_bpe", true);
  const auto fx = read_fixture("llama3_bpe.json");
  const auto tok = load_tokenizer(ttmoe_test::tokenizer_fixture_dir() / "llama3_bpe");
  CHECK(tok->bos_id() == fx["bos"].get<std::int32_t>());
  CHECK(tok->eos_id() == fx["eos"].get<std::int32_t>());
}

TEST_CASE("tokenizer parity: Qwen2-style byte-level BPE (NFC, single digits, chat tokens, string merges)", "[tokenizer][parity]") {
  check_hf_case("qwen2_bpe", false);
  const auto tok = load_tokenizer(ttmoe_test::tokenizer_fixture_dir() / "qwen2_bpe");
  CHECK_FALSE(tok->bos_id().has_value());
}

TEST_CASE("tokenizer parity: GPT-2-style ByteLevel pre-tokenizer with prefix space", "[tokenizer][parity]") {
  check_hf_case("gpt2_bpe", false);
}

TEST_CASE("tokenizer parity: Llama-2-style BPE with byte fallback, fused unk and decoder chain", "[tokenizer][parity]") {
  check_hf_case("llama2_bpe", false);
}

TEST_CASE("tokenizer parity: BERT WordPiece uncased with truncation", "[tokenizer][parity]") {
  check_hf_case("bert_wordpiece", false);
}

TEST_CASE("tokenizer parity: BERT WordPiece cased without accent stripping", "[tokenizer][parity]") {
  check_hf_case("bert_wordpiece_cased", false);
}

TEST_CASE("tokenizer parity: Split behaviours and ByteLevel options piece by piece", "[tokenizer][parity]") {
  const auto fx = read_fixture("pretokenizers.json");
  const auto& texts = fx["texts"];
  const std::string name = "pretokenizers.json";
  for (const auto& c : fx["cases"]) {
    const auto pt = PreTokenizer::from_json(c["spec"], detail::JsonAt{name, "spec"});
    for (std::size_t i = 0; i < c["pieces"].size(); ++i) {
      INFO(c["spec"].dump() << " on \"" << texts[i].get<std::string>() << "\"");
      std::vector<std::string> got;
      pt.apply(texts[i].get<std::string>(), got);
      CHECK(got == c["pieces"][i].get<std::vector<std::string>>());
    }
  }
}

TEST_CASE("tokenizer parity: SentencePiece model from spm_train against spm_encode and spm_decode", "[tokenizer][parity]") {
  const auto fx = read_fixture("spm.json");
  const auto tok = load_tokenizer(ttmoe_test::tokenizer_fixture_dir() / "spm");
  REQUIRE(tok->bos_id().has_value());
  for (std::size_t i = 0; i < fx["texts"].size(); ++i) {
    const std::string text = from_hex(fx["texts"][i].get<std::string>());
    INFO("text #" << i << ": \"" << text << "\"");
    const auto ref = as_ids(fx["ids"][i]);
    CHECK(tok->encode(text, false) == ref);
    auto with_bos = ref;
    with_bos.insert(with_bos.begin(), *tok->bos_id());
    CHECK(tok->encode(text, true) == with_bos);
    const std::string ref_text = fx["decoded"][i].get<std::string>();
    CHECK(tok->decode(with_bos, true) == ref_text);
    CHECK(tok->decode(ref, false) == ref_text);
    if (sanitize_utf8(text) == text) CHECK(ref_text == text);  // Llama 2's settings are lossless
  }
}

TEST_CASE("tokenizer trainer: Hugging Face tokenizers loads ttmoe's tokenizer.json and gives its ids", "[tokenizer][parity]") {
  // Train on the project's design notes; test on other documents plus the multilingual corpus.
  const std::filesystem::path src(TTMOE_SOURCE_DIR);
  BpeTrainerOptions opt;
  opt.vocab_size = 2000;
  opt.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>"};
  opt.bos_token = "<|begin_of_text|>";
  BpeTrainer trainer(opt);
  std::ifstream design(src / "docs" / "design.md");
  REQUIRE(design);
  for (std::string line; std::getline(design, line);) trainer.add_text(line + "\n");
  const auto t0 = std::chrono::steady_clock::now();
  const auto doc = trainer.train();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("trained " << doc["model"]["merges"].size() << " merges from " << trainer.distinct_words() << " distinct words in " << secs << " s");

  const auto dir = ttmoe_test::tokenizer_fixture_dir() / "ttmoe_trained";
  std::filesystem::create_directories(dir);
  save_tokenizer_json(doc, (dir / "tokenizer.json").string());

  std::vector<std::string> held_out;
  std::ifstream api(src / "docs" / "core-api.md");
  std::stringstream ss;
  ss << api.rdbuf();
  held_out.push_back(ss.str());
  const auto fx = read_fixture("llama3_bpe.json");
  for (const auto& h : fx["texts"]) held_out.push_back(from_hex(h.get<std::string>()));
  held_out.push_back("<|begin_of_text|>a special token inside<|end_of_text|>");
  nlohmann::json hex = nlohmann::json::array();
  for (const auto& t : held_out) hex.push_back(ttmoe_test::to_hex(t));
  {
    std::ofstream out(dir / "texts.json");
    out << hex.dump();
  }
  const std::string cmd = std::string("\"") + TTMOE_REF_PYTHON + "\" \"" + TTMOE_SOURCE_DIR +
                          "/tests/text/make_tokenizer_fixtures.py\" ids --out \"" + dir.string() + "\" --tokenizer \"" +
                          (dir / "tokenizer.json").string() + "\" --texts \"" + (dir / "texts.json").string() + "\"";
  INFO("reference command: " << cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(dir / "hf_ids.json");
  REQUIRE(in);
  const auto ref = nlohmann::json::parse(in);
  const auto tok = HfTokenizer::from_file((dir / "tokenizer.json").string());
  REQUIRE(ref.size() == held_out.size());
  std::size_t total = 0, bytes = 0;
  for (std::size_t i = 0; i < held_out.size(); ++i) {
    INFO("held-out text #" << i);
    const auto ids = tok.encode(held_out[i]);
    CHECK(ids == as_ids(ref[i]["ids"]));
    CHECK(tok.encode(held_out[i], false) == as_ids(ref[i]["ids_plain"]));
    CHECK(tok.decode(ids) == ref[i]["decoded"].get<std::string>());
    if (sanitize_utf8(held_out[i]) == held_out[i]) CHECK(tok.decode(tok.encode(held_out[i], false)) == held_out[i]);
    total += ids.size();
    bytes += held_out[i].size();
  }
  WARN("held-out: " << bytes << " bytes -> " << total << " tokens");
}
