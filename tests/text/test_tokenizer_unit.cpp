// Unit tests of ttmoe's tokenizers: every error path (typed, naming file and field), UTF-8
// replacement by the Unicode maximal-subpart rule, GPT-2's byte map, BPE merge order, WordPiece
// greedy matching and the trainer's invariants. Expected values come from the specifications
// (Unicode §3.9, GPT-2's published map, the BPE and WordPiece definitions), not from running ttmoe.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "ttmoe/text.hpp"

using namespace ttmoe::text;
using nlohmann::json;

namespace {

/// A minimal valid byte-level BPE tokenizer.json: bytes "a", "b", "c", merges a+b then ab+c.
json tiny_bpe() {
  return json::parse(R"({
    "added_tokens": [{"id": 5, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": false},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [5], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": ["a b", "ab c"]}
  })");
}

/// Runs `f`, which must throw a TokenizerError of `kind` whose message contains `needle`.
template <class F>
void expect_error(F&& f, TokenizerErrorKind kind, const std::string& needle) {
  try {
    f();
    FAIL("no exception; expected " << tokenizer_error_kind_name(kind));
  } catch (const TokenizerError& e) {
    INFO(e.what());
    CHECK(e.kind() == kind);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

std::filesystem::path scratch(const std::string& name) {
  auto p = std::filesystem::path(TTMOE_TEST_DATA_DIR) / "tokenizer-unit" / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace

TEST_CASE("tokenizer utf8: invalid sequences become U+FFFD by maximal subparts", "[tokenizer]") {
  const std::string r = "\xEF\xBF\xBD";
  CHECK(sanitize_utf8("plain ascii") == "plain ascii");
  CHECK(sanitize_utf8("\xC3\xA9") == "\xC3\xA9");
  CHECK(sanitize_utf8("a\xFF" "b") == "a" + r + "b");
  CHECK(sanitize_utf8("\xE2\x82") == r);                 // truncated 3-byte sequence: one subpart
  CHECK(sanitize_utf8("\xC0\xAF") == r + r);             // C0 never starts a sequence
  CHECK(sanitize_utf8("\xED\xA0\x80") == r + r + r);     // surrogate: ED then two lone continuations
  CHECK(sanitize_utf8("\xF0\x9F\x98 x") == r + " x");    // truncated 4-byte sequence
  CHECK(sanitize_utf8(r) == r);                          // a real U+FFFD stays
  CHECK(is_valid_utf8("caf\xC3\xA9 " + r));
  CHECK_FALSE(is_valid_utf8("caf\xC3"));
  // The regex refuses invalid UTF-8 instead of running PCRE2 on it unchecked.
  expect_error([] { (void)Regex(R"(\p{L}+)").find_all("ab\xFF"); }, TokenizerErrorKind::BadArgument, "not valid UTF-8");
}

TEST_CASE("tokenizer byte map: GPT-2's byte-to-unicode table", "[tokenizer]") {
  CHECK(byte_to_char('!') == U'!');
  CHECK(byte_to_char(' ') == 0x120);   // 'Ġ'
  CHECK(byte_to_char('\n') == 0x10A);  // 'Ċ'
  CHECK(byte_to_char(0) == 0x100);
  CHECK(byte_to_char(0xAD) == 0x143);  // the last of the 68 remapped bytes
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  CHECK(byte_level_to_bytes(bytes_to_byte_level(all)) == all);
}

TEST_CASE("tokenizer BPE: lowest rank first, template, decode", "[tokenizer]") {
  const auto tok = HfTokenizer::from_json(tiny_bpe(), "tiny.json");
  CHECK(tok.encode("abc ab  cab", false) == std::vector<std::int32_t>{4, 3, 2, 3});
  CHECK(tok.encode("abc") == std::vector<std::int32_t>{5, 4});
  CHECK(tok.encode("<s>abc", false) == std::vector<std::int32_t>{5, 4});
  CHECK(tok.decode(std::vector<std::int32_t>{5, 4, 3}) == "<s> abc ab");  // no decoder: joined by spaces
  CHECK(tok.decode(std::vector<std::int32_t>{5, 4}, true) == "abc");
  CHECK(tok.bos_id() == 5);
  CHECK(tok.vocab_size() == 6);
  CHECK(tok.special_ids() == std::vector<std::int32_t>{5});
  CHECK(tok.token_to_id("ab") == 3);
  CHECK_FALSE(tok.token_to_id("zz").has_value());
  // A character outside the vocabulary, no unk and no byte fallback: dropped, and its neighbours then
  // merge, as Hugging Face does (checked with tokenizers 0.23.3).
  CHECK(tok.encode("axb", false) == std::vector<std::int32_t>{3});
}

TEST_CASE("tokenizer errors: malformed files name the file and field", "[tokenizer]") {
  expect_error([] { HfTokenizer::from_string("{not json", "t.json"); }, TokenizerErrorKind::InvalidJson, "t.json");
  expect_error([] { HfTokenizer::from_string("[]", "t.json"); }, TokenizerErrorKind::BadField, "t.json");
  expect_error([] { HfTokenizer::from_string("{}", "t.json"); }, TokenizerErrorKind::MissingField, "t.json: model");
  auto j = tiny_bpe();
  j["model"]["type"] = "Unigram";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::Unsupported, "model.type: model type \"Unigram\"");
  j = tiny_bpe();
  j["model"].erase("vocab");
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::MissingField, "model.vocab");
  j = tiny_bpe();
  j["model"]["vocab"]["x"] = "seven";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadField, "model.vocab.x");
  j = tiny_bpe();
  j["model"]["vocab"]["dup"] = 1;
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadVocab, "appears twice");
  j = tiny_bpe();
  j["model"]["merges"][0] = "a q";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadVocab, "model.merges[0]");
  j = tiny_bpe();
  j["model"]["merges"][1] = "abc";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadField, "model.merges[1]");
  j = tiny_bpe();
  j["model"]["merges"][1] = 7;
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadField, "model.merges[1]");
  j = tiny_bpe();
  j["model"]["dropout"] = 0.1;
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::Unsupported, "model.dropout");
  j = tiny_bpe();
  j["model"]["unk_token"] = "<unk>";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadVocab, "model.unk_token");
  j = tiny_bpe();
  j["pre_tokenizer"]["pattern"]["Regex"] = "(unclosed";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadRegex, "pre_tokenizer.pattern.Regex");
  j = tiny_bpe();
  j["pre_tokenizer"]["behavior"] = "Sideways";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadField, "pre_tokenizer.behavior");
  j = tiny_bpe();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::Unsupported, "pre_tokenizer.type");
  j = tiny_bpe();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::Unsupported, "normalizer.normalizers[1].type");
  j = tiny_bpe();
  j["post_processor"]["single"].erase(1);
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadField, "no $A");
  j = tiny_bpe();
  j["post_processor"]["special_tokens"].erase("<s>");
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::MissingField, "post_processor.special_tokens.<s>");
  j = tiny_bpe();
  j["decoder"] = {{"type", "CTC"}};
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::Unsupported, "decoder.type");
  j = tiny_bpe();
  j["added_tokens"][0]["content"] = "";
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadField, "added_tokens[0].content");
  j = tiny_bpe();
  j["added_tokens"][0].erase("id");
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::MissingField, "added_tokens[0].id");
  j = tiny_bpe();
  j["padding"] = {{"strategy", "Sometimes"}, {"pad_id", 0}};
  expect_error([&] { HfTokenizer::from_json(j, "t.json"); }, TokenizerErrorKind::BadField, "padding.strategy");
  const json wp = json::parse(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}}})");
  expect_error([&] { HfTokenizer::from_json(wp, "w.json"); }, TokenizerErrorKind::BadVocab, "model.unk_token");
}

TEST_CASE("tokenizer errors: decode of an id outside the vocabulary", "[tokenizer]") {
  const auto tok = HfTokenizer::from_json(tiny_bpe(), "tiny.json");
  expect_error([&] { (void)tok.decode(std::vector<std::int32_t>{0, 99}); }, TokenizerErrorKind::BadArgument, "99");
  expect_error([&] { (void)tok.id_to_token(-1); }, TokenizerErrorKind::BadArgument, "-1");
}

TEST_CASE("tokenizer load_tokenizer: folders, files and their errors", "[tokenizer]") {
  expect_error([] { load_tokenizer("/nonexistent/ttmoe/tok"); }, TokenizerErrorKind::Io, "/nonexistent/ttmoe/tok");
  const auto empty = scratch("empty");
  expect_error([&] { load_tokenizer(empty); }, TokenizerErrorKind::Io, "neither tokenizer.json nor tokenizer.model");
  const auto dir = scratch("folder");
  std::ofstream(dir / "tokenizer.json") << tiny_bpe().dump();
  CHECK(load_tokenizer(dir)->encode("ab", false) == std::vector<std::int32_t>{3});
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>"})";
  expect_error([&] { load_tokenizer(dir); }, TokenizerErrorKind::BadVocab, "tokenizer_config.json: eos_token");
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}, "eos_token": "abc"})";
  const auto t = load_tokenizer(dir);
  CHECK(t->bos_id() == 5);
  CHECK(t->eos_id() == 4);
  std::ofstream(dir / "notes.txt") << "x";
  expect_error([&] { load_tokenizer(dir / "notes.txt"); }, TokenizerErrorKind::Unsupported, "notes.txt");
  const auto spm = scratch("spm");
  std::ofstream(spm / "tokenizer.model") << "this is not a protobuf";
  expect_error([&] { load_tokenizer(spm); }, TokenizerErrorKind::SentencePiece, "tokenizer.model");
}

TEST_CASE("tokenizer WordPiece: greedy longest match, prefix, unk for long or unmatchable words", "[tokenizer]") {
  const json j = json::parse(R"({
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 2]},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "max_input_chars_per_word": 10,
              "vocab": {"[UNK]": 0, "[SEP]": 1, "[CLS]": 2, "un": 3, "unaff": 4, "##aff": 5, "##able": 6,
                        "able": 7, "!": 8, "##a": 9}}
  })");
  const auto tok = HfTokenizer::from_json(j, "wp.json");
  // "unaffable": longest first piece "unaff", then "##able"; "Able!" lower-cased, "!" isolated.
  CHECK(tok.encode("UnAffable Able!", true) == std::vector<std::int32_t>{2, 4, 6, 7, 8, 1});
  CHECK(tok.encode("unaffableable", false) == std::vector<std::int32_t>{0});  // 13 chars > 10
  CHECK(tok.encode("unx", false) == std::vector<std::int32_t>{0});            // "##x" missing
  CHECK(tok.decode(std::vector<std::int32_t>{4, 6, 7, 8}) == "unaffable able!");
}

TEST_CASE("tokenizer trainer: bad options and deterministic merges", "[tokenizer]") {
  BpeTrainerOptions small;
  small.vocab_size = 100;
  expect_error([&] { BpeTrainer t(small); }, TokenizerErrorKind::BadArgument, "vocab_size");
  BpeTrainerOptions bos;
  bos.bos_token = "<s>";
  expect_error([&] { BpeTrainer t(bos); }, TokenizerErrorKind::BadArgument, "bos_token");

  // "aaab" x 10, "ab" x 3: pair counts a+a = 20, a+b = 13 -> first merge "aa"; then ("aa","a") and
  // ("a","b") tie at... aaab -> [aa, a, b]: (aa,a)=10, (a,b)=10+3=13 -> second merge "ab".
  BpeTrainerOptions o;
  o.vocab_size = 258;
  o.min_frequency = 1;
  BpeTrainer t(o);
  for (int i = 0; i < 10; ++i) t.add_text("aaab");
  for (int i = 0; i < 3; ++i) t.add_text(" ab");
  const auto doc = t.train();
  REQUIRE(doc["model"]["merges"].size() == 2);
  CHECK(doc["model"]["merges"][0] == json::array({"a", "a"}));
  CHECK(doc["model"]["merges"][1] == json::array({"a", "b"}));
  CHECK(doc["model"]["vocab"]["aa"] == 256);
  CHECK(doc["model"]["vocab"]["ab"] == 257);
}
