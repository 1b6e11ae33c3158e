#pragma once
// Name maps from a module's dotted parameter names (timm layout, as visit_parameters produces them)
// to the keys of a checkpoint file. The loader walks the MODULE's parameters and asks the map for
// each key, so one direction (module -> file) is enough, and parameters the source model does not
// have (MoE experts, routers) simply map to keys that are reported missing.

#include <functional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace ttmoe::io {

/// Module parameter name -> checkpoint key. Only file keys starting with `prefix` belong to the
/// state (fixtures keep inputs and outputs beside the weights under other prefixes).
struct NameMap {
  std::string prefix;                                             ///< prepended to every key ("model.")
  std::function<std::string(const std::string&)> rename;          ///< identity when empty
  std::string description = "identity";                          ///< for error messages

  /// The file key of module parameter `name`.
  std::string key_for(const std::string& name) const { return prefix + (rename ? rename(name) : name); }
  /// Whether file key `key` is part of the state this map describes.
  bool owns(const std::string& key) const { return key.compare(0, prefix.size(), prefix) == 0; }
};

/// timm names used as they are (also what save_state writes).
inline NameMap timm_names(std::string prefix = "") { return NameMap{std::move(prefix), {}, "timm"}; }

namespace detail {
/// One regex rewrite rule applied to the start of a name.
struct RenameRule {
  std::regex from;
  std::string to;
};

/// timm -> torchvision `vit_b_16` rules (ordered: the first match wins). q, k, v rows of the fused
/// in-projection are in the same order in both, so qkv maps without reshuffling.
inline const std::vector<RenameRule>& torchvision_vit_rules() {
  static const std::vector<RenameRule> rules = [] {
    const std::string L = "encoder.layers.encoder_layer_$1.";
    std::vector<std::pair<const char*, std::string>> raw = {
        {R"(^cls_token$)", "class_token"},
        {R"(^pos_embed$)", "encoder.pos_embedding"},
        {R"(^patch_embed\.proj\.)", "conv_proj."},
        {R"(^blocks\.(\d+)\.norm1\.)", L + "ln_1."},
        {R"(^blocks\.(\d+)\.norm2\.)", L + "ln_2."},
        {R"(^blocks\.(\d+)\.attn\.qkv\.weight$)", L + "self_attention.in_proj_weight"},
        {R"(^blocks\.(\d+)\.attn\.qkv\.bias$)", L + "self_attention.in_proj_bias"},
        {R"(^blocks\.(\d+)\.attn\.proj\.)", L + "self_attention.out_proj."},
        {R"(^blocks\.(\d+)\.mlp\.fc1\.)", L + "mlp.0."},
        {R"(^blocks\.(\d+)\.mlp\.fc2\.)", L + "mlp.3."},
        {R"(^norm\.)", "encoder.ln."},
        {R"(^head\.)", "heads.head."},
    };
    std::vector<RenameRule> out;
    for (auto& [f, t] : raw) out.push_back({std::regex(f), t});
    return out;
  }();
  return rules;
}
}  // namespace detail

/// Maps timm ViT names onto torchvision's `vit_b_16` (and other torchvision ViTs) state dict:
/// class_token, encoder.pos_embedding, conv_proj, encoder.layers.encoder_layer_{i}.{ln_1,
/// self_attention.in_proj_*, self_attention.out_proj, ln_2, mlp.0, mlp.3}, encoder.ln, heads.head.
/// Names no rule matches (e.g. MoE experts) pass through unchanged.
inline NameMap torchvision_vit_names(std::string prefix = "") {
  auto rename = [](const std::string& name) {
    for (const auto& r : detail::torchvision_vit_rules()) {
      std::smatch m;
      if (std::regex_search(name, m, r.from)) return m.format(r.to) + m.suffix().str();
    }
    return name;
  };
  return NameMap{std::move(prefix), rename, "torchvision vit"};
}

}  // namespace ttmoe::io
