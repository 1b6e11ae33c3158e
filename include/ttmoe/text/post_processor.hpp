#pragma once
// Hugging Face post-processors: the special tokens put around an encoded sequence when
// add_special_tokens is on. Supported: TemplateProcessing (single-sequence template),
// BertProcessing and RobertaProcessing ([CLS] A [SEP]), ByteLevel (ids unchanged) and Sequence.

#include <cstdint>
#include <string>
#include <vector>

#include "ttmoe/text/json_fields.hpp"

namespace ttmoe::text {

/// The single-sequence template of a post-processor: ids before and after the sequence.
class PostProcessor {
 public:
  /// Parses the "post_processor" object at `at`.
  static PostProcessor from_json(const detail::json& j, const detail::JsonAt& at) {
    PostProcessor p;
    p.append(j, at);
    return p;
  }

  /// Ids put before the sequence.
  const std::vector<std::int32_t>& prefix() const noexcept { return before_; }
  /// Ids put after the sequence.
  const std::vector<std::int32_t>& suffix() const noexcept { return after_; }
  /// Number of ids added around a single sequence.
  std::size_t added() const noexcept { return before_.size() + after_.size(); }

  /// `ids` with the template applied.
  std::vector<std::int32_t> apply(const std::vector<std::int32_t>& ids) const {
    std::vector<std::int32_t> out(before_);
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after_.begin(), after_.end());
    return out;
  }

 private:
  void append(const detail::json& j, const detail::JsonAt& at) {
    const std::string type = detail::component_type(j, at);
    if (type == "Sequence") {
      const auto& list = detail::get_array(j, "processors", at);
      for (std::size_t i = 0; i < list.size(); ++i) append(list[i], at.at("processors").at(i));
    } else if (type == "ByteLevel") {
      // Offsets only; the ids are unchanged.
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      before_.push_back(pair_id(detail::require(j, "cls", at), at.at("cls")));
      after_.push_back(pair_id(detail::require(j, "sep", at), at.at("sep")));
    } else if (type == "TemplateProcessing") {
      const auto& single = detail::get_array(j, "single", at);
      const auto& specials = detail::require(j, "special_tokens", at);
      const auto sp_at = at.at("special_tokens");
      detail::object(specials, sp_at);
      bool seen_a = false;
      for (std::size_t i = 0; i < single.size(); ++i) {
        const auto el_at = at.at("single").at(i);
        const auto& el = single[i];
        if (const auto* seq = detail::optional_member(el, "Sequence", el_at)) {
          if (detail::get_string(*seq, "id", el_at.at("Sequence")) != "A") el_at.bad("a single-sequence template may only use sequence A");
          seen_a = true;
        } else if (const auto* st = detail::optional_member(el, "SpecialToken", el_at)) {
          const std::string name = detail::get_string(*st, "id", el_at.at("SpecialToken"));
          const auto& entry = detail::require(specials, name, sp_at);
          const auto& ids = detail::get_array(entry, "ids", sp_at.at(name));
          for (std::size_t k = 0; k < ids.size(); ++k) {
            (seen_a ? after_ : before_).push_back(detail::get_id(ids[k], sp_at.at(name).at("ids").at(k)));
          }
        } else {
          el_at.bad("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
      }
      if (!seen_a) at.at("single").bad("the template has no $A");
    } else {
      detail::unsupported(at, "post_processor", type);
    }
  }

  static std::int32_t pair_id(const detail::json& v, const detail::JsonAt& at) {
    if (!v.is_array() || v.size() != 2 || !v[0].is_string()) at.bad("expected [\"token\", id]");
    return detail::get_id(v[1], at.at(1));
  }

  std::vector<std::int32_t> before_, after_;
};

}  // namespace ttmoe::text
