#pragma once
// Hugging Face normalizers: the text transformations applied before pre-tokenisation. Supported:
// NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, StripAccents, BertNormalizer, Replace (literal
// pattern), Prepend, Strip and Sequence. Input is valid UTF-8 (the tokenizer sanitises it first).

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ttmoe/text/json_fields.hpp"
#include "ttmoe/text/unicode.hpp"
#include "ttmoe/text/utf8.hpp"

namespace ttmoe::text {

/// Options of BERT's normaliser (Hugging Face's BertNormalizer).
struct BertNormalizerOptions {
  bool clean_text = true;            ///< Drop NUL, U+FFFD and control characters; whitespace becomes ' '.
  bool handle_chinese_chars = true;  ///< Surround CJK ideographs with spaces.
  std::optional<bool> strip_accents; ///< NFD then drop Mn; unset: follows `lowercase`.
  bool lowercase = true;             ///< Lower-case every character.
};

/// BERT's normaliser, step by step in Hugging Face's order (clean, CJK, accents, lower-case).
inline std::string bert_normalize(std::string_view s, const BertNormalizerOptions& o) {
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = next_code_point(s, i);
    if (o.clean_text) {
      if (c == 0 || c == kReplacementChar || is_bert_control(c)) continue;
      if (is_white_space(c)) {
        out.push_back(' ');
        continue;
      }
    }
    if (o.handle_chinese_chars && is_cjk_ideograph(c)) {
      out.push_back(' ');
      append_utf8(out, c);
      out.push_back(' ');
      continue;
    }
    append_utf8(out, c);
  }
  if (o.strip_accents.value_or(o.lowercase)) {
    const std::string nfd = normalize(out, NormalForm::NFD);
    out.clear();
    for (std::size_t i = 0; i < nfd.size();) {
      const char32_t c = next_code_point(nfd, i);
      if (category(c) != UTF8PROC_CATEGORY_MN) append_utf8(out, c);
    }
  }
  if (o.lowercase) out = lowercase(out);
  return out;
}

/// One normaliser of a tokenizer.json, or a Sequence of them.
class Normalizer {
 public:
  /// Parses the "normalizer" object at `at` (throws Unsupported for an unknown type).
  static Normalizer from_json(const detail::json& j, const detail::JsonAt& at) {
    Normalizer n;
    const std::string type = detail::component_type(j, at);
    n.type_ = type;
    if (type == "Sequence") {
      const auto& list = detail::get_array(j, "normalizers", at);
      for (std::size_t i = 0; i < list.size(); ++i) n.steps_.push_back(from_json(list[i], at.at("normalizers").at(i)));
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" || type == "Lowercase" ||
               type == "StripAccents") {
    } else if (type == "BertNormalizer") {
      n.bert_.clean_text = detail::get_bool(j, "clean_text", true, at);
      n.bert_.handle_chinese_chars = detail::get_bool(j, "handle_chinese_chars", true, at);
      if (const auto* v = detail::optional_member(j, "strip_accents", at)) {
        if (!v->is_boolean()) at.at("strip_accents").bad("expected true, false or null");
        n.bert_.strip_accents = v->get<bool>();
      }
      n.bert_.lowercase = detail::get_bool(j, "lowercase", true, at);
    } else if (type == "Replace") {
      const auto& pat = detail::require(j, "pattern", at);
      const auto pat_at = at.at("pattern");
      if (!pat.is_object() || !pat.contains("String")) {
        throw TokenizerError(TokenizerErrorKind::Unsupported, at.file, pat_at.path,
                             "only a literal {\"String\": ...} pattern is supported in a Replace normalizer");
      }
      n.a_ = detail::get_string(pat, "String", pat_at);
      n.b_ = detail::get_string(j, "content", at);
      if (n.a_.empty()) pat_at.bad("empty replacement pattern");
    } else if (type == "Prepend") {
      n.a_ = detail::get_string(j, "prepend", at);
    } else if (type == "Strip") {
      n.strip_left_ = detail::get_bool(j, "strip_left", true, at);
      n.strip_right_ = detail::get_bool(j, "strip_right", true, at);
    } else {
      detail::unsupported(at, "normalizer", type);
    }
    return n;
  }

  /// The normalised text.
  std::string operator()(std::string s) const {
    if (type_ == "Sequence") {
      for (const auto& step : steps_) s = step(std::move(s));
      return s;
    }
    if (type_ == "NFC") return normalize(s, NormalForm::NFC);
    if (type_ == "NFD") return normalize(s, NormalForm::NFD);
    if (type_ == "NFKC") return normalize(s, NormalForm::NFKC);
    if (type_ == "NFKD") return normalize(s, NormalForm::NFKD);
    if (type_ == "Lowercase") return lowercase(s);
    if (type_ == "BertNormalizer") return bert_normalize(s, bert_);
    if (type_ == "StripAccents") {  // drops Mn; Hugging Face expects an NFD normaliser before it
      std::string out;
      for (std::size_t i = 0; i < s.size();) {
        const char32_t c = next_code_point(s, i);
        if (category(c) != UTF8PROC_CATEGORY_MN) append_utf8(out, c);
      }
      return out;
    }
    if (type_ == "Replace") {
      std::string out;
      for (std::size_t pos = 0;;) {
        const std::size_t hit = s.find(a_, pos);
        out.append(s, pos, hit == std::string::npos ? std::string::npos : hit - pos);
        if (hit == std::string::npos) return out;
        out += b_;
        pos = hit + a_.size();
      }
    }
    if (type_ == "Prepend") return s.empty() ? s : a_ + s;
    if (type_ == "Strip") return strip(s);
    return s;
  }

 private:
  std::string strip(const std::string& s) const {
    const std::u32string cps = decode_utf8(s);
    std::size_t b = 0, e = cps.size();
    if (strip_left_) while (b < e && is_white_space(cps[b])) ++b;
    if (strip_right_) while (e > b && is_white_space(cps[e - 1])) --e;
    return encode_utf8(std::u32string_view(cps).substr(b, e - b));
  }

  std::string type_;
  std::vector<Normalizer> steps_;
  BertNormalizerOptions bert_;
  std::string a_, b_;
  bool strip_left_ = true, strip_right_ = true;
};

}  // namespace ttmoe::text
