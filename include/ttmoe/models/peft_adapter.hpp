#pragma once
// LoRA adapters in Hugging Face PEFT's on-disk format, both directions: a folder holding
// `adapter_config.json` (peft_type LORA, r, lora_alpha, use_rslora, target_modules as a list or a
// regex string, rank_pattern, alpha_pattern) and `adapter_model.safetensors` with keys
// `base_model.model.<module>.lora_A.weight` [r, in] and `...lora_B.weight` [out, r].
// The format is model-agnostic: loading checks the file against the base model's Linear modules,
// given as a name -> [out, in] map (models/llama_lora.hpp builds it for the Llama family).
// Scales follow PEFT exactly: alpha / r, or alpha / sqrt(r) with use_rslora, r and alpha per module
// from the patterns (the first key k with re.match("(.*\.)?(k)$", module) wins, as in PEFT's
// get_pattern_key). Regexes run through std::regex (ECMAScript), which agrees with Python's `re` on
// the alternations, classes and quantifiers such patterns use.
// Settings that change the computation in ways ttmoe does not run (fan_in_fan_out, a trained bias,
// DoRA, modules_to_save, ...) are refused with a PeftConfigError naming the field, never ignored.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/models/config_file.hpp"
#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/moe/lora.hpp"

namespace ttmoe::models {

/// An adapter_config.json ttmoe cannot use; what() reads "<file>: field '<field>': <problem>".
class PeftConfigError : public ConfigFieldError {
 public:
  using ConfigFieldError::ConfigFieldError;
};

/// The LoRA hyper-parameters of a PEFT adapter (the adapter_config.json fields ttmoe uses).
struct LoraAdapterConfig {
  index_t r = 8;                              ///< default rank
  double lora_alpha = 8;                      ///< default alpha
  bool use_rslora = false;                    ///< scale alpha / sqrt(r) instead of alpha / r
  std::vector<std::string> target_modules;    ///< module names or name suffixes (when no regex)
  std::string target_regex;                   ///< target_modules given as one regex (full match)
  std::vector<std::pair<std::string, index_t>> rank_pattern;  ///< per-module r, in file order
  std::vector<std::pair<std::string, double>> alpha_pattern;  ///< per-module alpha, in file order
  std::string base_model_name_or_path;        ///< informational, written back as read
  std::string task_type = "CAUSAL_LM";

  /// Whether PEFT's target_modules selects `module` (a dotted name like model.layers.0.mlp.up_proj):
  /// a regex must match the whole name; a list entry must equal it or be its last dotted part(s).
  bool targets(const std::string& module) const {
    if (!target_regex.empty()) return std::regex_match(module, std::regex(target_regex));
    for (const auto& t : target_modules)
      if (module == t || (module.size() > t.size() && module.ends_with("." + t))) return true;
    return false;
  }
  /// The rank of `module` (rank_pattern, else r).
  index_t rank_for(const std::string& module) const { return pattern_value(rank_pattern, module, r); }
  /// The alpha of `module` (alpha_pattern, else lora_alpha).
  double alpha_for(const std::string& module) const { return pattern_value(alpha_pattern, module, lora_alpha); }
  /// PEFT's scaling of `module`: alpha / r, or alpha / sqrt(r) with use_rslora.
  double scaling_for(const std::string& module) const {
    const double rk = double(rank_for(module));
    return alpha_for(module) / (use_rslora ? std::sqrt(rk) : rk);
  }

  /// Parses adapter_config.json text; `file` names it in errors.
  static LoraAdapterConfig from_json(const nlohmann::ordered_json& j, const std::string& file) {
    auto fail = [&](const std::string& field, const std::string& why) { throw PeftConfigError(file, field, why); };
    if (!j.is_object()) fail("", "the config is not a JSON object");
    const std::string type = j.value("peft_type", std::string("LORA"));
    if (type != "LORA") fail("peft_type", "'" + type + "' is not LORA (ttmoe reads LoRA adapters only)");
    // Each of these changes the computation (or the parameters) beyond y = xW^T + s (xA^T)B^T.
    for (const char* f : {"fan_in_fan_out", "use_dora", "lora_bias", "modules_to_save", "target_parameters",
                          "layer_replication", "trainable_token_indices", "alora_invocation_tokens", "use_qalora",
                          "use_bdlora"}) {
      if (!j.contains(f)) continue;
      const auto& v = j[f];
      const bool off = v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_array() && v.empty()) ||
                       (v.is_object() && v.empty());
      if (!off) fail(f, v.dump() + " is not supported (ttmoe runs plain LoRA: y = x W^T + s (x A^T) B^T)");
    }
    if (j.contains("bias") && j["bias"] != "none")
      fail("bias", j["bias"].dump() + " is not supported: only \"none\" (no trained biases)");
    LoraAdapterConfig c;
    auto number = [&](const char* f, const nlohmann::ordered_json& v) {
      if (!v.is_number()) fail(f, v.dump() + " is not a number");
      return v.get<double>();
    };
    auto rank = [&](const std::string& f, const nlohmann::ordered_json& v) {
      if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) fail(f, v.dump() + " is not a positive integer");
      return index_t(v.get<std::int64_t>());
    };
    if (j.contains("r")) c.r = rank("r", j["r"]);
    if (j.contains("lora_alpha")) c.lora_alpha = number("lora_alpha", j["lora_alpha"]);
    if (j.contains("use_rslora")) {
      if (!j["use_rslora"].is_boolean()) fail("use_rslora", j["use_rslora"].dump() + " is not a boolean");
      c.use_rslora = j["use_rslora"].get<bool>();
    }
    const auto& t = j.contains("target_modules") ? j["target_modules"] : nlohmann::ordered_json();
    if (t.is_string()) {
      c.target_regex = t.get<std::string>();
      try {
        std::regex check(c.target_regex);
      } catch (const std::regex_error& e) {
        fail("target_modules", "regex '" + c.target_regex + "' does not compile: " + e.what());
      }
    } else if (t.is_array() && !t.empty()) {
      for (const auto& m : t) {
        if (!m.is_string()) fail("target_modules", m.dump() + " is not a module name");
        c.target_modules.push_back(m.get<std::string>());
      }
    } else {
      fail("target_modules", (t.is_null() ? std::string("missing") : t.dump()) + ": need a list of names or a regex");
    }
    for (const char* f : {"rank_pattern", "alpha_pattern"}) {
      if (!j.contains(f) || j[f].is_null()) continue;
      if (!j[f].is_object()) fail(f, j[f].dump() + " is not an object");
      for (const auto& [k, v] : j[f].items()) {
        check_pattern(k, file, f);
        if (f == std::string("rank_pattern")) c.rank_pattern.emplace_back(k, rank(std::string(f) + "." + k, v));
        else c.alpha_pattern.emplace_back(k, number(f, v));
      }
    }
    if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
      c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
    if (j.contains("task_type") && j["task_type"].is_string()) c.task_type = j["task_type"].get<std::string>();
    return c;
  }

  /// Reads `path` (an adapter_config.json).
  static LoraAdapterConfig load(const std::filesystem::path& path) {
    return from_json(read_config_json<PeftConfigError, nlohmann::ordered_json>(path, "adapter config"), path.string());
  }

  /// The adapter_config.json PEFT's LoraConfig reads (its other fields take PEFT's defaults).
  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json j;
    j["peft_type"] = "LORA";
    j["task_type"] = task_type;
    j["base_model_name_or_path"] = base_model_name_or_path.empty() ? nullptr : nlohmann::ordered_json(base_model_name_or_path);
    j["r"] = r;
    j["lora_alpha"] = lora_alpha;
    j["use_rslora"] = use_rslora;
    if (target_regex.empty()) j["target_modules"] = target_modules;
    else j["target_modules"] = target_regex;
    j["rank_pattern"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : rank_pattern) j["rank_pattern"][k] = v;
    j["alpha_pattern"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : alpha_pattern) j["alpha_pattern"][k] = v;
    j["bias"] = "none";
    j["fan_in_fan_out"] = false;
    j["lora_dropout"] = 0.0;
    j["inference_mode"] = true;
    return j;
  }

 private:
  /// PEFT's get_pattern_key: the first key k such that "(.*\.)?(k)$" matches the module name.
  template <class V>
  static V pattern_value(const std::vector<std::pair<std::string, V>>& patterns, const std::string& module, V fallback) {
    for (const auto& [k, v] : patterns)
      if (std::regex_match(module, std::regex("(.*\\.)?(" + k + ")"))) return v;
    return fallback;
  }
  static void check_pattern(const std::string& k, const std::string& file, const char* field) {
    try {
      std::regex check("(.*\\.)?(" + k + ")");
    } catch (const std::regex_error& e) {
      throw PeftConfigError(file, std::string(field) + "." + k, std::string("the key is not a valid regex: ") + e.what());
    }
  }
};

/// One adapted Linear: PEFT's lora_A [r, in] and lora_B [out, r] (moe/lora.hpp's factor type) and
/// the scale its config gives it.
template <class T = float, class D = cpu>
struct LoraModule {
  moe::LoRAFactor<T, D> lora_A, lora_B;
  double scaling = 1.0;

  /// The rank r.
  index_t rank() const { return lora_A.weight.extent(0); }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("lora_A", lora_A);
    v.sub("lora_B", lora_B);
  }
};

/// A LoRA adapter: its config and one LoraModule per adapted Linear, keyed by the module's dotted
/// name in the base model (model.layers.0.self_attn.q_proj). visit_parameters gives the names of
/// PEFT's state dict without its "base_model.model." prefix, so nn::save_state writes the file.
template <class T = float, class D = cpu>
struct PeftAdapter {
  LoraAdapterConfig config;
  std::map<std::string, LoraModule<T, D>> modules;
  std::string source;  ///< the folder it was loaded from (for messages), empty when made in memory

  template <class V>
  void visit_parameters(V& v) {
    for (auto& [name, m] : modules) v.sub(name, m);
  }
};

/// The key prefix PEFT's save_pretrained puts before a module's name.
inline constexpr const char* peft_key_prefix = "base_model.model.";

/// The [out, in] shapes of the base model's adaptable Linear modules, by dotted name.
using LinearShapes = std::map<std::string, std::pair<index_t, index_t>>;

/// What a PEFT adapter folder holds, checked against a base model but not yet read: its config,
/// the mapped weights file and the [rank, in] / [out, rank] factor shapes of every module.
struct PeftAdapterLayout {
  LoraAdapterConfig config;
  io::SafetensorsFile file;  ///< adapter_model.safetensors, mapped (only its header has been read)
  std::map<std::string, std::pair<DynShape<2>, DynShape<2>>> modules;  ///< module -> (lora_A, lora_B) shapes
};

/// Checks the PEFT adapter folder `dir` against a base model whose Linear modules are `base`
/// without reading the factors (only the config and the safetensors header). Config problems throw
/// PeftConfigError; problems with the weights (a key for a module the base model lacks or
/// target_modules does not select, shapes that do not fit the base model and the configured rank, a
/// lora_A without its lora_B, other kinds of keys) all come in ONE nn::CheckpointError naming
/// adapter_model.safetensors and, for each, the key and the shapes; a missing or truncated file is
/// an io::SafetensorsError naming it.
inline PeftAdapterLayout inspect_peft_adapter(const std::filesystem::path& dir, const LinearShapes& base) {
  if (!std::filesystem::is_directory(dir))
    throw io::SafetensorsError(io::ErrorKind::Io, dir.string(), "the adapter folder does not exist");
  auto config = LoraAdapterConfig::load(dir / "adapter_config.json");
  const auto weights = dir / "adapter_model.safetensors";
  if (!std::filesystem::exists(weights))
    throw io::SafetensorsError(io::ErrorKind::Io, weights.string(),
                               "missing (ttmoe reads adapter_model.safetensors, not the pickled adapter_model.bin)");
  PeftAdapterLayout a{std::move(config), io::SafetensorsFile(weights), {}};
  const auto& file = a.file;
  const std::string prefix = peft_key_prefix;
  std::vector<std::string> problems;
  std::set<std::string> rejected;  // modules with a key already reported (no "missing partner" for them)
  auto shape_str = [](index_t a0, index_t a1) { return "[" + std::to_string(a0) + ", " + std::to_string(a1) + "]"; };
  for (const auto& key : file.names()) {
    const bool is_a = key.ends_with(".lora_A.weight"), is_b = key.ends_with(".lora_B.weight");
    if (!key.starts_with(prefix) || !(is_a || is_b)) {
      problems.push_back("key '" + key + "': not a LoRA factor (expected " + prefix + "<module>.lora_A.weight / .lora_B.weight)");
      continue;
    }
    const std::string module = key.substr(prefix.size(), key.size() - prefix.size() - std::string(".lora_A.weight").size());
    const auto it = base.find(module);
    const auto& file_shape = file.info(key).shape;
    if (it == base.end()) {
      problems.push_back("key '" + key + "' " + nn::detail::shape_str(file_shape) + ": unknown module '" + module +
                         "' (the base model has no adaptable Linear of that name)");
      continue;
    }
    if (!a.config.targets(module)) {
      problems.push_back("key '" + key + "': module '" + module + "' is not selected by target_modules");
      continue;
    }
    const auto [out, in] = it->second;
    const index_t r = a.config.rank_for(module);
    const auto [d0, d1] = is_a ? std::pair{r, in} : std::pair{out, r};
    const std::vector<std::int64_t> want{std::int64_t(d0), std::int64_t(d1)};
    if (file_shape != want) {
      problems.push_back("key '" + key + "': shape " + nn::detail::shape_str(file_shape) + " does not fit the base model's " +
                         module + " [out, in] = " + shape_str(out, in) + " with r = " + std::to_string(r) + " (expected " +
                         nn::detail::shape_str(want) + ")");
      rejected.insert(module);
      continue;
    }
    auto& m = a.modules.try_emplace(module, DynShape<2>(0, 0), DynShape<2>(0, 0)).first->second;
    (is_a ? m.first : m.second) = DynShape<2>(d0, d1);
  }
  for (const auto& [name, m] : a.modules) {
    const bool has_a = m.first.numel() > 0, has_b = m.second.numel() > 0;
    if (!rejected.count(name) && (!has_a || !has_b))
      problems.push_back("module '" + name + "': " + (has_a ? "lora_B" : "lora_A") + ".weight is missing (key '" +
                         prefix + name + (has_a ? ".lora_B" : ".lora_A") + ".weight')");
  }
  if (a.modules.empty() && problems.empty()) problems.push_back("no LoRA factors in the file");
  if (!problems.empty()) throw nn::CheckpointError(weights.string(), std::move(problems));
  return a;
}

/// Loads the PEFT adapter folder `dir` for a base model whose Linear modules are `base`: checks it
/// as inspect_peft_adapter does (same errors), then reads the factors from the mapped file.
template <class T = float, class D = cpu>
PeftAdapter<T, D> load_peft_adapter(const std::filesystem::path& dir, const LinearShapes& base) {
  auto layout = inspect_peft_adapter(dir, base);
  PeftAdapter<T, D> a;
  a.source = dir.string();
  a.config = std::move(layout.config);
  for (const auto& [name, shapes] : layout.modules) {
    auto& m = a.modules[name];
    m.scaling = a.config.scaling_for(name);
    m.lora_A.weight = Tensor<T, DynShape<2>, D>::zeros(shapes.first);
    m.lora_B.weight = Tensor<T, DynShape<2>, D>::zeros(shapes.second);
  }
  nn::load_state(a, layout.file, io::timm_names(peft_key_prefix));  // every shape checked: this only reads
  return a;
}

/// Writes `a` as a PEFT adapter folder `dir` (created if needed): adapter_config.json and
/// adapter_model.safetensors in `dtype` (F32, BF16 or F16), which PeftModel.from_pretrained loads.
template <class T, class D>
void save_peft_adapter(PeftAdapter<T, D>& a, const std::filesystem::path& dir, io::DType dtype = io::DType::F32) {
  if (dtype != io::DType::F32 && dtype != io::DType::BF16 && dtype != io::DType::F16)
    throw ValueError("save_peft_adapter: factors are stored as F32, BF16 or F16, not " + std::string(io::dtype_name(dtype)));
  for (const auto& [name, m] : a.modules) {
    if (m.rank() != a.config.rank_for(name))
      throw ValueError("save_peft_adapter: module '" + name + "' has rank " + std::to_string(m.rank()) +
                       " but the config gives it " + std::to_string(a.config.rank_for(name)) + " (set rank_pattern)");
    if (!a.config.targets(name))
      throw ValueError("save_peft_adapter: module '" + name + "' is not selected by the config's target_modules");
    // PEFT recomputes every scale from the config: one that differs would load as another adapter.
    if (std::abs(m.scaling - a.config.scaling_for(name)) > 1e-12 * std::abs(a.config.scaling_for(name)))
      throw ValueError("save_peft_adapter: module '" + name + "' has scaling " + std::to_string(m.scaling) +
                       " but its config gives " + std::to_string(a.config.scaling_for(name)));
  }
  std::filesystem::create_directories(dir);
  nn::save_state(a, dir / "adapter_model.safetensors", io::timm_names(peft_key_prefix), dtype);
  std::ofstream out(dir / "adapter_config.json");
  out << a.config.to_json().dump(2) << "\n";
  if (!out) throw io::SafetensorsError(io::ErrorKind::Io, (dir / "adapter_config.json").string(), "cannot write the config");
}

}  // namespace ttmoe::models
