#pragma once
// Reading the tokenizer reference fixtures written by make_tokenizer_fixtures.py.

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ttmoe_test {

/// Folder the fixture steps write into.
inline std::filesystem::path tokenizer_fixture_dir() { return std::filesystem::path(TTMOE_TEST_DATA_DIR) / "tokenizers"; }

/// Parses `name` under the fixture folder; a missing file fails the test with a clear message.
inline nlohmann::json read_fixture(const std::string& name) {
  const auto path = tokenizer_fixture_dir() / name;
  std::ifstream in(path);
  if (!in) FAIL("missing tokenizer fixture " << path << " (the generate_tokenizer_* CTest steps write it)");
  return nlohmann::json::parse(in);
}

/// The bytes a fixture wrote as hex.
inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

/// Hex of arbitrary bytes.
inline std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

}  // namespace ttmoe_test
