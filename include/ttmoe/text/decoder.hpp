#pragma once
// Hugging Face decoders: tokens back to text. Supported: ByteLevel (GPT-2 alphabet to bytes, invalid
// UTF-8 replaced by U+FFFD), WordPiece (strip "##", spaces between words, optional cleanup),
// ByteFallback (<0xXX> tokens to bytes), Fuse, Replace (literal), Strip and Sequence. Without a
// decoder the tokens are joined with spaces, as Hugging Face does.

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "ttmoe/text/byte_level.hpp"
#include "ttmoe/text/json_fields.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// BERT's detokenisation cleanup (spaces before punctuation and in English contractions).
inline std::string wordpiece_cleanup(std::string s) {
  static constexpr std::pair<std::string_view, std::string_view> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : rules) {
    std::string out;
    for (std::size_t pos = 0;;) {
      const std::size_t hit = s.find(from, pos);
      out.append(s, pos, hit == std::string::npos ? std::string::npos : hit - pos);
      if (hit == std::string::npos) break;
      out.append(to);
      pos = hit + from.size();
    }
    s = std::move(out);
  }
  return s;
}

/// One decoder of a tokenizer.json, or a Sequence of them.
class Decoder {
 public:
  /// Parses the "decoder" object at `at`.
  static Decoder from_json(const detail::json& j, const detail::JsonAt& at) {
    Decoder d;
    d.type_ = detail::component_type(j, at);
    if (d.type_ == "Sequence") {
      const auto& list = detail::get_array(j, "decoders", at);
      for (std::size_t i = 0; i < list.size(); ++i) d.steps_.push_back(from_json(list[i], at.at("decoders").at(i)));
    } else if (d.type_ == "WordPiece") {
      d.a_ = detail::opt_string(j, "prefix", at).value_or("##");
      d.cleanup_ = detail::get_bool(j, "cleanup", true, at);
    } else if (d.type_ == "Replace") {
      const auto& pat = detail::require(j, "pattern", at);
      if (!pat.is_object() || !pat.contains("String")) at.at("pattern").bad("only a literal {\"String\": ...} pattern is supported");
      d.a_ = detail::get_string(pat, "String", at.at("pattern"));
      d.b_ = detail::get_string(j, "content", at);
      if (d.a_.empty()) at.at("pattern").bad("empty replacement pattern");
    } else if (d.type_ == "Strip") {
      d.a_ = detail::get_string(j, "content", at);
      d.start_ = static_cast<std::size_t>(detail::get_uint(j, "start", 0, at));
      d.stop_ = static_cast<std::size_t>(detail::get_uint(j, "stop", 0, at));
    } else if (d.type_ != "ByteLevel" && d.type_ != "ByteFallback" && d.type_ != "Fuse") {
      detail::unsupported(at, "decoder", d.type_);
    }
    return d;
  }

  /// Hugging Face's decode_chain: tokens in, tokens out (joined by the caller).
  std::vector<std::string> chain(std::vector<std::string> tokens) const {
    if (type_ == "Sequence") {
      for (const auto& s : steps_) tokens = s.chain(std::move(tokens));
      return tokens;
    }
    if (type_ == "ByteLevel") {
      std::string bytes;
      for (const auto& t : tokens) bytes += byte_level_to_bytes(t);
      return {sanitize_utf8(bytes)};
    }
    if (type_ == "Fuse") {
      std::string all;
      for (const auto& t : tokens) all += t;
      return {all};
    }
    if (type_ == "WordPiece") {
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) {
          if (tokens[i].starts_with(a_)) tokens[i].erase(0, a_.size());
          else tokens[i].insert(0, " ");
        }
        if (cleanup_) tokens[i] = wordpiece_cleanup(std::move(tokens[i]));
      }
      return tokens;
    }
    if (type_ == "Replace") {
      for (auto& t : tokens) {
        std::string out;
        for (std::size_t pos = 0;;) {
          const std::size_t hit = t.find(a_, pos);
          out.append(t, pos, hit == std::string::npos ? std::string::npos : hit - pos);
          if (hit == std::string::npos) break;
          out += b_;
          pos = hit + a_.size();
        }
        t = std::move(out);
      }
      return tokens;
    }
    if (type_ == "Strip") {
      for (auto& t : tokens) {
        for (std::size_t k = 0; k < start_ && t.starts_with(a_); ++k) t.erase(0, a_.size());
        for (std::size_t e = 0; e < stop_ && t.size() >= a_.size() && t.ends_with(a_); ++e) t.erase(t.size() - a_.size());
      }
      return tokens;
    }
    // ByteFallback: runs of <0xXX> become bytes; a run that is not valid UTF-8 gives one U+FFFD per byte.
    std::vector<std::string> out;
    std::string run;
    std::size_t run_len = 0;
    const auto flush = [&] {
      if (run_len == 0) return;
      if (sanitize_utf8(run) == run) out.push_back(run);
      else for (std::size_t k = 0; k < run_len; ++k) out.emplace_back("\xEF\xBF\xBD");
      run.clear();
      run_len = 0;
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
        const auto v = std::strtoul(t.substr(3, 2).c_str(), nullptr, 16);
        run.push_back(static_cast<char>(v));
        ++run_len;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    return out;
  }

 private:
  std::string type_;
  std::vector<Decoder> steps_;
  std::string a_, b_;
  bool cleanup_ = true;
  std::size_t start_ = 0, stop_ = 0;
};

}  // namespace ttmoe::text
